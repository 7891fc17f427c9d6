package report

import (
	"fmt"
	"math"

	"github.com/asyrevel/asyrevel/privacy/metric"
)

// A measured attack AUC against the bound its run claims: the AUC that
// the bound must cover (the worst class's on a multiclass set, the AUC
// on a binary one), its Hanley-McNeil 95% interval where the CSV holds
// the class counts, and the flag when it is above the bound.

// aucCheck is one attacker's measured AUC on one run, against the run's
// bound.
type aucCheck struct {
	auc, bound float64 // auc: the worst class's (binary: the AUC)
	pos, neg   int     // the counts behind auc; 0: not in the CSV
	lo, hi     float64 // its 95% interval; NaN without the counts
	// Without the counts but with the number of samples n: the highest
	// lower end of the interval over every split of n into positives and
	// negatives (NaN if n < 2). At or below the bound, no class count
	// could put the interval's lower end above it.
	n        int
	loAtMost float64
}

// newAUCCheck is the check of auc over pos positives and neg negatives
// (pos 0: counts unknown) against bound.
func newAUCCheck(auc, bound float64, pos, neg int) aucCheck {
	return newMeanAUCCheck(auc, bound, pos, neg, 1)
}

// newMeanAUCCheck is the check of auc, the mean of runs runs' AUCs, each
// over pos positives and neg negatives: its standard error is one run's
// over the square root of runs (the runs independent). With runs > 1 and
// no counts it gives no bound on the lower end (the runs' counts differ).
func newMeanAUCCheck(auc, bound float64, pos, neg, runs int) aucCheck {
	c := aucCheck{auc: auc, bound: bound, lo: math.NaN(), hi: math.NaN(), n: max(pos+neg, 0), loAtMost: math.NaN()}
	if se := metric.AUCStdErr(auc, pos, neg); !math.IsNaN(se) && runs >= 1 {
		const z95 = 1.959963984540054
		se /= math.Sqrt(float64(runs))
		c.pos, c.neg, c.lo, c.hi = pos, neg, max(auc-z95*se, 0), min(auc+z95*se, 1)
		return c
	}
	if c.above() && runs == 1 {
		c.loAtMost = highestLowerEnd(auc, c.n)
	}
	return c
}

// highestLowerEnd is the highest lower end of auc's 95% interval over
// every split of n samples into positives and negatives: what the
// interval's lower end is at most when the class counts are unknown. NaN
// if n < 2.
func highestLowerEnd(auc float64, n int) float64 {
	best := math.NaN()
	for p := 1; p < n; p++ {
		if lo, _, err := metric.AUCInterval(auc, p, n-p); err == nil && (math.IsNaN(best) || lo > best) {
			best = lo
		}
	}
	return best
}

// goalCheck is the check of who's ("passive" or "active") strongest
// attack on row i of privacy-goal.csv.
func goalCheck(t *table, i int, who string) aucCheck {
	auc := t.num(i, who+"_max_class_auc")
	if a := t.num(i, who+"_auc"); math.IsNaN(auc) || a > auc {
		auc = a
	}
	pos := int(t.integer(i, who+"_class_positives"))
	return newAUCCheck(auc, t.num(i, "auc_bound"), pos, int(t.integer(i, who+"_covered"))-pos)
}

// above is whether the AUC is above a bound below 1 (a bound of 1
// claims nothing).
func (c aucCheck) above() bool { return c.bound < 1 && c.auc > c.bound }

// known is whether the CSV held the counts of an interval.
func (c aucCheck) known() bool { return !math.IsNaN(c.lo) }

// ciText is " [lo..hi]", or "" without the counts.
func (c aucCheck) ciText() string {
	if !c.known() {
		return ""
	}
	return fmt.Sprintf(" [%s..%s]", f(c.lo, 3), f(c.hi, 3))
}

// flag is the mark of an AUC above its bound, for a table cell:
// " ⚑ above the bound 0.597, the interval's lower end too", or "".
func (c aucCheck) flag() string {
	if !c.above() {
		return ""
	}
	return " ⚑ above the bound " + f(c.bound, 3) + ", " + c.lowerEnd()
}

// lowerEnd says where the interval's lower end lies against the bound.
func (c aucCheck) lowerEnd() string {
	switch {
	case !c.known() && c.loAtMost <= c.bound:
		return "the interval's lower end not above it for any class count (at most " + f(c.loAtMost, 3) + ")"
	case !c.known():
		return "interval unknown (no class counts in the CSV)"
	case c.lo > c.bound:
		return "**even the interval's lower end " + f(c.lo, 3) + " is above it**"
	}
	return "the interval's lower end " + f(c.lo, 3) + " is not above it"
}

// verdict is the list's sentence on the interval against the bound, and
// whether its lower end is above the bound (false when not known).
func (c aucCheck) verdict(file string) (string, bool) {
	switch {
	case c.known() && c.lo > c.bound:
		return fmt.Sprintf("95%% interval%s (Hanley-McNeil, %d positives, %d negatives): **even its lower end is above the bound**", c.ciText(), c.pos, c.neg), true
	case c.known():
		return fmt.Sprintf("95%% interval%s (Hanley-McNeil, %d positives, %d negatives): its lower end is not above the bound", c.ciText(), c.pos, c.neg), false
	case c.loAtMost <= c.bound:
		return fmt.Sprintf("%s holds no class counts for this row, so the interval is not known; but whatever the split of the %d samples "+
			"into the class and the others, the 95%% interval's lower end is at most %s (Hanley-McNeil at the narrowest split), not above the bound",
			file, c.n, f(c.loAtMost, 3)), false
	}
	return fmt.Sprintf("%s holds no class counts for this row, so whether the lower end of its Hanley-McNeil 95%% interval is above the bound is not known", file), false
}
