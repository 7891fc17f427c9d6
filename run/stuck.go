package run

import (
	"errors"
	"fmt"
	"math"

	"github.com/asyrevel/asyrevel/aggregator"
)

// A stuck run stops. A run whose training loss stays far above where it
// started is not learning and will not: a step size too large for the
// data, or raw columns on very different scales (one step overshoots the
// large ones; under the privacy switch's budget profile the replies are
// clipped, so the outputs never blow up to an error, and issue 34 saw a
// training loss of 43, from 1.1, for the whole 5 minutes it was given).
// Such a run stops once its training loss has been above StuckFactor
// times the first evaluation's (or not finite) at every evaluation for
// StuckEpochs epochs and at least StuckEvals evaluations, whatever its
// length flags say. A run whose steps stall there (raw columns at a small
// --lr: the loss in the hundreds of millions, no reply for minutes) stops
// too: its evaluations go on. Its outputs are written, stopped_by is "stuck", and
// the run ends with an error wrapping ErrStuck that names the likely
// cause (a non-zero exit).
const (
	StuckFactor = 3.0
	StuckEpochs = 3.0
	StuckEvals  = 3
)

// ErrStuck ends a run whose training loss stayed far above its start.
var ErrStuck = errors.New("the run does not learn")

// stuckWatch watches the training loss of a run's evaluations (from the
// aggregator's goroutine, as earlyStop).
type stuckWatch struct {
	cfg      *job
	epoch    float64 // answered requests in an epoch
	unscaled bool    // the columns differ in range by orders of magnitude (Data.Unscaled)
	first    float64 // the first finite training loss (NaN before)
	from, at int64   // steps at the first and the last evaluation of the stretch above
	evals    int     // evaluations in the stretch above (0: none)
	last     float64 // the last training loss
	fired    bool
}

func newStuckWatch(cfg *job, d *Data) *stuckWatch {
	return &stuckWatch{cfg: cfg, epoch: epochSteps(cfg, d.NTrain), unscaled: d.Unscaled, first: math.NaN()}
}

// observe returns an OnPoint that records pt and then calls next.
func (w *stuckWatch) observe(next func(aggregator.Point)) func(aggregator.Point) {
	return func(pt aggregator.Point) {
		w.point(pt)
		if next != nil {
			next(pt)
		}
	}
}

func (w *stuckWatch) point(pt aggregator.Point) {
	if pt.Final {
		return
	}
	l := pt.TrainLoss
	finite := !math.IsNaN(l) && !math.IsInf(l, 0)
	if math.IsNaN(w.first) && finite {
		w.first = l
		return
	}
	w.last = l
	if finite && !(l > StuckFactor*w.first) {
		w.evals = 0
		return
	}
	if w.evals == 0 {
		w.from = pt.Steps
	}
	w.at = pt.Steps
	w.evals++
}

// stuck reports whether the stretch above is long enough to stop.
func (w *stuckWatch) stuck() bool {
	return w.evals >= StuckEvals && float64(w.at-w.from)/w.epoch >= StuckEpochs
}

// stopWhen returns a StopWhen that is true once the run is stuck, or when
// other says so.
func (w *stuckWatch) stopWhen(other func() bool) func() bool {
	return func() bool {
		if w.fired || w.stuck() {
			if !w.fired {
				w.fired = true
				w.cfg.hooks.Log.Error().Float64("first", w.first).Float64("now", w.last).Msg(w.words())
			}
			return true
		}
		return other != nil && other()
	}
}

// words says why the run stopped and what to change.
func (w *stuckWatch) words() string {
	now := fmt.Sprintf("%.4g", w.last)
	if math.IsNaN(w.last) || math.IsInf(w.last, 0) {
		now = "not finite"
	}
	over := fmt.Sprintf("%d evaluations over %.3g epochs (%d steps)", w.evals, float64(w.at-w.from)/w.epoch, w.at-w.from)
	what := fmt.Sprintf("the training loss stayed above %g times its start (%.4g at the start, %s now) for %s", StuckFactor, w.first, now, over)
	if math.IsNaN(w.first) {
		what = "the training loss was not finite at any of " + over
	}
	if w.unscaled {
		return what + ": the columns are on very different scales (see the warning above): give --scale standard; a smaller --lr (now " +
			fmt.Sprintf("%g", w.cfg.LR) + ") would only slow the small columns down"
	}
	return what + fmt.Sprintf(": the step size is too large (--lr, now %g: try %g) or the columns are on very different scales (--scale standard)", w.cfg.LR, w.cfg.LR/10)
}

// reason is the stop control's reason when w stopped the run ("" if not).
func (w *stuckWatch) reason() string {
	if !w.fired {
		return ""
	}
	return "stuck: " + w.words()
}

// err is the error a run that w stopped ends with (nil if none).
func (w *stuckWatch) err() error {
	if w == nil || !w.fired {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrStuck, w.words())
}

// stuckErr returns a function that passes a run's outcome on, with
// ErrStuck when cfg's run stopped stuck and nothing else went wrong.
func stuckErr(cfg *job) func(*Summary, error) (*Summary, error) {
	return func(s *Summary, err error) (*Summary, error) {
		if err == nil {
			err = cfg.stuck.err()
		}
		return s, err
	}
}
