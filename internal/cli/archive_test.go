package cli

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/asyrevel/asyrevel/run"
	"github.com/asyrevel/asyrevel/trust"
)

// store export writes one archive of a run that audit verify and replay
// read offline, with its roster and receipts; a damaged archive and one
// with entries outside its folders are refused.
func TestStoreExportArchive(t *testing.T) {
	t.Parallel()
	out := auditRun(t)
	roster, err := trust.ReadRoster(filepath.Join(out, "keys", "roster.json"))
	if err != nil {
		t.Fatal(err)
	}
	// Each party countersigns every checkpoint the aggregator signs, and
	// how many it signs depends on how long the run took (a busy host:
	// 4 receipts, not 2): the archive holds every receipt file the run
	// kept, at least one a party.
	var kept []string
	filepath.WalkDir(out, func(p string, e fs.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() && strings.Contains(p, string(filepath.Separator)+"receipts"+string(filepath.Separator)) && strings.HasSuffix(p, ".json") {
			kept = append(kept, p)
		}
		return nil
	})
	if len(kept) < 2 {
		t.Fatalf("the run kept %d receipt files, want one a party at least: %v", len(kept), kept)
	}
	receipts := fmt.Sprintf("%d receipts", len(kept))
	arch := filepath.Join(t.TempDir(), "run.tar.gz")
	code, stdout, errOut := runCLI(t, "store", "export", "--store", filepath.Join(out, "stream"), "--run", roster.Run, "--out", arch)
	if code != 0 || !strings.Contains(stdout, "roster, "+receipts) {
		t.Fatalf("store export: exit %d, want the roster and %s: %s %s", code, receipts, stdout, errOut)
	}
	if err := os.RemoveAll(out); err != nil { // the archive stands alone
		t.Fatal(err)
	}
	code, stdout, errOut = runCLI(t, "audit", "verify", "--archive", arch)
	if code != 0 || !strings.Contains(stdout, "verdict: intact") || !strings.Contains(stdout, receipts) {
		t.Fatalf("audit verify --archive: exit %d: %s %s", code, stdout, errOut)
	}
	code, stdout, errOut = runCLI(t, "replay", "--archive", arch, "--out", t.TempDir())
	if code != 0 || !strings.Contains(stdout, "run "+roster.Run) {
		t.Fatalf("replay --archive: exit %d: %s %s", code, stdout, errOut)
	}
	// A byte changed in the archive.
	b, err := os.ReadFile(arch)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x10
	bad := filepath.Join(t.TempDir(), "bad.tar.gz")
	if err := os.WriteFile(bad, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := run.OpenArchive(bad); !errors.Is(err, run.ErrArchive) {
		t.Errorf("a damaged archive: %v, want ErrArchive", err)
	}
	// An entry that climbs out of the folder.
	evil := filepath.Join(t.TempDir(), "evil.tar.gz")
	f, err := os.Create(evil)
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	tw := tar.NewWriter(zw)
	for _, e := range []struct{ name, body string }{{"manifest.json", `{"format":1,"run":"x","files":1}`}, {"stream/../../evil", "x"}} {
		tw.WriteHeader(&tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.body))})
		tw.Write([]byte(e.body))
	}
	tw.Close()
	zw.Close()
	f.Close()
	if _, _, _, err := run.OpenArchive(evil); !errors.Is(err, run.ErrArchive) || !strings.Contains(err.Error(), "outside") {
		t.Errorf("an entry outside the archive: %v", err)
	}
}

// store prune removes whole runs, oldest first, until the rest fit, and
// says what it keeps.
func TestStorePrune(t *testing.T) {
	t.Parallel()
	store := t.TempDir()
	for range 2 {
		code, _, errOut := runCLI(t, "train", "--data", "synthetic:n=600,d=8,test=100", "--parties", "2", "--steps", "300",
			"--batch", "8", "--store", store, "--log", "warn")
		if code != 0 {
			t.Fatalf("train: exit %d: %s", code, errOut)
		}
	}
	st, err := run.OpenStore(store)
	if err != nil || len(st.Runs) != 2 {
		t.Fatalf("%v runs: %v", st, err)
	}
	newest := st.Runs[1]
	code, stdout, errOut := runCLI(t, "store", "prune", store, "--max-size", strconv.FormatInt(newest.Bytes+1, 10), "--dry-run")
	if code != 0 || !strings.Contains(stdout, "would remove run "+st.Runs[0].Run) {
		t.Fatalf("prune --dry-run: exit %d: %s %s", code, stdout, errOut)
	}
	code, stdout, errOut = runCLI(t, "store", "prune", store, "--max-size", strconv.FormatInt(newest.Bytes+1, 10))
	if code != 0 || !strings.Contains(stdout, "removed run "+st.Runs[0].Run) || !strings.Contains(stdout, "kept 1 run") {
		t.Fatalf("prune: exit %d: %s %s", code, stdout, errOut)
	}
	st, err = run.OpenStore(store)
	if err != nil || len(st.Runs) != 1 || st.Runs[0].Run != newest.Run {
		t.Fatalf("after prune: %+v %v", st, err)
	}
}
