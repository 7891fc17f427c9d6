package run

import (
	"fmt"

	"github.com/asyrevel/asyrevel/dataset"
)

// Rows held out of training. With Config.HoldOut > 0, that share of the
// training rows, chosen from the row count and the seed alone (so that a
// party's process and the aggregator's choose the same ones), is kept
// aside: not trained on, scored at every evaluation, and the evaluation
// best on them is the model kept; early stopping watches their loss. The
// test set, if any, is only reported: it never chooses.
//
// They travel as the first rows of the test split (Data.PartTest and
// TestY hold the held-out rows, then the test set's): a party needs no
// new message to send their outputs, and the aggregator, which knows how
// many they are (aggregator.Config.HeldOut), scores them apart. Without a
// test set they are the whole test split, and their figures stand in the
// test columns (the report calls them held-out), as before.
//
// A label-free run (the privacy switch's default profile) chooses its head
// on rows the aggregator holds out by itself: with a test set nothing is
// held out here for it; without one the held-out rows serve as its test
// set, as they always did.

// holdOut keeps cfg.HoldOut of d's training rows aside (see above).
func holdOut(cfg *Config, d *Data) error {
	if cfg.HoldOut <= 0 || d.NTrain < 2 || d.HeldOut > 0 || d.NTest > 0 && cfg.labelFreeChosen() {
		return nil
	}
	train, held, err := dataset.TestSplit{Fraction: cfg.HoldOut, Shuffle: true, Seed: cfg.Seed}.Rows(d.NTrain)
	if err != nil {
		return fmt.Errorf("%w: --holdout: %w", ErrConfig, err)
	}
	if len(held) == 0 || len(train) == 0 {
		return nil
	}
	for m, x := range d.PartTrain {
		if x == nil {
			continue
		}
		h := x.Rows(held)
		if t := d.PartTest[m]; t != nil {
			h = stackRows(h, t)
		}
		d.PartTest[m], d.PartTrain[m] = h, x.Rows(train)
	}
	if d.TrainY != nil {
		ty, y := make([]int32, len(held), len(held)+len(d.TestY)), make([]int32, len(train))
		for i, r := range held {
			ty[i] = d.TrainY[r]
		}
		for i, r := range train {
			y[i] = d.TrainY[r]
		}
		d.TrainY, d.TestY = y, append(ty, d.TestY...)
	}
	d.NTrain, d.NTest, d.HeldOut = len(train), len(held)+d.NTest, len(held)
	return nil
}

// TestRows is the number of rows of d's own test set (its test split
// without the held-out training rows).
func (d *Data) TestRows() int {
	if d.NTest > d.HeldOut {
		return d.NTest - d.HeldOut
	}
	return 0
}

// stackRows is a above b (the same columns).
func stackRows(a, b *dataset.Matrix) *dataset.Matrix {
	n := int64(len(a.Indices))
	out := &dataset.Matrix{NRows: a.NRows + b.NRows, NCols: a.NCols,
		Indptr:  make([]int64, 0, a.NRows+b.NRows+1),
		Indices: append(append(make([]int32, 0, len(a.Indices)+len(b.Indices)), a.Indices...), b.Indices...),
		Values:  append(append(make([]float32, 0, len(a.Values)+len(b.Values)), a.Values...), b.Values...)}
	out.Indptr = append(out.Indptr, a.Indptr...)
	for _, p := range b.Indptr[1:] {
		out.Indptr = append(out.Indptr, n+p)
	}
	return out
}

// labelFreeChosen reports whether the privacy switch picks (or picked) the
// label-free profile for this run (applyPrivacy decides it once the data
// are loaded; the rows held out must be known before).
func (c *Config) labelFreeChosen() bool {
	if c.LabelFree {
		return true
	}
	if c.Privacy == "" {
		return false
	}
	spec, err := ParsePrivacy(c.Privacy)
	if err != nil || spec.Mode == PrivacyOff || spec.Profile == "budget" {
		return false
	}
	algo, err := LookupAlgo(c.Algo)
	return err == nil && c.labelFreeAvailable(algo)
}
