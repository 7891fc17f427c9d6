package party

import (
	"math"
	"slices"
	"testing"

	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/zoo"
)

// A mean reply moves the party exactly as the per-sample replies with
// the same mean do.
func TestMeanReplyEqualsPerSample(t *testing.T) {
	step := func(rep func(seq uint64) *schemas.Reply) []float64 {
		p, _ := newTest(t, 3, 1, zoo.Gaussian)
		if err := p.request(); err != nil {
			t.Fatal(err)
		}
		if err := p.apply(rep(p.ring[0].seq)); err != nil {
			t.Fatal(err)
		}
		return p.w
	}
	h := schemas.Header{Version: schemas.Version, Party: 2, Seq: 1}
	perSample := step(func(s uint64) *schemas.Reply {
		return &schemas.Reply{Header: h, ReqSeq: s, Delta: []float64{0.003, -0.001, 0.004}}
	})
	mean := step(func(s uint64) *schemas.Reply {
		return &schemas.Reply{Header: h, ReqSeq: s, Delta: []float64{0.002}, Mean: true}
	})
	for i := range mean {
		if math.Abs(mean[i]-perSample[i]) > 1e-15 {
			t.Fatalf("w[%d]: mean reply %v, per-sample %v", i, mean[i], perSample[i])
		}
	}
}

// With a batch seed from the aggregator, requests carry the drawn ids.
func TestDrawnBatches(t *testing.T) {
	p, _ := newTest(t, 4, 2, zoo.Gaussian)
	p.control(&schemas.Control{Header: schemas.Header{Version: schemas.Version, Seq: 1}, Op: schemas.CtlStart, BatchSeed: 99})
	want := make([]uint32, 4)
	for r := range 2 {
		schemas.DrawBatch(want, 99, 2, uint64(r), 50)
		if got := p.ring[r].ids; !slices.Equal(got, want) {
			t.Fatalf("request %d: ids %v, want the drawn %v", r, got, want)
		}
	}
}

// adversary records the hook calls and chooses batches of one.
type adversary struct{ batches, requests, evals int }

func (a *adversary) Batch(r uint64, ids []uint32, n int) int {
	a.batches++
	ids[0] = uint32(r) % uint32(n)
	return 1
}
func (a *adversary) Request(r uint64, ids []uint32, c, cHat []float64) {
	a.requests++
	cHat[0] = c[0] + 7
}
func (a *adversary) Eval(schemas.Split, int, []float64) { a.evals++ }

func TestAdversaryHook(t *testing.T) {
	p, _ := newTest(t, 4, 1, zoo.Gaussian)
	a := &adversary{}
	p.cfg.Adversary = a
	if err := p.request(); err != nil {
		t.Fatal(err)
	}
	if len(p.out.IDs) != 1 || p.out.IDs[0] != 0 || len(p.out.C) != 1 || p.out.CHat[0]-p.out.C[0] != 7 {
		t.Fatalf("request %+v", p.out)
	}
	if err := p.sendSplit(schemas.SplitInit, 0); err != nil {
		t.Fatal(err)
	}
	if a.batches != 1 || a.requests != 1 || a.evals == 0 {
		t.Fatalf("hook calls %+v", a)
	}
	// Its reply has one value: the request was for one sample.
	rep := &schemas.Reply{Header: schemas.Header{Version: schemas.Version, Party: 2, Seq: 1}, ReqSeq: p.ring[0].seq, Delta: []float64{0.1}}
	if err := p.apply(rep); err != nil {
		t.Fatal(err)
	}
}
