package main

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/asyrevel/asyrevel/experiment"
)

// cancelAfter is a log writer that cancels once it has seen n lines
// containing s.
type cancelAfter struct {
	mu     sync.Mutex
	b      strings.Builder
	s      string
	n      int
	cancel context.CancelFunc
}

func (c *cancelAfter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.b.Write(p)
	if strings.Count(c.b.String(), c.s) >= c.n {
		c.cancel()
	}
	return len(p), nil
}

// An interrupted fig4 writes the sets whose simulations all finished, says
// so in its section, and exits with an error.
func TestFig4InterruptKeepsFinishedSets(t *testing.T) {
	if testing.Short() {
		t.Skip("short: fig4 on the real a9a, minutes under the race detector")
	}
	_, file, _, _ := runtime.Caller(0)
	data := filepath.Join(filepath.Dir(file), "..", "..", "..", "shared", "data")
	if _, err := os.Stat(filepath.Join(data, "a9a", "a9a.gz")); err != nil {
		t.Skipf("real data not available (%v): put the shared data set beside the repository", err)
	}
	out := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Four quick simulations on a9a, then the real-pipeline check starts:
	// the interrupt comes there, and w8a is never reached.
	e := &cancelAfter{s: "fig4 simulation", n: 4, cancel: cancel}
	var o syncBuffer
	code := execute(ctx, []string{"experiment", "fig4", "--sets", "a9a,w8a", "--qs", "1,2", "--suboptimality", "0.05",
		"--check-qs", "2", "--seeds", "1", "--data-dir", data, "--out", out, "--log", "info"}, &o, e)
	if code == 0 {
		t.Fatalf("exit 0 after an interrupt\n%s%s", o.String(), e.b.String())
	}
	raw, err := os.ReadFile(filepath.Join(out, "fig4.csv"))
	if err != nil {
		t.Fatalf("no fig4.csv after an interrupt with a9a finished: %v\n%s", err, e.b.String())
	}
	if n := strings.Count(string(raw), "\na9a,"); n != 4 || strings.Contains(string(raw), "w8a") {
		t.Fatalf("fig4.csv after the interrupt:\n%s", raw)
	}
	report, _ := os.ReadFile(filepath.Join(out, experiment.ReportFile))
	if !strings.Contains(string(report), "**interrupted**: only a9a finished") {
		t.Fatalf("the section does not say it was interrupted:\n%s", report)
	}
}
