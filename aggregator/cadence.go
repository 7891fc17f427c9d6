package aggregator

import (
	"context"
	"time"
)

// The evaluation cadence. A round is due when EvalEvery has gone by since
// the last one was requested, spaced at least evalSpacing times a round's
// own cost (on large data a round takes seconds: evaluations then take at
// most about a tenth of the run), or when EvalSteps requests were answered
// since then (an epoch: every party's pass over its rows), whichever comes
// first. A round's cost is the time from its request to its score less
// the time the broker connection was down meanwhile, and the spacing
// takes the lesser of the last two rounds' costs: a round slowed by an
// outage (a broker restarted, a cluster's fail-over that the aggregator's
// own connection rode out) measures the outage, not what evaluating
// costs, and would otherwise push the next round out by nine times the
// outage (issue 35: no evaluation for 25 s after a fail-over). A cost
// that stays high is in both. On a small table an epoch takes a few
// milliseconds, less than a round's round trip: to evaluate at least
// once an epoch, training waits for the round in progress once an epoch
// has gone by since it was requested (awaitRound), for at most a few
// times what a round takes and never for a party known to be silent in
// evaluations.

// evalDue reports whether a new evaluation round is due at training time
// el (a.mu held).
func (a *Aggregator) evalDue(el time.Duration) bool {
	if a.phase != training || a.lf != nil || a.eval.cur != nil || a.stop.pausing {
		return false
	}
	if n := a.cfg.EvalSteps; n > 0 && a.res.Steps-a.eval.steps >= n {
		return true
	}
	return el-a.eval.at >= max(a.cfg.EvalEvery, evalSpacing*a.spacingCost())
}

// spacingCost is the evaluation cost the spacing of rounds follows: the
// lesser of the last two rounds' (the last alone after the first).
func (a *Aggregator) spacingCost() time.Duration {
	if a.eval.prev > 0 {
		return min(a.eval.cost, a.eval.prev)
	}
	return a.eval.cost
}

// roundScored records what round r cost, scored at now, when the broker
// had been unreachable for outage since r's request (OutageSince of the
// bus; a.mu held): that time is not the evaluation's cost.
func (a *Aggregator) roundScored(r *round, now time.Time, outage time.Duration) {
	cost := max(now.Sub(r.requested)-outage, 0)
	a.eval.prev, a.eval.cost = a.eval.cost, cost
	a.eval.done++
	a.eval.sum += cost
	a.cfg.Log.Debug().Uint32("round", r.id).Dur("took", now.Sub(r.requested)).Dur("outage", outage).
		Dur("cost", cost).Dur("spacing", evalSpacing*a.spacingCost()).Msg("evaluation round scored")
}

// outageSince is how long the broker has been unreachable since t, a
// disconnection or a stream that answered no publish (0 when the bus does
// not say).
func (a *Aggregator) outageSince(t time.Time) time.Duration {
	if o, ok := a.bus.(interface{ OutageSince(time.Time) time.Duration }); ok {
		return o.OutageSince(t)
	}
	return 0
}

// owedWait bounds how long training waits for a round it is owed:
// at least this, or three times what a round takes.
const owedWait = firstSilentWait

// owed returns, when training must wait for the round in progress (an
// epoch went by since it was requested, a.mu held), a channel closed when
// that round is scored and the longest the wait may still last; nil when
// training goes on.
func (a *Aggregator) owed() (<-chan struct{}, time.Duration) {
	c := a.eval.cur
	n := a.cfg.EvalSteps
	if c == nil || c.final || n <= 0 || a.phase != training || a.res.Steps-c.steps < n {
		return nil, 0
	}
	for m := 1; m <= a.q; m++ {
		if c.wait[m] && a.eval.silent[m] && !a.roundDone(c, m) {
			return nil, 0 // a party silent in evaluations: rounds wait for it briefly, training not at all
		}
	}
	left := max(owedWait, 3*a.eval.cost) - time.Since(c.requested)
	if left <= 0 {
		return nil, 0
	}
	if c.scored == nil {
		c.scored = make(chan struct{})
	}
	return c.scored, left
}

// awaitRound waits, before a request is handled, while training is owed
// an evaluation round (owed), and counts the wait (Result.EvalWait).
func (a *Aggregator) awaitRound(ctx context.Context) {
	for {
		a.mu.Lock()
		ch, left := a.owed()
		a.mu.Unlock()
		if ch == nil {
			return
		}
		t0 := time.Now()
		t := time.NewTimer(left)
		select {
		case <-ch:
		case <-t.C:
		case <-ctx.Done():
		case <-a.fin: // the run ended (failed): the round will not be scored
		}
		t.Stop()
		a.mu.Lock()
		a.res.EvalWait += time.Since(t0)
		a.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
	}
}

// evalRequested records where round r was requested, for evalDue.
func (a *Aggregator) evalRequested(r *round) {
	a.eval.at, a.eval.steps = r.at, r.steps
}
