package model

import (
	"errors"
	"math/rand/v2"

	"github.com/asyrevel/asyrevel/dataset"
)

// ErrNoGradient is returned where a first-order method asks a black-box
// model for a gradient it cannot give.
var ErrNoGradient = errors.New("model: black-box model has no gradient")

// Local is a party's private model F_m(w; x) -> R^k.
//
// The zeroth-order path only ever calls Forward: a Local is a black box.
// Parameters live outside the model in a flat []float64 owned by the caller,
// so the caller can evaluate F at w and at w + mu u without copying the model.
// A Local may keep scratch space and is not safe for concurrent use.
type Local interface {
	// InDim is the number of input features d_m.
	InDim() int
	// OutDim is the number of outputs k per sample.
	OutDim() int
	// NumParams is len(w).
	NumParams() int
	// Init writes initial parameters into w (len NumParams()).
	Init(w []float64, rng *rand.Rand)
	// Forward writes F(w; x_r) for each r in rows into out, sample after
	// sample: out[j*k:(j+1)*k] for rows[j]. len(out) must be len(rows)*k.
	// It does not retain w, x, rows or out, and does not allocate.
	Forward(w []float64, x *dataset.Matrix, rows []uint32, out []float64)
}

// Fitter is a Local that is fitted to its party's own rows before the
// run, without labels (Codebook): its parameters then stay as they are.
type Fitter interface {
	Local
	Fit(w []float64, x *dataset.Matrix, rng *rand.Rand) error
}

// WhiteBox is a Local that also gives gradients (for first-order baselines
// such as TIG). A model that cannot is a black box and the first-order
// algorithms refuse it with ErrNoGradient.
type WhiteBox interface {
	Local
	// Backward adds to grad (len NumParams()) the gradient with respect to w of
	// sum_j <dout[j*k:(j+1)*k], F(w; x_rows[j])>.
	Backward(w []float64, x *dataset.Matrix, rows []uint32, dout []float64, grad []float64)
}

// Head is the aggregator's global model F_0(w0, c; y): it maps the q*k
// outputs of all parties for one sample to a loss and a prediction.
// A Head may keep scratch space and is not safe for concurrent use.
type Head interface {
	// InDim is q*k, the length of c.
	InDim() int
	// Classes is the number of classes it predicts.
	Classes() int
	// NumParams is len(w0); 0 for a head without parameters.
	NumParams() int
	// Init writes initial parameters into w0.
	Init(w0 []float64, rng *rand.Rand)
	// Loss is the per-sample loss F_0(w0, c; y).
	Loss(w0, c []float64, y int32) float64
	// Predict is the predicted class for c.
	Predict(w0, c []float64) int32
}

// WhiteBoxHead is a Head with gradients, for TIG and for checks.
type WhiteBoxHead interface {
	Head
	// Grad adds dLoss/dw0 to dw0 (if non-nil) and dLoss/dc to dc (if non-nil).
	Grad(w0, c []float64, y int32, dw0, dc []float64)
}

// Regularizer is the penalty g(w) of a party's parameters.
type Regularizer interface {
	Value(w []float64) float64
	// Grad adds dg/dw to g.
	Grad(w, g []float64)
}
