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
//
// With an intercept (NewLogisticBias) the head has one parameter b, held
// by the aggregator, and z = b + sum_m c_m: the label holder owns the
// class prior, which a model without intercept cannot represent (an empty
// row has z = 0 whatever the weights).
type Logistic struct {
	q    int
	bias bool
}

var _ WhiteBoxHead = (*Logistic)(nil)

// NewLogistic returns the logistic head over q parties with one output each.
// It panics if q is not positive.
func NewLogistic(q int) *Logistic {
	checkDims("NewLogistic", q)
	return &Logistic{q: q}
}

// NewLogisticBias returns the logistic head over q parties with an
// intercept b = w0[0]. It panics if q is not positive.
func NewLogisticBias(q int) *Logistic {
	checkDims("NewLogisticBias", q)
	return &Logistic{q: q, bias: true}
}

// InDim is q.
func (h *Logistic) InDim() int { return h.q }

// Classes is 2.
func (h *Logistic) Classes() int { return 2 }

// NumParams is 0, or 1 with an intercept.
func (h *Logistic) NumParams() int {
	if h.bias {
		return 1
	}
	return 0
}

// Init sets the intercept, if any, to 0.
func (h *Logistic) Init(w0 []float64, rng *rand.Rand) {
	checkLen("Logistic.Init", "w0", len(w0), h.NumParams())
	clear(w0)
}

// z is the score b + sum c.
func (h *Logistic) z(who string, w0, c []float64) float64 {
	checkLen(who, "w0", len(w0), h.NumParams())
	checkLen(who, "c", len(c), h.q)
	var z float64
	if h.bias {
		z = w0[0]
	}
	for _, v := range c {
		z += v
	}
	return z
}

func (h *Logistic) margin(who string, w0, c []float64, y int32) float64 {
	z := h.z(who, w0, c)
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

// Loss is log(1 + exp(-y z)). w0 must hold NumParams values (none
// without an intercept). It panics if len(c) != q or y is not 0 or 1.
func (h *Logistic) Loss(w0, c []float64, y int32) float64 {
	return Softplus(-h.margin("Logistic.Loss", w0, c, y))
}

// Predict is 1 if z >= 0, else 0.
func (h *Logistic) Predict(w0, c []float64) int32 {
	if h.z("Logistic.Predict", w0, c) >= 0 {
		return 1
	}
	return 0
}

// Grad adds dLoss/dc_m = -y sigmoid(-y z) to every dc[m] and, with an
// intercept, the same to dw0[0].
func (h *Logistic) Grad(w0, c []float64, y int32, dw0, dc []float64) {
	t := h.margin("Logistic.Grad", w0, c, y)
	g := -Sigmoid(-t)
	if y == 0 {
		g = -g
	}
	if dw0 != nil {
		checkLen("Logistic.Grad", "dw0", len(dw0), h.NumParams())
		if h.bias {
			dw0[0] += g
		}
	}
	if dc == nil {
		return
	}
	checkLen("Logistic.Grad", "dc", len(dc), h.q)
	for i := range dc {
		dc[i] += g
	}
}
