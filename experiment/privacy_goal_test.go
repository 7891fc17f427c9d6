package experiment

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/privacy"
)

func TestGoalPlan(t *testing.T) {
	data := GoalData{A9A: "/d/a9a/a9a.gz", A9ATest: "/d/a9a/a9a.t.gz", MNIST: "/d/mnist", FashionMNIST: "/d/fashion-mnist",
		BreastCancer: "/s/breast_cancer.csv", Wine: "/s/wine_data.csv",
		Show: map[string]string{"/d/mnist": "data/mnist", "/s/wine_data.csv": "wine_data.csv"}}
	runs, err := GoalPlan(GoalPlanOptions{Data: data, Seeds: []uint64{1, 2, 3, 4, 5}})
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, r := range runs {
		count[r.Set]++
	}
	// Tables: 5 seeds x 2; a9a: 4 algorithms x 4 lengths x 2; the
	// networks: 2 lengths x 2.
	if want := map[string]int{"breast-cancer": 10, "wine": 10, "a9a": 32, "mnist": 4, "fashion-mnist": 4}; !mapsEqual(count, want) {
		t.Errorf("rows per set %v, want %v", count, want)
	}
	find := func(set, length, algo, priv string, seed uint64) GoalRun {
		for _, r := range runs {
			if r.Set == set && r.Length == length && r.Algo == algo && r.Privacy == priv && r.Seed == seed {
				return r
			}
		}
		t.Fatalf("no row %s %s %s %s %d", set, length, algo, priv, seed)
		return GoalRun{}
	}
	// make run's command, as the Makefile gives it; --privacy off beside it.
	if c := find("mnist", "90s", "asyrevel-gau", PrivacyDefault, 1).Command(); c != "asyrevel train --data data/mnist --parties 8 --model mlp --algo asyrevel-gau --duration 90s" {
		t.Errorf("MNIST 90 s: %s", c)
	}
	if c := find("mnist", "15m", "asyrevel-gau", "off", 1).Command(); !strings.HasSuffix(c, "--duration 15m --privacy off") {
		t.Errorf("MNIST 15 min off: %s", c)
	}
	// A small table as a new user runs it: split, then train with no flag.
	if c := find("wine", GoalLengthNone, "asyrevel-gau", PrivacyDefault, 3).Command(); c !=
		"asyrevel data split --out SPLIT --parties 3 --test-fraction 0.2 --stratify --scale standard --seed 3 wine_data.csv; asyrevel train --data SPLIT" {
		t.Errorf("wine: %s", c)
	}
	// nonf: one party (its default); no --duration for "none".
	if r := find("a9a", GoalLengthNone, "nonf", "off", 1); slices.Contains(r.Train, "--parties") || slices.Contains(r.Train, "--duration") {
		t.Errorf("a9a nonf none: %v", r.Train)
	}
	var feat []string
	for _, r := range runs {
		if r.Feature {
			feat = append(feat, r.Set+" "+r.Length+" "+r.Privacy)
		}
	}
	if want := []string{"a9a 20s default", "a9a 20s off", "mnist 90s default", "mnist 90s off"}; !slices.Equal(feat, want) {
		t.Errorf("feature rows %v, want %v", feat, want)
	}

	only, err := GoalPlan(GoalPlanOptions{Data: data, Sets: []string{"a9a"}, Lengths: []string{"20s"}, Algos: []string{"nonf"}, Budget: true})
	if err != nil || len(only) != 2 {
		t.Errorf("a9a nonf 20 s: %d rows, %v", len(only), err)
	}
	if budget, _ := GoalPlan(GoalPlanOptions{Data: data, Sets: []string{"mnist"}, Lengths: []string{"90s"}, Budget: true}); len(budget) != 3 ||
		budget[2].Privacy != "auc=0.6,profile=budget" || budget[2].Feature {
		t.Errorf("--budget: %+v", budget)
	}
	for _, bad := range []GoalPlanOptions{{Data: data, Sets: []string{"iris"}}, {Data: data, Algos: []string{"tig"}}, {Sets: []string{"wine"}, Seeds: []uint64{1}}} {
		if _, err := GoalPlan(bad); !errors.Is(err, ErrPrivacyPlan) {
			t.Errorf("%+v: %v, want ErrPrivacyPlan", bad, err)
		}
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// A row run again replaces its earlier one in place; other rows stay; a
// file of another version is refused.
func TestMergeCSV(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.csv")
	h := []string{"set", "seed", "acc"}
	for _, step := range []struct {
		fresh [][]string
		want  string
	}{
		{[][]string{{"a", "1", "0.5"}, {"b", "1", "0.6"}}, "set,seed,acc\na,1,0.5\nb,1,0.6\n"},
		{[][]string{{"b", "1", "0.7"}, {"c", "1", "0.8"}}, "set,seed,acc\na,1,0.5\nb,1,0.7\nc,1,0.8\n"},
		{[][]string{{"a", "2", "0.9"}}, "set,seed,acc\na,1,0.5\nb,1,0.7\nc,1,0.8\na,2,0.9\n"},
	} {
		if err := mergeCSV(path, h, 2, step.fresh); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(path); string(got) != step.want {
			t.Errorf("after %v:\n%s\nwant\n%s", step.fresh, got, step.want)
		}
	}
	// Columns added at the end: the older rows get them empty.
	wider := append(slices.Clone(h), "positives")
	if err := mergeCSV(path, wider, 2, [][]string{{"b", "1", "0.75", "12"}}); err != nil {
		t.Fatal(err)
	}
	if got, want := readText(t, path), "set,seed,acc,positives\na,1,0.5,\nb,1,0.75,12\nc,1,0.8,\na,2,0.9,\n"; got != want {
		t.Errorf("after a column added:\n%s\nwant\n%s", got, want)
	}
	for _, other := range [][]string{{"set", "seed", "accuracy"}, {"set", "seed"}, {"set", "seed", "accuracy", "acc", "positives"}} {
		if err := mergeCSV(path, other, 2, nil); err == nil || !strings.Contains(err.Error(), "not a file of this version") {
			t.Errorf("header %v: %v", other, err)
		}
	}
}

func readText(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The code-mean attack recovers a party's columns exactly when its codes
// name them (each block's code is its pattern), and nothing from codes
// drawn at random; outputs that are not codes are refused.
func TestCodeMeanAttack(t *testing.T) {
	const n, d, k = 2000, 6, 2 // two blocks of 3 binary columns: 8 patterns each
	rng := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, n*d)
	for i := range x {
		x[i] = float32(rng.IntN(2))
	}
	truth := &dataset.Matrix{NRows: n, NCols: d, Indptr: []int64{0}}
	for i := range n {
		for j := range d {
			if v := x[i*d+j]; v != 0 {
				truth.Indices, truth.Values = append(truth.Indices, int32(j)), append(truth.Values, v)
			}
		}
		truth.Indptr = append(truth.Indptr, int64(len(truth.Indices)))
	}
	exact := &privacy.Trajectories{Party: 1, Rounds: 1, K: k, N: n, X: make([]float64, n*k)}
	random := &privacy.Trajectories{Party: 1, Rounds: 1, K: k, N: n, X: make([]float64, n*k)}
	for i := range n {
		for j := range k {
			code := 0
			for c := range 3 {
				code = 2*code + int(x[i*d+3*j+c])
			}
			exact.X[i*k+j] = float64(code)
			random.X[i*k+j] = float64(rng.IntN(8))
		}
	}
	aux := privacy.AuxSamples(n, 400, 1)
	for _, c := range []struct {
		name   string
		tr     *privacy.Trajectories
		lo, hi float64
	}{
		{"exact codes", exact, 0.999, 1.001},
		{"random codes", random, -0.05, 0.05},
	} {
		s, err := CodeMeanAttack(c.tr, truth, aux)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if s.R2 < c.lo || s.R2 > c.hi || s.Samples != n-400 || s.Features != d || s.Outputs != k {
			t.Errorf("%s: R2 %.4f (want %g..%g), %+v", c.name, s.R2, c.lo, c.hi, s)
		}
	}
	bad := *exact
	bad.X = slices.Clone(exact.X)
	bad.X[aux[0]*k] = 0.5
	if _, err := CodeMeanAttack(&bad, truth, aux); !errors.Is(err, privacy.ErrView) {
		t.Errorf("outputs that are not codes: %v", err)
	}
	if _, err := CodeMeanAttack(exact, truth, aux[:1]); err == nil {
		t.Error("one aux sample accepted")
	}
}

// The counts of a Hanley-McNeil interval: the worst class is the first of
// the largest one-vs-rest AUCs (classes without one skipped), its
// positives the covered samples of that label, and a goal row writes them
// only where they can give an interval.
func TestClassPositives(t *testing.T) {
	nan := math.NaN()
	for _, tc := range []struct {
		aucs []float64
		want int32
	}{
		{[]float64{0.5, 0.65, 0.6}, 1},
		{[]float64{nan, 0.52, 0.52}, 1},
		{[]float64{0.7, nan}, 0},
		{[]float64{nan, nan}, -1},
		{nil, -1},
	} {
		if got := worstClassOf(tc.aucs); got != tc.want {
			t.Errorf("worstClassOf(%v) = %d, want %d", tc.aucs, got, tc.want)
		}
	}
	labels := []int32{0, 1, 2, 1, 1, 0}
	if got := classCount([]uint32{0, 1, 3, 5, 9}, labels, 1); got != 2 {
		t.Errorf("classCount of label 1 = %d, want 2 (id 9 beyond the labels ignored)", got)
	}
	for _, tc := range []struct {
		a    GoalAttack
		want string
	}{
		{GoalAttack{Covered: 281, Positives: 28}, "28"},
		{GoalAttack{Covered: 281}, ""},
		{GoalAttack{Covered: 281, Positives: 281}, ""},
	} {
		r := GoalRow{Passive: tc.a, Active: tc.a}
		rec := r.record()
		if len(rec) != len(goalHeader) {
			t.Fatalf("record of %d fields, header of %d", len(rec), len(goalHeader))
		}
		for _, col := range []string{"passive_class_positives", "active_class_positives"} {
			if got := rec[slices.Index(goalHeader, col)]; got != tc.want {
				t.Errorf("%+v: %s %q, want %q", tc.a, col, got, tc.want)
			}
		}
	}
}
