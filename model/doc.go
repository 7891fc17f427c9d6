// Package model holds the local models F_m of the parties, the global
// models (heads) F_0 of the aggregator and the regularisers g.
//
// Parameters are flat []float64 slices owned by the caller; a model only
// describes how to read them (the layout is documented on each type). This
// lets a zeroth-order party evaluate F at w and at w + mu u without copying
// a model. Sample ids are uint32 row indices into a dataset.Matrix.
//
// Local models: Linear (F = w^T x, the paper's logistic-regression party)
// and MLP (d -> H ReLU -> k, the paper's neural-network party). Both are
// WhiteBox: they also give gradients, for the first-order baselines. The
// zeroth-order algorithms only ever call Forward.
//
// Heads: Logistic (log(1 + exp(-y sum c)), no parameters) and Softmax (a
// fully connected layer from the q*k party outputs to C classes followed by
// softmax cross-entropy). Labels are class indices; for the binary Logistic
// head class 1 is y = +1 and class 0 is y = -1.
//
// Regularisers: Nonconvex (the paper's 1/2 sum w^2/(1+w^2)), L2 and None.
//
// Conventions follow gonum: hot paths (Forward, Backward, Loss, Grad,
// Predict) write into destinations owned by the caller and do not allocate;
// scratch space is owned by the model, which is therefore not safe for
// concurrent use. Wrong dimensions (len(w) != NumParams(), a matrix whose
// NCols is not InDim(), len(out) != len(rows)*OutDim(), a class index out of
// range) are programmer errors and panic.
package model
