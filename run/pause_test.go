package run

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/aggregator"
	"github.com/asyrevel/asyrevel/audit"
)

// A paused run (the first Ctrl-C of train: Hooks.Pause) answers what is
// in flight, seals the whole log and saves every participant's state:
// the log it leaves is intact, which a run stopped by its context
// (cancelled at once) is not (unsealed tails: the last messages of each
// chain covered by no signature). A resume goes on to the end, intact.
func TestPauseSealsTheLog(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	out := t.TempDir()
	cfg := roomyConfig(t, out, "paused")
	cfg.Duration = time.Minute
	// The pause comes once training is under way (an evaluation after
	// steps), not at a time: a busy host may still be setting up 1.5 s
	// in, and a pause there ends the run before training, unpaused (a
	// make test run at load 30).
	pause := make(chan struct{})
	var once sync.Once
	onPoint := func(pt aggregator.Point) {
		if pt.Steps > 0 {
			once.Do(func() { close(pause) })
		}
	}
	t0 := time.Now()
	s, err := Train(context.Background(), cfg, Hooks{Pause: pause, OnPoint: onPoint})
	if !errors.Is(err, ErrInterrupted) || !errors.Is(err, aggregator.ErrPaused) {
		t.Fatalf("paused run: %v, want ErrInterrupted and ErrPaused", err)
	}
	t.Logf("the pause took %v", time.Since(t0)) // a hang is the test timeout's
	if s == nil || s.Steps == 0 || s.TrainSeconds <= 0 || s.StoppedBy != "paused" || s.NotStarted {
		t.Fatalf("paused run's summary: %+v", s)
	}
	rep, err := audit.CheckOut(context.Background(), out, cfg.Run)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Intact() || len(rep.Notes) > 0 {
		t.Fatalf("audit of the paused run: intact %v, problems %v, notes %v", rep.Intact(), rep.Problems, rep.Notes)
	}
	resumeToTheEnd(t, cfg, s.TrainSeconds)
}

// A pause that comes before training starts (the first Ctrl-C while the
// data loads, the stream is set up or the parties join) ends the run as
// a pause all the same: Train returns the summary of what there is, with
// an error wrapping ErrInterrupted and aggregator.ErrPaused, stopped_by
// "paused" and NotStarted (there is no checkpoint to go on from), and
// writes summary.json. Before, it returned "aggregator: interrupted:
// paused by its operator", no summary, which the command line took for a
// failure (exit 1). The pause comes on events, not at a time: before
// Train is called (setup), or when the aggregator starts waiting for the
// parties to join.
func TestPauseBeforeTraining(t *testing.T) {
	for _, tc := range []struct {
		name string
		when string // the log message the pause comes with; "" before Train
	}{
		{"setup", ""},
		{"joining", "waiting for the parties to join"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := t.TempDir()
			cfg := roomyConfig(t, out, "early-"+tc.name)
			cfg.Duration = time.Minute
			pause := make(chan struct{})
			var once sync.Once
			stop := func() { once.Do(func() { close(pause) }) }
			hooks := Hooks{Pause: pause, Log: testLog(t)}
			if tc.when == "" {
				stop()
			} else {
				hooks.Log = zerolog.New(onMessage{tc.when, stop}).Level(zerolog.InfoLevel)
			}
			s, err := Train(context.Background(), cfg, hooks)
			if !errors.Is(err, ErrInterrupted) || !errors.Is(err, aggregator.ErrPaused) {
				t.Fatalf("paused before training: %v, want ErrInterrupted and ErrPaused", err)
			}
			if s == nil {
				t.Fatal("paused before training: no summary")
			}
			if s.Steps != 0 || !s.NotStarted || s.StoppedBy != "paused" || s.Interrupted == "" {
				t.Fatalf("summary of a run paused before training: steps %d, not_started %v, stopped_by %q, interrupted %q",
					s.Steps, s.NotStarted, s.StoppedBy, s.Interrupted)
			}
			var onDisk Summary
			raw, err := os.ReadFile(filepath.Join(out, "summary.json"))
			if err != nil {
				t.Fatalf("summary.json: %v", err)
			}
			if err := json.Unmarshal(raw, &onDisk); err != nil || !onDisk.NotStarted || onDisk.StoppedBy != "paused" {
				t.Fatalf("summary.json of a run paused before training (%v): %s", err, raw)
			}
			if _, err := os.Stat(CheckpointPath(cfg.CheckpointDir, cfg.Run, 0)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("a run paused before training has no checkpoint to go on from; stat: %v", err)
			}
		})
	}
}

// onMessage is a log's writer that calls do once a line with msg is
// written.
type onMessage struct {
	msg string
	do  func()
}

func (o onMessage) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(o.msg)) {
		o.do()
	}
	return len(p), nil
}
