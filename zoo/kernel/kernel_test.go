package kernel

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/zoo"
)

// dense is an n x d matrix of values in [-1, 1).
func dense(n, d int, rng *rand.Rand) *dataset.Matrix {
	m := &dataset.Matrix{NRows: n, NCols: d, Indptr: make([]int64, n+1)}
	for i := range n {
		for j := range d {
			m.Indices = append(m.Indices, int32(j))
			m.Values = append(m.Values, float32(2*rng.Float64()-1))
		}
		m.Indptr[i+1] = int64(len(m.Indices))
	}
	return m
}

// TestAnswerFresh: h comes from the fresh c (not the stored value), h_bar
// from c_hat in the party's slot, the other slots are untouched and c stays
// stored.
func TestAnswerFresh(t *testing.T) {
	head := model.NewLogistic(3)
	row := []float64{0.5, -9, 0.25} // party 2's slot holds a stale -9
	c, chat := []float64{0.1}, []float64{0.3}
	h, hb := Answer(head, nil, row, 1, c, chat, 1)
	softplus := func(z float64) float64 { return math.Log1p(math.Exp(-z)) } // y = 1
	if want := softplus(0.5 + 0.1 + 0.25); math.Abs(h-want) > 1e-15 {
		t.Errorf("h = %v, want %v (from the fresh c)", h, want)
	}
	if want := softplus(0.5 + 0.3 + 0.25); math.Abs(hb-want) > 1e-15 {
		t.Errorf("h_bar = %v, want %v", hb, want)
	}
	if row[0] != 0.5 || row[1] != 0.1 || row[2] != 0.25 {
		t.Errorf("row after Answer = %v, want [0.5 0.1 0.25]", row)
	}
}

// TestReplyAgreesWithSync: the asynchronous reply (Reply) and SynREVEL's
// pieces (Store, Losses, Bar) give the same bits for one party's request
// (the same as long as a sample repeated in a batch carries the same
// outputs, as it does from a model).
func TestReplyAgreesWithSync(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const n, q, k, b = 50, 3, 2, 7
	head := model.NewSoftmax(q*k, k)
	w0 := make([]float64, head.NumParams())
	head.Init(w0, rng)
	table := make([]float64, n*q*k)
	for i := range table {
		table[i] = rng.NormFloat64()
	}
	y := make([]int32, n)
	for i := range y {
		y[i] = int32(rng.IntN(k))
	}
	ids := make([]uint32, b)
	c, chat := make([]float64, b*k), make([]float64, b*k)
	// Distinct samples: a repeated sample carries the same outputs from a
	// model, but not from this test's random ones.
	for j, i := range rng.Perm(n)[:b] {
		ids[j] = uint32(i)
	}
	for i := range c {
		c[i] = rng.NormFloat64()
		chat[i] = c[i] + 1e-3*rng.NormFloat64()
	}
	t1 := append([]float64(nil), table...)
	h1, hb1 := make([]float64, b), make([]float64, b)
	Reply(head, w0, t1, q*k, k, ids, c, chat, y, h1, hb1)

	t2 := append([]float64(nil), table...)
	h2, hb2 := make([]float64, b), make([]float64, b)
	Store(t2, q*k, k, ids, c)
	Losses(head, w0, t2, q*k, ids, y, h2)
	for j, id := range ids {
		i := int(id)
		hb2[j] = Bar(head, w0, t2[i*q*k:(i+1)*q*k], k, c[j*k:(j+1)*k], chat[j*k:(j+1)*k], y[i])
	}
	for j := range b {
		if math.Float64bits(h1[j]) != math.Float64bits(h2[j]) || math.Float64bits(hb1[j]) != math.Float64bits(hb2[j]) {
			t.Fatalf("sample %d: Reply (%v, %v), Store+Losses+Bar (%v, %v)", j, h1[j], hb1[j], h2[j], hb2[j])
		}
	}
	for i := range t1 {
		if t1[i] != t2[i] {
			t.Fatalf("tables differ at %d", i)
		}
	}
	if d := MeanDiff(h1, hb1); d == 0 || math.IsNaN(d) {
		t.Errorf("MeanDiff = %v", d)
	}
}

// TestStepDescends: repeated kernel steps of one party against a fixed
// logistic head lower the mean loss (the kernel learns), and Update refuses
// a non-finite step without touching w.
func TestStepDescends(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const n, d, b = 400, 5, 16
	x := dense(n, d, rng)
	truth := []float64{1, -2, 0.5, 1.5, -1}
	y := make([]int32, n)
	for i := range n {
		idx, v := x.Row(i)
		var z float64
		for j, c := range idx {
			z += truth[c] * float64(v[j])
		}
		if z > 0 {
			y[i] = 1
		}
	}
	f, head := model.NewLinear(d, 1), model.NewLogistic(1)
	w, wp, u := make([]float64, d), make([]float64, d), make([]float64, d)
	table := make([]float64, n)
	all := make([]uint32, n)
	for i := range all {
		all[i] = uint32(i)
	}
	loss := func() float64 {
		f.Forward(w, x, all, table)
		var s float64
		for i := range n {
			s += head.Loss(nil, table[i:i+1], y[i])
		}
		return s / n
	}
	before := loss()
	ids := make([]uint32, b)
	c, chat, h, hb := make([]float64, b), make([]float64, b), make([]float64, b), make([]float64, b)
	phi := zoo.Gaussian.Phi(d)
	for step := range 3000 {
		for j := range ids {
			ids[j] = uint32(rng.IntN(n))
		}
		Probe(f, x, ids, zoo.Gaussian, rng, 1e-3, w, wp, u, c, chat)
		Reply(head, nil, table, 1, 0, ids, c, chat, y, h, hb)
		if !Update(w, u, 0.05/math.Sqrt(1+float64(step)/500), phi, 1e-3, MeanDiff(h, hb)+RegDiff(model.Nonconvex{}, 1e-4, w, wp)) {
			t.Fatal("finite step refused")
		}
	}
	after := loss()
	t.Logf("mean loss %.4f -> %.4f", before, after)
	if !(after < 0.6*before) {
		t.Errorf("mean loss %.4f -> %.4f: the kernel's steps do not descend", before, after)
	}
	keep := append([]float64(nil), w...)
	for _, diff := range []float64{math.NaN(), math.Inf(1)} {
		if Update(w, u, 0.1, 1, 1e-3, diff) {
			t.Errorf("Update accepted diff %v", diff)
		}
	}
	if Update(w, u, math.MaxFloat64, 1, 1e-300, 1) {
		t.Error("Update accepted an overflowing step")
	}
	for i := range w {
		if w[i] != keep[i] {
			t.Fatalf("a refused step changed w: %v, was %v", w, keep)
		}
	}
}

func TestRegDiff(t *testing.T) {
	w, wp := []float64{1, 2}, []float64{1.5, 2}
	if RegDiff(nil, 1, w, wp) != 0 || RegDiff(model.Nonconvex{}, 0, w, wp) != 0 {
		t.Error("RegDiff without a regulariser or lambda is not 0")
	}
	g := model.Nonconvex{}
	if got, want := RegDiff(g, 0.5, w, wp), 0.5*(g.Value(wp)-g.Value(w)); got != want || got == 0 {
		t.Errorf("RegDiff = %v, want %v", got, want)
	}
}

func TestHeadDiffTap(t *testing.T) {
	head := model.NewLogisticBias(2)
	w0p := []float64{0.01}
	table := []float64{0.1, 0.2, -0.3, 0.4}
	y := []int32{1, 0}
	ids := []uint32{0, 1}
	h := []float64{0.5, 0.6}
	plain := HeadDiff(head, w0p, table, 2, ids, y, h, nil)
	want := (head.Loss(w0p, table[:2], 1) - 0.5 + head.Loss(w0p, table[2:], 0) - 0.6) / 2
	if plain != want {
		t.Errorf("HeadDiff = %v, want %v", plain, want)
	}
	if got := HeadDiff(head, w0p, table, 2, ids, y, h, zeroTap{}); got != 0 {
		t.Errorf("HeadDiff through a tap that zeroes = %v", got)
	}
}

type zeroTap struct{}

func (zeroTap) Term(int, int, float64) float64 { return 0 }

func TestPanics(t *testing.T) {
	head := model.NewLogistic(2)
	for name, fn := range map[string]func(){
		"MeanDiff lengths": func() { MeanDiff(make([]float64, 2), make([]float64, 3)) },
		"MeanDiff empty":   func() { MeanDiff(nil, nil) },
		"Reply chat": func() {
			Reply(head, nil, make([]float64, 4), 2, 0, []uint32{0}, []float64{1}, nil, []int32{0, 1}, make([]float64, 1), make([]float64, 1))
		},
		"Reply h short": func() {
			Reply(head, nil, make([]float64, 4), 2, 0, []uint32{0, 1}, []float64{1, 2}, []float64{1, 2}, []int32{0, 1}, make([]float64, 1), make([]float64, 2))
		},
		"Losses":         func() { Losses(head, nil, make([]float64, 4), 2, []uint32{0, 1}, []int32{0, 1}, make([]float64, 1)) },
		"HeadDiff empty": func() { HeadDiff(head, nil, nil, 2, nil, nil, nil, nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			fn()
		}()
	}
}

// stepState is one whole step's buffers: a party of d features (linear
// model) among q, batch b, a logistic head with a bias.
type stepState struct {
	f          model.Local
	head       model.Head
	x          *dataset.Matrix
	rng        *rand.Rand
	w, wp, u   []float64
	w0, w0p    []float64
	u0         []float64
	c, chat    []float64
	h, hb      []float64
	ids        []uint32
	table      []float64
	y          []int32
	q, phi, mu float64
}

func newStep(n, d, q, b int) *stepState {
	rng := rand.New(rand.NewPCG(1, 1))
	s := &stepState{f: model.NewLinear(d, 1), head: model.NewLogisticBias(q), x: dense(n, d, rng), rng: rng,
		w: make([]float64, d), wp: make([]float64, d), u: make([]float64, d),
		w0: make([]float64, 1), w0p: make([]float64, 1), u0: make([]float64, 1),
		c: make([]float64, b), chat: make([]float64, b), h: make([]float64, b), hb: make([]float64, b),
		ids: make([]uint32, b), table: make([]float64, n*q), y: make([]int32, n), q: float64(q), phi: 1, mu: 1e-3}
	for i := range s.y {
		s.y[i] = int32(i % 2)
	}
	return s
}

// step is one asynchronous step of party 2 (1 if q = 1) through the kernel: probe,
// reply, head step, party update.
func (s *stepState) step() {
	n := len(s.y)
	for j := range s.ids {
		s.ids[j] = uint32(s.rng.IntN(n))
	}
	Probe(s.f, s.x, s.ids, zoo.Gaussian, s.rng, s.mu, s.w, s.wp, s.u, s.c, s.chat)
	r := RegDiff(model.Nonconvex{}, 1e-4, s.w, s.wp)
	Reply(s.head, s.w0, s.table, int(s.q), min(1, int(s.q)-1), s.ids, s.c, s.chat, s.y, s.h, s.hb)
	Direction(zoo.Gaussian, s.rng, s.mu, s.w0, s.w0p, s.u0)
	Update(s.w0, s.u0, 1e-3, 1, s.mu, HeadDiff(s.head, s.w0p, s.table, int(s.q), s.ids, s.y, s.h, nil))
	Update(s.w, s.u, 1e-3, s.phi, s.mu, MeanDiff(s.h, s.hb)+r)
}

func TestStepAllocs(t *testing.T) {
	s := newStep(1000, 16, 4, 64)
	if n := testing.AllocsPerRun(100, s.step); n != 0 {
		t.Errorf("a kernel step allocates %v times", n)
	}
}

// BenchmarkStep is one whole step (party probe, reply, head step, party
// update) through the kernel, without messages.
func BenchmarkStep(b *testing.B) {
	for _, tc := range []struct{ d, q, batch int }{{16, 8, 1}, {16, 8, 64}, {123, 1, 64}} {
		b.Run("linear-d"+strconv.Itoa(tc.d)+"-q"+strconv.Itoa(tc.q)+"/batch="+strconv.Itoa(tc.batch), func(b *testing.B) {
			s := newStep(1000, tc.d, tc.q, tc.batch)
			b.ReportAllocs()
			for b.Loop() {
				s.step()
			}
		})
	}
}
