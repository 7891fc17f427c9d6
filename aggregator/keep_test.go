package aggregator

import (
	"math"
	"slices"
	"testing"
)

// The round kept is the one with the lowest held-out loss among those
// every party answered; a run whose labels are protected, or that holds
// no rows out, names none and keeps the last models.
func TestKeeperChoosesOnHeldOut(t *testing.T) {
	nan := math.NaN()
	type ev struct {
		heldOut, test float64
		stale         bool
	}
	for _, c := range []struct {
		name    string
		def     Defense
		heldOut int
		evals   []ev
		want    uint32 // the round named at the stop
		why     string
	}{
		{"the lowest held-out loss", Defense{}, 10, []ev{{0.7, 0.7, false}, {0.5, 0.9, false}, {0.6, 0.1, false}}, 2, ""},
		{"the test set never chooses", Defense{}, 10, []ev{{0.7, 0.1, false}, {0.6, 0.2, false}, {0.65, 0.05, false}}, 2, ""},
		{"a round with a party's last outputs is no candidate", Defense{}, 10, []ev{{0.7, 0, false}, {0.1, 0, true}, {0.6, 0, false}}, 3, ""},
		{"not finite is no candidate", Defense{}, 10, []ev{{nan, 0, false}, {math.Inf(1), 0, false}, {0.9, 0, false}}, 3, ""},
		{"a tie keeps the earlier", Defense{}, 10, []ev{{0.5, 0, false}, {0.5, 0, false}}, 1, ""},
		{"protected labels: the last", Defense{Reply: ReplyMean, Clip: 1, Noise: 1}, 10, []ev{{0.7, 0, false}, {0.5, 0, false}, {0.6, 0, false}}, 0, KeepProtected},
		{"randomised response: the last", Defense{LabelEpsilon: 2}, 10, []ev{{0.7, 0, false}, {0.5, 0, false}}, 0, KeepProtected},
		{"nothing held out: the last", Defense{}, 0, []ev{{nan, 0.1, false}, {nan, 0.2, false}}, 0, KeepNoHeldOut},
		{"no candidate: the last", Defense{}, 10, []ev{{0.3, 0, true}, {0.2, 0, true}}, 0, KeepNoCandidate},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := &Aggregator{cfg: Config{HeldOut: c.heldOut}}
			a.def.cfg = c.def
			a.initKeep()
			var named []uint32
			for i, e := range c.evals {
				r := &round{id: uint32(i + 1)}
				pt := Point{Round: r.id, HeldOutLoss: e.heldOut, TestLoss: e.test}
				if e.stale {
					pt.Stale = []int{2}
				}
				named = append(named, a.keep.named())
				a.keep.offer(r, &pt, []float64{float64(r.id)})
			}
			got := a.keep.stop()
			var res Result
			a.keep.result(&res)
			if got != c.want || res.KeptRound != c.want || res.KeepWhy != c.why {
				t.Errorf("stop names round %d (result %d, why %q), want %d (%q); named on the way %v", got, res.KeptRound, res.KeepWhy, c.want, c.why, named)
			}
			if c.want != 0 && !slices.Equal(res.Params, []float64{float64(c.want)}) {
				t.Errorf("the head kept is %v, want round %d's", res.Params, c.want)
			}
			if c.want == 0 && slices.ContainsFunc(named, func(r uint32) bool { return r != 0 }) {
				t.Errorf("rounds named to the parties %v, want none", named)
			}
		})
	}
}
