package aggregator

import (
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/zoo"
)

func newAlt(t testing.TB, cfg Config) (*Aggregator, *sink) {
	cfg.Run, cfg.Mu, cfg.Log = "t", 1e-3, zerolog.Nop()
	if cfg.LR.Eta0 == 0 {
		cfg.LR = zoo.Schedule{Eta0: 0.01}
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := &sink{}
	a.bus, a.ctx = s, context.Background()
	return a, s
}

// TIG's reply is dF_0/dc of the party's slot, at the table row holding the
// party's fresh outputs, and the head steps down its own gradient: both
// checked against central finite differences of Head.Loss.
func TestFirstOrderReplyIsTheHeadGradient(t *testing.T) {
	q, k, classes, n := 3, 2, 4, 5
	head := model.NewSoftmax(q*k, classes)
	labels := []int32{0, 3, 1, 2, 1}
	a, _ := newAlt(t, Config{Parties: q, K: k, Head: head, Labels: labels, FirstOrder: true, LR: zoo.Schedule{Eta0: 0.5}})
	rng := rand.New(rand.NewPCG(4, 5))
	table := make([]float64, n*q*k)
	for i := range table {
		table[i] = rng.NormFloat64()
	}
	train(a, table)
	w0 := append([]float64(nil), a.w0...)
	o := &schemas.PartyOutput{Header: schemas.Header{Version: schemas.Version, Party: 2, Seq: 1},
		IDs: []uint32{1, 4, 1}, C: []float64{0.5, -1, 2, 0.25, 0.5, -1}}
	a.answerGrad(2, o)
	const h = 1e-6
	fd := func(x []float64, i int, f func() float64) float64 {
		v := x[i]
		x[i] = v + h
		up := f()
		x[i] = v - h
		down := f()
		x[i] = v
		return (up - down) / (2 * h)
	}
	if len(a.rep.Grad) != 3*k || len(a.rep.H)+len(a.rep.HBar)+len(a.rep.Delta) != 0 {
		t.Fatalf("reply %+v", a.rep)
	}
	gw0 := make([]float64, len(w0))
	for j, id := range o.IDs {
		row := append([]float64(nil), table[int(id)*q*k:(int(id)+1)*q*k]...)
		copy(row[k:2*k], o.C[j*k:(j+1)*k]) // the fresh c in party 2's slot
		for o := range k {
			want := fd(row, k+o, func() float64 { return head.Loss(w0, row, labels[id]) })
			if got := a.rep.Grad[j*k+o]; math.Abs(got-want) > 1e-6 {
				t.Fatalf("sample %d output %d: dF_0/dc %.8f, finite difference %.8f", j, o, got, want)
			}
		}
		for i := range gw0 {
			gw0[i] += fd(w0, i, func() float64 { return head.Loss(w0, row, labels[id]) }) / 3
		}
	}
	// Party 2's slot of sample 1 holds the last fresh c sent for it.
	if got := a.table[1*q*k+k : 1*q*k+2*k]; got[0] != 0.5 || got[1] != -1 {
		t.Fatalf("table slot %v", got)
	}
	for i := range w0 {
		if want := w0[i] - 0.5*gw0[i]; math.Abs(a.w0[i]-want) > 1e-6 {
			t.Fatalf("head parameter %d: %.8f, want %.8f", i, a.w0[i], want)
		}
	}
}

func TestFirstOrderValidation(t *testing.T) {
	if _, err := New(Config{Run: "t", Parties: 2, K: 1, Head: opaqueHead{model.NewLogistic(2)}, Labels: []int32{1}, FirstOrder: true}); err == nil {
		t.Fatal("TIG with a black-box head accepted")
	}
	c := schemas.NewCodec()
	zo, _ := c.Marshal(&schemas.PartyOutput{Header: schemas.Header{Version: schemas.Version, Party: 1, Seq: 5}, IDs: []uint32{0}, C: []float64{1}, CHat: []float64{1}})
	zo = append([]byte(nil), zo...)
	fo, _ := c.Marshal(&schemas.PartyOutput{Header: schemas.Header{Version: schemas.Version, Party: 1, Seq: 6}, IDs: []uint32{0}, C: []float64{1}})
	a, s := newAlt(t, Config{Parties: 2, K: 1, Head: model.NewLogistic(2), Labels: []int32{1, 0}, FirstOrder: true})
	train(a, []float64{1, 2, 3, 4})
	a.handle(context.Background(), &delivery{"asyrevel.t.out.1", zo})
	if a.res.Rejected["shape"] != 1 || s.n != 0 {
		t.Fatalf("zeroth-order request in a TIG run: rejected %v, replies %d", a.res.Rejected, s.n)
	}
	a.handle(context.Background(), &delivery{"asyrevel.t.out.1", fo})
	if s.n != 1 || a.res.Steps != 1 {
		t.Fatalf("TIG request not answered: rejected %v", a.res.Rejected)
	}
}

// opaqueHead hides a head's gradient.
type opaqueHead struct{ model.Head }

// A SynREVEL round is answered when every party's request is in: each
// party gets h of the row holding all fresh outputs and h_bar with its own
// c_hat, and the head steps once.
func TestSyncRound(t *testing.T) {
	q := 3
	labels := []int32{1, 0, 1, 1}
	a, s := newAlt(t, Config{Parties: q, K: 1, Head: model.NewLogisticBias(q), Labels: labels, Sync: true})
	train(a, make([]float64, 4*q))
	a.w0[0] = 0.2
	c := schemas.NewCodec()
	ids := []uint32{2, 0}
	cs := map[int][]float64{1: {0.5, -1}, 2: {0.25, 2}, 3: {-0.5, 1}}
	out := func(m int, seq uint64, ids []uint32) []byte {
		b, _ := c.Marshal(&schemas.PartyOutput{Header: schemas.Header{Version: schemas.Version, Party: uint16(m), Seq: seq},
			IDs: ids, C: cs[m], CHat: []float64{cs[m][0] + 0.01, cs[m][1] - 0.02}})
		return append([]byte(nil), b...)
	}
	var replies []schemas.Reply
	s.onPublish = func(data []byte) {
		var r schemas.Reply
		if err := schemas.NewCodec().Unmarshal(data, &r); err != nil {
			t.Fatal(err)
		}
		replies = append(replies, r)
	}
	a.handleOutputs(context.Background(), &delivery{"asyrevel.t.out.1", out(1, 1, ids)})
	a.handleOutputs(context.Background(), &delivery{"asyrevel.t.out.3", out(3, 1, ids)})
	a.handleOutputs(context.Background(), &delivery{"asyrevel.t.out.1", out(1, 2, ids)}) // a second one in the round
	if len(replies) != 0 || a.res.Rejected["state"] != 1 {
		t.Fatalf("incomplete round: %d replies, rejected %v", len(replies), a.res.Rejected)
	}
	b0 := a.w0[0]
	a.handleOutputs(context.Background(), &delivery{"asyrevel.t.out.2", out(2, 1, ids)})
	if len(replies) != q || a.res.Steps != int64(q) {
		t.Fatalf("complete round: %d replies, %d steps", len(replies), a.res.Steps)
	}
	loss := func(z float64, y int32) float64 {
		if y == 0 {
			z = -z
		}
		return softplus(-z)
	}
	for _, r := range replies {
		m := int(r.Party)
		if r.ReqSeq != 1 || r.Staleness != 0 {
			t.Fatalf("reply to party %d: %+v", m, r)
		}
		for j, id := range ids {
			z := b0
			for p := 1; p <= q; p++ {
				z += cs[p][j]
			}
			hb := z - cs[m][j] + []float64{cs[m][0] + 0.01, cs[m][1] - 0.02}[j]
			// Outputs and losses travel as float32 (and differences).
			if math.Abs(r.H[j]-loss(z, labels[id])) > 1e-6 || math.Abs(r.HBar[j]-loss(hb, labels[id])) > 1e-6 {
				t.Fatalf("party %d sample %d: h %v h_bar %v, want %v %v", m, j, r.H[j], r.HBar[j], loss(z, labels[id]), loss(hb, labels[id]))
			}
		}
	}
	if a.w0[0] == b0 {
		t.Fatal("the head did not step")
	}
	// The next round starts empty.
	a.handleOutputs(context.Background(), &delivery{"asyrevel.t.out.2", out(2, 2, []uint32{1, 3})})
	if len(replies) != q || a.err != nil {
		t.Fatalf("next round: %d replies, err %v", len(replies), a.err)
	}
	// A party whose batch differs cannot be answered: the run fails with a
	// message that says why.
	a.handleOutputs(context.Background(), &delivery{"asyrevel.t.out.3", out(3, 2, []uint32{1, 2})})
	if a.err == nil || !strings.Contains(a.err.Error(), "--seed") {
		t.Fatalf("batch mismatch: %v", a.err)
	}
}

func TestAltStepsDoNotAllocate(t *testing.T) {
	n := 1000
	a, _ := newAlt(t, Config{Parties: 4, K: 1, Head: model.NewLogisticBias(4), Labels: make([]int32, n), FirstOrder: true})
	train(a, make([]float64, n*4))
	ids := make([]uint32, 64)
	for i := range ids {
		ids[i] = uint32(i * 7)
	}
	o := &schemas.PartyOutput{Header: schemas.Header{Version: schemas.Version, Party: 3, Seq: 1}, IDs: ids, C: make([]float64, 64)}
	if allocs := testing.AllocsPerRun(200, func() { a.answerGrad(3, o) }); allocs != 0 {
		t.Fatalf("TIG step: %v allocations, want 0", allocs)
	}
	s, _ := newAlt(t, Config{Parties: 4, K: 1, Head: model.NewSoftmax(4, 3), Labels: make([]int32, n), Sync: true})
	train(s, make([]float64, n*4))
	zo := &schemas.PartyOutput{Header: schemas.Header{Version: schemas.Version}, IDs: ids, C: make([]float64, 64), CHat: make([]float64, 64)}
	round := func() {
		for m := 1; m <= 4; m++ {
			zo.Party = uint16(m)
			if err := s.collect(m, zo, 100); err != nil {
				panic(err)
			}
		}
	}
	// Publishing (the transport's part, message ids included) is measured
	// apart: the round itself must not allocate.
	publish := func() {
		for m := 1; m <= 4; m++ {
			s.publish(s.wire.subjReply[m], schemas.KindReply, &s.rep)
		}
	}
	if allocs, pub := testing.AllocsPerRun(100, round), testing.AllocsPerRun(100, publish); allocs > pub {
		t.Fatalf("SynREVEL round: %v allocations, %v of them publishing; want 0 in the round", allocs, pub)
	}
}
