package metric

import (
	"math"
	"math/rand/v2"
	"testing"
)

// AUC against its definition: the fraction of (positive, negative) pairs
// ordered correctly, ties one half.
func TestAUCAgainstPairs(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 20 {
		n := 5 + trial*7
		s := make([]float64, n)
		p := make([]bool, n)
		for i := range s {
			s[i] = float64(rng.IntN(6)) // many ties
			p[i] = rng.IntN(3) == 0
		}
		p[0], p[1] = true, false
		var num, den float64
		for i := range n {
			for j := range n {
				if p[i] && !p[j] {
					den++
					switch {
					case s[i] > s[j]:
						num++
					case s[i] == s[j]:
						num += 0.5
					}
				}
			}
		}
		if got := AUC(s, p); math.Abs(got-num/den) > 1e-12 {
			t.Fatalf("trial %d: AUC %g, pairs %g", trial, got, num/den)
		}
	}
}

func TestAUCCases(t *testing.T) {
	cases := []struct {
		s    []float64
		p    []bool
		want float64
	}{
		{[]float64{1, 2, 3, 4}, []bool{false, false, true, true}, 1},
		{[]float64{4, 3, 2, 1}, []bool{false, false, true, true}, 0},
		{[]float64{1, 1, 1, 1}, []bool{false, true, false, true}, 0.5},
		{[]float64{math.NaN(), 2}, []bool{true, false}, 0},
	}
	for _, c := range cases {
		if got := AUC(c.s, c.p); got != c.want {
			t.Errorf("AUC(%v, %v) = %g, want %g", c.s, c.p, got, c.want)
		}
	}
	if !math.IsNaN(AUC([]float64{1, 2}, []bool{true, true})) {
		t.Error("one class: want NaN")
	}
}

func TestR2Pearson(t *testing.T) {
	truth := []float64{1, 2, 3, 4}
	if r := R2(truth, truth); r != 1 {
		t.Errorf("perfect R2 %g", r)
	}
	if r := R2([]float64{2.5, 2.5, 2.5, 2.5}, truth); r != 0 {
		t.Errorf("mean predictor R2 %g", r)
	}
	if r := Pearson([]float64{2, 4, 6, 8}, truth); math.Abs(r-1) > 1e-12 {
		t.Errorf("pearson %g", r)
	}
	if r := Pearson([]float64{8, 6, 4, 2}, truth); math.Abs(r+1) > 1e-12 {
		t.Errorf("pearson %g", r)
	}
	if a := Accuracy([]int{1, 2, 3}, []int{1, 0, 3}); math.Abs(a-2.0/3) > 1e-12 {
		t.Errorf("accuracy %g", a)
	}
	s := []float64{0.9, 0.1, 0.1, 0.8, 0.5, 0.5}
	if a := MacroAUC(s, []int32{0, 1, 1}, 2); a != 1 {
		t.Errorf("macro AUC %g", a)
	}
}

// ClassAUCs: each class's one-vs-rest AUC, NaN for an absent class, and
// MacroAUC their mean over the classes present.
func TestClassAUCs(t *testing.T) {
	// 3 classes, class 2 absent; scores rank class 0 perfectly, class 1
	// half the time.
	labels := []int32{0, 0, 1, 1}
	scores := []float64{
		0.9, 0.1, 0,
		0.8, 0.2, 0,
		0.1, 0.9, 0,
		0.2, 0.05, 0,
	}
	got := ClassAUCs(scores, labels, 3)
	if got[0] != 1 || got[1] != 0.5 || !math.IsNaN(got[2]) {
		t.Errorf("ClassAUCs = %v, want [1 0.5 NaN]", got)
	}
	if m := MacroAUC(scores, labels, 3); m != (got[0]+got[1])/2 {
		t.Errorf("MacroAUC %g, want the mean of the present classes' %g", m, (got[0]+got[1])/2)
	}
}
