package experiment

import (
	"context"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/asyrevel/asyrevel/internal/cli"
	"github.com/asyrevel/asyrevel/privacy/metric"
)

// The softmax objective's gradient agrees with central finite differences
// of the objective, weights and intercepts, with and without L2.
func TestSoftmaxGradient(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct {
		K  int
		l2 float64
	}{{2, 0}, {2, 0.3}, {3, 0.1}, {4, 1e-3}} {
		n, d := 23, 5
		x := mat.NewDense(n, d, nil)
		y := make([]int32, n)
		for i := range n {
			for j := range d {
				x.Set(i, j, rng.NormFloat64())
			}
			y[i] = int32(rng.IntN(c.K))
		}
		f, grad := softmaxObjective(x, y, c.K, c.l2)
		w := make([]float64, c.K*(d+1))
		for i := range w {
			w[i] = rng.NormFloat64()
		}
		g := make([]float64, len(w))
		grad(g, w)
		if v := f(w); math.IsNaN(v) || math.IsInf(v, 0) {
			t.Fatalf("K=%d: objective %v", c.K, v)
		}
		const h = 1e-6
		for i := range w {
			wp, wm := append([]float64(nil), w...), append([]float64(nil), w...)
			wp[i] += h
			wm[i] -= h
			fd := (f(wp) - f(wm)) / (2 * h)
			if math.Abs(fd-g[i]) > 1e-6*max(1, math.Abs(fd)) {
				t.Errorf("K=%d l2=%g: d/dw[%d] = %.9f, finite differences %.9f", c.K, c.l2, i, g[i], fd)
			}
		}
	}
}

// fitSoftmax ends where the gradient vanishes, and its model classifies
// separable data without error.
func TestFitSoftmax(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	n, d, K := 90, 2, 3
	x := mat.NewDense(n, d, nil)
	y := make([]int32, n)
	centres := [][]float64{{4, 0}, {-4, 0}, {0, 4}}
	for i := range n {
		y[i] = int32(i % K)
		for j := range d {
			x.Set(i, j, centres[y[i]][j]+0.5*rng.NormFloat64())
		}
	}
	w, err := fitSoftmax(x, y, K, 1.0/float64(n))
	if err != nil {
		t.Fatal(err)
	}
	_, grad := softmaxObjective(x, y, K, 1.0/float64(n))
	g := make([]float64, len(w))
	grad(g, w)
	if m := normInf(g); m > 1e-5 {
		t.Errorf("gradient %.3g at the solution", m)
	}
	if a := softmaxAccuracy(w, x, y, K); a != 1 {
		t.Errorf("training accuracy %v on separated classes, want 1", a)
	}
}

// rrKeep's derivation: binary randomised response at the bound keeps a
// label with probability A whatever the priors (eps = ln(A/(1-A))); with
// three balanced classes the best attack's AUC is (1 + keep - q)/2; with
// unbalanced ones the best attack does a little better, so keep is lower;
// and the worst class's AUC at the keep chosen is A.
func TestRRKeep(t *testing.T) {
	const A = 0.6
	wine := []float64{47.0 / 142, 57.0 / 142, 38.0 / 142}
	balancedQ := (2 - 2*A) / 3
	for _, c := range []struct {
		name   string
		priors []float64
		keep   float64 // 0: only the AUC is checked
	}{
		{"binary balanced", []float64{0.5, 0.5}, A},
		{"binary breast cancer", []float64{0.37, 0.63}, A},
		{"three balanced", []float64{1.0 / 3, 1.0 / 3, 1.0 / 3}, balancedQ + 2*A - 1},
		{"wine", wine, 0},
	} {
		keep := rrKeep(A, c.priors)
		if c.keep != 0 && math.Abs(keep-c.keep) > 1e-9 {
			t.Errorf("%s: keep %.9f, want %.9f", c.name, keep, c.keep)
		}
		if got := rrAttackAUC(keep, c.priors); math.Abs(got-A) > 1e-9 {
			t.Errorf("%s: worst class's AUC %.9f at keep %.6f, want %v", c.name, got, keep, A)
		}
		if len(c.priors) == 2 {
			if eps := rrEpsilon(keep, 2); math.Abs(eps-math.Log(A/(1-A))) > 1e-9 {
				t.Errorf("%s: eps %v, want ln(A/(1-A))", c.name, eps)
			}
		}
	}
	if w, b := rrKeep(A, wine), balancedQ+2*A-1; !(w < b) {
		t.Errorf("wine's keep %v not below the balanced classes' %v", w, b)
	}
}

// Randomised response at rrKeep, measured: on many draws of labels, the
// share of labels changed is 1-keep, and the best one-vs-rest attack on
// the randomised labels (ranking by the likelihood ratio) has, for the
// worst class, the AUC A, within 0.006 (about 4 standard errors at 120,000
// samples). With the binary eps on three classes (the keep of
// dp.KeepProb(ln(A/(1-A)), 3)) this AUC would be 0.571.
func TestRRMeasured(t *testing.T) {
	const A = 0.6
	for _, c := range []struct {
		name   string
		priors []float64
	}{
		{"binary", []float64{0.37, 0.63}},
		{"wine", []float64{47.0 / 142, 57.0 / 142, 38.0 / 142}},
	} {
		K := len(c.priors)
		keep := rrKeep(A, c.priors)
		rng := rand.New(rand.NewPCG(11, uint64(K)))
		const draws, n = 60, 2000
		var y, r []int32
		flipped := 0
		for range draws {
			ys := make([]int32, n)
			for i := range ys {
				u, k := rng.Float64(), 0
				for k < K-1 && u >= c.priors[k] {
					u -= c.priors[k]
					k++
				}
				ys[i] = int32(k)
			}
			rs, fl := randomise(ys, K, keep, rng)
			y, r, flipped = append(y, ys...), append(r, rs...), flipped+fl
		}
		N := float64(len(y))
		rate, want := float64(flipped)/N, 1-keep
		if sd := math.Sqrt(want * (1 - want) / N); math.Abs(rate-want) > 4*sd {
			t.Errorf("%s: changed %.4f of the labels, want %.4f (sd %.4f)", c.name, rate, want, sd)
		}
		changed := 0
		for i := range y {
			if y[i] != r[i] {
				changed++
			}
		}
		if changed != flipped {
			t.Errorf("%s: randomise says %d changed, %d differ", c.name, flipped, changed)
		}
		// The best attack for class k: the likelihood ratio of the
		// randomised label, from the mechanism and the priors.
		q := (1 - keep) / float64(K-1)
		worst := 0.0
		for k := range K {
			scores := make([]float64, len(r))
			pos := make([]bool, len(r))
			for i, v := range r {
				pos[i] = y[i] == int32(k)
				if v == int32(k) {
					scores[i] = keep / q
				} else {
					nu := c.priors[v] / (1 - c.priors[k])
					scores[i] = q / (nu*keep + (1-nu)*q)
				}
			}
			worst = max(worst, metric.AUC(scores, pos))
		}
		if math.Abs(worst-A) > 0.006 {
			t.Errorf("%s: the best attack's worst class AUC %.4f, want %v within 0.006", c.name, worst, A)
		}
	}
}

// sklearnData is the folder of scikit-learn's breast_cancer.csv and
// wine_data.csv: $ASYREVEL_SKLEARN_DATA, else Debian's python3-sklearn's
// (the default of experiment privacy --sklearn-data).
func sklearnData(t *testing.T) (bc, wine string) {
	t.Helper()
	dir := os.Getenv("ASYREVEL_SKLEARN_DATA")
	if dir == "" {
		dir = "/usr/lib/python3/dist-packages/sklearn/datasets/data"
	}
	bc, wine = filepath.Join(dir, "breast_cancer.csv"), filepath.Join(dir, "wine_data.csv")
	for _, p := range []string{bc, wine} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("no scikit-learn CSV file %s (set ASYREVEL_SKLEARN_DATA to the folder of breast_cancer.csv and wine_data.csv): %v", p, err)
		}
	}
	return bc, wine
}

// The ceiling rows of one seed on the real tables: the goal rows' split
// (its command, its row counts), every kind, the draws, the bound's keep,
// what a party sends.
func TestCeilingTables(t *testing.T) {
	bc, wine := sklearnData(t)
	data := GoalData{BreastCancer: bc, Wine: wine, Show: map[string]string{bc: "breast_cancer.csv", wine: "wine_data.csv"}}
	rows, err := Ceiling(context.Background(), CeilingConfig{Data: data, Seeds: []uint64{2}, Draws: 2,
		Split: func(args []string) error { return cli.DataSplit(args, io.Discard, io.Discard) }, Store: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	goal, err := GoalPlan(GoalPlanOptions{Data: data, Sets: CeilingSets, Seeds: []uint64{2}})
	if err != nil {
		t.Fatal(err)
	}
	splitOf := map[string]string{}
	for _, g := range goal {
		splitOf[g.Set] = strings.SplitN(g.Command(), "; ", 2)[0]
	}
	type want struct {
		train, test, classes int
		values               map[string]int
	}
	wants := map[string]want{
		"breast-cancer": {455, 114, 2, map[string]int{CeilingUndefended: 1, CeilingRR: 1, CeilingRRStack: 1, CeilingPCA1: 1, CeilingPCA3: 3}},
		"wine":          {142, 36, 3, map[string]int{CeilingUndefended: 2, CeilingRR: 2, CeilingRRStack: 1, CeilingPCA1: 1, CeilingPCA3: 3}},
	}
	count := map[string]int{}
	for _, r := range rows {
		w := wants[r.Set]
		count[r.Set+" "+r.Kind]++
		if r.Split != splitOf[r.Set] {
			t.Errorf("%s %s: split %q, the goal rows' %q", r.Set, r.Kind, r.Split, splitOf[r.Set])
		}
		if r.Seed != 2 || r.TrainRows != w.train || r.TestRows != w.test || r.Classes != w.classes || r.Parties != 3 {
			t.Errorf("%s %s: seed %d, %d/%d rows, %d classes, %d parties", r.Set, r.Kind, r.Seed, r.TrainRows, r.TestRows, r.Classes, r.Parties)
		}
		if r.Values != w.values[r.Kind] || r.InForm != (r.Values == 1) {
			t.Errorf("%s %s: %d values a party (in form %v), want %d", r.Set, r.Kind, r.Values, r.InForm, w.values[r.Kind])
		}
		if !(r.TestAccuracy >= 0 && r.TestAccuracy <= 1) {
			t.Errorf("%s %s: accuracy %v", r.Set, r.Kind, r.TestAccuracy)
		}
		switch r.Kind {
		case CeilingRR, CeilingRRStack:
			if r.Draw < 1 || r.Draw > 2 || math.Abs(r.AUCBound-0.6) > 1e-9 || r.Flipped <= 0 || r.Flipped >= w.train {
				t.Errorf("%s %s draw %d: bound %v, %d flipped", r.Set, r.Kind, r.Draw, r.AUCBound, r.Flipped)
			}
			if r.Set == "breast-cancer" && math.Abs(r.Keep-0.6) > 1e-9 {
				t.Errorf("breast cancer's keep %v, want 0.6", r.Keep)
			}
		case CeilingUndefended:
			if !math.IsNaN(r.AUCBound) || r.Draw != 0 {
				t.Errorf("%s undefended: bound %v, draw %d", r.Set, r.AUCBound, r.Draw)
			}
		default:
			if r.AUCBound != 0.5 || r.Draw != 0 {
				t.Errorf("%s %s: bound %v, draw %d", r.Set, r.Kind, r.AUCBound, r.Draw)
			}
		}
	}
	for set := range wants {
		for _, k := range CeilingKinds {
			n := 1
			if k == CeilingRR || k == CeilingRRStack {
				n = 2
			}
			if count[set+" "+k] != n {
				t.Errorf("%s %s: %d rows, want %d", set, k, count[set+" "+k], n)
			}
		}
	}
	if _, err := Ceiling(context.Background(), CeilingConfig{Data: data, Sets: []string{"a9a"}, Seeds: []uint64{1},
		Split: func([]string) error { return nil }}); err == nil {
		t.Error("a9a's ceiling: no error")
	}
}
