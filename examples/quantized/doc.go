// Command quantized is an external local model for asyrevel: a black box the
// party runs as a child process and talks to over stdin and stdout with the
// protocol of model/EXTERNAL.md.
//
// The model is a linear model whose weights are quantised to a grid of step
// s (default 1/16) and whose output is clipped to [-C, C] (default 4):
//
//	F(w; x)_o = clip( sum_j q(w[j*k+o]) x_j, -C, C ),   q(v) = s * round(v / s)
//
// F is piecewise constant in w: moving a weight by less than the distance
// to the next rounding boundary changes nothing, and crossing a boundary
// makes the output jump. Its gradient with respect to w is therefore zero
// almost everywhere (and undefined on the boundaries): first-order training
// (back-propagation, TIG) gets no signal at all. The zeroth-order estimator
// (F(w + mu u) - F(w)) / mu u of AsyREVEL estimates the gradient of the
// smoothed model E[F(w + mu u)], which is smooth and close to the gradient
// of the unquantised model once mu is comparable to or larger than the step
// s: mu >= s, e.g. mu = 0.1 for s = 1/16. See README.md.
//
// It is written against an ordinary msgpack library to show what a model
// author writes; it does not import asyrevel.
package main
