package metric

import (
	"errors"
	"fmt"
	"math"
)

// ErrCounts is returned by AUCInterval when the counts cannot give an
// interval: a class with no sample, or an AUC outside [0, 1].
var ErrCounts = errors.New("metric: no AUC interval")

// z95 is the standard normal's 97.5% quantile: a two-sided 95% interval.
const z95 = 1.959963984540054

// AUCStdErr is Hanley and McNeil's (Radiology 1982) standard error of an
// AUC measured over pos positives and neg negatives:
//
//	SE² = (A(1-A) + (pos-1)(Q1-A²) + (neg-1)(Q2-A²)) / (pos·neg),
//	Q1 = A/(2-A), Q2 = 2A²/(1+A),
//
// where Q1 and Q2 take the scores' distributions as exponential; for
// other shapes it is close (within a few percent for the binormal). It is
// NaN when a class is empty or auc is not in [0, 1].
func AUCStdErr(auc float64, pos, neg int) float64 {
	if pos < 1 || neg < 1 || !(auc >= 0 && auc <= 1) {
		return math.NaN()
	}
	q1 := auc / (2 - auc)
	q2 := 2 * auc * auc / (1 + auc)
	a2 := auc * auc
	v := (auc*(1-auc) + float64(pos-1)*(q1-a2) + float64(neg-1)*(q2-a2)) / (float64(pos) * float64(neg))
	return math.Sqrt(max(v, 0))
}

// AUCInterval is the 95% interval auc ± 1.96 SE (AUCStdErr), clipped to
// [0, 1]. A one-class count or an auc outside [0, 1] wraps ErrCounts.
func AUCInterval(auc float64, pos, neg int) (lo, hi float64, err error) {
	se := AUCStdErr(auc, pos, neg)
	if math.IsNaN(se) {
		return math.NaN(), math.NaN(), fmt.Errorf("%w: AUC %g over %d positives and %d negatives", ErrCounts, auc, pos, neg)
	}
	return max(auc-z95*se, 0), min(auc+z95*se, 1), nil
}
