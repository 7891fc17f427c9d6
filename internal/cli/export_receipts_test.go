package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/asyrevel/asyrevel/trust"
)

// store export takes every --receipts folder, as audit verify does: the
// receipts of two parties kept in two folders (two processes' --out) all
// go into the archive, and audit verify --archive checks them all. Before,
// only the last folder was kept.
func TestStoreExportEveryReceiptsFolder(t *testing.T) {
	t.Parallel()
	out := auditRun(t)
	roster, err := trust.ReadRoster(filepath.Join(out, "keys", "roster.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	want := 0
	for m := 1; m <= roster.Parties(); m++ {
		src := filepath.Join(out, "receipts", trust.PartyID(m))
		names, err := filepath.Glob(filepath.Join(src, "*.json"))
		if err != nil || len(names) == 0 {
			t.Fatalf("party %d kept no receipts in %s: %v", m, src, err)
		}
		// Party m's process keeps OUTm/receipts/party-m.
		dst := filepath.Join(t.TempDir(), "receipts")
		if err := os.MkdirAll(filepath.Join(dst, trust.PartyID(m)), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			b, err := os.ReadFile(n)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dst, trust.PartyID(m), filepath.Base(n)), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		dirs = append(dirs, dst)
		want += len(names)
	}
	if len(dirs) < 2 {
		t.Fatalf("%d folders", len(dirs))
	}
	arch := filepath.Join(t.TempDir(), "run.tar.gz")
	args := []string{"store", "export", "--store", filepath.Join(out, "stream"), "--run", roster.Run, "--out", arch}
	for _, d := range dirs {
		args = append(args, "--receipts", d)
	}
	code, stdout, errOut := runCLI(t, args...)
	if code != 0 || !strings.Contains(stdout, "roster, "+plural(want, "receipt")) {
		t.Fatalf("store export with %d receipts in %d folders: exit %d: %s %s", want, len(dirs), code, stdout, errOut)
	}
	code, stdout, errOut = runCLI(t, "audit", "verify", "--archive", arch)
	if code != 0 || !strings.Contains(stdout, "verdict: intact") || !strings.Contains(stdout, plural(want, "receipt")+" from") {
		t.Fatalf("audit verify --archive: exit %d: %s %s", code, stdout, errOut)
	}
	// A folder that is not one is named, not skipped.
	code, _, errOut = runCLI(t, "store", "export", "--store", filepath.Join(out, "stream"), "--run", roster.Run, "--out", arch+".2",
		"--receipts", dirs[0], "--receipts", filepath.Join(out, "no-such-folder"))
	if code == 0 || !strings.Contains(errOut, "no-such-folder") {
		t.Errorf("a missing receipts folder: exit %d: %s", code, errOut)
	}
}
