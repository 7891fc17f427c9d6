package run

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/asyrevel/asyrevel/aggregator"
	"github.com/asyrevel/asyrevel/dataset"
)

// Early stopping: a run given no length ends when the held-out loss stops
// improving.
//
// The held-out loss is the head's mean loss on the test set (--test, a
// preset's or a split folder's test set) at each evaluation; without a test
// set, DefaultHoldOut of the training rows are kept aside, chosen at random
// with --seed, and serve as the test set (they are not trained on, and the
// accuracy reported is theirs). An evaluation improves on the best so far
// when its loss is lower than best - Tolerance*|best|; once Patience epochs
// (passes of every party over its training rows) have gone by since the
// last improvement, the run stops at that evaluation (stopped_by "patience"
// in summary.json). Patience counts epochs, not evaluations, so that it
// means the same on a set of 455 rows (hundreds of epochs a second) as on
// one of 32,561 (an epoch a second or so). Evaluations come every
// StopEvalEvery (or 9 times an evaluation's own cost, whichever is longer),
// so that a small set ends within a fraction of a second of its best and a
// large one spends at most a tenth of its time evaluating.
const (
	DefaultPatience  = 5.0
	DefaultTolerance = 1e-3
	DefaultHoldOut   = 0.1
	StopEvalEvery    = 50 * time.Millisecond
)

// Unbounded reports whether c gives the run no length: no --epochs,
// --duration, --steps or --stop-at-target.
func (c *Aggregation) Unbounded() bool {
	return c.Epochs == 0 && c.Duration == 0 && c.MaxSteps == 0 && !c.StopAtTarget
}

// EarlyStopReport is what early stopping watched and found, for summary.json.
type EarlyStopReport struct {
	// Watched is the loss: "test" (the test set's), "held-out" (HeldOut
	// training rows kept aside) or "train" (no test set, no hold-out).
	Watched   string  `json:"watched"`
	HeldOut   int     `json:"held_out_rows,omitempty"`
	Patience  float64 `json:"patience_epochs"`
	Tolerance float64 `json:"tolerance"`
	// Best is the lowest loss seen, BestSeconds and BestSteps where.
	Best        float64 `json:"best_loss"`
	BestSeconds float64 `json:"best_seconds"`
	BestSteps   int64   `json:"best_steps"`
	Fired       bool    `json:"stopped_the_run"`
}

// earlyStop watches the evaluations of a run (from the aggregator's
// goroutine: observe and stopWhen are called one after the other for each
// evaluation) and says when the loss has stopped improving.
type earlyStop struct {
	cfg     *Config
	test    bool    // the test loss is watched (else the training loss)
	heldOut bool    // the test set is a hold-out of the training rows
	epoch   float64 // answered requests in an epoch: parties * rows / batch
	best    float64
	bestAt  aggregator.Point
	since   float64 // epochs from the best to the last evaluation
	fired   bool
}

func newEarlyStop(cfg *Config, n int, test, heldOut bool) *earlyStop {
	return &earlyStop{cfg: cfg, test: test, heldOut: heldOut, best: math.NaN(),
		epoch: max(float64(cfg.Parties)*float64(n)/float64(max(cfg.Batch, 1)), 1)}
}

// watched names the loss es watches.
func (es *earlyStop) watched() string {
	switch {
	case es.heldOut:
		return "held-out"
	case es.test:
		return "test"
	}
	return "train"
}

// lossName names the loss es watches in words.
func (es *earlyStop) lossName() string {
	if w := es.watched(); w != "train" {
		return w
	}
	return "training"
}

// observe returns an OnPoint that records pt and then calls next.
func (es *earlyStop) observe(next func(aggregator.Point)) func(aggregator.Point) {
	return func(pt aggregator.Point) {
		es.point(pt)
		if next != nil {
			next(pt)
		}
	}
}

func (es *earlyStop) point(pt aggregator.Point) {
	if pt.Final {
		return
	}
	loss := pt.TrainLoss
	if es.test {
		loss = pt.TestLoss
	}
	if !math.IsNaN(loss) && !math.IsInf(loss, 0) && (math.IsNaN(es.best) || loss < es.best-es.cfg.Tolerance*math.Abs(es.best)) {
		es.best, es.bestAt = loss, pt
	}
	// A loss that is not finite never becomes the best: a run that
	// diverges from the start stops after Patience epochs.
	es.since = float64(pt.Steps-es.bestAt.Steps) / es.epoch
}

// stopWhen returns a StopWhen that is true once Patience epochs went by
// without an improvement, or when other says so.
func (es *earlyStop) stopWhen(other func() bool) func() bool {
	return func() bool {
		if es.since >= es.cfg.Patience {
			if !es.fired {
				es.fired = true
				es.cfg.Log.Info().Float64("best", es.best).Float64("at_seconds", es.bestAt.Seconds).
					Msgf("the %s loss has not improved by %g%% for %.1f epochs: stopping (--patience %g, --tolerance %g)",
						es.lossName(), 100*es.cfg.Tolerance, es.since, es.cfg.Patience, es.cfg.Tolerance)
			}
			return true
		}
		return other != nil && other()
	}
}

// reason says why es stopped the run ("" if it did not): the stop
// control's reason, which the parties print.
func (es *earlyStop) reason() string {
	if !es.fired {
		return ""
	}
	return fmt.Sprintf("the %s loss stopped improving (--patience %g)", es.lossName(), es.cfg.Patience)
}

// report is es's part of the summary (nil without early stopping).
func (es *earlyStop) report(d *Data) *EarlyStopReport {
	if es == nil {
		return nil
	}
	r := &EarlyStopReport{Watched: es.watched(), HeldOut: d.HeldOut, Patience: es.cfg.Patience, Tolerance: es.cfg.Tolerance,
		Best: es.best, BestSeconds: es.bestAt.Seconds, BestSteps: es.bestAt.Steps, Fired: es.fired}
	if math.IsNaN(r.Best) {
		r.Best = 0 // no evaluation before the stop (JSON has no NaN)
	}
	return r
}

// stoppedBy names the limit that ended the run of res (Summary.StoppedBy).
func (c *Config) stoppedBy(res *aggregator.Result, n int) string {
	switch {
	case res.Interrupted != "":
		return "interrupted"
	case c.early != nil && c.early.fired:
		return "patience"
	}
	switch res.StopReason {
	case "step budget reached":
		if c.Epochs > 0 && c.Batch > 0 {
			s := int64(math.Ceil(c.Epochs * float64(n) / float64(c.Batch) * float64(c.Parties)))
			if c.MaxSteps == 0 || s <= c.MaxSteps {
				return "epochs"
			}
		}
		return "steps"
	case "duration reached":
		return "duration"
	case "target accuracy reached":
		return "target"
	case aggregator.ReasonConverged:
		return "converged"
	case aggregator.ReasonBudget:
		return "budget"
	case aggregator.ReasonEpochs:
		return "epochs"
	case "":
		return ""
	}
	return "condition"
}

// StopWords says in a sentence why the run of s stopped ("" if unknown).
func (s *Summary) StopWords() string {
	switch s.StoppedBy {
	case "patience":
		e := s.EarlyStop
		what := map[string]string{"test": "test", "held-out": "held-out", "train": "training"}[e.Watched]
		return fmt.Sprintf("stopped: the %s loss stopped improving: best %.4f after %.1f s, no gain of %g%% in the %g epochs after it (--patience, --tolerance)",
			what, e.Best, e.BestSeconds, 100*e.Tolerance, e.Patience)
	case "epochs", "steps", "duration", "target":
		return "stopped: --" + strings.Replace(s.StoppedBy, "target", "target (--stop-at-target)", 1) + " reached"
	case "condition":
		return "stopped: the experiment's stop condition was met"
	case "budget":
		return "stopped: the privacy budget is spent: every request of the last while was refused by it (an exact 0), so no model could move any more; " +
			"a longer run needs a larger bound (--privacy auc=A with A above 0.6, or epsilon=E) or the label-free profile"
	case "converged":
		if f := s.LabelFree; f != nil {
			return fmt.Sprintf("stopped: converged: the head's loss on %d held-out training rows stopped improving; the head of epoch %d, the best on them (loss %.4f, accuracy %.2f%%), is kept",
				f.HeldOutRows, f.BestEpoch, f.HeldOutLoss, 100*f.HeldOutAccuracy)
		}
		return "stopped: converged"
	}
	return ""
}

// holdOut keeps cfg.HoldOut of d's training rows aside as its test set when
// d has none (see Config.HoldOut). The rows are chosen from the row count
// and the seed alone, so a party's process and the aggregator's choose the
// same ones.
func holdOut(cfg *Config, d *Data) error {
	if cfg.HoldOut <= 0 || d.NTest > 0 || d.NTrain < 2 {
		return nil
	}
	train, test, err := dataset.TestSplit{Fraction: cfg.HoldOut, Shuffle: true, Seed: cfg.Seed}.Rows(d.NTrain)
	if err != nil {
		return fmt.Errorf("%w: --holdout: %w", ErrConfig, err)
	}
	if len(test) == 0 || len(train) == 0 {
		return nil
	}
	for m, x := range d.PartTrain {
		if x != nil {
			d.PartTest[m], d.PartTrain[m] = x.Rows(test), x.Rows(train)
		}
	}
	if d.TrainY != nil {
		ty, y := make([]int32, len(test)), make([]int32, len(train))
		for i, r := range test {
			ty[i] = d.TrainY[r]
		}
		for i, r := range train {
			y[i] = d.TrainY[r]
		}
		d.TrainY, d.TestY = y, ty
	}
	d.NTrain, d.NTest, d.HeldOut = len(train), len(test), len(test)
	return nil
}
