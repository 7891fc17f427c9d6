package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/aggregator"
	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/run"
)

// A party stopped (Ctrl-C) before training started has no checkpoint to
// keep, --checkpoint-dir or not: its last words say the run had not
// started, that there is nothing to resume and how to take part again,
// and it exits 128+N like train stopped then. The stop comes while it
// joins alone (subscribing, saying hello or waiting): the same command
// then joins again, and the run ends; or once the aggregator has called
// it and taken its initial pass while waiting for the other party: the
// aggregator refuses a second join, and the words say to start every
// participant again with another --run. Before, the party said "no state
// was saved to go on from (--checkpoint-dir, or train's --out, keeps
// it)" with a --checkpoint-dir given, or failed with exit 1 ("party 1:
// subscribe: ... context canceled", "party 1: flush: ... context
// canceled") when the signal landed in a broker call.
func TestPartyStopBeforeTraining(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("short")
	}
	for _, tc := range []struct {
		name, word string
		joined     bool // the aggregator runs and takes the party's join
		again      string
	}{
		{"joining", "joining; waiting for the aggregator's start", false, "the same command joins the run again"},
		{"joined", "called: joined; initial pass sent", true, "start them all again with another --run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := startBroker(t)
			actx, stopAgg := context.WithCancel(context.Background())
			defer stopAgg()
			common := []string{"--nats", url, "--run", "early-" + tc.name, "--parties", "2", "--data", "synthetic:n=1000,d=8,test=200",
				"--batch", "16", "--checkpoint-dir", t.TempDir()}
			aggregator := func() <-chan result {
				return goCLI(actx, append([]string{"aggregator", "--epochs", "1", "--log", "warn", "--join-wait", "1m", "--no-privacy-report", "--out", t.TempDir()}, common...)...)
			}
			var agg <-chan result
			if tc.joined {
				agg = aggregator()
			}
			args := append([]string{"party", "--id", "1", "--log", "debug"}, common...)
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			errOut := &signalOn{word: tc.word, seen: make(chan struct{})}
			go func() {
				<-errOut.seen
				cancel(signalError{syscall.SIGINT})
			}()
			var stdout syncBuffer
			code := execute(ctx, args, &stdout, errOut)
			last := lastWords(errOut.String(), "asyrevel: run interrupted")
			if code != 130 || !strings.Contains(last, "before training started") || !strings.Contains(last, "nothing to resume") ||
				!strings.Contains(last, tc.again) || strings.Contains(last, "--resume") ||
				strings.Contains(last, "no state was saved to go on from") || strings.Contains(last, "summary") ||
				strings.Contains(stdout.String(), "no checkpoint was kept") || strings.Contains(stdout.String(), "checkpoint is saved") {
				t.Fatalf("party stopped before training: exit %d, want 130, and words that say the run had not started and how to take part again (%q): %s\n%s",
					code, tc.again, stdout.String(), last)
			}
			t.Logf("party %d: %s%s", code, stdout.String(), last)
			if tc.joined {
				stopAgg()
				<-agg
				return
			}
			// The same command joins again; with party 2 and the aggregator
			// the run ends.
			chs := []<-chan result{aggregator(), goCLI(actx, args...),
				goCLI(actx, append([]string{"party", "--id", "2", "--log", "warn"}, common...)...)}
			for i, ch := range chs {
				if r := <-ch; r.code != 0 {
					t.Fatalf("after the stopped party's start again, participant %d (0: aggregator): exit %d: %s", i, r.code, r.errOut)
				}
			}
		})
	}
}

// A run whose stream nears its bound with no checkpoint kept (no
// --checkpoint-dir, or --checkpoint-every negative) stops: no state is
// saved, and --resume cannot go on. Its last words say so and what to do
// instead, and it exits 1 (not finished, nothing to go on from). Before,
// they said "the state saved; ... the same command with --resume (and
// its --run) goes on", exit 75. Its summary says stopped_by stream_full,
// and its report why; before, stopped_by paused, with nothing to resume.
func TestNearlyFullWithoutCheckpoints(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("short")
	}
	for _, tc := range []struct {
		name string
		out  bool // it writes summary.json into dir/out
		args func(dir string) []string
	}{
		{"no checkpoint-dir", false, func(string) []string { return nil }},
		{"checkpoints off", true, func(dir string) []string {
			return []string{"--out", filepath.Join(dir, "out"), "--checkpoint-every", "-1s"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			args := append(append([]string{"train", "--max-store", "4MB"}, tc.args(dir)...), exitData...)
			// It ends only nearly full (--duration 30m).
			code, stdout, errOut := runCLICtx(context.Background(), args...)
			last := lastWords(errOut, "asyrevel: the run")
			t.Logf("train %d: %s", code, last)
			if code != exitFailed || !strings.Contains(errOut, "nearly full") || !strings.Contains(last, "no checkpoint was kept") ||
				!strings.Contains(last, "--resume cannot go on") || !strings.Contains(last, "--max-store") ||
				strings.Contains(last, "state saved") || strings.Contains(last, "goes on") {
				t.Fatalf("nearly full with no checkpoint: exit %d, want %d, and words that say --resume cannot go on and what to do: %s\n%s", code, exitFailed, stdout, errOut)
			}
			if !strings.Contains(stdout, "stopped: the run's stream was nearly full") {
				t.Errorf("the report does not say why the run stopped: %s", stdout)
			}
			if !tc.out {
				return
			}
			var s struct {
				StoppedBy string `json:"stopped_by"`
			}
			if raw, err := readSummary(filepath.Join(dir, "out"), &s); err != nil || s.StoppedBy != "stream_full" {
				t.Errorf("summary.json: stopped_by %q, want stream_full (nothing to resume) (%v): %s", s.StoppedBy, err, raw)
			}
		})
	}
}

// train's Ctrl-C pause with no checkpoint kept (no --out, no
// --checkpoint-dir) stops the run: its last words say --resume cannot go
// on, and it exits 130 like any stop with no state to go on from
// (docs/running.md). Before, it said "the state saved; ... --resume goes
// on", exit 75.
func TestPauseWithoutCheckpoints(t *testing.T) {
	// Not parallel: pauser is the process's one train.
	if testing.Short() {
		t.Skip("short")
	}
	// The pause comes once training has started (the aggregator's phase
	// is set before it logs this).
	errOut := &signalOn{word: "training starts", seen: make(chan struct{})}
	done := make(chan struct{})
	defer func() { <-done }()
	go func() {
		defer close(done)
		<-errOut.seen
		if p := pauser.Load(); p != nil {
			(*p)(syscall.SIGINT)
		}
	}()
	var stdout syncBuffer
	code := execute(context.Background(), append([]string{"train"}, append(exitData, "--log", "info")...), &stdout, errOut)
	last := lastWords(errOut.String(), "asyrevel: ")
	t.Logf("train %d: %s", code, last)
	if code != 130 || !strings.Contains(last, "--resume cannot go on") || strings.Contains(last, "state saved") || strings.Contains(last, "goes on") {
		t.Fatalf("paused with no checkpoint: exit %d, want 130, and words that say --resume cannot go on: %s", code, errOut.String())
	}
}

// A stalled run (aggregator.ErrStalled: no request answered for --wait)
// with no checkpoint kept has nothing --resume can go on from: it ends
// as a failure that says so, not as a pause (exit 75 and "--resume goes
// on", as before). With checkpoints it stays a pause, with the command.
func TestStallWithoutCheckpoints(t *testing.T) {
	stalled := fmt.Errorf("aggregator: %w: no request answered for 1m0s (--wait) and every party has departed; restart them with --resume", aggregator.ErrStalled)
	for _, tc := range []struct {
		name   string
		err    error
		code   int
		want   []string
		unwant string
	}{
		{"no checkpoints", stalled, exitFailed, []string{"no checkpoint was kept", "--resume cannot go on", "start the run again"}, "goes on"},
		{"checkpoints", resumeHint{err: stalled, command: "asyrevel train --out o --resume --run r1"}, exitPaused,
			[]string{"the run paused", "go on with:\n  asyrevel train --out o --resume --run r1"}, "cannot go on"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			code := exitFor(tc.err, &stderr)
			words := stderr.String()
			for _, w := range tc.want {
				if !strings.Contains(words, w) {
					t.Errorf("exit %d, words lack %q: %s", code, w, words)
				}
			}
			if code != tc.code || strings.Contains(words, tc.unwant) {
				t.Errorf("exit %d, want %d, and words without %q: %s", code, tc.code, tc.unwant, words)
			}
		})
	}
}

// Without the trust layer (--no-trust) a run whose stream nears its bound
// stops with its state saved, and --resume goes on (exit 75); but nothing
// seals its log, and its last words say so. Before, they said "what was in
// flight answered, the log sealed", as with the trust layer.
func TestNearlyFullWithoutTrust(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("short")
	}
	out := filepath.Join(t.TempDir(), "out")
	args := append([]string{"train", "--max-store", "4MB", "--no-trust", "--out", out}, exitData...)
	code, stdout, errOut := runCLICtx(context.Background(), args...)
	last := lastWords(errOut, "asyrevel: the run")
	t.Logf("train %d: %s", code, last)
	if code != exitPaused || !strings.Contains(errOut, "nearly full") || !strings.Contains(last, "the state saved") ||
		!strings.Contains(last, "trust layer is off") || !strings.Contains(last, "--resume --run") || strings.Contains(last, "sealed") {
		t.Fatalf("nearly full without the trust layer: exit %d, want %d, and words that say the state is saved, the log not sealed, and how to go on: %s\n%s",
			code, exitPaused, stdout, errOut)
	}
	var s struct {
		StoppedBy string `json:"stopped_by"`
	}
	if raw, err := readSummary(out, &s); err != nil || s.StoppedBy != "paused" {
		t.Errorf("summary.json: stopped_by %q, want paused (--resume goes on) (%v): %s", s.StoppedBy, err, raw)
	}
}

// The words of a pause with its state saved are true with the trust layer
// and without it (run.ErrUnsealed: the aggregator took its pause as a
// stop, and nothing sealed the log).
func TestPauseWordsWithoutTrust(t *testing.T) {
	hinted := func(err error) error {
		return resumeHint{err: err, command: "asyrevel train --out o --resume --run r1"}
	}
	paused := fmt.Errorf("%w: %w", run.ErrInterrupted, aggregator.ErrPaused)
	for _, tc := range []struct {
		name   string
		err    error
		want   string
		unwant string
	}{
		{"sealed", hinted(paused), "the log sealed", "trust layer is off"},
		{"unsealed", hinted(fmt.Errorf("%w: %w (%w)", run.ErrInterrupted, aggregator.ErrPaused, run.ErrUnsealed)), "trust layer is off", "sealed,"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			code := exitFor(tc.err, &stderr)
			words := stderr.String()
			if code != exitPaused || !strings.Contains(words, tc.want) || strings.Contains(words, tc.unwant) || !strings.Contains(words, "go on with") {
				t.Errorf("exit %d, want %d, and words with %q, without %q: %s", code, exitPaused, tc.want, tc.unwant, words)
			}
		})
	}
}

// A party whose run the aggregator stops because the run's stream is
// nearly full, with no checkpoint to go on from (the aggregator's
// --checkpoint-every negative), did not finish: it exits 1 as the
// aggregator does, and its words say why and that --resume cannot go on,
// with --checkpoint-dir too (the stream holds the stop). Before, it exited
// 0 as if the run had ended, and wrote its model.
func TestPartyNearlyFullWithoutCheckpoints(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("short")
	}
	url := startBroker(t)
	const id = "full-party"
	// A guard against a hang, not a measure: the run ends nearly full in
	// a second or two.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The run's stream, bounded before the participants come (as the
	// broker command makes it with --roster); they use it as it is.
	js, err := broker.ConnectJetStream(ctx, broker.JetStreamConfig{URL: url, Run: id, MaxBytes: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	js.Close()
	common := []string{"--nats", url, "--run", id, "--parties", "2", "--data", "synthetic:n=3000,d=8,test=600,noise=0.02", "--batch", "16",
		"--log", "warn", "--privacy", "off"}
	agg := goCLI(ctx, append([]string{"aggregator", "--duration", "30m", "--checkpoint-every", "-1s", "--no-privacy-report"}, common...)...)
	parties := []<-chan result{
		goCLI(ctx, append([]string{"party", "--id", "1", "--checkpoint-dir", t.TempDir()}, common...)...),
		goCLI(ctx, append([]string{"party", "--id", "2"}, common...)...),
	}
	got := []result{<-agg, <-parties[0], <-parties[1]}
	if r := got[0]; r.code != exitFailed || !strings.Contains(r.errOut, "nearly full") {
		t.Errorf("aggregator: exit %d, want %d, nearly full: %s\n%s", r.code, exitFailed, r.out, r.errOut)
	}
	for m, r := range got[1:] {
		last := lastWords(r.errOut, "asyrevel: ")
		t.Logf("party %d: exit %d: %s%s", m+1, r.code, r.out, last)
		if r.code != exitFailed || !strings.Contains(r.errOut, "nearly full") || !strings.Contains(last, "--resume cannot go on") ||
			!strings.Contains(r.out, "did not finish") || strings.Contains(last, "goes on") || strings.Contains(last, "go on with") {
			t.Errorf("party %d stopped nearly full with no checkpoint: exit %d, want %d, and words that say the run did not finish and --resume cannot go on: %s\n%s",
				m+1, r.code, exitFailed, r.out, r.errOut)
		}
	}
}

// A party writes no summary.json: its last words point to its stop line
// instead. Here party 1, stopped (Ctrl-C) in training with its
// checkpoint saved, exits 75 with the command that goes on. Before, its
// words said "the summary shows the part that ran".
func TestPartyWordsNameNoSummary(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("short")
	}
	url := startBroker(t)
	const id = "party-words"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a guard against a hang
	defer cancel()
	ck := t.TempDir()
	common := []string{"--nats", url, "--run", id, "--parties", "2", "--data", "synthetic:n=1000,d=8,test=200", "--batch", "16",
		"--log", "warn", "--privacy", "off", "--checkpoint-dir", ck, "--checkpoint-every", "100ms"}
	agg := goCLI(ctx, append([]string{"aggregator", "--duration", "30m", "--no-privacy-report"}, common...)...)
	c1, stop1 := context.WithCancelCause(ctx)
	defer stop1(nil)
	p1 := goCLI(c1, append([]string{"party", "--id", "1"}, common...)...)
	p2 := goCLI(ctx, append([]string{"party", "--id", "2"}, common...)...)
	// Party 1 saves a checkpoint once training has started.
	for _, err := os.Stat(run.CheckpointPath(ck, id, 1)); err != nil; _, err = os.Stat(run.CheckpointPath(ck, id, 1)) {
		if ctx.Err() != nil {
			t.Fatal("party 1 saved no checkpoint")
		}
		time.Sleep(5 * time.Millisecond)
	}
	stop1(signalError{syscall.SIGINT})
	r := <-p1
	cancel()
	<-agg
	<-p2
	last := lastWords(r.errOut, "asyrevel: ")
	t.Logf("party 1: exit %d: %s%s", r.code, r.out, last)
	if r.code != exitPaused || !strings.Contains(last, "party 1's stop line shows the part that ran") || strings.Contains(last, "the summary shows") ||
		!strings.Contains(last, "--resume --run") {
		t.Errorf("party 1 stopped in training: exit %d, want %d, and words that point to its stop line, not to a summary: %s%s", r.code, exitPaused, r.out, r.errOut)
	}
}

// What train's first Ctrl-C says it does is what it does: a sealed pause
// with checkpoints and the trust layer, a pause that seals nothing without
// the trust layer, a stop with no checkpoint kept. Before, it said
// "answering what is in flight, sealing the log, saving the state" in
// every case.
func TestTrainPauseWords(t *testing.T) {
	cfg := func(dir string, every time.Duration, off bool) run.Config {
		var c run.Config
		c.CheckpointDir, c.CheckpointEvery, c.Trust.Off = dir, every, off
		return c
	}
	for _, tc := range []struct {
		name         string
		cfg          run.Config
		want, unwant string
	}{
		{"checkpoints, trust", cfg("ck", 0, false), "sealing the log, saving the state", "trust layer is off"},
		{"checkpoints, no trust", cfg("ck", 0, true), "trust layer is off", "sealing"},
		{"no checkpoint-dir", cfg("", 0, false), "no checkpoint is kept", "saving the state"},
		{"checkpoints off", cfg("ck", -time.Second, false), "no checkpoint is kept", "saving the state"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if w := trainPauseWords(&tc.cfg); !strings.Contains(w, tc.want) || strings.Contains(w, tc.unwant) {
				t.Errorf("%q: want %q, not %q", w, tc.want, tc.unwant)
			}
		})
	}
}

// lastWords is the part of a command's stderr from the last line that
// starts with from (its last words, after the log), or all of it.
func lastWords(stderr, from string) string {
	if i := strings.LastIndex(stderr, "\n"+from); i >= 0 {
		return stderr[i+1:]
	}
	return stderr
}
