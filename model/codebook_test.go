package model

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/asyrevel/asyrevel/dataset"
)

// bruteCode is the nearest centroid of block [lo, hi) of a dense row, by
// the definition.
func bruteCode(w []float64, K, lo, hi int, x []float64) int {
	best, bd := 0, math.Inf(1)
	for c := range K {
		var s float64
		for j := lo; j < hi; j++ {
			t := x[j] - w[j*K+c]
			s += t * t
		}
		if s < bd {
			best, bd = c, s
		}
	}
	return best
}

func denseRow(x *dataset.Matrix, i int) []float64 {
	r := make([]float64, x.NCols)
	idx, val := x.Row(i)
	for p, j := range idx {
		r[j] = float64(val[p])
	}
	return r
}

func TestCodebookForwardIsNearestCentroid(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		d, k, K int
		density float64
		binary  bool
	}{{10, 1, 7, 0.5, false}, {23, 3, 16, 0.3, true}, {40, 4, 5, 1, false}} {
		m := NewCodebook(tc.d, tc.k, tc.K)
		x := randomMatrix(rng, 200, tc.d, tc.density, tc.binary)
		w := randVec(rng, m.NumParams(), 1)
		rows := make([]uint32, x.NRows)
		for i := range rows {
			rows[i] = uint32(i)
		}
		out := make([]float64, len(rows)*tc.k)
		m.Forward(w, x, rows, out)
		blocks, _ := dataset.Blocks(tc.d, tc.k)
		for i := range rows {
			r := denseRow(x, i)
			for b, bl := range blocks {
				if want := bruteCode(w, tc.K, bl.Lo, bl.Hi, r); out[i*tc.k+b] != float64(want) {
					t.Fatalf("d=%d k=%d K=%d: row %d block %d: code %v, the nearest centroid is %d", tc.d, tc.k, tc.K, i, b, out[i*tc.k+b], want)
				}
			}
		}
	}
}

// Rows drawn around K well separated points are coded by their point:
// two rows share a code if and only if they come from the same point.
func TestCodebookFitFindsClusters(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const K, d, n = 6, 5, 600
	centres := randVec(rng, K*d, 10)
	m := &dataset.Matrix{NRows: n, NCols: d, Indptr: []int64{0}}
	from := make([]int, n)
	for i := range n {
		c := rng.IntN(K)
		from[i] = c
		for j := range d {
			m.Indices = append(m.Indices, int32(j))
			m.Values = append(m.Values, float32(centres[c*d+j]+0.1*rng.NormFloat64()))
		}
		m.Indptr = append(m.Indptr, int64(len(m.Indices)))
	}
	cb := NewCodebook(d, 1, K)
	w := make([]float64, cb.NumParams())
	if err := cb.Fit(w, m, rng); err != nil {
		t.Fatal(err)
	}
	out := make([]float64, n)
	rows := make([]uint32, n)
	for i := range rows {
		rows[i] = uint32(i)
	}
	cb.Forward(w, m, rows, out)
	code := map[int]float64{}
	seen := map[float64]int{}
	for i, c := range from {
		if got, ok := code[c]; ok && got != out[i] {
			t.Fatalf("rows of cluster %d coded %v and %v", c, got, out[i])
		}
		if other, ok := seen[out[i]]; ok && other != c {
			t.Fatalf("code %v holds clusters %d and %d", out[i], other, c)
		}
		code[c], seen[out[i]] = out[i], c
	}
}

// A block with fewer distinct rows than codes is coded without loss: equal
// codes mean equal rows.
func TestCodebookFewDistinctRowsLossless(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	patterns := randomMatrix(rng, 9, 12, 0.4, true)
	pick := make([]int, 500)
	for i := range pick {
		pick[i] = rng.IntN(patterns.NRows)
	}
	x := patterns.Rows(pick)
	cb := NewCodebook(12, 2, 32)
	w := make([]float64, cb.NumParams())
	if err := cb.Fit(w, x, rng); err != nil {
		t.Fatal(err)
	}
	rows := make([]uint32, x.NRows)
	for i := range rows {
		rows[i] = uint32(i)
	}
	out := make([]float64, 2*len(rows))
	cb.Forward(w, x, rows, out)
	blocks, _ := dataset.Blocks(12, 2)
	for a := range rows {
		for b := range a {
			for o, bl := range blocks {
				ra, rb := denseRow(x, a)[bl.Lo:bl.Hi], denseRow(x, b)[bl.Lo:bl.Hi]
				same := true
				for j := range ra {
					same = same && ra[j] == rb[j]
				}
				if same != (out[a*2+o] == out[b*2+o]) {
					t.Fatalf("rows %d and %d, block %d: equal %v but codes %v and %v", a, b, o, same, out[a*2+o], out[b*2+o])
				}
			}
		}
	}
}

func TestEmbedGradFiniteDifferences(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, hidden := range []int{0, 6} {
		m := NewEmbed(3, 4, 2, hidden, 5)
		w0 := make([]float64, m.NumParams())
		m.Init(w0, rng)
		for i := range w0 {
			w0[i] += 0.1 * rng.NormFloat64() // no bias exactly at the ReLU's kink
		}
		c := []float64{1, 3, 0}
		for y := range int32(5) {
			g := make([]float64, len(w0))
			m.Grad(w0, c, y, g, nil)
			gradCheck(t, "Embed", w0, g, func(w []float64) float64 { return m.Loss(w, c, y) }, 1e-5)
		}
	}
}

func TestEmbedProbabilitiesMatchLoss(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	m := NewEmbed(2, 3, 4, 5, 3)
	w0 := make([]float64, m.NumParams())
	m.Init(w0, rng)
	c := []float64{2, 0}
	p := make([]float64, 3)
	m.Probabilities(w0, c, p)
	var s float64
	for y, v := range p {
		s += v
		if l := m.Loss(w0, c, int32(y)); math.Abs(l+math.Log(v)) > 1e-12 {
			t.Fatalf("class %d: loss %v, -log p %v", y, l, -math.Log(v))
		}
	}
	if math.Abs(s-1) > 1e-12 {
		t.Fatalf("probabilities sum to %v", s)
	}
	if !m.IsCode(2) || m.IsCode(3) || m.IsCode(-1) || m.IsCode(1.5) || m.IsCode(math.NaN()) {
		t.Fatal("IsCode accepts a value that is not a code, or refuses one that is")
	}
}

// The embed head's parameter count, as serve counts it for a model file
// without building the head, is NumParams.
func TestEmbedNumParamsFormula(t *testing.T) {
	for _, c := range [][5]int{{3, 4, 2, 0, 5}, {8, 173, 16, 128, 10}, {1, 2, 1, 3, 2}} {
		in, codes, dim, hidden, out := c[0], c[1], c[2], c[3], c[4]
		width := in * dim
		if hidden > 0 {
			width = hidden
		}
		n := in*codes*dim + out*width + out
		if hidden > 0 {
			n += hidden*in*dim + hidden
		}
		if got := NewEmbed(in, codes, dim, hidden, out).NumParams(); got != n {
			t.Errorf("%v: NumParams %d, the formula %d", c, got, n)
		}
	}
}
