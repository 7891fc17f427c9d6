package report

import (
	"fmt"
	"math"
	"strings"

	"gonum.org/v1/gonum/stat/distuv"

	"github.com/asyrevel/asyrevel/privacy/metric"
)

// A measured attack AUC against the bound its run claims: the AUC that
// the bound must cover (the worst class's on a multiclass set, the AUC
// on a binary one), its Hanley-McNeil interval where the CSV holds the
// class counts, and the flag when it is above the bound.
//
// The worst class is the largest of C one-vs-rest AUCs: even with every
// class at the bound, one of C is above its own 95% interval far more
// often than one time in twenty. Its interval is therefore Bonferroni's,
// at level 1 - 0.05/C per class (C = 1 on a binary set: the plain 95%
// interval), so that the chance that any of the C intervals misses its
// class's AUC is at most 5%. An AUC above the bound whose corrected
// interval reaches down to the bound is within noise; one whose corrected
// interval lies wholly above it means the bound fails.

// setClasses are the class counts of the sets the experiments run (a set
// named with a suffix, mnist-8ep, is its base set's).
var setClasses = map[string]int{"mnist": 10, "fashion-mnist": 10, "wine": 3, "syn-multi": 10,
	"a9a": 2, "breast-cancer": 2, "w8a": 2, "uci-credit-card": 2, "give-me-some-credit": 2, "syn-binary": 2, "syn-table": 2}

// maxClasses is the class count assumed for a multiclass set not in
// setClasses: the largest of them, whose interval is the widest, so that
// no flag says the bound fails on a guessed count.
const maxClasses = 10

// comparisons is C, the number of one-vs-rest AUCs whose largest a check
// compares with the bound: the class count of a multiclass set, 1 on a
// binary one (its one AUC). A set not in setClasses is multiclass when
// multi says so (its worst class above its macro AUC, or its profile).
func comparisons(set string, multi bool) int {
	for name, c := range setClasses {
		if set == name || strings.HasPrefix(set, name+"-") {
			if c <= 2 {
				return 1
			}
			return c
		}
	}
	if multi {
		return maxClasses
	}
	return 1
}

// bonferroniZ is the normal quantile of a two-sided interval at level
// 1 - (1-Level)/c: 1.96 for c = 1, 2.81 for c = 10.
func bonferroniZ(c int) float64 {
	return distuv.UnitNormal.Quantile(1 - (1-Level)/2/float64(max(c, 1)))
}

// aucCheck is one attacker's measured AUC on one run, against the run's
// bound.
type aucCheck struct {
	auc, bound float64 // auc: the worst class's (binary: the AUC)
	classes    int     // C: auc is the largest of this many classes' AUCs (1: binary)
	pos, neg   int     // the counts behind auc; 0: not in the CSV
	lo, hi     float64 // its interval at level 1 - 0.05/C; NaN without the counts
	// Without the counts but with the number of samples n: the highest
	// lower end of the interval over every split of n into positives and
	// negatives (NaN if n < 2). At or below the bound, no class count
	// could put the interval's lower end above it.
	n        int
	loAtMost float64
}

// newAUCCheck is the check of auc, the largest of classes classes' AUCs
// (1: a binary set's one AUC), over pos positives and neg negatives (pos
// 0: counts unknown) against bound.
func newAUCCheck(auc, bound float64, pos, neg, classes int) aucCheck {
	return newMeanAUCCheck(auc, bound, pos, neg, 1, classes)
}

// newMeanAUCCheck is the check of auc, the mean of runs runs' AUCs, each
// over pos positives and neg negatives: its standard error is one run's
// over the square root of runs (the runs independent). With runs > 1 and
// no counts it gives no bound on the lower end (the runs' counts differ).
func newMeanAUCCheck(auc, bound float64, pos, neg, runs, classes int) aucCheck {
	classes = max(classes, 1)
	c := aucCheck{auc: auc, bound: bound, classes: classes, lo: math.NaN(), hi: math.NaN(), n: max(pos+neg, 0), loAtMost: math.NaN()}
	z := bonferroniZ(classes)
	if se := metric.AUCStdErr(auc, pos, neg); !math.IsNaN(se) && runs >= 1 {
		se /= math.Sqrt(float64(runs))
		c.pos, c.neg, c.lo, c.hi = pos, neg, max(auc-z*se, 0), min(auc+z*se, 1)
		return c
	}
	if c.above() && runs == 1 {
		c.loAtMost = highestLowerEnd(auc, c.n, z)
	}
	return c
}

// highestLowerEnd is the highest lower end of auc's interval (auc - z SE)
// over every split of n samples into positives and negatives: what the
// interval's lower end is at most when the class counts are unknown. NaN
// if n < 2.
func highestLowerEnd(auc float64, n int, z float64) float64 {
	best := math.NaN()
	for p := 1; p < n; p++ {
		if se := metric.AUCStdErr(auc, p, n-p); !math.IsNaN(se) {
			if lo := max(auc-z*se, 0); math.IsNaN(best) || lo > best {
				best = lo
			}
		}
	}
	return best
}

// goalCheck is the check of who's ("passive" or "active") strongest
// attack on row i of privacy-goal.csv.
func goalCheck(t *table, i int, who string) aucCheck {
	auc := t.num(i, who+"_max_class_auc")
	macro := t.num(i, who+"_auc")
	multi := auc > macro || t.str(i, "profile") == "multiclass"
	if math.IsNaN(auc) || macro > auc {
		auc = macro
	}
	pos := int(t.integer(i, who+"_class_positives"))
	return newAUCCheck(auc, t.num(i, "auc_bound"), pos, int(t.integer(i, who+"_covered"))-pos, comparisons(t.str(i, "set"), multi))
}

// above is whether the AUC is above a bound below 1 (a bound of 1
// claims nothing).
func (c aucCheck) above() bool { return c.bound < 1 && c.auc > c.bound }

// known is whether the CSV held the counts of an interval.
func (c aucCheck) known() bool { return !math.IsNaN(c.lo) }

// fails is whether the bound fails: the AUC is above it and so is the
// lower end of its corrected interval.
func (c aucCheck) fails() bool { return c.above() && c.known() && c.lo > c.bound }

// noise is whether an AUC above the bound is within noise: its corrected
// interval, or without the counts the interval of every split of its
// samples, reaches down to the bound.
func (c aucCheck) noise() bool {
	return c.above() && (c.known() && c.lo <= c.bound || !c.known() && c.loAtMost <= c.bound)
}

// level is the interval's level: "95%", or "99.5% (Bonferroni: 95% over
// the 10 classes)".
func (c aucCheck) level() string {
	if c.classes <= 1 {
		return fmt.Sprintf("%g%%", 100*Level)
	}
	return fmt.Sprintf("%s%% (Bonferroni: %g%% over the %d classes)", strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.3f", 100*(1-(1-Level)/float64(c.classes))), "0"), "."),
		100*Level, c.classes)
}

// ciText is " [lo..hi]", or "" without the counts.
func (c aucCheck) ciText() string {
	if !c.known() {
		return ""
	}
	return fmt.Sprintf(" [%s..%s]", f(c.lo, 3), f(c.hi, 3))
}

// flag is the mark of an AUC above its bound, for a table cell:
// " ⚑ above the bound 0.597, within noise (...)", " ⚑ **the bound
// fails**: ...", or "".
func (c aucCheck) flag() string {
	b := f(c.bound, 3)
	switch {
	case !c.above():
		return ""
	case c.fails():
		return " ⚑ **the bound fails**: above the bound " + b + ", and so is the corrected interval's lower end " + f(c.lo, 3)
	case c.known():
		return " ⚑ above the bound " + b + ", within noise (the corrected interval's lower end " + f(c.lo, 3) + " is not above it)"
	case c.noise():
		return " ⚑ above the bound " + b + ", within noise for any class count (the corrected interval's lower end at most " + f(c.loAtMost, 3) + ")"
	}
	return " ⚑ above the bound " + b + ", interval unknown (no class counts in the CSV)"
}

// verdict is the list's sentence on the interval against the bound, and
// whether the bound fails (its lower end above the bound; false when not
// known).
func (c aucCheck) verdict(file string) (string, bool) {
	switch {
	case c.fails():
		return fmt.Sprintf("%s interval%s (Hanley-McNeil, %d positives, %d negatives): even its lower end is above the bound: **the bound fails**",
			c.level(), c.ciText(), c.pos, c.neg), true
	case c.known():
		return fmt.Sprintf("%s interval%s (Hanley-McNeil, %d positives, %d negatives): its lower end is not above the bound: within noise",
			c.level(), c.ciText(), c.pos, c.neg), false
	case c.noise():
		return fmt.Sprintf("%s holds no class counts for this row, so the interval is not known; but whatever the split of the %d samples "+
			"into the class and the others, the %s interval's lower end is at most %s (Hanley-McNeil at the narrowest split), not above the bound: within noise",
			file, c.n, c.level(), f(c.loAtMost, 3)), false
	}
	return fmt.Sprintf("%s holds no class counts for this row, so whether the lower end of its Hanley-McNeil %s interval is above the bound is not known",
		file, c.level()), false
}
