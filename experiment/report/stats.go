package report

import (
	"math"
	"slices"

	"gonum.org/v1/gonum/stat"
	"gonum.org/v1/gonum/stat/distuv"
)

// Level is the confidence level of every interval in the report.
const Level = 0.95

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

// tQuantile is the two-sided Level quantile of Student's t with df degrees
// of freedom.
func tQuantile(df float64) float64 {
	return distuv.StudentsT{Mu: 0, Sigma: 1, Nu: df}.Quantile(1 - (1-Level)/2)
}

// meanCI is the mean of x and its Level interval, Student's t with n-1
// degrees of freedom (no interval below 2 values).
func meanCI(x []float64) (m, lo, hi float64) {
	if len(x) == 0 {
		return math.NaN(), math.NaN(), math.NaN()
	}
	m, v := stat.MeanVariance(x, nil)
	if len(x) < 2 {
		return m, math.NaN(), math.NaN()
	}
	h := tQuantile(float64(len(x)-1)) * math.Sqrt(v/float64(len(x)))
	return m, m - h, m + h
}

// meanSDCI is the Level interval of a mean m given as the standard
// deviation sd of n values (Student's t, n-1 degrees of freedom).
func meanSDCI(m, sd float64, n int) (lo, hi float64) {
	if n < 2 || math.IsNaN(sd) || math.IsNaN(m) {
		return math.NaN(), math.NaN()
	}
	h := tQuantile(float64(n-1)) * sd / math.Sqrt(float64(n))
	return m - h, m + h
}

// geoCI is the geometric mean of positive x and its Level interval: the
// t interval of the mean of the logarithms, taken back (times and their
// ratios spread multiplicatively).
func geoCI(x []float64) (g, lo, hi float64) {
	logs := make([]float64, 0, len(x))
	for _, v := range x {
		if v > 0 && !math.IsInf(v, 0) {
			logs = append(logs, math.Log(v))
		}
	}
	m, l, h := meanCI(logs)
	return math.Exp(m), math.Exp(l), math.Exp(h)
}

// geoRatioCI is the ratio of the geometric means of positive a and b and
// its Level interval, Welch's on the difference of the logarithms' means
// (a and b independent).
func geoRatioCI(a, b []float64) (r, lo, hi float64) {
	la, lb := logsOf(a), logsOf(b)
	if len(la) == 0 || len(lb) == 0 {
		return math.NaN(), math.NaN(), math.NaN()
	}
	w := WelchTest(la, lb)
	r = math.Exp(w.Diff)
	if math.IsNaN(w.P) {
		return r, math.NaN(), math.NaN()
	}
	if w.T == 0 || math.IsInf(w.T, 0) {
		return r, r, r
	}
	se := w.Diff / w.T
	h := tQuantile(w.DF) * se
	return r, math.Exp(w.Diff - h), math.Exp(w.Diff + h)
}

func logsOf(x []float64) []float64 {
	out := make([]float64, 0, len(x))
	for _, v := range x {
		if v > 0 && !math.IsInf(v, 0) {
			out = append(out, math.Log(v))
		}
	}
	return out
}

// median of x (NaN if empty); x is not changed.
func median(x []float64) float64 {
	if len(x) == 0 {
		return math.NaN()
	}
	s := slices.Clone(x)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	}
	n := len(s)
	return (s[n/2-1] + s[n/2]) / 2
}

// extent is the smallest and largest of x (NaN if empty).
func extent(x []float64) (lo, hi float64) {
	if len(x) == 0 {
		return math.NaN(), math.NaN()
	}
	return slices.Min(x), slices.Max(x)
}
