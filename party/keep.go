package party

import "slices"

// The model a party keeps. At each evaluation round it answers, the party
// keeps a copy of the parameters it evaluated (the newest round); the
// aggregator names, in each evaluation request, the round that was best
// so far on its held-out rows (Control.Keep), and the party keeps that
// one's copy too and lets the others go: two copies at most. The stop
// names the round every participant keeps (Control.Round): the party
// takes that round's parameters as its final model (Params), or keeps its
// last ones when the stop names none, or one it does not hold (a round it
// did not answer: the aggregator names none such), which it says.

// snapshot is the party's parameters at one evaluation round.
type snapshot struct {
	round uint32 // 0: none
	w     []float64
}

// kept is a party's copies of its parameters at evaluation rounds.
type kept struct {
	named, newest snapshot
}

// eval records the parameters w the party evaluates in round r, after
// keep, the round the aggregator names as best so far (0: none), has been
// kept. It allocates only the first two times.
func (k *kept) eval(r, keep uint32, w []float64) {
	if keep != 0 && keep != k.named.round && keep == k.newest.round {
		k.named, k.newest = k.newest, k.named // the newest is the best: kept; the old best's buffer is reused
	}
	k.newest.round = r
	k.newest.w = append(k.newest.w[:0], w...)
}

// get returns the parameters of round r, if the party holds them.
func (k *kept) get(r uint32) ([]float64, bool) {
	switch {
	case r == 0:
		return nil, false
	case k.newest.round == r:
		return k.newest.w, true
	case k.named.round == r:
		return k.named.w, true
	}
	return nil, false
}

// save copies k into c.
func (k *kept) save(c *Checkpoint) {
	c.KeptRound, c.NewestRound = k.named.round, k.newest.round
	c.KeptW = append(c.KeptW[:0], k.named.w...)
	c.NewestW = append(c.NewestW[:0], k.newest.w...)
}

// restore sets k from c (a checkpoint of an earlier build holds none).
func (k *kept) restore(c *Checkpoint, np int) {
	k.named, k.newest = snapshot{}, snapshot{}
	if c.KeptRound != 0 && len(c.KeptW) == np {
		k.named = snapshot{c.KeptRound, slices.Clone(c.KeptW)}
	}
	if c.NewestRound != 0 && len(c.NewestW) == np {
		k.newest = snapshot{c.NewestRound, slices.Clone(c.NewestW)}
	}
}

// keepRound makes the parameters of round r, named by the stop, the
// party's final ones (p.mu held). It reports the round kept (0: the last
// parameters).
func (p *Party) keepRound(r uint32) {
	if r == 0 {
		return
	}
	w, ok := p.keep.get(r)
	if !ok {
		p.cfg.Log.Warn().Int("party", p.cfg.ID).Uint32("round", r).
			Msg("the aggregator keeps the models of an evaluation round this party holds no copy of (it did not answer it, or resumed from an older checkpoint): this party keeps its last parameters")
		return
	}
	copy(p.w, w)
	p.step.ema = nil // the parameters evaluated in that round, moving average or not
	p.stats.KeptRound = r
}
