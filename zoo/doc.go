// Package zoo holds the zeroth-order (ZOO) estimation used by AsyREVEL:
// random directions, the two-point gradient estimator and step-size
// schedules.
//
// A party that can only evaluate a function f draws a direction u, evaluates
// f(w) and f(w + mu u) and forms
//
//	v = (phi/mu) (f(w + mu u) - f(w)) u.
//
// With the right phi, v is an unbiased estimate of the gradient of the
// mu-smoothed function f_mu:
//
//   - Gaussian directions, u ~ N(0, I): phi = 1, and E[v] = grad f_mu with
//     f_mu(w) = E[f(w + mu u)] (Gaussian smoothing, Nesterov & Spokoiny).
//   - Sphere directions, u uniform on the unit sphere: phi = d, and
//     E[v] = grad f_mu with f_mu(w) = E[f(w + mu b)], b uniform in the unit
//     ball (Flaxman, Kalai & McMahan).
//
// Both f_mu are within O(mu^2 L) of f for an L-smooth f, so v is a gradient
// estimate with a small, mu-controlled bias. Dist.Phi gives phi.
//
// The AsyREVEL paper (Zhang et al., CIKM 2021) writes the factor d/mu for both
// distributions. With Gaussian directions that is d times too large: E[u u^T]
// is I for N(0, I) but I/d on the unit sphere, so only the sphere needs the
// factor d. This package uses the unbiased form; a learning rate tuned for the
// paper's Gaussian variant corresponds to d times that rate here. The tests
// check unbiasedness statistically and show that the paper's Gaussian scaling
// fails the same check.
//
// Functions here follow gonum conventions: they write into destination
// slices owned by the caller, do not allocate, and panic on programmer
// errors such as mismatched lengths.
package zoo
