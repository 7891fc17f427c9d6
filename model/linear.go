package model

import (
	"math/rand/v2"

	"github.com/asyrevel/asyrevel/dataset"
)

// Linear is the linear local model F(w; x) = w^T x with k outputs and no
// bias (the paper's F_m for logistic regression, k = 1).
//
// Layout: w has d*k entries, w[j*k + o] is the weight of input feature j in
// output o, so the k weights of one feature are contiguous and a sparse row
// touches only its non-zero features' blocks.
type Linear struct {
	d, k int
}

var _ WhiteBox = (*Linear)(nil)

// NewLinear returns a linear model with d inputs and k outputs. It panics if
// d or k is not positive.
func NewLinear(d, k int) *Linear {
	checkDims("NewLinear", d, k)
	return &Linear{d: d, k: k}
}

// InDim is d.
func (m *Linear) InDim() int { return m.d }

// OutDim is k.
func (m *Linear) OutDim() int { return m.k }

// NumParams is d*k.
func (m *Linear) NumParams() int { return m.d * m.k }

// Init sets w to zero, the usual start for (regularised) logistic
// regression; rng is not used.
func (m *Linear) Init(w []float64, rng *rand.Rand) {
	checkLen("Linear.Init", "w", len(w), m.NumParams())
	clear(w)
}

// Forward writes w^T x_r for each r in rows into out[j*k:(j+1)*k].
func (m *Linear) Forward(w []float64, x *dataset.Matrix, rows []uint32, out []float64) {
	checkForward("Linear.Forward", m.d, m.k, m.NumParams(), w, x, rows, out)
	k := m.k
	if k == 1 {
		for j, r := range rows {
			idx, val := x.Row(int(r))
			val = val[:len(idx)]
			var s float64
			for p, c := range idx {
				s += float64(val[p]) * w[c]
			}
			out[j] = s
		}
		return
	}
	for j, r := range rows {
		o := out[j*k : j*k+k]
		clear(o)
		idx, val := x.Row(int(r))
		val = val[:len(idx)]
		for p, c := range idx {
			v := float64(val[p])
			wc := w[int(c)*k : int(c)*k+k]
			for i := range o {
				o[i] += v * wc[i]
			}
		}
	}
}

// Backward adds to grad the gradient of sum_j <dout_j, w^T x_rows[j]>:
// grad[c*k + o] += x_{r,c} dout[j*k + o].
func (m *Linear) Backward(w []float64, x *dataset.Matrix, rows []uint32, dout []float64, grad []float64) {
	checkForward("Linear.Backward", m.d, m.k, m.NumParams(), w, x, rows, dout)
	checkLen("Linear.Backward", "grad", len(grad), m.NumParams())
	k := m.k
	for j, r := range rows {
		g := dout[j*k : j*k+k]
		idx, val := x.Row(int(r))
		val = val[:len(idx)]
		for p, c := range idx {
			v := float64(val[p])
			gc := grad[int(c)*k : int(c)*k+k]
			for i := range gc {
				gc[i] += v * g[i]
			}
		}
	}
}
