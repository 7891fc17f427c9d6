package model

import (
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/floats"

	"github.com/asyrevel/asyrevel/dataset"
)

// DefaultHidden is the hidden width of the paper's MLP party model.
const DefaultHidden = 128

// MLP is the two-layer local model F(w; x) = W2 relu(W1^T x + b1) + b2 with
// d inputs, H hidden units and k outputs (the paper's neural-network party:
// d_m x 128, ReLU, 128 x 1).
//
// Layout of w (NumParams = d*H + H + k*H + k), in this order:
//
//	W1 [d*H]  W1[j*H + h]: input feature j to hidden unit h (a sparse row
//	          touches only its non-zero features' contiguous H-blocks)
//	b1 [H]
//	W2 [k*H]  W2[o*H + h]: hidden unit h to output o
//	b2 [k]
//
// The model owns a scratch buffer of 2H floats: Forward and Backward work one
// sample at a time, so any batch size runs without allocation.
type MLP struct {
	d, h, k int
	hid     []float64 // hidden activations of the current sample
	dh      []float64 // gradient with respect to the hidden pre-activation
}

var _ WhiteBox = (*MLP)(nil)

// NewMLP returns a two-layer ReLU network d -> hidden -> k (use
// DefaultHidden for the paper's width). It panics if a dimension is not
// positive.
func NewMLP(d, hidden, k int) *MLP {
	checkDims("NewMLP", d, hidden, k)
	buf := make([]float64, 2*hidden)
	return &MLP{d: d, h: hidden, k: k, hid: buf[:hidden:hidden], dh: buf[hidden:]}
}

// InDim is d.
func (m *MLP) InDim() int { return m.d }

// OutDim is k.
func (m *MLP) OutDim() int { return m.k }

// Hidden is the hidden width H.
func (m *MLP) Hidden() int { return m.h }

// NumParams is d*H + H + k*H + k.
func (m *MLP) NumParams() int { return m.d*m.h + m.h + m.k*m.h + m.k }

// split returns the four parameter blocks of w.
func (m *MLP) split(w []float64) (w1, b1, w2, b2 []float64) {
	d, h, k := m.d, m.h, m.k
	w1 = w[: d*h : d*h]
	w = w[d*h:]
	b1 = w[:h:h]
	w = w[h:]
	w2 = w[: k*h : k*h]
	b2 = w[k*h : k*h+k]
	return
}

// Init draws W1 ~ N(0, 2/d) (He, for ReLU) and W2 ~ N(0, 2/(H+k))
// (Glorot), and sets the biases to zero.
func (m *MLP) Init(w []float64, rng *rand.Rand) {
	checkLen("MLP.Init", "w", len(w), m.NumParams())
	w1, b1, w2, b2 := m.split(w)
	s1 := math.Sqrt(2 / float64(m.d))
	for i := range w1 {
		w1[i] = s1 * rng.NormFloat64()
	}
	s2 := math.Sqrt(2 / float64(m.h+m.k))
	for i := range w2 {
		w2[i] = s2 * rng.NormFloat64()
	}
	clear(b1)
	clear(b2)
}

// hidden computes relu(W1^T x_r + b1) into m.hid.
func (m *MLP) hidden(w1, b1 []float64, x *dataset.Matrix, r uint32) {
	h := m.h
	hid := m.hid[:h]
	copy(hid, b1)
	idx, val := x.Row(int(r))
	val = val[:len(idx)]
	for p, c := range idx {
		v := float64(val[p])
		floats.AddScaled(hid, v, w1[int(c)*h:int(c)*h+h])
	}
	for i, a := range hid {
		if a < 0 {
			hid[i] = 0
		}
	}
}

// Forward writes F(w; x_r) for each r in rows into out[j*k:(j+1)*k].
func (m *MLP) Forward(w []float64, x *dataset.Matrix, rows []uint32, out []float64) {
	checkForward("MLP.Forward", m.d, m.k, m.NumParams(), w, x, rows, out)
	w1, b1, w2, b2 := m.split(w)
	h, k := m.h, m.k
	for j, r := range rows {
		m.hidden(w1, b1, x, r)
		hid := m.hid[:h]
		o := out[j*k : j*k+k]
		for i := range o {
			o[i] = b2[i] + floats.Dot(hid, w2[i*h:i*h+h])
		}
	}
}

// Backward adds to grad (same layout as w) the gradient of
// sum_j <dout_j, F(w; x_rows[j])>. At a ReLU kink it uses the derivative 0.
func (m *MLP) Backward(w []float64, x *dataset.Matrix, rows []uint32, dout []float64, grad []float64) {
	checkForward("MLP.Backward", m.d, m.k, m.NumParams(), w, x, rows, dout)
	checkLen("MLP.Backward", "grad", len(grad), m.NumParams())
	w1, b1, w2, _ := m.split(w)
	g1, gb1, g2, gb2 := m.split(grad)
	h, k := m.h, m.k
	for j, r := range rows {
		m.hidden(w1, b1, x, r)
		hid := m.hid[:h]
		dh := m.dh[:h]
		clear(dh)
		for i, g := range dout[j*k : j*k+k] {
			if g == 0 {
				continue
			}
			gb2[i] += g
			floats.AddScaled(g2[i*h:i*h+h], g, hid)
			floats.AddScaled(dh, g, w2[i*h:i*h+h])
		}
		for t, a := range hid {
			if a <= 0 {
				dh[t] = 0
			}
			gb1[t] += dh[t]
		}
		idx, val := x.Row(int(r))
		val = val[:len(idx)]
		for p, c := range idx {
			floats.AddScaled(g1[int(c)*h:int(c)*h+h], float64(val[p]), dh)
		}
	}
}
