package run

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/asyrevel/asyrevel/aggregator"
)

// Early stopping: a run given no length ends when the held-out loss stops
// improving.
//
// The held-out loss is the head's mean loss, at each evaluation, on
// DefaultHoldOut of the training rows kept aside (holdout.go: chosen at
// random with --seed, never trained on), whether or not the run has a test
// set: the test set is only reported, it never chooses; separate
// processes hold out the rows the aggregator names (holdout.go). A run
// that holds no rows out (--holdout negative) watches the training loss.
// An evaluation improves on the best so far when its loss is lower than
// best - Tolerance*|best|. The run stops at the first
// evaluation at which, since the last improvement, all three of these have
// gone by (stopped_by "patience" in summary.json):
//
//   - Patience epochs (passes of every party over its training rows), so
//     that the rule means the same on a set of 455 rows (hundreds of epochs
//     a second) as on one of 32,561 (an epoch a second or so);
//   - MinPatienceSteps requests of each party: a small table's epoch is a
//     few requests (2 a party on wine's 128 training rows at batch 64),
//     too few for a zeroth-order step to show a gain over 5 of them;
//   - MinPatienceEvals evaluations, so that the run never stops on one
//     evaluation's word: with evaluations far apart (an --eval-every of
//     its own on a small table) Patience epochs can pass between two of
//     them, and a wine run once stopped after 0.15 s with 3 rows in
//     curve.csv.
//
// Every participant then keeps its model of the evaluation best on the
// held-out rows (aggregator/keep.go). Evaluations come at least once an
// epoch, and every StopEvalEvery (or 9 times an evaluation's own cost,
// whichever is longer) on large sets, which then spend at most a tenth of
// their time evaluating; so with the default cadence 5 epochs hold at
// least 5 evaluations, and on large sets (a9a: 458 requests a party an
// epoch) Patience epochs are the whole rule.
//
// How the floors were chosen (issue 34: scikit-learn's wine and breast
// cancer tables, 3 parties, --privacy off, seeds 1-10, every evaluation's
// held-out loss in curve.csv): the held-out loss on 14 (wine) or 46
// (breast cancer) rows is smooth, its jitter from one evaluation to the
// next 0.01% to 0.09% of the loss (the residual from a running median of
// 21 evaluations), below the 0.1% Tolerance, so it needs neither
// smoothing nor a tolerance scaled to its noise. It hardly ever reaches a
// flat plateau either: it keeps falling slowly for as long as the run
// goes on (by 0.2% to 4.8% over the last tenth of every run's steps),
// and the test accuracy gains a test row now and then. So the rule is a
// rate: the run stops when its loss falls by less than Tolerance in the
// patience window, and the floor sets that rate. It was 500 requests a
// party (wine and breast cancer runs trained 4 to 58 s). Replayed on
// those curves, a floor of 150 stops after 14% to 73% of the requests
// (37% to 43% on average) with the same mean test accuracy (wine 95.56%,
// breast cancer 0.09 points less); 100 lost 0.35 points on breast cancer
// (0.18 and 0.35 in two rounds of runs alternating with the old build),
// 50 lost 1.7 points on wine. Run, 20 times a table alternating with the
// old build, 150 gave 95.28% on wine (95.55% before: a test row in ten
// runs) and 98.51% on breast cancer (98.47%) in 40% and 34% of the wall
// time (docs/running.md).
const (
	DefaultPatience  = 5.0
	DefaultTolerance = 1e-3
	DefaultHoldOut   = 0.1
	// MinPatienceSteps is the least patience in requests of each party
	// (see above); under 5 epochs of a9a's, so large sets are not
	// concerned.
	MinPatienceSteps = 150
	// MinPatienceEvals is the least patience in evaluations (see above):
	// DefaultPatience, so that it never binds at the default cadence of
	// at least one evaluation an epoch.
	MinPatienceEvals = 5
	StopEvalEvery    = 50 * time.Millisecond
)

// Unbounded reports whether c gives the run no length: no --epochs,
// --duration, --steps or --stop-at-target.
func (c *Aggregation) Unbounded() bool {
	return c.Epochs == 0 && c.Duration == 0 && c.MaxSteps == 0 && !c.StopAtTarget
}

// EarlyStopReport is what early stopping watched and found, for summary.json.
type EarlyStopReport struct {
	// Watched is the loss: "held-out" (HeldOut training rows kept aside)
	// or "train" (no rows held out).
	Watched string `json:"watched"`
	HeldOut int    `json:"held_out_rows,omitempty"`
	// Patience is the patience in force, in epochs: --patience, or more
	// on a small table (MinPatience, in requests of each party). The run
	// also waits MinEvals evaluations after the best.
	Patience    float64 `json:"patience_epochs"`
	Asked       float64 `json:"patience_asked"`
	MinPatience int     `json:"min_patience_steps"`
	MinEvals    int     `json:"min_patience_evals"`
	Tolerance   float64 `json:"tolerance"`
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
	cfg      *job
	heldOut  bool    // the held-out loss is watched (else the training loss)
	epoch    float64 // answered requests in an epoch: parties * rows / batch
	patience float64 // epochs: Patience, at least MinPatienceSteps requests a party
	best     float64
	bestAt   aggregator.Point
	since    float64 // epochs from the best to the last evaluation
	evals    int     // evaluations after the best (all of them while there is none)
	fired    bool
}

func newEarlyStop(cfg *job, n int, heldOut bool) *earlyStop {
	es := &earlyStop{cfg: cfg, heldOut: heldOut, best: math.NaN(), epoch: epochSteps(cfg, n)}
	es.patience = max(cfg.Patience, MinPatienceSteps*float64(cfg.Parties)/es.epoch)
	return es
}

// epochSteps is the answered requests of an epoch (every party's pass
// over its n rows), at least 1.
func epochSteps(cfg *job, n int) float64 {
	return max(float64(cfg.Parties)*float64(n)/float64(max(cfg.Batch, 1)), 1)
}

// watched names the loss es watches.
func (es *earlyStop) watched() string {
	if es.heldOut {
		return "held-out"
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
	if es.heldOut {
		loss = pt.HeldOutLoss
	}
	es.evals++
	if !math.IsNaN(loss) && !math.IsInf(loss, 0) && (math.IsNaN(es.best) || loss < es.best-es.cfg.Tolerance*math.Abs(es.best)) {
		es.best, es.bestAt, es.evals = loss, pt, 0
	}
	// A loss that is not finite never becomes the best: a run that
	// diverges from the start stops after Patience epochs.
	es.since = float64(pt.Steps-es.bestAt.Steps) / es.epoch
}

// stopWhen returns a StopWhen that is true once Patience epochs (at
// least MinPatienceSteps requests a party) and MinPatienceEvals
// evaluations went by without an improvement, or when other says so.
func (es *earlyStop) stopWhen(other func() bool) func() bool {
	return func() bool {
		if es.since >= es.patience && es.evals >= MinPatienceEvals {
			if !es.fired {
				es.fired = true
				es.cfg.hooks.Log.Info().Float64("best", es.best).Float64("at_seconds", es.bestAt.Seconds).
					Msgf("the %s loss has not improved by %g%% for %.1f epochs and %d evaluations: stopping (--patience %g, at least %d requests a party: %.4g epochs here, and %d evaluations; --tolerance %g)",
						es.lossName(), 100*es.cfg.Tolerance, es.since, es.evals, es.cfg.Patience, MinPatienceSteps, es.patience, MinPatienceEvals, es.cfg.Tolerance)
			}
			return true
		}
		return other != nil && other()
	}
}

// reason says why es stopped the run ("" if it did not): the stop
// control's reason, which the parties print.
func (es *earlyStop) reason() string {
	if es == nil || !es.fired {
		return ""
	}
	return fmt.Sprintf("the %s loss stopped improving (--patience %g)", es.lossName(), es.cfg.Patience)
}

// report is es's part of the summary (nil without early stopping).
func (es *earlyStop) report(d *Data) *EarlyStopReport {
	if es == nil {
		return nil
	}
	r := &EarlyStopReport{Watched: es.watched(), HeldOut: d.HeldOut, Patience: es.patience, Asked: es.cfg.Patience, MinPatience: MinPatienceSteps, MinEvals: MinPatienceEvals, Tolerance: es.cfg.Tolerance,
		Best: es.best, BestSeconds: es.bestAt.Seconds, BestSteps: es.bestAt.Steps, Fired: es.fired}
	if math.IsNaN(r.Best) {
		r.Best = 0 // no evaluation before the stop (JSON has no NaN)
	}
	return r
}

// stoppedBy names the limit that ended the run of res (Summary.StoppedBy).
func (c *job) stoppedBy(res *aggregator.Result, n int) string {
	switch {
	case res.Paused:
		return "paused"
	case res.Interrupted != "":
		return "interrupted"
	case c.stuck != nil && c.stuck.fired:
		return "stuck"
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

// pauseName is Summary.StoppedBy for a run the aggregator paused, or
// whose pause it took as a stop (pausedAsStop), for cause: "paused", or
// "stream_full" when its stream nearly filled up and no checkpoint is
// kept to go on from (no --checkpoint-dir, --checkpoint-every negative,
// or training had not started): --resume has nothing to resume then.
func pauseName(cfg *job, s *Summary, cause error) string {
	if errors.Is(cause, aggregator.ErrNearlyFull) &&
		(s.NotStarted || cfg.CheckpointDir == "" || cfg.CheckpointEvery < 0) {
		return "stream_full"
	}
	return "paused"
}

// StopWords says in a sentence why the run of s stopped ("" if unknown).
func (s *Summary) StopWords() string {
	switch s.StoppedBy {
	case "patience":
		e := s.EarlyStop
		what := map[string]string{"held-out": "held-out", "train": "training"}[e.Watched]
		why := "--patience"
		if e.Patience > e.Asked {
			why = fmt.Sprintf("--patience %g, at least %d requests a party on a small table", e.Asked, e.MinPatience)
		}
		return fmt.Sprintf("stopped: the %s loss stopped improving: best %.4f after %.1f s, no gain of %g%% in the %.4g epochs after it (%s; --tolerance)",
			what, e.Best, e.BestSeconds, 100*e.Tolerance, e.Patience, why)
	case "stuck":
		return "stopped: the run does not learn: " + s.Stuck
	case "diverged":
		return "stopped: the training diverged (a party's outputs beyond the bound or not finite); the models were not written"
	case "epochs", "steps", "duration", "target":
		return "stopped: --" + strings.Replace(s.StoppedBy, "target", "target (--stop-at-target)", 1) + " reached"
	case "condition":
		return "stopped: the experiment's stop condition was met"
	case "stream_full":
		return "stopped: the run's stream was nearly full (its bound, --max-store, or the disk's free space), with no checkpoint kept to go on from"
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

// divergedEnd marks s as the summary of a run a party stopped because its
// outputs diverged (err wraps party.ErrDiverged): stopped_by "diverged",
// the party's words as the interruption's, and no model written (a
// diverged model scores nothing). The summary is written like an
// interrupted run's (issue 34: a diverged run exited without one) and the
// run still ends with err, a non-zero exit. It returns the function that
// passes finish's outcome on.
func divergedEnd(s *Summary, err error) func(*Summary, error) (*Summary, error) {
	s.StoppedBy, s.Interrupted = "diverged", err.Error()
	return func(sum *Summary, ferr error) (*Summary, error) {
		if ferr != nil {
			if sum == nil {
				s.OutputsErr = ferr.Error()
			}
			return s, fmt.Errorf("%w (and the outputs: %w)", err, ferr)
		}
		return sum, err
	}
}
