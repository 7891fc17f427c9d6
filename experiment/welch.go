package experiment

import (
	"math"

	"gonum.org/v1/gonum/stat"
	"gonum.org/v1/gonum/stat/distuv"
)

// Welch is Welch's unequal-variance t-test of the difference of two means.
type Welch struct {
	Diff float64 // mean(a) - mean(b)
	T    float64 // Diff over its standard error
	DF   float64 // Welch-Satterthwaite degrees of freedom
	P    float64 // two-sided p-value; NaN if either sample has fewer than 2 values
}

// WelchTest compares the means of a and b without assuming equal
// variances. Two samples without spread and with different means give
// T = ±Inf and P = 0; with equal means, P = 1.
func WelchTest(a, b []float64) Welch {
	w := Welch{Diff: math.NaN(), T: math.NaN(), DF: math.NaN(), P: math.NaN()}
	if len(a) < 2 || len(b) < 2 {
		if len(a) > 0 && len(b) > 0 {
			w.Diff = stat.Mean(a, nil) - stat.Mean(b, nil)
		}
		return w
	}
	ma, va := stat.MeanVariance(a, nil)
	mb, vb := stat.MeanVariance(b, nil)
	na, nb := float64(len(a)), float64(len(b))
	sa, sb := va/na, vb/nb
	w.Diff = ma - mb
	if sa+sb == 0 {
		if w.Diff == 0 {
			w.T, w.P = 0, 1
		} else {
			w.T, w.P = math.Copysign(math.Inf(1), w.Diff), 0
		}
		w.DF = na + nb - 2
		return w
	}
	w.T = w.Diff / math.Sqrt(sa+sb)
	w.DF = (sa + sb) * (sa + sb) / (sa*sa/(na-1) + sb*sb/(nb-1))
	w.P = 2 * distuv.StudentsT{Mu: 0, Sigma: 1, Nu: w.DF}.Survival(math.Abs(w.T))
	return w
}
