package zoo

import (
	"fmt"

	"gonum.org/v1/gonum/floats"
)

// Perturb writes dst = w + mu u. dst may alias w or u. It panics if the
// lengths differ.
func Perturb(dst, w, u []float64, mu float64) {
	if len(w) != len(dst) || len(u) != len(dst) {
		panic(fmt.Sprintf("zoo: Perturb lengths %d, %d, %d differ", len(dst), len(w), len(u)))
	}
	floats.AddScaledTo(dst, w, mu, u)
}

// Coef is the scalar (phi/mu) diff of the two-point estimator, so that the
// estimate is Coef(diff, mu, phi) * u. It panics if mu <= 0.
func Coef(diff, mu, phi float64) float64 {
	if !(mu > 0) {
		panic(fmt.Sprintf("zoo: smoothing radius mu = %v, want > 0", mu))
	}
	return phi / mu * diff
}

// AddScaled performs dst += alpha s, the update step: a descent step with
// learning rate eta along the estimate Coef(diff, mu, phi) u is
// AddScaled(w, -eta*Coef(diff, mu, phi), u), which needs no buffer for the
// estimate. It panics if the lengths differ.
func AddScaled(dst []float64, alpha float64, s []float64) {
	if len(s) != len(dst) {
		panic(fmt.Sprintf("zoo: AddScaled lengths %d, %d differ", len(dst), len(s)))
	}
	floats.AddScaled(dst, alpha, s)
}
