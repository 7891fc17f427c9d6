package aggregator

import (
	"context"
	"math"
	"testing"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/zoo"
)

// A party of a label-free run that sends requests anyway (an active
// attacker probing the labels) gets no reply: each request is rejected
// and counted, and nothing is published. A chunk of its codes that holds
// a value that is not a code (a real number, a code out of range, NaN)
// is rejected and counted too, and leaves the table as it was.
func TestLabelFreeRefusesRequestsAndNonCodes(t *testing.T) {
	head := model.NewEmbed(2, 4, 2, 0, 2)
	a, err := New(Config{Run: "t", Parties: 2, K: 1, Head: head, Labels: []int32{1, 0, 1}, Mu: 1e-3,
		LR: zoo.Schedule{Eta0: 0.01}, Log: zerolog.Nop(), LabelFree: &LabelFree{}})
	if err != nil {
		t.Fatal(err)
	}
	s := &sink{}
	a.bus, a.ctx = s, context.Background()
	train(a, []float64{0, 1, 2, 3, 1, 0})
	c := schemas.NewCodec()
	enc := func(m schemas.Message) []byte {
		b, err := c.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return append([]byte(nil), b...)
	}
	for seq := uint64(1); seq <= 3; seq++ {
		req := enc(&schemas.PartyOutput{Header: schemas.Header{Version: schemas.Version, Party: 1, Seq: seq},
			IDs: []uint32{0, 1}, C: []float64{1, 2}, CHat: []float64{1.001, 2}})
		a.handle(context.Background(), &delivery{"asyrevel.t.out.1", req})
	}
	if s.n != 0 || a.res.Steps != 0 || a.res.Rejected["state"] != 3 {
		t.Fatalf("requests to a label-free run: %d published, %d steps, rejected %v; want none answered and 3 rejected", s.n, a.res.Steps, a.res.Rejected)
	}
	a.phase = joining
	a.hello[1] = true
	before := append([]float64(nil), a.table...)
	for i, bad := range []float64{0.5, 4, -1, math.NaN()} {
		ev := enc(&schemas.EvalOutput{Header: schemas.Header{Version: schemas.Version, Party: 1, Seq: uint64(10 + i)},
			Split: schemas.SplitInit, First: 0, Total: 3, C: []float64{1, bad, 2}})
		a.handle(context.Background(), &delivery{"asyrevel.t.eval.1", ev})
	}
	if got := a.res.Rejected["shape"] + a.res.Rejected["nonfinite"]; got != 4 {
		t.Fatalf("chunks of non-codes: rejected %v, want 4", a.res.Rejected)
	}
	for i := range before {
		if a.table[i] != before[i] {
			t.Fatalf("a rejected chunk changed the table: %v", a.table)
		}
	}
}
