package party

import (
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/zoo/kernel"
)

// Adversary lets an attack experiment make a party deviate from the
// protocol while it keeps speaking it: choose its batches, rewrite what it
// sends. Honest parties have none. Its methods run on the party's
// goroutine, between the model's evaluation and the publication, and must
// not allocate or retain their arguments.
type Adversary interface {
	// Batch may choose the sample ids of request r (0, 1, ...): it writes
	// up to len(ids) ids into ids and returns how many it wrote (at least
	// 1), or 0 to keep the party's draw. n is the training set size. It is
	// not called when the aggregator draws the batches.
	Batch(r uint64, ids []uint32, n int) int
	// Request may rewrite the outputs c and c_hat (k per sample) of a
	// request for ids before it is published.
	Request(r uint64, ids []uint32, c, cHat []float64)
	// Eval may rewrite the outputs c of the samples first, first+1, ... of
	// a split before they are published.
	Eval(split schemas.Split, first int, c []float64)
}

// Frozen is an Adversary that keeps its own model as it is: it gives up
// training (its requests are crafted, and the replies to them are not
// steps of its model). Optional.
type Frozen interface {
	Frozen() bool
}

// frozen reports whether the party's adversary keeps its model.
func (p *Party) frozen() bool {
	f, ok := p.cfg.Adversary.(Frozen)
	return ok && f.Frozen()
}

// drawBatch fills the slot's ids for the next request: drawn by the
// aggregator (Control.BatchSeed), chosen by an adversary, or drawn from
// the party's own generator. It does not allocate.
func (p *Party) drawBatch(slot *pending) {
	slot.ids = slot.ids[:cap(slot.ids)]
	n := p.cfg.Train.NRows
	r := p.requests
	p.requests++
	if p.batchSeed != 0 {
		schemas.DrawBatch(slot.ids, p.batchSeed, p.cfg.ID, r, n)
		return
	}
	if a := p.cfg.Adversary; a != nil {
		if b := a.Batch(r, slot.ids, n); b > 0 {
			slot.ids = slot.ids[:min(b, len(slot.ids))]
			return
		}
	}
	rng := p.step.rng
	if p.alt.sampler != nil { // SynREVEL: the run's shared batches
		rng = p.alt.sampler
	}
	for j := range slot.ids {
		slot.ids[j] = uint32(rng.IntN(n))
	}
}

// replyDiff is mean(h_bar - h) over the request's samples, whatever form
// the reply r takes.
func replyDiff(r *schemas.Reply, b int) float64 {
	switch {
	case r.Mean:
		return r.Delta[0]
	case len(r.Delta) > 0:
		return kernel.Sum(r.Delta) / float64(b)
	}
	return kernel.MeanDiff(r.H, r.HBar)
}
