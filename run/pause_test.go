package run

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

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
	if s == nil || s.Steps == 0 || s.TrainSeconds <= 0 {
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
