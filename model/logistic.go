package model

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Logistic is the parameter-free binary head of the paper's logistic
// regression: with z = sum_m c_m and y = +1 for class 1, -1 for class 0,
//
//	F_0(c; y) = log(1 + exp(-y z)),
//
// computed without overflow for any finite z. Predict is class 1 when
// z >= 0.
type Logistic struct {
	q int
}

var _ WhiteBoxHead = (*Logistic)(nil)

// NewLogistic returns the logistic head over q parties with one output each.
// It panics if q is not positive.
func NewLogistic(q int) *Logistic {
	checkDims("NewLogistic", q)
	return &Logistic{q: q}
}

// InDim is q.
func (h *Logistic) InDim() int { return h.q }

// Classes is 2.
func (h *Logistic) Classes() int { return 2 }

// NumParams is 0.
func (h *Logistic) NumParams() int { return 0 }

// Init does nothing: the head has no parameters.
func (h *Logistic) Init(w0 []float64, rng *rand.Rand) {
	checkLen("Logistic.Init", "w0", len(w0), 0)
}

func (h *Logistic) margin(who string, w0, c []float64, y int32) float64 {
	checkLen(who, "w0", len(w0), 0)
	checkLen(who, "c", len(c), h.q)
	var z float64
	for _, v := range c {
		z += v
	}
	switch y {
	case 1:
		return z
	case 0:
		return -z
	}
	panic(fmt.Sprintf("model: %s: class %d, want 0 or 1", who, y))
}

// Softplus is log(1 + exp(x)), accurate and finite for all finite x.
func Softplus(x float64) float64 {
	if x > 0 {
		return x + math.Log1p(math.Exp(-x))
	}
	return math.Log1p(math.Exp(x))
}

// Sigmoid is 1/(1 + exp(-x)), without overflow.
func Sigmoid(x float64) float64 {
	if x >= 0 {
		return 1 / (1 + math.Exp(-x))
	}
	e := math.Exp(x)
	return e / (1 + e)
}

// Loss is log(1 + exp(-y sum c)). w0 must be empty (nil). It panics if
// len(c) != q or y is not 0 or 1.
func (h *Logistic) Loss(w0, c []float64, y int32) float64 {
	return Softplus(-h.margin("Logistic.Loss", w0, c, y))
}

// Predict is 1 if sum c >= 0, else 0.
func (h *Logistic) Predict(w0, c []float64) int32 {
	checkLen("Logistic.Predict", "w0", len(w0), 0)
	checkLen("Logistic.Predict", "c", len(c), h.q)
	var z float64
	for _, v := range c {
		z += v
	}
	if z >= 0 {
		return 1
	}
	return 0
}

// Grad adds dLoss/dc_m = -y sigmoid(-y z) to every dc[m]; there is no dw0.
func (h *Logistic) Grad(w0, c []float64, y int32, dw0, dc []float64) {
	t := h.margin("Logistic.Grad", w0, c, y)
	if dw0 != nil {
		checkLen("Logistic.Grad", "dw0", len(dw0), 0)
	}
	if dc == nil {
		return
	}
	checkLen("Logistic.Grad", "dc", len(dc), h.q)
	g := -Sigmoid(-t)
	if y == 0 {
		g = -g
	}
	for i := range dc {
		dc[i] += g
	}
}
