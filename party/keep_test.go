package party

import (
	"slices"
	"testing"
)

// A party keeps its parameters of the round the aggregator names as best
// so far and of the newest round it answered, nothing more, and gives
// back the parameters of a round the stop names when it holds them.
func TestKeptRounds(t *testing.T) {
	type step struct {
		round, keep uint32
		w           float64 // the parameters evaluated (one value)
	}
	for _, c := range []struct {
		name  string
		steps []step
		held  []uint32 // rounds held after the steps
		stop  uint32   // the round the stop names
		want  float64  // its parameters (NaN-free: 0 means not held)
	}{
		{"the newest is named", []step{{1, 0, 10}, {2, 1, 20}, {3, 2, 30}}, []uint32{2, 3}, 2, 20},
		{"an early best stays", []step{{1, 0, 10}, {2, 1, 20}, {3, 1, 30}, {4, 1, 40}}, []uint32{1, 4}, 1, 10},
		{"the last round", []step{{1, 0, 10}, {2, 1, 20}}, []uint32{1, 2}, 2, 20},
		{"a round let go", []step{{1, 0, 10}, {2, 1, 20}, {3, 2, 30}}, []uint32{2, 3}, 1, 0},
		{"a round never answered", []step{{1, 0, 10}, {3, 2, 30}}, []uint32{3}, 2, 0},
		{"a later best replaces an earlier", []step{{1, 0, 10}, {2, 1, 20}, {3, 1, 30}, {4, 3, 40}}, []uint32{3, 4}, 3, 30},
	} {
		t.Run(c.name, func(t *testing.T) {
			var k kept
			for _, s := range c.steps {
				k.eval(s.round, s.keep, []float64{s.w, -s.w})
			}
			var held []uint32
			for _, s := range []snapshot{k.named, k.newest} {
				if s.round != 0 {
					held = append(held, s.round)
				}
			}
			slices.Sort(held)
			if !slices.Equal(held, c.held) {
				t.Errorf("holds rounds %v, want %v", held, c.held)
			}
			w, ok := k.get(c.stop)
			switch {
			case c.want == 0 && ok:
				t.Errorf("round %d: holds %v, want none", c.stop, w)
			case c.want != 0 && (!ok || !slices.Equal(w, []float64{c.want, -c.want})):
				t.Errorf("round %d: %v (held %v), want [%g %g]", c.stop, w, ok, c.want, -c.want)
			}
			// What a checkpoint keeps comes back.
			var ck Checkpoint
			k.save(&ck)
			var r kept
			r.restore(&ck, 2)
			if r.named.round != k.named.round || r.newest.round != k.newest.round || !slices.Equal(r.named.w, k.named.w) || !slices.Equal(r.newest.w, k.newest.w) {
				t.Errorf("restored %+v, saved %+v", r, k)
			}
		})
	}
}
