package report

import (
	"math"
	"strings"
	"testing"
)

// The rule of a measured AUC against its run's bound: a worst class, the
// largest of C classes' AUCs, has Bonferroni's interval at 1 - 0.05/C;
// above the bound, an interval that reaches down to it is within noise,
// one wholly above it says the bound fails; without the class counts,
// what every split of the covered samples would give.
func TestAUCCheckRule(t *testing.T) {
	for _, tc := range []struct {
		name              string
		auc, bound        float64
		pos, neg, classes int
		above, fails      bool
		noise             bool
		flag              string // in flag()
		verdict           string // in verdict()
	}{
		{name: "a worst class clearly above: the bound fails", auc: 0.70, bound: 0.60, pos: 500, neg: 4500, classes: 10,
			above: true, fails: true, flag: "**the bound fails**: above the bound 0.600, and so is the corrected interval's lower end 0.662",
			verdict: "99.5% (Bonferroni: 95% over the 10 classes) interval [0.662..0.738] (Hanley-McNeil, 500 positives, 4500 negatives): even its lower end is above the bound: **the bound fails**"},
		{name: "a binary AUC clearly above: the plain 95% interval", auc: 0.70, bound: 0.60, pos: 1400, neg: 4588, classes: 1,
			above: true, fails: true, flag: "**the bound fails**", verdict: "95% interval [0.683..0.717]"},
		// Above at 95% for a class chosen in advance (lower end 0.589),
		// not once the maximum over 10 classes is allowed for (0.563).
		{name: "a worst class of 10 above the plain interval, within the corrected one", auc: 0.65, bound: 0.58, pos: 100, neg: 900, classes: 10,
			above: true, noise: true, flag: "within noise (the corrected interval's lower end 0.563 is not above it)",
			verdict: "[0.563..0.737] (Hanley-McNeil, 100 positives, 900 negatives): its lower end is not above the bound: within noise"},
		{name: "the same AUC of a binary set: the bound fails", auc: 0.65, bound: 0.58, pos: 100, neg: 900, classes: 1,
			above: true, fails: true, flag: "and so is the corrected interval's lower end 0.589"},
		{name: "MNIST's worst class over 281 samples: within noise", auc: 0.6503, bound: 0.5972, pos: 28, neg: 253, classes: 10,
			above: true, noise: true, flag: "within noise (the corrected interval's lower end 0.486 is not above it)"},
		{name: "no counts, few samples: within noise for any count", auc: 0.6503, bound: 0.5972, neg: 281, classes: 10,
			above: true, noise: true, flag: "within noise for any class count (the corrected interval's lower end at most 0.559)",
			verdict: "whatever the split of the 281 samples"},
		{name: "no counts, many samples: not known", auc: 0.6227, bound: 0.598, neg: 59900, classes: 10,
			above: true, flag: "interval unknown (no class counts in the CSV)", verdict: "is not known"},
		{name: "at the bound: no flag", auc: 0.5972, bound: 0.5972, pos: 28, neg: 253, classes: 10},
		{name: "a bound of 1 claims nothing", auc: 0.95, bound: 1, pos: 28, neg: 253, classes: 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newAUCCheck(tc.auc, tc.bound, tc.pos, tc.neg, tc.classes)
			if c.above() != tc.above || c.fails() != tc.fails || c.noise() != tc.noise {
				t.Errorf("above %v fails %v noise %v, want %v %v %v (interval [%g..%g], lower end at most %g)",
					c.above(), c.fails(), c.noise(), tc.above, tc.fails, tc.noise, c.lo, c.hi, c.loAtMost)
			}
			if fl := c.flag(); !strings.Contains(fl, tc.flag) || (tc.flag == "") != (fl == "") {
				t.Errorf("flag %q, want it to hold %q", fl, tc.flag)
			}
			if tc.fails && !strings.Contains(c.flag(), "**the bound fails**") {
				t.Errorf("a failing bound's flag %q does not say so loudly", c.flag())
			}
			if tc.noise && !strings.Contains(c.flag(), "within noise") {
				t.Errorf("flag %q does not say within noise", c.flag())
			}
			v, failed := c.verdict(goalFile)
			if failed != tc.fails || !strings.Contains(v, tc.verdict) {
				t.Errorf("verdict %q (fails %v), want it to hold %q (fails %v)", v, failed, tc.verdict, tc.fails)
			}
		})
	}
}

// C is the class count of a multiclass set (a suffixed set is its base
// set's, an unknown one the largest), 1 on a binary one; the interval's
// quantile is 1.96 at C = 1 and 2.81 at C = 10.
func TestComparisons(t *testing.T) {
	for _, tc := range []struct {
		set   string
		multi bool
		want  int
	}{{"mnist", true, 10}, {"mnist-8ep", true, 10}, {"fashion-mnist-8ep", true, 10}, {"wine", true, 3}, {"wine", false, 3},
		{"a9a", false, 1}, {"breast-cancer", false, 1}, {"covtype", true, maxClasses}} {
		if got := comparisons(tc.set, tc.multi); got != tc.want {
			t.Errorf("comparisons(%q, %v) = %d, want %d", tc.set, tc.multi, got, tc.want)
		}
	}
	if z := bonferroniZ(1); math.Abs(z-1.95996) > 1e-4 {
		t.Errorf("z at one class %g, want 1.960", z)
	}
	if z := bonferroniZ(10); math.Abs(z-2.80703) > 1e-4 {
		t.Errorf("z at 10 classes %g, want 2.807", z)
	}
}
