package serve_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/serve"
)

// Of a split folder, scoring reads the test set, or the training set of a
// folder that has none (an alignment of new rows: it said "no test file
// for party 1"); "all" reads both, the training set first; a set the
// folder lacks is named with the ones it has.
func TestFolderSplits(t *testing.T) {
	train, test, err := dataset.Synthetic(dataset.SyntheticConfig{Samples: 30, TestSamples: 10, Features: 4, Classes: 2, Density: 1, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	withTest, trainOnly := t.TempDir(), t.TempDir()
	if _, err := dataset.WriteSplit(withTest, 2, train, test, dataset.SplitSource{}); err != nil {
		t.Fatal(err)
	}
	if _, err := dataset.WriteSplit(trainOnly, 2, train, nil, dataset.SplitSource{}); err != nil {
		t.Fatal(err)
	}
	agg := &serve.File{Labels: &serve.LabelsSpec{Classes: 2, Values: train.LabelValues}}
	party := &serve.File{Party: 2, In: 2, Columns: &serve.Columns{Lo: 2, Hi: 4}, Read: serve.ReadSpec{Features: 4}}
	for _, c := range []struct {
		dir, split string
		rows       int
		sets       string
	}{
		{withTest, serve.SplitAuto, 10, "test"},
		{trainOnly, serve.SplitAuto, 30, "train"},
		{withTest, serve.SplitAll, 40, "train and test"},
		{withTest, "train", 30, "train"},
	} {
		l, err := serve.ReadLabels(c.dir, agg, c.split)
		if err != nil || len(l.IDs) != c.rows || len(l.Y) != c.rows {
			t.Errorf("%q of %s: labels %v, %+v", c.split, c.dir, err, l)
			continue
		}
		r, err := serve.ReadParty(c.dir, party, c.split)
		if err != nil || !slices.Equal(r.IDs, l.IDs) || r.X.NRows != c.rows || r.X.Check() != nil {
			t.Errorf("%q of %s: party 2's rows %v", c.split, c.dir, err)
		}
		if got := serve.SplitsOf(c.dir, c.split); got != c.sets {
			t.Errorf("%q of %s: SplitsOf %q, want %q", c.split, c.dir, got, c.sets)
		}
	}
	_, err = serve.ReadLabels(trainOnly, agg, "test")
	if !errors.Is(err, serve.ErrData) || !strings.Contains(err.Error(), "has no test set (it holds train): give --split train, or all") {
		t.Errorf("a set the folder lacks: %v", err)
	}
}
