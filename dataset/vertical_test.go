package dataset_test

import (
	"errors"
	"testing"

	"github.com/asyrevel/asyrevel/dataset"
)

// Each role loads only its part: the aggregator the labels, a party its
// own columns; the rows held out are the same in every process.
func TestLoadVerticalRoles(t *testing.T) {
	syn := &dataset.SyntheticConfig{Samples: 200, TestSamples: 50, Features: 9, Density: 1, Seed: 3}
	o := dataset.VerticalOptions{Synthetic: syn, Parties: 3, HoldOut: 0.1, Seed: 7}
	all, err := dataset.LoadVertical(o, dataset.RoleAll)
	if err != nil {
		t.Fatal(err)
	}
	if all.HeldOut != 20 || all.NTrain != 180 || all.NTest != 70 || all.TestRows() != 50 {
		t.Errorf("held out %d, train %d, test %d (own %d): want 20, 180, 70 (50)", all.HeldOut, all.NTrain, all.NTest, all.TestRows())
	}
	agg, err := dataset.LoadVertical(o, dataset.RoleAggregator)
	if err != nil {
		t.Fatal(err)
	}
	for m, x := range agg.PartTrain {
		if x != nil {
			t.Errorf("the aggregator holds party %d's columns", m+1)
		}
	}
	if len(agg.TrainY) != 180 || agg.IDHash != all.IDHash {
		t.Errorf("aggregator: %d labels, id hash %q (whole run %q)", len(agg.TrainY), agg.IDHash, all.IDHash)
	}
	p2, err := dataset.LoadVertical(o, 2)
	if err != nil {
		t.Fatal(err)
	}
	if p2.TrainY != nil || p2.PartTrain[0] != nil || p2.PartTrain[2] != nil || p2.PartTrain[1] == nil {
		t.Fatalf("party 2 holds labels or another party's columns")
	}
	if p2.PartTrain[1].NRows != 180 || p2.PartTest[1].NRows != 70 {
		t.Errorf("party 2: %d training rows, %d test rows", p2.PartTrain[1].NRows, p2.PartTest[1].NRows)
	}
	// A label-free run holds nothing out when it has a test set.
	o.HoldOutWithoutTestOnly = true
	lf, err := dataset.LoadVertical(o, dataset.RoleAll)
	if err != nil {
		t.Fatal(err)
	}
	if lf.HeldOut != 0 || lf.NTrain != 200 {
		t.Errorf("label-free with a test set: %d held out of %d", lf.HeldOut, lf.NTrain)
	}
}

// Options that contradict each other are ErrOptions, not data errors.
func TestLoadVerticalOptions(t *testing.T) {
	for name, o := range map[string]dataset.VerticalOptions{
		"no data":           {Parties: 2},
		"csv with a preset": {Path: "x.csv", Preset: "a9a", CSV: dataset.CSVOptions{Label: "y"}, Parties: 2},
		"preset and test":   {Path: "x", Preset: "a9a", Test: "t", Parties: 2},
	} {
		if _, err := dataset.LoadVertical(o, dataset.RoleAll); !errors.Is(err, dataset.ErrOptions) {
			t.Errorf("%s: %v, want ErrOptions", name, err)
		}
	}
}
