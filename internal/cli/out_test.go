package cli

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The README tour's first blocks (train into out/tour, audit verify,
// store list, replay) run twice in one folder: each time the audit of the
// new run says intact, and the first run is kept whole in
// out/tour/earlier/tour, where its own audit says intact too. Before, the
// second train removed the first run's store, the first run's receipts
// stayed behind ("holds another receipt for checkpoint 1") and the audit
// said NOT intact (bad_receipt).
func TestReadmeTourTwice(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("short")
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	bin := testBinary(t)
	dir := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(dir, "bin"), 0o755))
	must(t, os.Symlink(bin, filepath.Join(dir, "bin", "asyrevel")))
	var script []string
	for _, b := range readmeBlocks(t) {
		s := b.script()
		if b.section != "A tour" || strings.Contains(s, "data/") || strings.Contains(s, "mydata") || strings.Contains(s, "split") ||
			strings.Contains(s, "bank") || strings.Contains(s, "aligned") {
			continue
		}
		s = strings.ReplaceAll(s, "make build", ": make build")
		s = strings.ReplaceAll(s, "--epochs 4", "--epochs 1")
		script = append(script, s)
	}
	if len(script) < 3 || !strings.Contains(strings.Join(script, "\n"), "audit verify") {
		t.Fatalf("the tour's first blocks are not there (train, audit verify, store list): %q", script)
	}
	for i := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		cmd := exec.CommandContext(ctx, "bash", "-c", "set -e -o pipefail\n"+strings.Join(script, "\n"))
		cmd.Dir = dir
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("tour %d: %v\n%s", i+1, err, out)
		}
		if !strings.Contains(string(out), "verdict: intact") || strings.Contains(string(out), "ERR") {
			t.Fatalf("tour %d: the audit is not intact, or an error was logged:\n%s", i+1, out)
		}
		if i == 1 && !strings.Contains(string(out), filepath.Join("out", "tour", "earlier", "tour")) {
			t.Errorf("tour 2 did not say where it kept the first run:\n%s", out)
		}
	}
	code, stdout, errOut := runCLI(t, "audit", "verify", "--store", filepath.Join(dir, "out", "tour", "earlier", "tour", "stream"), "--run", "tour")
	if code != 0 || !strings.Contains(stdout, "verdict: intact") || !strings.Contains(stdout, "receipt") {
		t.Fatalf("the first run, kept: exit %d: %s%s", code, stdout, errOut)
	}
}

// --replace removes the earlier run that --out holds, whole: no store,
// keys or receipts of it stay, and nothing is kept in OUT/earlier.
func TestTrainReplace(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "out")
	args := []string{"train", "--data", "synthetic:n=1000,d=8,test=200", "--parties", "2", "--epochs", "1",
		"--batch", "16", "--log", "info", "--out", out, "--run", "again"}
	if code, _, errOut := runCLI(t, args...); code != 0 {
		t.Fatalf("first run: exit %d: %s", code, errOut)
	}
	code, _, errOut := runCLI(t, append(args, "--replace")...)
	if code != 0 || !strings.Contains(errOut, "--replace") {
		t.Fatalf("second run with --replace: exit %d: %s", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(out, "earlier")); !os.IsNotExist(err) {
		t.Errorf("--replace kept the earlier run: %v", err)
	}
	code, stdout, errOut := runCLI(t, "audit", "verify", "--store", filepath.Join(out, "stream"), "--run", "again")
	if code != 0 || !strings.Contains(stdout, "verdict: intact") {
		t.Fatalf("audit after --replace: exit %d: %s%s", code, stdout, errOut)
	}
}
