package aggregator

import (
	"context"
	"testing"

	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/schemas"
)

// An evaluation chunk of a round that is over is the answer of a late
// party, or of one that answered the round again after a resume (its
// checkpoint predates the request, read again from the stream): counted
// as late, never scored and never a rejection, which counts bad input.
// A round never asked for, a replayed sequence number and a chunk out of
// order in the round in progress are still rejected. Before, every chunk
// of a round that was over was rejected as "state": a resumed run under
// load counted its parties' honest answers as hostile messages
// (TestResumeAggregatorBatches, issue 34).
func TestLateEvalChunks(t *testing.T) {
	c := schemas.NewCodec()
	chunk := func(round uint32, seq uint64, first uint32) *delivery {
		b, err := c.Marshal(&schemas.EvalOutput{Header: schemas.Header{Version: schemas.Version, Party: 1, Seq: seq},
			Round: round, Split: schemas.SplitTrain, First: first, Total: 2, C: []float64{0.5}})
		if err != nil {
			t.Fatal(err)
		}
		return &delivery{schemas.Subject("t", schemas.KindEval, 1), append([]byte(nil), b...)}
	}
	for _, tc := range []struct {
		name     string
		inRound  bool // round 3 in progress (else none)
		msgs     []*delivery
		late     int64
		rejected map[string]int64
	}{
		{"past round, none in progress", false, []*delivery{chunk(2, 10, 0), chunk(2, 11, 1)}, 2, nil},
		{"past round, another in progress", true, []*delivery{chunk(1, 10, 0), chunk(2, 11, 0)}, 2, nil},
		{"a round never asked for", false, []*delivery{chunk(3, 10, 0)}, 0, map[string]int64{"state": 1}},
		{"round 0 is the initial pass's", false, []*delivery{chunk(0, 10, 0)}, 0, map[string]int64{"state": 1}},
		{"a late chunk replayed", false, []*delivery{chunk(2, 10, 0), chunk(2, 10, 0)}, 1, map[string]int64{"replay": 1}},
		{"out of order in the round in progress", true, []*delivery{chunk(3, 10, 1)}, 0, map[string]int64{"state": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := newTest(t, 2, []int32{1, 0}, model.NewLogistic(2))
			train(a, []float64{1, 2, 3, 4})
			a.eval.rounds = 2
			if tc.inRound {
				a.requestEval(false) // round 3
			}
			before := append([]float64(nil), a.eval.tables[0]...)
			for _, d := range tc.msgs {
				a.handle(context.Background(), d)
			}
			if a.res.LateEvals != tc.late {
				t.Errorf("late %d, want %d", a.res.LateEvals, tc.late)
			}
			if len(a.res.Rejected) != len(tc.rejected) {
				t.Errorf("rejected %v, want %v", a.res.Rejected, tc.rejected)
			}
			for k, n := range tc.rejected {
				if a.res.Rejected[k] != n {
					t.Errorf("rejected %v, want %v", a.res.Rejected, tc.rejected)
				}
			}
			for i := range before {
				if a.eval.tables[0][i] != before[i] {
					t.Fatalf("a late chunk was stored in the round's table: %v", a.eval.tables[0])
				}
			}
		})
	}
}
