package dataset

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestTestSplitRows(t *testing.T) {
	tests := []struct {
		split       TestSplit
		n           int
		train, test []int
	}{
		{TestSplit{Fraction: 0.2}, 10, []int{2, 3, 4, 5, 6, 7, 8, 9}, []int{0, 1}},
		{TestSplit{Fraction: 0.25}, 10, []int{3, 4, 5, 6, 7, 8, 9}, []int{0, 1, 2}}, // 2.5 rounds up
		{TestSplit{Fraction: 0}, 3, []int{0, 1, 2}, []int{}},
		{TestSplit{Fraction: 0.5}, 0, []int{}, []int{}},
		// Pinned: the shuffle must never change, or presets and splits change.
		{TestSplit{Fraction: 0.3, Shuffle: true, Seed: 1}, 10, []int{0, 4, 5, 6, 7, 8, 9}, []int{1, 2, 3}},
		{TestSplit{Fraction: 0.3, Shuffle: true, Seed: 2}, 10, []int{0, 2, 3, 4, 5, 6, 9}, []int{1, 7, 8}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%v/%d", tt.split, tt.n), func(t *testing.T) {
			train, test, err := tt.split.rows(tt.n)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(train, tt.train) || !slices.Equal(test, tt.test) {
				t.Errorf("train %v test %v, want %v %v", train, test, tt.train, tt.test)
			}
		})
	}
	for _, f := range []float64{-0.1, 1, 2} {
		if _, _, err := (TestSplit{Fraction: f}).rows(10); err == nil {
			t.Errorf("fraction %v: no error", f)
		}
	}
}

func TestTrainTestSplit(t *testing.T) {
	d, _, err := Synthetic(SyntheticConfig{Samples: 1000, Features: 5, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	s := TestSplit{Fraction: 0.2, Shuffle: true, Seed: 7}
	tr, te, err := TrainTestSplit(d, s)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Len() != 800 || te.Len() != 200 || te.Name != "synthetic/test" {
		t.Fatalf("sizes %d %d name %q", tr.Len(), te.Len(), te.Name)
	}
	// Every sample lands in exactly one set, with its id, row and label.
	seen := map[string]bool{}
	for _, part := range []*Dataset{tr, te} {
		if err := part.X.Check(); err != nil {
			t.Fatal(err)
		}
		for k := range part.Len() {
			id := part.ID(k)
			var i int
			fmt.Sscan(id, &i)
			i--
			a, av := part.X.Row(k)
			b, bv := d.X.Row(i)
			if seen[id] || part.Y[k] != d.Y[i] || !slices.Equal(a, b) || !slices.Equal(av, bv) {
				t.Fatalf("sample %s differs or repeats", id)
			}
			seen[id] = true
		}
	}
	// Deterministic.
	tr2, _, _ := TrainTestSplit(d, s)
	if !slices.Equal(tr.IDs, tr2.IDs) {
		t.Error("same seed, other split")
	}
	if !strings.Contains(s.String(), "seed 7") || !strings.Contains((TestSplit{Fraction: 0.2}).String(), "first") {
		t.Error("String")
	}
}
