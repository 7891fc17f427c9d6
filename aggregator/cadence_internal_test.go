package aggregator

import (
	"testing"
	"time"
)

// The spacing of evaluation rounds follows what evaluating costs, not a
// broker outage that a round spanned (issue 35: a round of about 8 s
// across a cluster's fail-over put the next one 9 times that later, and
// the curve had no point for 25 s). The clock is the test's: each case
// scores rounds requested and answered at given times, with the time the
// broker was unreachable during each (the bus's OutageSince the request:
// an outage before it is none of it, broker TestOutageSince), then asks
// when the next round is due.
func TestCadenceIgnoresOutages(t *testing.T) {
	const every = 500 * time.Millisecond
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	type scored struct {
		took   time.Duration // request to score
		during time.Duration // the broker unreachable during the round
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
		{"a round slowed by something else: the lesser cost", []scored{{took: ms(100)}, {took: ms(8000)}}, ms(899), ms(900)},
		{"a cost that stays high", []scored{{took: ms(2000)}, {took: ms(2000)}}, ms(17999), ms(18000)},
		{"a cost that rises for good", []scored{{took: ms(100)}, {took: ms(2000)}, {took: ms(2000)}}, ms(17999), ms(18000)},
		{"the first round alone", []scored{{took: ms(2000)}}, ms(17999), ms(18000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &Aggregator{phase: training}
			a.cfg.EvalEvery = every
			clock := time.Unix(1000, 0)
			var at time.Duration // training time
			for _, s := range tc.rounds {
				at += time.Second
				r := &round{requested: clock, at: at}
				a.evalRequested(r)
				clock = clock.Add(s.took)
				a.roundScored(r, clock, s.during)
			}
			if a.evalDue(at + tc.notDue) {
				t.Errorf("due %v after the last request, want not before %v (costs %v, %v)", tc.notDue, tc.due, a.eval.cost, a.eval.prev)
			}
			if !a.evalDue(at + tc.due) {
				t.Errorf("not due %v after the last request (costs %v, %v)", tc.due, a.eval.cost, a.eval.prev)
			}
		})
	}
}
