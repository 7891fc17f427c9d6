package metric

import (
	"math"
	"slices"
)

// AUC is the area under the ROC curve of scores for the binary labels pos
// (true = positive): the probability that a random positive scores above a
// random negative, ties counting one half (the Mann-Whitney statistic). It
// is NaN when one class is absent. Non-finite scores are treated as ties
// at the bottom.
func AUC(scores []float64, pos []bool) float64 {
	n := len(scores)
	if len(pos) != n {
		panic("metric: AUC: scores and labels differ in length")
	}
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	key := func(i int) float64 {
		s := scores[i]
		if math.IsNaN(s) || math.IsInf(s, 0) {
			return math.Inf(-1)
		}
		return s
	}
	slices.SortFunc(idx, func(a, b int) int {
		ka, kb := key(a), key(b)
		switch {
		case ka < kb:
			return -1
		case ka > kb:
			return 1
		}
		return 0
	})
	var np, nn float64
	var rankSum float64 // sum of the (mid-)ranks of the positives, 1-based
	for i := 0; i < n; {
		j := i
		for j < n && key(idx[j]) == key(idx[i]) {
			j++
		}
		mid := float64(i+j+1) / 2 // ranks i+1 .. j
		for _, t := range idx[i:j] {
			if pos[t] {
				rankSum += mid
				np++
			} else {
				nn++
			}
		}
		i = j
	}
	if np == 0 || nn == 0 {
		return math.NaN()
	}
	return (rankSum - np*(np+1)/2) / (np * nn)
}

// Accuracy is the fraction of i with pred[i] == truth[i] (NaN if empty).
func Accuracy[T comparable](pred, truth []T) float64 {
	if len(pred) != len(truth) {
		panic("metric: Accuracy: lengths differ")
	}
	if len(pred) == 0 {
		return math.NaN()
	}
	c := 0
	for i := range pred {
		if pred[i] == truth[i] {
			c++
		}
	}
	return float64(c) / float64(len(pred))
}

// R2 is the coefficient of determination of the prediction pred of truth:
// 1 - SS_res/SS_tot (NaN if truth is constant). It can be negative.
func R2(pred, truth []float64) float64 {
	if len(pred) != len(truth) {
		panic("metric: R2: lengths differ")
	}
	var mean float64
	for _, v := range truth {
		mean += v
	}
	mean /= float64(len(truth))
	var res, tot float64
	for i, v := range truth {
		res += (v - pred[i]) * (v - pred[i])
		tot += (v - mean) * (v - mean)
	}
	if tot == 0 {
		return math.NaN()
	}
	return 1 - res/tot
}

// Pearson is the correlation of x and y (NaN if either is constant).
func Pearson(x, y []float64) float64 {
	if len(x) != len(y) {
		panic("metric: Pearson: lengths differ")
	}
	n := float64(len(x))
	var mx, my float64
	for i := range x {
		mx += x[i]
		my += y[i]
	}
	mx /= n
	my /= n
	var sxy, sxx, syy float64
	for i := range x {
		dx, dy := x[i]-mx, y[i]-my
		sxy += dx * dy
		sxx += dx * dx
		syy += dy * dy
	}
	if sxx == 0 || syy == 0 {
		return math.NaN()
	}
	return sxy / math.Sqrt(sxx*syy)
}

// ClassAUCs is the one-vs-rest AUC of each class: class c's column of
// scores (n x classes, row-major) against labels == c; NaN for a class
// absent from labels (or present alone).
func ClassAUCs(scores []float64, labels []int32, classes int) []float64 {
	n := len(labels)
	if len(scores) != n*classes {
		panic("metric: ClassAUCs: shape")
	}
	col := make([]float64, n)
	pos := make([]bool, n)
	out := make([]float64, classes)
	for c := range classes {
		for i := range n {
			col[i] = scores[i*classes+c]
			pos[i] = labels[i] == int32(c)
		}
		out[c] = AUC(col, pos)
	}
	return out
}

// MacroAUC is the mean over classes of the one-vs-rest AUC of scores
// (n x classes, row-major) for labels in 0..classes-1; classes absent from
// labels are skipped.
func MacroAUC(scores []float64, labels []int32, classes int) float64 {
	n := len(labels)
	if len(scores) != n*classes {
		panic("metric: MacroAUC: shape")
	}
	col := make([]float64, n)
	pos := make([]bool, n)
	var sum float64
	var k int
	for c := range classes {
		for i := range n {
			col[i] = scores[i*classes+c]
			pos[i] = labels[i] == int32(c)
		}
		if a := AUC(col, pos); !math.IsNaN(a) {
			sum += a
			k++
		}
	}
	if k == 0 {
		return math.NaN()
	}
	return sum / float64(k)
}
