package aggregator

import (
	"testing"
	"time"
)

// The spacing of evaluation rounds follows what evaluating costs, not a
// broker outage that a round spanned (issue 35: a round of about 8 s
// across a cluster's fail-over put the next one 9 times that later, and
// the curve had no point for 25 s). The clock is the test's: each case
// scores rounds requested and answered at given times, with the bus's
// outage so far, then asks when the next round is due.
func TestCadenceIgnoresOutages(t *testing.T) {
	const every = 500 * time.Millisecond
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	type scored struct {
		took           time.Duration // request to score
		before, during time.Duration // the bus's outage before the request, and during the round
	}
	for _, tc := range []struct {
		name   string
		rounds []scored
		// the next round is not due at notDue after the last request,
		// and due at due.
		notDue, due time.Duration
	}{
		{"steady rounds", []scored{{took: ms(100)}, {took: ms(100)}}, ms(899), ms(900)},
		{"cheap rounds: EvalEvery", []scored{{took: ms(10)}, {took: ms(10)}}, ms(499), every},
		{"a broker outage during the round", []scored{{took: ms(100)}, {took: ms(8000), during: ms(7900)}}, ms(899), ms(900)},
		{"an outage before the round is no part of it", []scored{{took: ms(100)}, {took: ms(100), before: ms(60000)}}, ms(899), ms(900)},
		{"a round slowed without a lost connection (a fail-over)", []scored{{took: ms(100)}, {took: ms(8000)}}, ms(899), ms(900)},
		{"a cost that stays high", []scored{{took: ms(2000)}, {took: ms(2000)}}, ms(17999), ms(18000)},
		{"a cost that rises for good", []scored{{took: ms(100)}, {took: ms(2000)}, {took: ms(2000)}}, ms(17999), ms(18000)},
		{"the first round alone", []scored{{took: ms(2000)}}, ms(17999), ms(18000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &Aggregator{phase: training}
			a.cfg.EvalEvery = every
			clock := time.Unix(1000, 0)
			var outage, at time.Duration // the bus's outage so far; training time
			for _, s := range tc.rounds {
				outage += s.before
				at += time.Second
				r := &round{requested: clock, outage: outage, at: at}
				a.evalRequested(r)
				clock = clock.Add(s.took)
				outage += s.during
				a.roundScored(r, clock, outage)
			}
			if a.evalDue(at + tc.notDue) {
				t.Errorf("due %v after the last request, want not before %v (costs %v, %v)", tc.notDue, tc.due, a.evalCost, a.evalPrev)
			}
			if !a.evalDue(at + tc.due) {
				t.Errorf("not due %v after the last request (costs %v, %v)", tc.due, a.evalCost, a.evalPrev)
			}
		})
	}
}
