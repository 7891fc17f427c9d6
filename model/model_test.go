package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/asyrevel/asyrevel/dataset"
)

// randomMatrix builds an n x d CSR matrix with each entry non-zero with
// probability density, values in [-1, 1] (or 1 when binary).
func randomMatrix(rng *rand.Rand, n, d int, density float64, binary bool) *dataset.Matrix {
	m := &dataset.Matrix{NRows: n, NCols: d, Indptr: make([]int64, 1, n+1)}
	for range n {
		for j := range d {
			if rng.Float64() < density {
				v := float32(1)
				if !binary {
					v = float32(2*rng.Float64() - 1)
				}
				m.Indices = append(m.Indices, int32(j))
				m.Values = append(m.Values, v)
			}
		}
		m.Indptr = append(m.Indptr, int64(len(m.Indices)))
	}
	if err := m.Check(); err != nil {
		panic(err)
	}
	return m
}

func randVec(rng *rand.Rand, n int, scale float64) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = scale * rng.NormFloat64()
	}
	return v
}

// gradCheck compares analytic with central differences of fn at w:
// |num - ana| <= tol * max(1, |num|, |ana|) for every coordinate.
func gradCheck(t *testing.T, name string, w, analytic []float64, fn func([]float64) float64, tol float64) {
	t.Helper()
	const h = 1e-6
	wp := append([]float64(nil), w...)
	bad := 0
	for i := range w {
		wp[i] = w[i] + h
		fp := fn(wp)
		wp[i] = w[i] - h
		fm := fn(wp)
		wp[i] = w[i]
		num := (fp - fm) / (2 * h)
		scale := math.Max(1, math.Max(math.Abs(num), math.Abs(analytic[i])))
		if math.Abs(num-analytic[i]) > tol*scale {
			if bad++; bad <= 5 {
				t.Errorf("%s: d/dw[%d]: analytic %.10g, central difference %.10g", name, i, analytic[i], num)
			}
		}
	}
}

func TestLocalGradients(t *testing.T) {
	for _, tc := range []struct {
		name    string
		m       WhiteBox
		density float64
		batch   int
	}{
		{"linear-k1", NewLinear(7, 1), 0.5, 5},
		{"linear-k3", NewLinear(9, 3), 0.4, 6},
		{"linear-dense", NewLinear(4, 2), 1, 3},
		{"mlp-k1", NewMLP(6, 10, 1), 0.6, 4},
		{"mlp-k3", NewMLP(8, 16, 3), 0.5, 7},
		{"mlp-one-row", NewMLP(5, 4, 2), 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(11, 12))
			x := randomMatrix(rng, 20, tc.m.InDim(), tc.density, false)
			rows := make([]uint32, tc.batch)
			for i := range rows {
				rows[i] = uint32(rng.IntN(x.NRows))
			}
			k := tc.m.OutDim()
			w := randVec(rng, tc.m.NumParams(), 0.7)
			dout := randVec(rng, tc.batch*k, 1)
			out := make([]float64, tc.batch*k)
			fn := func(w []float64) float64 {
				tc.m.Forward(w, x, rows, out)
				var s float64
				for i, v := range out {
					s += dout[i] * v
				}
				return s
			}
			// Backward adds: start from a known non-zero gradient.
			offset := randVec(rng, tc.m.NumParams(), 1)
			grad := append([]float64(nil), offset...)
			tc.m.Backward(w, x, rows, dout, grad)
			for i := range grad {
				grad[i] -= offset[i]
			}
			gradCheck(t, tc.name, w, grad, fn, 1e-6)
		})
	}
}

func TestForwardBatchEqualsRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for _, m := range []Local{NewLinear(12, 1), NewLinear(12, 4), NewMLP(12, 32, 1), NewMLP(12, 8, 3)} {
		t.Run(fmt.Sprintf("%T-k%d", m, m.OutDim()), func(t *testing.T) {
			x := randomMatrix(rng, 30, m.InDim(), 0.3, true)
			w := make([]float64, m.NumParams())
			m.Init(w, rng)
			if _, ok := m.(*Linear); ok { // zero init: make it interesting
				w = randVec(rng, m.NumParams(), 1)
			}
			rows := []uint32{3, 0, 29, 3, 17, 8}
			k := m.OutDim()
			batch := make([]float64, len(rows)*k)
			m.Forward(w, x, rows, batch)
			one := make([]float64, k)
			for j, r := range rows {
				m.Forward(w, x, []uint32{r}, one)
				for o := range k {
					if batch[j*k+o] != one[o] {
						t.Fatalf("row %d output %d: batch %v, alone %v", r, o, batch[j*k+o], one[o])
					}
				}
			}
		})
	}
}

func TestLinearKnownValue(t *testing.T) {
	// Row 0: x = (1, 0, 2); row 1: x = (0, -1, 0).
	x := &dataset.Matrix{NRows: 2, NCols: 3, Indptr: []int64{0, 2, 3},
		Indices: []int32{0, 2, 1}, Values: []float32{1, 2, -1}}
	m := NewLinear(3, 2)
	// w[j*k+o]: feature 0 -> (1, 2), feature 1 -> (3, 4), feature 2 -> (5, 6).
	w := []float64{1, 2, 3, 4, 5, 6}
	out := make([]float64, 4)
	m.Forward(w, x, []uint32{0, 1}, out)
	want := []float64{11, 14, -3, -4}
	for i := range out {
		if out[i] != want[i] {
			t.Fatalf("Forward = %v, want %v", out, want)
		}
	}
}

func TestMLPInit(t *testing.T) {
	const d, h = 98, 128
	m := NewMLP(d, h, 1)
	w := make([]float64, m.NumParams())
	m.Init(w, rand.New(rand.NewPCG(1, 1)))
	w1, b1, w2, b2 := m.split(w)
	var ss float64
	for _, v := range w1 {
		ss += v * v
	}
	if v, want := ss/float64(len(w1)), 2.0/d; math.Abs(v-want) > 0.05*want {
		t.Errorf("var(W1) = %.4g, want %.4g", v, want)
	}
	for _, v := range append(append([]float64(nil), b1...), b2...) {
		if v != 0 {
			t.Fatalf("bias not zero: %v", v)
		}
	}
	if len(w2) != h || m.NumParams() != d*h+h+h+1 {
		t.Errorf("layout: len(W2) = %d, NumParams = %d", len(w2), m.NumParams())
	}
}

func TestHeadGradients(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    WhiteBoxHead
		y    int32
	}{
		{"logistic-pos", NewLogistic(4), 1},
		{"logistic-neg", NewLogistic(4), 0},
		{"logistic-q1", NewLogistic(1), 1},
		{"logistic-bias-pos", NewLogisticBias(3), 1},
		{"logistic-bias-neg", NewLogisticBias(3), 0},
		{"softmax-10", NewSoftmax(8, 10), 3},
		{"softmax-2", NewSoftmax(3, 2), 0},
		{"softmax-last", NewSoftmax(5, 4), 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(31, 32))
			w0 := randVec(rng, tc.h.NumParams(), 0.8)
			if tc.h.NumParams() == 0 {
				w0 = nil
			}
			c := randVec(rng, tc.h.InDim(), 1.5)
			off := 0.25
			dw0 := make([]float64, tc.h.NumParams())
			dc := make([]float64, tc.h.InDim())
			for i := range dw0 {
				dw0[i] = off
			}
			for i := range dc {
				dc[i] = off
			}
			tc.h.Grad(w0, c, tc.y, dw0, dc)
			for i := range dw0 {
				dw0[i] -= off
			}
			for i := range dc {
				dc[i] -= off
			}
			gradCheck(t, tc.name+"/c", c, dc, func(c []float64) float64 { return tc.h.Loss(w0, c, tc.y) }, 1e-6)
			if len(w0) > 0 {
				gradCheck(t, tc.name+"/w0", w0, dw0, func(w []float64) float64 { return tc.h.Loss(w, c, tc.y) }, 1e-6)
				// nil destinations are allowed and give the same result.
				only := make([]float64, len(dw0))
				tc.h.Grad(w0, c, tc.y, only, nil)
				for i := range only {
					if math.Abs(only[i]-dw0[i]) > 1e-15 {
						t.Fatalf("Grad with dc = nil differs at %d", i)
					}
				}
			}
			onlyC := make([]float64, len(dc))
			tc.h.Grad(w0, c, tc.y, nil, onlyC)
			for i := range onlyC {
				if math.Abs(onlyC[i]-dc[i]) > 1e-15 {
					t.Fatalf("Grad with dw0 = nil differs at %d", i)
				}
			}
		})
	}
}

func TestLogisticStability(t *testing.T) {
	h := NewLogistic(2)
	for _, tc := range []struct {
		z     float64
		y     int32
		loss  float64 // expected value
		dz    float64 // expected dLoss/dc_m
		class int32
	}{
		{1000, 1, 0, 0, 1},
		{1000, 0, 1000, 1, 1},
		{-1000, 1, 1000, -1, 0},
		{-1000, 0, 0, 0, 0},
		{0, 1, math.Ln2, -0.5, 1},
		{0, 0, math.Ln2, 0.5, 1},
		{40, 1, math.Exp(-40), -math.Exp(-40), 1},
	} {
		c := []float64{tc.z / 2, tc.z / 2}
		loss := h.Loss(nil, c, tc.y)
		// Relative tolerance: the tiny loss at z = 40 must be accurate too.
		if math.IsNaN(loss) || math.IsInf(loss, 0) || math.Abs(loss-tc.loss) > 1e-12*tc.loss {
			t.Errorf("z=%v y=%d: loss %v, want %v", tc.z, tc.y, loss, tc.loss)
		}
		dc := make([]float64, 2)
		h.Grad(nil, c, tc.y, nil, dc)
		if math.Abs(dc[0]-tc.dz) > 1e-12*math.Abs(tc.dz) {
			t.Errorf("z=%v y=%d: dLoss/dc %v, want %v", tc.z, tc.y, dc[0], tc.dz)
		}
		if got := h.Predict(nil, c); got != tc.class {
			t.Errorf("z=%v: Predict %d, want %d", tc.z, got, tc.class)
		}
	}
}

func TestSoftmaxStabilityAndPredict(t *testing.T) {
	h := NewSoftmax(2, 3)
	// W = [[1,0],[0,1],[0,0]], b = 0: logits (c0, c1, 0).
	w0 := []float64{1, 0, 0, 1, 0, 0, 0, 0, 0}
	for _, tc := range []struct {
		c     []float64
		y     int32
		loss  float64
		class int32
	}{
		{[]float64{1000, 0}, 0, 0, 0},
		{[]float64{1000, 0}, 1, 1000, 0},
		{[]float64{-1000, -1000}, 2, 0, 2},
		{[]float64{0, 0}, 1, math.Log(3), 0}, // ties: lowest class
		{[]float64{1, 2}, 1, math.Log(math.E+math.E*math.E+1) - 2, 1},
	} {
		loss := h.Loss(w0, tc.c, tc.y)
		if math.IsNaN(loss) || math.Abs(loss-tc.loss) > 1e-12*math.Max(1, tc.loss) {
			t.Errorf("c=%v y=%d: loss %v, want %v", tc.c, tc.y, loss, tc.loss)
		}
		if got := h.Predict(w0, tc.c); got != tc.class {
			t.Errorf("c=%v: Predict %d, want %d", tc.c, got, tc.class)
		}
		dc := make([]float64, 2)
		h.Grad(w0, tc.c, tc.y, nil, dc)
		for _, v := range dc {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Errorf("c=%v: gradient %v", tc.c, dc)
			}
		}
	}
}

func TestRegularizers(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	w := randVec(rng, 25, 2)
	w[0], w[1] = 0, 1e-3
	for _, tc := range []struct {
		name string
		at1  float64 // g((1, -1))
	}{
		{"nonconvex", 0.5},
		{"l2", 1},
		{"none", 0},
		{"NonConvex", 0.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ParseRegularizer(tc.name)
			if err != nil {
				t.Fatal(err)
			}
			if got := r.Value([]float64{1, -1}); math.Abs(got-tc.at1) > 1e-15 {
				t.Errorf("g((1,-1)) = %v, want %v", got, tc.at1)
			}
			g := make([]float64, len(w))
			for i := range g {
				g[i] = 1
			}
			r.Grad(w, g)
			for i := range g {
				g[i]--
			}
			gradCheck(t, tc.name, w, g, r.Value, 1e-7)
		})
	}
	if _, err := ParseRegularizer("l1"); err == nil {
		t.Error("ParseRegularizer(l1) succeeded")
	}
}

func TestAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(51, 52))
	x := randomMatrix(rng, 64, 16, 0.3, true)
	rows := make([]uint32, 64)
	for i := range rows {
		rows[i] = uint32(i)
	}
	for _, m := range []WhiteBox{NewLinear(16, 1), NewLinear(16, 3), NewMLP(16, 32, 1)} {
		w := randVec(rng, m.NumParams(), 1)
		out := make([]float64, len(rows)*m.OutDim())
		grad := make([]float64, m.NumParams())
		if n := testing.AllocsPerRun(50, func() { m.Forward(w, x, rows, out) }); n != 0 {
			t.Errorf("%T.Forward allocates %v times", m, n)
		}
		if n := testing.AllocsPerRun(50, func() { m.Backward(w, x, rows, out, grad) }); n != 0 {
			t.Errorf("%T.Backward allocates %v times", m, n)
		}
	}
	for _, h := range []WhiteBoxHead{NewLogistic(8), NewSoftmax(8, 10)} {
		w0 := randVec(rng, h.NumParams(), 1)
		c := randVec(rng, h.InDim(), 1)
		dw0 := make([]float64, h.NumParams())
		dc := make([]float64, h.InDim())
		if n := testing.AllocsPerRun(50, func() {
			h.Loss(w0, c, 1)
			h.Predict(w0, c)
			h.Grad(w0, c, 1, dw0, dc)
		}); n != 0 {
			t.Errorf("%T Loss/Predict/Grad allocate %v times", h, n)
		}
	}
	w := randVec(rng, 100, 1)
	g := make([]float64, 100)
	for _, r := range []Regularizer{Nonconvex{}, L2{}, None{}} {
		if n := testing.AllocsPerRun(50, func() { r.Value(w); r.Grad(w, g) }); n != 0 {
			t.Errorf("%T allocates %v times", r, n)
		}
	}
}

func TestPanics(t *testing.T) {
	x := &dataset.Matrix{NRows: 1, NCols: 3, Indptr: []int64{0, 0}}
	for name, fn := range map[string]func(){
		"NewLinear d=0":      func() { NewLinear(0, 1) },
		"NewMLP hidden=0":    func() { NewMLP(3, 0, 1) },
		"NewLogistic q=-1":   func() { NewLogistic(-1) },
		"NewSoftmax C=0":     func() { NewSoftmax(3, 0) },
		"Linear w length":    func() { NewLinear(3, 1).Forward(make([]float64, 2), x, []uint32{0}, make([]float64, 1)) },
		"Linear out length":  func() { NewLinear(3, 1).Forward(make([]float64, 3), x, []uint32{0}, make([]float64, 2)) },
		"Linear columns":     func() { NewLinear(4, 1).Forward(make([]float64, 4), x, []uint32{0}, make([]float64, 1)) },
		"MLP grad length":    func() { NewMLP(3, 2, 1).Backward(make([]float64, 11), x, []uint32{0}, make([]float64, 1), nil) },
		"Logistic class":     func() { NewLogistic(1).Loss(nil, []float64{0}, 2) },
		"Logistic c length":  func() { NewLogistic(2).Loss(nil, []float64{0}, 1) },
		"Logistic w0":        func() { NewLogistic(1).Loss([]float64{1}, []float64{0}, 1) },
		"Softmax class":      func() { NewSoftmax(1, 2).Loss(make([]float64, 4), []float64{0}, 2) },
		"Softmax w0 length":  func() { NewSoftmax(1, 2).Loss(make([]float64, 3), []float64{0}, 1) },
		"Nonconvex g length": func() { Nonconvex{}.Grad(make([]float64, 2), make([]float64, 1)) },
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
