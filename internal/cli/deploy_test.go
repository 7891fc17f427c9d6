package cli

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/broker/bustest"
)

// docSection returns the code of the section titled heading of a file of
// docs/: the lines indented by at least four spaces more than the text
// around them (the blocks of a numbered list are indented by eight), in
// order, as one script.
func docSection(t *testing.T, file, heading string) string {
	t.Helper()
	_, self, _, _ := runtime.Caller(0)
	f, err := os.Open(filepath.Join(filepath.Dir(self), "..", "..", "docs", file))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		lines  []string
		in     bool
		code   bool // in a block: a code line follows a blank line
		prevBl = true
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if h, ok := strings.CutPrefix(line, "## "); ok {
			in = h == heading
			continue
		}
		blank := strings.TrimSpace(line) == ""
		switch {
		case !in || blank:
		case strings.HasPrefix(line, "        ") && (code || prevBl):
			code = true
			lines = append(lines, line[8:])
		case strings.HasPrefix(line, "    ") && !strings.HasPrefix(line, "     ") && prevBl:
			// A block at the top level of the section.
			code = true
			lines = append(lines, line[4:])
		default:
			code = false
		}
		prevBl = blank
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(lines) == 0 {
		t.Fatalf("docs/%s has no code under %q", file, heading)
	}
	return strings.Join(lines, "\n")
}

// Issue 24: docs/deployment.md's stock nats-server recipe, run as written:
// keys, the server's configuration, a stock nats-server, the split, four
// parties and the aggregator as separate processes, the audit of the
// server's store. Only the port (a free one), the store folder (the
// test's) and the length (--epochs 1) are changed; a9a comes from the
// shared data beside the repository.
func TestDeploymentStockRecipe(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("short")
	}
	server := bustest.StockServerBinary()
	if server == "" {
		t.Skipf("no stock nats-server binary (make stock-server, or apt-get install nats-server, or set %s)", bustest.StockServerEnv)
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	_, self, _, _ := runtime.Caller(0)
	a9a, _ := filepath.Abs(filepath.Join(filepath.Dir(self), "..", "..", "..", "shared", "data", "a9a"))
	if _, err := os.Stat(a9a); err != nil {
		t.Skipf("no a9a in %s", filepath.Dir(a9a))
	}
	script := docSection(t, "deployment.md", "A stock nats-server, step by step")
	bin := testBinary(t)
	dir := t.TempDir()
	for name, target := range map[string]string{"bin/asyrevel": bin, "tools/nats-server": server, "data/a9a": a9a} {
		must(t, os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755))
		must(t, os.Symlink(target, filepath.Join(dir, name)))
	}
	store := filepath.Join(dir, "nats-store")
	port := strconv.Itoa(freePort(t))
	for _, r := range []struct{ re, new string }{
		{`\b4222\b`, port},
		{`/tmp/asyrevel-nats`, store},
		{`--epochs [0-9.]+`, "--epochs 1"},
	} {
		if !regexp.MustCompile(r.re).MatchString(script) {
			t.Fatalf("the recipe no longer has %s: update this test\n%s", r.re, script)
		}
		script = regexp.MustCompile(r.re).ReplaceAllString(script, r.new)
	}
	script = "set -e -o pipefail\nexport PATH=" + filepath.Join(dir, "tools") + ":$PATH\n" + script + "\nkill $(jobs -p) 2>/dev/null || true; wait\n"
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the recipe failed after %v: %v\n--- script\n%s\n--- output\n%s", time.Since(start).Round(time.Millisecond), err, script, out)
	}
	t.Logf("the recipe ran in %v", time.Since(start).Round(time.Millisecond))
	for _, w := range []string{"stopped: --epochs reached", "verdict: intact"} { // the recipe's --epochs bounds the label-free head's fit
		if !strings.Contains(string(out), w) {
			t.Errorf("the recipe's output does not say %q:\n%s", w, out)
		}
	}
	for m := 1; m <= 4; m++ {
		if !strings.Contains(string(out), "party "+strconv.Itoa(m)+": ") {
			t.Errorf("party %d did not report:\n%s", m, out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "out", "stock", "summary.json")); err != nil {
		t.Error(err)
	}
}
