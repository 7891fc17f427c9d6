package model

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Embed defaults: the embedding width of a code and the hidden width of
// the head of the label-free profile.
const (
	DefaultEmbedDim    = 16
	DefaultEmbedHidden = 128
)

// Embed is the aggregator's head of the label-free profile: each of its p
// inputs is a code in 0..K-1 (the output of a party's Codebook), each
// code of each input has an embedding of E values, the p embeddings are
// concatenated and go through a ReLU layer of H units (none if H = 0)
// and a softmax cross-entropy over C classes:
//
//	x = [emb_1(c_1); ...; emb_p(c_p)],  z = W2 relu(W1 x + b1) + b2,
//	F_0(w0, c; y) = log sum_l exp(z_l) - z_y.
//
// The head is the label holder's own model: it is fitted on the labels
// (first-order, Grad) and none of it ever reaches a party.
//
// Layout of w0: emb [p*K*E] (input i, code c at (i*K+c)*E), then W1
// [H*p*E] (W1[h*p*E + j]: input j to hidden unit h), b1 [H], W2 [C*H]
// (C*p*E without a hidden layer), b2 [C].
//
// An input that is not a code (not an integer in 0..K-1) is a programmer
// error here: the aggregator validates what parties send.
//
// The head owns scratch space and is not safe for concurrent use.
type Embed struct {
	p, codes, e, h, classes int
	x, hid, z, dz, dIn, dX  []float64
	code                    []int
}

var _ WhiteBoxHead = (*Embed)(nil)

// NewEmbed returns the head over p inputs of K codes each, with
// embeddings of dim values, hidden units (0: a softmax layer on the
// embeddings) and classes classes (2 for a binary set). It panics if a
// dimension is not positive (hidden may be 0).
func NewEmbed(inputs, codes, dim, hidden, classes int) *Embed {
	checkDims("NewEmbed", inputs, codes, dim, classes)
	if hidden < 0 {
		panic(fmt.Sprintf("model: NewEmbed with %d hidden units", hidden))
	}
	e := &Embed{p: inputs, codes: codes, e: dim, h: hidden, classes: classes}
	e.x = make([]float64, inputs*dim)
	e.hid = make([]float64, hidden)
	e.dIn = make([]float64, max(hidden, inputs*dim))
	e.dX = make([]float64, inputs*dim)
	e.z = make([]float64, classes)
	e.dz = make([]float64, classes)
	e.code = make([]int, inputs)
	return e
}

// Copy returns a head of the same shape with scratch space of its own, for
// another goroutine.
func (m *Embed) Copy() *Embed { return NewEmbed(m.p, m.codes, m.e, m.h, m.classes) }

// InDim is p.
func (m *Embed) InDim() int { return m.p }

// Classes is C.
func (m *Embed) Classes() int { return m.classes }

// Codes is K, EmbedDim E and Hidden H.
func (m *Embed) Codes() int    { return m.codes }
func (m *Embed) EmbedDim() int { return m.e }
func (m *Embed) Hidden() int   { return m.h }

// width is the input width of the output layer.
func (m *Embed) width() int {
	if m.h > 0 {
		return m.h
	}
	return m.p * m.e
}

// NumParams is p*K*E + H*p*E + H + C*H + C (without a hidden layer
// p*K*E + C*p*E + C).
func (m *Embed) NumParams() int {
	n := m.p*m.codes*m.e + m.classes*m.width() + m.classes
	if m.h > 0 {
		n += m.h*m.p*m.e + m.h
	}
	return n
}

// split returns the parameter blocks of w0.
func (m *Embed) split(w0 []float64) (emb, w1, b1, w2, b2 []float64) {
	n := m.p * m.codes * m.e
	emb, w0 = w0[:n], w0[n:]
	if m.h > 0 {
		w1, w0 = w0[:m.h*m.p*m.e], w0[m.h*m.p*m.e:]
		b1, w0 = w0[:m.h], w0[m.h:]
	}
	w2, b2 = w0[:m.classes*m.width()], w0[m.classes*m.width():]
	return emb, w1, b1, w2, b2
}

// Init draws the embeddings from N(0, 1), the layers' weights He (ReLU)
// and Glorot (output), and sets the biases to zero.
func (m *Embed) Init(w0 []float64, rng *rand.Rand) {
	checkLen("Embed.Init", "w0", len(w0), m.NumParams())
	emb, w1, b1, w2, b2 := m.split(w0)
	for i := range emb {
		emb[i] = rng.NormFloat64()
	}
	s1 := math.Sqrt(2 / float64(m.p*m.e))
	for i := range w1 {
		w1[i] = s1 * rng.NormFloat64()
	}
	clear(b1)
	s2 := math.Sqrt(2 / float64(m.width()+m.classes))
	for i := range w2 {
		w2[i] = s2 * rng.NormFloat64()
	}
	clear(b2)
}

// IsCode reports whether v is a code of this head: an integer in 0..K-1.
func (m *Embed) IsCode(v float64) bool {
	return v >= 0 && v < float64(m.codes) && v == math.Trunc(v)
}

// forward computes the logits of c into m.z and returns their maximum.
func (m *Embed) forward(who string, w0, c []float64) float64 {
	checkLen(who, "w0", len(w0), m.NumParams())
	checkLen(who, "c", len(c), m.p)
	emb, w1, b1, w2, b2 := m.split(w0)
	E := m.e
	for i, v := range c {
		if !m.IsCode(v) {
			panic(fmt.Sprintf("model: %s: input %d is %v, not a code in 0..%d", who, i, v, m.codes-1))
		}
		k := int(v)
		m.code[i] = k
		copy(m.x[i*E:(i+1)*E], emb[(i*m.codes+k)*E:(i*m.codes+k+1)*E])
	}
	in := m.x
	if m.h > 0 {
		pe := m.p * E
		for h := range m.h {
			s := b1[h]
			row := w1[h*pe : (h+1)*pe]
			for j, v := range m.x {
				s += row[j] * v
			}
			m.hid[h] = max(s, 0)
		}
		in = m.hid
	}
	wd := m.width()
	zmax := math.Inf(-1)
	for l := range m.classes {
		s := b2[l]
		row := w2[l*wd : (l+1)*wd]
		for j, v := range in {
			s += row[j] * v
		}
		m.z[l] = s
		zmax = max(zmax, s)
	}
	return zmax
}

func (m *Embed) checkClass(who string, y int32) {
	if y < 0 || int(y) >= m.classes {
		panic(fmt.Sprintf("model: %s: class %d out of range [0,%d)", who, y, m.classes))
	}
}

// Loss is the cross-entropy -log softmax(z)_y.
func (m *Embed) Loss(w0, c []float64, y int32) float64 {
	m.checkClass("Embed.Loss", y)
	zmax := m.forward("Embed.Loss", w0, c)
	var s float64
	for _, v := range m.z {
		s += math.Exp(v - zmax)
	}
	return zmax + math.Log(s) - m.z[y]
}

// Predict is argmax z (the lowest class on ties).
func (m *Embed) Predict(w0, c []float64) int32 {
	zmax := m.forward("Embed.Predict", w0, c)
	for l, v := range m.z {
		if v == zmax {
			return int32(l)
		}
	}
	return 0
}

// Probabilities writes softmax(z) for c into p (len Classes()).
func (m *Embed) Probabilities(w0, c, p []float64) {
	checkLen("Embed.Probabilities", "p", len(p), m.classes)
	zmax := m.forward("Embed.Probabilities", w0, c)
	var s float64
	for l, v := range m.z {
		p[l] = math.Exp(v - zmax)
		s += p[l]
	}
	for l := range p {
		p[l] /= s
	}
}

// Grad adds dLoss/dw0 to dw0. The codes have no gradient: dc, if not nil,
// is left as it is.
func (m *Embed) Grad(w0, c []float64, y int32, dw0, dc []float64) {
	m.checkClass("Embed.Grad", y)
	zmax := m.forward("Embed.Grad", w0, c)
	if dw0 == nil {
		return
	}
	checkLen("Embed.Grad", "dw0", len(dw0), m.NumParams())
	_, w1, _, w2, _ := m.split(w0)
	gemb, gw1, gb1, gw2, gb2 := m.split(dw0)
	var s float64
	for l, v := range m.z {
		m.dz[l] = math.Exp(v - zmax)
		s += m.dz[l]
	}
	for l := range m.dz {
		m.dz[l] /= s
	}
	m.dz[y]--
	in := m.x
	if m.h > 0 {
		in = m.hid
	}
	wd := m.width()
	// Output layer, and the gradient with respect to its input into dIn.
	dIn := m.dIn[:wd]
	clear(dIn)
	for l, g := range m.dz {
		gb2[l] += g
		row, grow := w2[l*wd:(l+1)*wd], gw2[l*wd:(l+1)*wd]
		for j, v := range in {
			grow[j] += g * v
			dIn[j] += g * row[j]
		}
	}
	E := m.e
	pe := m.p * E
	dx := dIn
	if m.h > 0 {
		// Through the ReLU layer: dIn (H values) to dx (p*E values).
		dx = m.dX
		clear(dx)
		for h, g := range dIn {
			if m.hid[h] <= 0 || g == 0 {
				continue
			}
			gb1[h] += g
			row, grow := w1[h*pe:(h+1)*pe], gw1[h*pe:(h+1)*pe]
			for j, v := range m.x {
				grow[j] += g * v
				dx[j] += g * row[j]
			}
		}
	}
	for i, k := range m.code {
		g := gemb[(i*m.codes+k)*E : (i*m.codes+k+1)*E]
		for j := range g {
			g[j] += dx[i*E+j]
		}
	}
}
