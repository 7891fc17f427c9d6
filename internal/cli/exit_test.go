package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/run"
)

// exitData is a small run that does not end by itself before it is
// stopped (its duration is far beyond the test's).
var exitData = []string{"--data", "synthetic:n=3000,d=8,test=600,noise=0.02", "--parties", "2", "--batch", "16", "--duration", "30m",
	"--log", "warn", "--no-privacy-report", "--privacy", "off"}

// A summary that could not be written is named as such in the last
// words. Before, a run whose summary.json could not be written (a full
// disk; here a folder in its place) said "the summary shows the part
// that ran".
func TestSummaryNotWrittenIsSaid(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	out := filepath.Join(t.TempDir(), "out")
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	ch := goCLI(ctx, append([]string{"train", "--out", out}, exitData...)...)
	waitTraining(t, filepath.Join(out, "checkpoints"))
	if err := os.MkdirAll(filepath.Join(out, "summary.json", "in-the-way"), 0o755); err != nil {
		t.Fatal(err)
	}
	cancel(signalError{syscall.SIGTERM})
	r := <-ch
	if !strings.Contains(r.errOut, "summary.json could not be written") || strings.Contains(r.errOut, "the summary shows the part that ran") {
		t.Errorf("summary.json not written, the last words say otherwise (exit %d): %s", r.code, r.errOut)
	}
}

// waitTraining waits until the aggregator's checkpoint file is written
// in dir (--checkpoint-dir: dir/RUN/aggregator.ckpt, the run's id not
// known ahead), at the start of training.
func waitTraining(t *testing.T, dir string) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		runs, _ := os.ReadDir(dir)
		for _, r := range runs {
			if _, err := os.Stat(run.CheckpointPath(dir, r.Name(), 0)); err == nil {
				return
			}
		}
	}
	t.Fatal("training did not start within two minutes")
}
