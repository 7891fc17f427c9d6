package model

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Softmax is the head of the paper's neural network: a fully connected layer
// from the p = q*k party outputs to C classes, with bias, followed by
// softmax cross-entropy:
//
//	z = W c + b,   F_0(w0, c; y) = log sum_l exp(z_l) - z_y,
//
// computed with a stable log-sum-exp. Predict is argmax z (the lowest class
// on ties).
//
// Layout of w0 (NumParams = C*p + C): W [C*p] with W[l*p + i] from input i to
// class l, then b [C].
//
// The head owns a scratch buffer of C logits and is not safe for concurrent
// use.
type Softmax struct {
	p, classes int
	z          []float64
}

var _ WhiteBoxHead = (*Softmax)(nil)

// NewSoftmax returns a softmax head with the given number of inputs (q*k)
// and classes. It panics if either is not positive.
func NewSoftmax(inputs, classes int) *Softmax {
	checkDims("NewSoftmax", inputs, classes)
	return &Softmax{p: inputs, classes: classes, z: make([]float64, classes)}
}

// InDim is the number of inputs q*k.
func (h *Softmax) InDim() int { return h.p }

// Classes is C.
func (h *Softmax) Classes() int { return h.classes }

// NumParams is C*p + C.
func (h *Softmax) NumParams() int { return h.classes*h.p + h.classes }

// Init draws W ~ N(0, 2/(p+C)) (Glorot) and sets b to zero.
func (h *Softmax) Init(w0 []float64, rng *rand.Rand) {
	checkLen("Softmax.Init", "w0", len(w0), h.NumParams())
	s := math.Sqrt(2 / float64(h.p+h.classes))
	n := h.classes * h.p
	for i := range w0[:n] {
		w0[i] = s * rng.NormFloat64()
	}
	clear(w0[n:])
}

// logits computes z = W c + b into h.z and returns it with its maximum.
func (h *Softmax) logits(who string, w0, c []float64) (z []float64, zmax float64) {
	checkLen(who, "w0", len(w0), h.NumParams())
	checkLen(who, "c", len(c), h.p)
	p := h.p
	n := h.classes * p
	b := w0[n : n+h.classes]
	z = h.z[:h.classes]
	zmax = math.Inf(-1)
	for l := range z {
		wl := w0[l*p : l*p+p]
		s := b[l]
		for i, v := range c {
			s += wl[i] * v
		}
		z[l] = s
		if s > zmax {
			zmax = s
		}
	}
	return z, zmax
}

func (h *Softmax) checkClass(who string, y int32) {
	if y < 0 || int(y) >= h.classes {
		panic(fmt.Sprintf("model: %s: class %d out of range [0,%d)", who, y, h.classes))
	}
}

// Loss is the cross-entropy -log softmax(W c + b)_y. It panics on wrong
// lengths or a class out of range.
func (h *Softmax) Loss(w0, c []float64, y int32) float64 {
	h.checkClass("Softmax.Loss", y)
	z, zmax := h.logits("Softmax.Loss", w0, c)
	var s float64
	for _, v := range z {
		s += math.Exp(v - zmax)
	}
	return zmax + math.Log(s) - z[y]
}

// Predict is argmax_l (W c + b)_l.
func (h *Softmax) Predict(w0, c []float64) int32 {
	z, zmax := h.logits("Softmax.Predict", w0, c)
	for l, v := range z {
		if v == zmax {
			return int32(l)
		}
	}
	return 0 // NaN logits
}

// Grad adds dLoss/dw0 to dw0 and dLoss/dc to dc (either may be nil). With
// g = softmax(z) - e_y: dW[l*p+i] += g_l c_i, db[l] += g_l,
// dc[i] += sum_l g_l W[l*p+i].
func (h *Softmax) Grad(w0, c []float64, y int32, dw0, dc []float64) {
	h.checkClass("Softmax.Grad", y)
	z, zmax := h.logits("Softmax.Grad", w0, c)
	if dw0 != nil {
		checkLen("Softmax.Grad", "dw0", len(dw0), h.NumParams())
	}
	if dc != nil {
		checkLen("Softmax.Grad", "dc", len(dc), h.p)
	}
	var s float64
	for l, v := range z {
		e := math.Exp(v - zmax)
		z[l] = e
		s += e
	}
	p := h.p
	n := h.classes * p
	for l := range z {
		g := z[l] / s
		if l == int(y) {
			g--
		}
		if dw0 != nil {
			dl := dw0[l*p : l*p+p]
			for i, v := range c {
				dl[i] += g * v
			}
			dw0[n+l] += g
		}
		if dc != nil {
			wl := w0[l*p : l*p+p]
			for i := range dc {
				dc[i] += g * wl[i]
			}
		}
	}
}
