package cli

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
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
	t.Parallel()
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

// The exit status tells a script how a run ended: 0 finished, 1 failed,
// exitPaused (75) for a run whose state is saved and that goes on with
// --resume, 128+N for a run a signal N stopped with no state to go on
// from. Before, a stop by a signal exited 0 like a finished run, with
// or without a state to go on from.
func TestExitStatus(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("short")
	}
	// Stopped with its state saved (--out keeps the checkpoints).
	out := filepath.Join(t.TempDir(), "out")
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	ch := goCLI(ctx, append([]string{"train", "--out", out}, exitData...)...)
	waitTraining(t, filepath.Join(out, "checkpoints"))
	cancel(signalError{syscall.SIGTERM})
	if r := <-ch; r.code != exitPaused || !strings.Contains(r.errOut, "--resume") {
		t.Errorf("stopped with its state saved: exit %d, want %d and the command that goes on: %s", r.code, exitPaused, r.errOut)
	}

	// Stopped with no state saved (no --out, no --checkpoint-dir), once
	// training has started: the signal's status.
	ctx, cancel = context.WithCancelCause(context.Background())
	defer cancel(nil)
	errOut := &signalOn{word: "training starts", seen: make(chan struct{})}
	go func() {
		<-errOut.seen
		cancel(signalError{syscall.SIGTERM})
	}()
	var stdout syncBuffer
	code := execute(ctx, append([]string{"train"}, append(exitData, "--log", "info")...), &stdout, errOut)
	if code != 128+int(syscall.SIGTERM) || !strings.Contains(errOut.String(), "no state was saved") {
		t.Errorf("stopped by SIGTERM with no state saved: exit %d, want %d and words that say so: %s", code, 128+int(syscall.SIGTERM), errOut.String())
	}
}

// signalOn is a log's writer that closes seen once word is written.
type signalOn struct {
	syncBuffer
	word string
	seen chan struct{}
	once sync.Once
}

func (s *signalOn) Write(p []byte) (int, error) {
	n, err := s.syncBuffer.Write(p)
	if strings.Contains(s.syncBuffer.String(), s.word) {
		s.once.Do(func() { close(s.seen) })
	}
	return n, err
}

// waitTraining waits until the aggregator's checkpoint file is written
// in dir (--checkpoint-dir: dir/RUN/aggregator.ckpt, the run's id not
// known ahead), at the start of training.
func waitTraining(t *testing.T, dir string) {
	t.Helper()
	for deadline := time.Now().Add(patience); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		runs, _ := os.ReadDir(dir)
		for _, r := range runs {
			if _, err := os.Stat(run.CheckpointPath(dir, r.Name(), 0)); err == nil {
				return
			}
		}
	}
	t.Fatal("training did not start (waited three minutes)")
}

// A pause (the first Ctrl-C of train) that comes before training has
// started leaves nothing to resume: the run ends with the signal's status
// (128+N, as a stop with no state saved), summary.json says it paused
// before training started (stopped_by "paused", not_started), and the
// last words say so and that the same command starts the run, with no
// --resume command; that command does start it again. A stop (a cancelled
// context: the second Ctrl-C, SIGTERM) before training ends the same way.
// Before, the pause exited 75 with "aggregator: interrupted: paused by its
// operator", "the state saved; --resume goes on" and no summary.json, and
// the stop exited 75 with a --resume command that had nothing to resume.
// Not parallel: the pause goes through the process's one pauser, as
// Main's signal handler does.
func TestPauseBeforeTrainingExitStatus(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	for _, tc := range []struct {
		name      string
		sig       syscall.Signal
		stoppedBy string
	}{
		{"pause", syscall.SIGINT, "paused"},
		{"stop", syscall.SIGTERM, "interrupted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			// With the privacy report: a run that never started has no
			// attack to report.
			data := slices.DeleteFunc(slices.Clone(exitData), func(a string) bool { return a == "--no-privacy-report" })
			args := append([]string{"train", "--out", out}, append(data, "--log", "info")...)
			// Twice: the same command starts the run again, up to the same
			// stop (an earlier run in --out is kept aside).
			for range 2 {
				ctx, cancel := context.WithCancelCause(context.Background())
				defer cancel(nil)
				// The stop comes when the aggregator waits for the parties.
				errOut := &signalOn{word: "waiting for the parties to join", seen: make(chan struct{})}
				go func() {
					<-errOut.seen
					if p := pauser.Load(); p != nil && tc.stoppedBy == "paused" {
						(*p)(tc.sig)
					} else {
						cancel(signalError{tc.sig})
					}
				}()
				var stdout syncBuffer
				code := execute(ctx, args, &stdout, errOut)
				last := errOut.String()
				if i := strings.Index(last, "\nasyrevel: "); i >= 0 {
					last = last[i+1:] // the last words, after the log
				}
				if want := 128 + int(tc.sig); code != want || !strings.Contains(last, "before training started") || !strings.Contains(last, "nothing to resume") ||
					!strings.Contains(last, "the same command starts it again") || strings.Contains(last, "--resume --run") {
					t.Fatalf("stopped before training: exit %d, want %d, and last words that say the run had not started and how to start it, with no --resume command: %s", code, want, errOut.String())
				}
				var s struct {
					StoppedBy  string `json:"stopped_by"`
					NotStarted bool   `json:"not_started"`
					Steps      int64  `json:"steps"`
				}
				if raw, err := readSummary(out, &s); err != nil || s.StoppedBy != tc.stoppedBy || !s.NotStarted || s.Steps != 0 {
					t.Fatalf("summary.json of a run stopped before training (%v): %s", err, raw)
				}
				if o := stdout.String(); !strings.Contains(o, "stopped before training started") || strings.Contains(o, "AUC") {
					t.Fatalf("the report of a run stopped before training: want it said, and no attack measured: %s", o)
				}
			}
		})
	}
}

// The command that starts again a run stopped before training: the same
// one, unless the run id it names has its stream outside --out, where the
// stopped start stays (then without --run, a new id); separate
// participants all start again under another id.
func TestStartAgain(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		cmd  string
		args []string
		set  func(c *run.Config)
		want string
		not  string
	}{
		{"same", "train", []string{"--data", "my data.csv", "--out", "o"}, func(c *run.Config) {}, "the same command starts it again:\n  asyrevel train --data 'my data.csv' --out o", "--run"},
		{"run in out", "train", []string{"--run", "r1", "--out", "o"}, func(c *run.Config) { c.Run, c.Out = "r1", "o" }, "asyrevel train --run r1 --out o", "another"},
		{"run in a store", "train", []string{"--run", "r1", "--store", "s"}, func(c *run.Config) { c.Run, c.StoreDir = "r1", "s" }, "under another run id (run r1's stream holds the stopped start), as this command does:\n  asyrevel train --store s", "--run"},
		{"separate", "aggregator", []string{"--run", "r1", "--nats", "nats://x"}, func(c *run.Config) { c.Run, c.NATS = "r1", "nats://x" }, "start every participant again with another --run", "--resume"},
	} {
		var cfg run.Config
		c.set(&cfg)
		got := startAgain(c.cmd, c.args, &cfg, "r1")
		if !strings.Contains(got, c.want) || strings.Contains(got, c.not) {
			t.Errorf("%s: %q, want %q and no %q", c.name, got, c.want, c.not)
		}
	}
}
