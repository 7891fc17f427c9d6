package aggregator

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/model"
)

// flushSink is a sink whose Flush returns at once.
type flushSink struct{ sink }

func (*flushSink) Flush(context.Context) error { return nil }

// A Ctrl-C can fail a publish (its context ended) before the run's loop
// sees the signal: the failure ends the run, and the interruption is
// handled after it. The summary then said "0.0 s of training (0
// steps/s)" for a run that trained for seconds.
func TestInterruptAfterFailureKeepsTrainingTime(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first func(a *Aggregator)
	}{
		{"failed publish first", func(a *Aggregator) { a.fail(context.Canceled) }},
		{"interrupt alone", func(*Aggregator) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := newTest(t, 2, []int32{1, 0}, model.NewLogistic(2))
			s := &flushSink{}
			a.bus = s
			train(a, []float64{0, 0, 0, 0})
			a.start = time.Now().Add(-2 * time.Second)
			a.res.Steps = 1000
			tc.first(a)
			ctx, cancel := context.WithCancelCause(context.Background())
			cancel(errors.New("interrupt signal received"))
			res, err := a.interrupted(ctx, s)
			if !errors.Is(err, ErrInterrupted) {
				t.Fatalf("err %v, want ErrInterrupted", err)
			}
			if res.Training < 2*time.Second || res.Training > time.Minute {
				t.Fatalf("training time %v, want about 2 s (the time since the start)", res.Training)
			}
		})
	}
}
