package party

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/zoo"
)

// blackBox hides the gradient of a model.
type blackBox struct{ model.Local }

func newTIG(t testing.TB, m model.Local, batch int) *Party {
	p, err := New(Config{Run: "t", ID: 2, Model: m, Train: dense(40, m.InDim()), Reg: model.Nonconvex{}, Lambda: 0.05,
		Mu: 1e-3, LR: zoo.Schedule{Eta0: 0.1}, Batch: batch, Window: 1, Seed: 3, FirstOrder: true, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	p.bus, p.ctx = &sink{}, t.Context()
	return p
}

// The TIG step is w <- w - eta grad L with L(w) = (1/B) sum_j <g_j, F(w; x_j)>
// + lambda g(w), the chain rule of the head's loss for the replied g_j =
// dF_0/dc_j: checked against central finite differences of L, which calls
// only Forward.
func TestFirstOrderStepIsTheChainRule(t *testing.T) {
	mlp := model.NewMLP(4, 3, 2)
	p := newTIG(t, mlp, 3)
	// Random parameters (with this seed no pre-activation of the batch is
	// within the finite-difference step of a ReLU kink).
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range p.w {
		p.w[i] = rng.NormFloat64()
	}
	if err := p.request(); err != nil {
		t.Fatal(err)
	}
	if len(p.out.CHat) != 0 || len(p.out.C) != 3*2 {
		t.Fatalf("TIG request with %d c and %d c_hat", len(p.out.C), len(p.out.CHat))
	}
	ids := append([]uint32(nil), p.out.IDs...)
	g := []float64{0.3, -0.7, 1.1, 0.2, -0.4, 0.9}
	w0 := append([]float64(nil), p.w...)
	rep := &schemas.Reply{Header: schemas.Header{Version: schemas.Version, Party: 2, Seq: 1}, ReqSeq: p.ring[0].seq, Grad: g}
	if err := p.apply(rep); err != nil {
		t.Fatal(err)
	}
	out := make([]float64, len(g))
	loss := func(w []float64) float64 {
		mlp.Forward(w, p.cfg.Train, ids, out)
		var s float64
		for i, v := range out {
			s += g[i] * v
		}
		return s/3 + 0.05*model.Nonconvex{}.Value(w)
	}
	const h = 1e-6
	wp := append([]float64(nil), w0...)
	for i := range w0 {
		wp[i] = w0[i] + h
		up := loss(wp)
		wp[i] = w0[i] - h
		down := loss(wp)
		wp[i] = w0[i]
		fd := (up - down) / (2 * h)
		if step := (w0[i] - p.w[i]) / 0.1; math.Abs(step-fd) > 1e-6*(1+math.Abs(fd)) {
			t.Fatalf("parameter %d: step/eta = %.9f, finite difference %.9f", i, step, fd)
		}
	}
	if p.t != 1 || p.n != 0 {
		t.Fatalf("t=%d, in flight %d", p.t, p.n)
	}
}

func TestFirstOrderRejects(t *testing.T) {
	_, err := New(Config{Run: "t", ID: 1, Model: blackBox{model.NewLinear(6, 1)}, Train: dense(5, 6), Mu: 1e-3,
		LR: zoo.Schedule{Eta0: 1}, FirstOrder: true})
	if !errors.Is(err, ErrConfig) || !errors.Is(err, model.ErrNoGradient) {
		t.Fatalf("TIG with a black-box model: %v, want ErrConfig and model.ErrNoGradient", err)
	}
	p := newTIG(t, model.NewLinear(6, 1), 2)
	if err := p.request(); err != nil {
		t.Fatal(err)
	}
	h := schemas.Header{Version: schemas.Version, Party: 2, Seq: 1}
	seq := p.ring[0].seq
	w := append([]float64(nil), p.w...)
	for name, r := range map[string]schemas.Reply{
		"function values": {Header: h, ReqSeq: seq, Delta: []float64{1, 1}},
		"short gradient":  {Header: h, ReqSeq: seq, Grad: []float64{1}},
		"nan gradient":    {Header: h, ReqSeq: seq, Grad: []float64{1, math.NaN()}},
	} {
		if err := p.apply(&r); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if !slices.Equal(w, p.w) {
		t.Fatal("a rejected reply changed the parameters")
	}
}

// SynREVEL parties draw the same batches from the shared seed, and their
// own directions from their private ones.
func TestSyncPartiesShareBatches(t *testing.T) {
	mk := func(id int, seed uint64) *Party {
		p, err := New(Config{Run: "t", ID: id, Model: model.NewLinear(6, 1), Train: dense(1000, 6), Mu: 1e-3,
			LR: zoo.Schedule{Eta0: 0.1}, Batch: 4, Window: 1, Seed: seed, Sync: true, SampleSeed: 42})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, b := mk(1, 7), mk(2, 8)
	for range 5 {
		sa, sb := a.prepare(), b.prepare()
		if !slices.Equal(sa.ids, sb.ids) {
			t.Fatalf("batches differ: %v and %v", sa.ids, sb.ids)
		}
		if slices.Equal(sa.u, sb.u) {
			t.Fatal("directions are the same")
		}
	}
	if _, err := New(Config{Run: "t", ID: 1, Model: model.NewLinear(6, 1), Train: dense(5, 6), Mu: 1e-3,
		LR: zoo.Schedule{Eta0: 1}, Window: 4, Sync: true}); !errors.Is(err, ErrConfig) {
		t.Fatalf("SynREVEL with window 4: %v", err)
	}
}

// A straggler's steps last Slowdown times (compute + StepCost): over many
// steps the mean is right although each delay is below a timer's precision
// here.
func TestSimulatedComputeDelay(t *testing.T) {
	for _, tc := range []struct {
		slow float64
		cost time.Duration
	}{{2, 100 * time.Microsecond}, {1.6, 2 * time.Millisecond}} {
		p, err := New(Config{Run: "t", ID: 1, Model: model.NewLinear(6, 1), Train: dense(50, 6), Mu: 1e-3,
			LR: zoo.Schedule{Eta0: 0.01}, Batch: 2, Window: 1, Seed: 1, Slowdown: tc.slow, StepCost: tc.cost})
		if err != nil {
			t.Fatal(err)
		}
		p.bus, p.ctx = &sink{}, t.Context()
		rep := &schemas.Reply{Header: schemas.Header{Version: schemas.Version, Party: 1, Seq: 1}, Delta: []float64{0, 0}}
		const steps = 200
		start := time.Now()
		for range steps {
			if err := p.request(); err != nil {
				t.Fatal(err)
			}
			rep.ReqSeq = p.seq
			p.alt.begin()
			if err := p.apply(rep); err != nil {
				t.Fatal(err)
			}
		}
		el := time.Since(start)
		want := time.Duration(steps * tc.slow * float64(tc.cost))
		t.Logf("slowdown %g, cost %v: %d steps in %v (want at least %v)", tc.slow, tc.cost, steps, el, want)
		if el < want*95/100 || el > 3*want+200*time.Millisecond {
			t.Errorf("%d steps took %v, want about %v", steps, el, want)
		}
	}
}

func TestAltStepsDoNotAllocate(t *testing.T) {
	p := newTIG(t, model.NewMLP(6, 8, 2), 8)
	p.cfg.Train = dense(50, 6)
	rep := &schemas.Reply{Header: schemas.Header{Version: schemas.Version, Party: 2, Seq: 1}, Grad: make([]float64, 16)}
	allocs := testing.AllocsPerRun(200, func() {
		slot := p.prepareGrad()
		p.seq++
		slot.seq = p.seq
		p.n++
		rep.ReqSeq = p.seq
		if err := p.apply(rep); err != nil {
			panic(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("TIG step: %v allocations, want 0", allocs)
	}
	s, err := New(Config{Run: "t", ID: 1, Model: model.NewLinear(6, 1), Train: dense(50, 6), Mu: 1e-3,
		LR: zoo.Schedule{Eta0: 0.01}, Batch: 4, Window: 1, Seed: 1, Sync: true, Slowdown: 1.5})
	if err != nil {
		t.Fatal(err)
	}
	c := schemas.NewCodec()
	zr := &schemas.Reply{Header: schemas.Header{Version: schemas.Version, Party: 1, Seq: 1}, Delta: make([]float64, 4)}
	if allocs := testing.AllocsPerRun(200, func() { step(s, c, zr) }); allocs != 0 {
		t.Fatalf("SynREVEL step: %v allocations, want 0", allocs)
	}
}
