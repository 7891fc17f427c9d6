package aggregator

import (
	"math"
	"slices"
)

// The model a run keeps. Each evaluation round scores every participant's
// model of the moment: the parties' as they were when they answered the
// round, the head's when it was scored. With rows held out of training
// (Config.HeldOut), the round whose held-out loss is the lowest is the one
// kept: the aggregator keeps its head of that round, names the round to
// the parties in each later evaluation request (Control.Keep: a party keeps
// its parameters of that round and of the newest it answered, nothing
// more), and names it in the stop (Control.Round), so that every
// participant saves its model of that same round. A round scored with a
// party's last outputs (a party that did not answer it) is not a
// candidate: that party holds no parameters of it.
//
// The choice reads the held-out rows' labels, and naming it tells every
// party which evaluation the labels preferred: one bit a round that a
// party could steer (its outputs on the held-out rows are its own). So a
// run whose labels are protected (noise, a budget, randomised response:
// Defense.protectsLabels) names no round and keeps the last models; the
// early stopping's moment of stopping is all the held-out labels tell the
// parties then, as before.

// Why the last models are kept (Result.KeepWhy).
const (
	KeepNoHeldOut   = "no training rows were held out to choose on (--holdout)"
	KeepProtected   = "the labels are protected: naming the best evaluation would tell the parties which one the held-out labels preferred"
	KeepNoCandidate = "no evaluation had fresh outputs of every party"
)

// keeper is the aggregator's choice of the model to keep.
type keeper struct {
	on    bool      // rounds are chosen and named
	why   string    // why not (the last models are kept)
	round uint32    // the best round so far (0: none)
	pt    Point     // its evaluation
	head  []float64 // the head scored in it
	// stopped: the stop named round (the final evaluation is scored).
	stopped bool
}

// initKeep decides whether the run keeps its best evaluation's models
// (a.mu not needed: New).
func (a *Aggregator) initKeep() {
	k := &a.keep
	switch {
	case a.lf != nil:
		k.why = "" // a label-free run keeps its best head by itself (labelfree.go)
	case a.cfg.HeldOut <= 0:
		k.why = KeepNoHeldOut
	case a.def.cfg.protectsLabels():
		k.why = KeepProtected
	default:
		k.on = true
	}
}

// protectsLabels reports whether d protects the labels with an accounted
// mechanism (noise, a budget, randomised response).
func (d *Defense) protectsLabels() bool {
	return d.Noise > 0 || d.Budget > 0 || d.LabelEpsilon > 0
}

// offer makes round r's evaluation pt, scored with the head w0, the best
// so far if it is a candidate with a lower held-out loss (a.mu held).
func (k *keeper) offer(r *round, pt *Point, w0 []float64) {
	if !k.on || r.without || len(pt.Stale) > 0 || r.id == 0 {
		return
	}
	l := pt.HeldOutLoss
	if math.IsNaN(l) || math.IsInf(l, 0) || k.round != 0 && !(l < k.pt.HeldOutLoss) {
		return
	}
	k.round, k.pt = r.id, *pt
	k.head = append(k.head[:0], w0...)
}

// named is the round to name to the parties (0: none).
func (k *keeper) named() uint32 {
	if !k.on {
		return 0
	}
	return k.round
}

// recorded is told, in recovery, of a round a control of the aggregator's
// before the crash named (Control.Keep): if it is not the checkpoint's
// best, the parties have let the checkpoint's go, and the choice starts
// again from the rounds after the resume.
func (k *keeper) recorded(keep uint32) {
	if keep != 0 && keep != k.round {
		k.round, k.pt, k.head = 0, Point{}, k.head[:0]
	}
}

// restore sets k from a checkpoint's fields.
func (k *keeper) restore(c *Checkpoint) {
	if !k.on || c.KeepRound == 0 {
		return
	}
	k.round, k.pt, k.head = c.KeepRound, c.KeepPoint, slices.Clone(c.KeepHead)
}

// save copies k into a checkpoint's fields.
func (k *keeper) save(c *Checkpoint) {
	c.KeepRound, c.KeepPoint = k.round, k.pt
	c.KeepHead = append(c.KeepHead[:0], k.head...)
}

// stop is the round the stop control names (0: every participant keeps
// its last model); after it, the result reports the model kept.
func (k *keeper) stop() uint32 {
	k.stopped = true
	return k.named()
}

// result fills res with the model kept and the head to save (once the
// stop was sent; an interrupted run keeps nothing).
func (k *keeper) result(res *Result) {
	res.KeepWhy = k.why
	if !k.stopped {
		return
	}
	switch {
	case k.on && k.round != 0:
		res.KeptRound, res.Kept = k.round, k.pt
		res.Params = slices.Clone(k.head)
	case k.on:
		res.KeepWhy = KeepNoCandidate
	}
}
