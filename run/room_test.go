package run

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/aggregator"
	"github.com/asyrevel/asyrevel/audit"
	"github.com/asyrevel/asyrevel/broker"
)

// roomyConfig is a small run that keeps its checkpoints and keys in out,
// so that it can be resumed.
func roomyConfig(t *testing.T, out, run string) Config {
	return New(func(c *Config) {
		c.Synthetic = small()
		c.Parties = 3
		c.Batch = 16
		c.Window = 2
		c.Seed = 1
		c.Out = out
		c.Run = run
		c.EvalEvery = 200 * time.Millisecond
		c.CheckpointDir = filepath.Join(out, "ck")
		c.CheckpointEvery = 200 * time.Millisecond
	})
}

// resumeToTheEnd resumes cfg, which stopped after trained of training,
// for a second more, and checks that it ends and that its log is intact.
func resumeToTheEnd(t *testing.T, cfg Config, trained float64) {
	t.Helper()
	cfg.Resume = true
	cfg.Duration = time.Duration(trained*float64(time.Second)) + time.Second
	s, err := Train(context.Background(), cfg, Hooks{Log: testLog(t)})
	if err != nil {
		t.Fatalf("resumed with room: %v", err)
	}
	if s.Resumed == nil || s.TrainSeconds < cfg.Duration.Seconds()-0.1 {
		t.Fatalf("resumed run: %.2f s of training, want %v; resumed %v", s.TrainSeconds, cfg.Duration, s.Resumed)
	}
	rep, err := audit.CheckOut(context.Background(), cfg.Out, cfg.Run)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Intact() {
		t.Fatalf("audit of the resumed run: %v %v", rep.Counts, rep.Problems)
	}
}

// A run whose stream nears its bound pauses while there is room left:
// what is in flight is answered, a seal covers the whole log and every
// participant saves its state, so the log it leaves is intact and holds
// every message sent. Before, the run went on until the stream refused
// messages: the tails of the chains were left unsealed, and since a full
// stream refuses by size, a small reply could be stored after its larger
// request was refused (the request, sent again on resume, then landed
// after its answer: the audit's causal_order, once in CI). The run goes
// on when resumed with the default bound, which counts what the store
// holds plus 80% of the free space: the bound was fixed when the stream
// was made, and every resume stopped full again.
func TestFullStreamGoesOnWithRoom(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	out := t.TempDir()
	cfg := roomyConfig(t, out, "roomy")
	const bound = 8 << 20 // nearly full after a second or so: checkpoints were saved
	cfg.MaxStore = bound
	cfg.Duration = time.Minute
	s, err := Train(context.Background(), cfg, Hooks{Log: testLog(t)})
	if !errors.Is(err, aggregator.ErrNearlyFull) || !errors.Is(err, broker.ErrStreamFull) {
		t.Fatalf("a stream nearly full: %v, want ErrNearlyFull (and ErrStreamFull)", err)
	}
	if s == nil || s.Steps == 0 {
		t.Fatalf("the paused run's summary: %+v", s)
	}
	if s.Lost != 0 || s.StreamBytes <= 0 || s.StreamBytes > bound {
		t.Errorf("the paused run lost %d messages; its stream holds %d bytes of its bound of %d", s.Lost, s.StreamBytes, bound)
	}
	rep, err := audit.CheckOut(context.Background(), out, cfg.Run)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Intact() || len(rep.Notes) > 0 {
		t.Fatalf("audit of the run paused nearly full: intact %v, problems %v, notes %v", rep.Intact(), rep.Problems, rep.Notes)
	}
	cfg.MaxStore = 0
	resumeToTheEnd(t, cfg, s.TrainSeconds)
}

// smallDisk mounts a tmpfs of size (e.g. "8m") to fill, or skips the
// test where it cannot (root and CAP_SYS_ADMIN needed).
func smallDisk(t *testing.T, size string) string {
	t.Helper()
	disk := filepath.Join(t.TempDir(), "disk")
	if err := os.Mkdir(disk, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", disk).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a small tmpfs to fill (root and CAP_SYS_ADMIN needed): %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", disk).Run() })
	return disk
}

// On a small disk the stream's default bound is within the free space:
// the run pauses, sealed, before the disk is full (ErrNearlyFull), and
// goes on once there is room. Before, the default bound was at least
// 64 MiB, more than the 8 MB disk: the disk filled first and the run
// stopped on the broker's write error (ErrStoreWrite).
func TestSmallDiskPausesBeforeItIsFull(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	disk := smallDisk(t, "8m")
	cfg := roomyConfig(t, filepath.Join(disk, "run"), "smalldisk")
	cfg.Duration = time.Minute
	s, err := Train(context.Background(), cfg, Hooks{Log: testLog(t)})
	if !errors.Is(err, aggregator.ErrNearlyFull) || errors.Is(err, broker.ErrStoreWrite) {
		t.Fatalf("a stream on an 8 MB disk with the default bound: %v, want ErrNearlyFull (a pause before the disk is full)", err)
	}
	t.Logf("paused: %v", err)
	if b, err := exec.Command("mount", "-o", "remount,size=256m", disk).CombinedOutput(); err != nil {
		t.Fatalf("remount: %v %s", err, b)
	}
	trained := 0.0
	if s != nil {
		trained = s.TrainSeconds
	}
	resumeToTheEnd(t, cfg, trained)
}

// A broker whose disk fills up stops the run at once, with an error that
// names the disk (broker.ErrStoreWrite), instead of training on for the
// rest of the run while nothing is stored and failing at the end with
// "messages lost". Once there is room, a resume goes on to the end with
// an intact log. It needs a small file system of its own: a tmpfs,
// mounted as root. The stream is unbounded (--max-store none): a bound,
// which is within the free space, would pause the run first.
func TestDiskFullStopsTheRun(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	disk := smallDisk(t, "8m")
	out := filepath.Join(disk, "run")
	cfg := roomyConfig(t, out, "diskfull")
	cfg.Duration = time.Minute
	cfg.MaxStore = -1
	t0 := time.Now()
	s, err := Train(context.Background(), cfg, Hooks{Log: testLog(t)})
	took := time.Since(t0)
	if !errors.Is(err, broker.ErrStoreWrite) || !strings.Contains(err.Error(), "disk is full") {
		t.Fatalf("a full disk: %v, want ErrStoreWrite naming the disk", err)
	}
	if took > 30*time.Second {
		t.Errorf("the run went on for %v on a full disk", took)
	}
	t.Logf("stopped after %v: %v", took.Round(time.Millisecond), err)
	if b, err := exec.Command("mount", "-o", "remount,size=256m", disk).CombinedOutput(); err != nil {
		t.Fatalf("remount: %v %s", err, b)
	}
	trained := 0.0
	if s != nil {
		trained = s.TrainSeconds
	}
	resumeToTheEnd(t, cfg, trained)
}
