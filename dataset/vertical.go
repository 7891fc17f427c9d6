package dataset

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
)

// Vertical is a vertically partitioned data set: what each party of a run
// holds and what its aggregator holds. A process that plays one role holds
// only that role's part: a party's process has nil labels and nil
// matrices for the other parties, the aggregator's has no matrices.
type Vertical struct {
	Name          string
	Features      int
	Classes       int
	NTrain, NTest int
	TrainY, TestY []int32 // labels (class indices); nil in a party's process
	PartTrain     []*Matrix
	PartTest      []*Matrix // nil entries without a test set
	Blocks        []Block
	// IDHash fingerprints the training sample ids (a file without ids:
	// its row numbers): parties and aggregator compare it when they join.
	IDHash string
	// Names are the feature names where the format gives them ("" else),
	// for messages.
	Names []string
	// Warnings are what loading found worth saying (unscaled columns).
	Warnings []string
	// How raw rows became these features, for the saved models:
	// the format, the label values of the classes and their names, a CSV
	// file's encoding, and each party's fitted scaling (nil: none).
	Format      string
	LabelValues []float64
	ClassNames  []string
	Encoding    *Encoding
	Scalers     []*Scaler
	// HeldOut is the number of training rows kept aside
	// (VerticalOptions.HoldOut), 0 if none: the first HeldOut rows of PartTest and
	// TestY, before the test set's own (TestRows). NTest counts both.
	HeldOut int
	// Unscaled says that the columns held differ in range by orders of
	// magnitude and were not scaled (the warning in Warnings says which).
	Unscaled bool
}

// VerticalOptions say which data a run trains on and how they are read,
// split between its parties, scaled and held out.
type VerticalOptions struct {
	Path      string           // the training set (a file, an IDX folder or a split folder)
	Test      string           // the test set ("" = none)
	Preset    string           // a named preprocessing recipe (LookupPreset), instead of CSV
	CSV       CSVOptions       // how a CSV file is read
	Synthetic *SyntheticConfig // generated data, used instead of Path when set
	Parties   int              // q: the parties the columns are split between
	Scale     ScaleMethod      // each party's columns' scaling, fitted on the training set
	// HoldOut is the share of the training rows kept aside (see
	// holdOut); HoldOutWithoutTestOnly holds them out only when there is
	// no test set (a label-free run, whose aggregator holds out its own).
	HoldOut                float64
	HoldOutWithoutTestOnly bool
	Seed                   uint64 // chooses the rows held out
}

// ErrOptions reports VerticalOptions that cannot be loaded (flags that
// contradict each other or the data): a usage error, not a data error.
var ErrOptions = errors.New("invalid settings")

// Roles for LoadVertical.
const (
	RoleAll        = -1 // everything: a whole run in one process
	RoleAggregator = 0  // labels only
)

// LoadVertical reads (or generates) the data of o for a role: RoleAll,
// RoleAggregator, or a party id 1..q (that party's columns only). PATH may
// be a LIBSVM or CSV file, a folder of IDX files, a split folder written by
// `asyrevel data split` (each party reads only its own file), or synthetic.
func LoadVertical(o VerticalOptions, role int) (*Vertical, error) {
	if o.CSV.Given() && (o.Synthetic != nil || o.Preset != "") {
		return nil, fmt.Errorf("%w: the CSV column flags (--label, --id-column, --categorical, --drop, --skip-rows) are for CSV files; a preset and synthetic data fix their own columns", ErrOptions)
	}
	if o.Synthetic == nil && o.Path != "" && IsSplit(o.Path) {
		if o.CSV.Given() {
			return nil, fmt.Errorf("%w: %s is a split folder, whose label and columns were chosen when it was split: drop the CSV column flags (--label, ...)", ErrOptions, o.Path)
		}
		d, err := loadSplit(&o, role)
		if err != nil {
			return nil, err
		}
		return d, finishVertical(&o, d)
	}
	var tr, te *Dataset
	var err error
	switch {
	case o.Synthetic != nil:
		tr, te, err = Synthetic(*o.Synthetic)
		if err == nil {
			tr.Name = "synthetic"
		}
	case o.Path == "":
		return nil, fmt.Errorf("%w: --data is required", ErrOptions)
	case o.Preset != "":
		if o.Test != "" {
			return nil, fmt.Errorf("%w: --preset %s makes its own test split: drop --test", ErrOptions, o.Preset)
		}
		var p Preset
		if p, err = LookupPreset(o.Preset); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrOptions, err)
		}
		tr, te, err = p.Load(o.Path)
	default:
		tr, te, err = OpenPairOptions(o.Path, o.Test, OpenOptions{CSV: o.CSV})
	}
	if err != nil {
		return nil, err
	}
	if te != nil && te.Len() == 0 {
		te = nil
	}
	d := &Vertical{Name: tr.Name, Features: tr.X.NCols, Classes: tr.Classes, NTrain: tr.Len(), Names: tr.FeatureNames(),
		Format: tr.Format, LabelValues: tr.LabelValues, ClassNames: tr.ClassNames, Encoding: tr.Encoding}
	d.IDHash = datasetIDHash(tr)
	if role == RoleAll || role == RoleAggregator {
		d.TrainY = tr.Y
		if te != nil {
			d.TestY = te.Y
		}
	}
	if te != nil {
		d.NTest = te.Len()
	}
	d.PartTrain, d.Blocks, err = VerticalSplit(tr.X, o.Parties)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrOptions, err)
	}
	d.PartTest = make([]*Matrix, o.Parties)
	for m, b := range d.Blocks {
		if role != RoleAll && role != m+1 {
			d.PartTrain[m] = nil
			continue
		}
		if te != nil {
			d.PartTest[m] = te.X.Columns(b.Lo, b.Hi)
		}
	}
	return d, finishVertical(&o, d)
}

// datasetIDHash fingerprints the sample ids of d, its row numbers if it
// has none (as a split folder written from it names them).
func datasetIDHash(d *Dataset) string {
	ids := d.IDs
	if ids == nil {
		ids = make([]string, d.Len())
		for i := range ids {
			ids[i] = d.ID(i)
		}
	}
	return idHash(ids)
}

// idHash fingerprints a list of sample ids ("" for none).
func idHash(ids []string) string {
	if len(ids) == 0 {
		return ""
	}
	h := sha256.New()
	for _, id := range ids {
		h.Write([]byte(id))
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// loadSplit reads a split folder for a role; see LoadVertical.
func loadSplit(o *VerticalOptions, role int) (*Vertical, error) {
	dir := o.Path
	man, err := ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	if o.Test != "" || o.Preset != "" {
		return nil, fmt.Errorf("%w: %s is a split folder: it holds its own test set; drop --test and --preset", ErrOptions, dir)
	}
	if man.Q != o.Parties {
		return nil, fmt.Errorf("%w: %s was split for %d parties, the run has --parties %d", ErrOptions, dir, man.Q, o.Parties)
	}
	if o.Scale != ScaleNone && man.Source.Scale != "" && man.Source.Scale != "none" {
		return nil, fmt.Errorf("%w: %s was scaled (%s) when it was split: drop --scale", ErrOptions, dir, man.Source.Scale)
	}
	d := &Vertical{Name: filepath.Base(filepath.Clean(dir)), Features: man.Features, Classes: man.Classes, Blocks: man.Blocks,
		Format: "split", LabelValues: man.LabelValues,
		PartTrain: make([]*Matrix, man.Q), PartTest: make([]*Matrix, man.Q), Names: make([]string, man.Features)}
	for _, set := range man.Sets {
		switch set.Split {
		case "train":
			d.NTrain = set.Samples
		case "test":
			d.NTest = set.Samples
		}
	}
	for _, split := range []string{"train", "test"} {
		var labels *Labels
		var parts []*PartyData
		if role == RoleAll || role == RoleAggregator {
			e, ok := man.File(split, 0)
			if !ok {
				continue
			}
			if err := e.Verify(dir); err != nil {
				return nil, err
			}
			if labels, err = LoadLabels(filepath.Join(dir, e.Name)); err != nil {
				return nil, err
			}
			if split == "train" {
				d.TrainY, d.IDHash = labels.Y, idHash(labels.IDs)
			} else {
				d.TestY = labels.Y
			}
		}
		for m := 1; m <= man.Q; m++ {
			if role != RoleAll && role != m {
				continue
			}
			e, ok := man.File(split, m)
			if !ok {
				continue
			}
			if err := e.Verify(dir); err != nil {
				return nil, err
			}
			p, err := LoadPartyFile(filepath.Join(dir, e.Name))
			if err != nil {
				return nil, err
			}
			if p.Party != m || p.Parties != man.Q || p.Block() != man.Blocks[m-1] {
				return nil, fmt.Errorf("%w: %s is party %d of %d with columns [%d,%d), the manifest says party %d of %d",
					ErrMismatch, e.Name, p.Party, p.Parties, p.Lo, p.Hi, m, man.Q)
			}
			parts = append(parts, p)
			if len(p.Names) == p.Hi-p.Lo {
				copy(d.Names[p.Lo:p.Hi], p.Names)
			}
			if split == "train" {
				d.PartTrain[m-1] = p.X
				if role == m {
					d.IDHash = idHash(p.IDs)
				}
			} else {
				d.PartTest[m-1] = p.X
			}
		}
		if err := Align(labels, parts...); err != nil {
			return nil, fmt.Errorf("%s: %w", dir, err)
		}
	}
	if err := checkSplitFiles(dir, man, role, d); err != nil {
		return nil, err
	}
	if role == RoleAll || role == RoleAggregator {
		if len(d.TrainY) == 0 {
			return nil, fmt.Errorf("%w: %s has no training labels", ErrMismatch, dir)
		}
	}
	return d, nil
}

// scaleSpread is the ratio of the largest to the smallest column range
// above which a warning says the columns need scaling.
const scaleSpread = 1000

// finishVertical holds rows out (holdOut) and scales the columns that d
// holds, as o.Scale asks
// (fitted on the training rows, applied to both sets: each column belongs
// to one party, so a party scales its own alone and the result is the
// same), or warns when they are on very different scales.
func finishVertical(o *VerticalOptions, d *Vertical) error {
	if err := holdOut(o, d); err != nil {
		return err
	}
	for m := range d.PartTrain {
		x := d.PartTrain[m]
		if x == nil || o.Scale == ScaleNone {
			continue
		}
		s := NewScaler(o.Scale)
		if err := s.Fit(x); err != nil {
			return err
		}
		if dense := s.Dense(); len(dense) > 0 {
			if before, after := int64(x.NNZ()), s.Entries(x); after > 2*before {
				d.Warnings = append(d.Warnings, fmt.Sprintf("%s scaling of party %d's columns shifts %d of %d, so their zeros become non-zeros: %d stored entries instead of %d (--scale std or maxabs keep sparse data sparse)",
					o.Scale, m+1, len(dense), x.NCols, after, before))
			}
		}
		if d.Scalers == nil {
			d.Scalers = make([]*Scaler, len(d.PartTrain))
		}
		d.Scalers[m] = s
		var err error
		if d.PartTrain[m], err = s.Apply(x); err != nil {
			return err
		}
		if d.PartTest[m] != nil {
			if d.PartTest[m], err = s.Apply(d.PartTest[m]); err != nil {
				return err
			}
		}
	}
	if o.Scale == ScaleNone {
		if w := spreadWarning(d); w != "" {
			d.Warnings = append(d.Warnings, w)
			d.Unscaled = true
		}
	}
	return nil
}

// spreadWarning says when the columns held differ in range by orders of
// magnitude: one step size is then too large for some and too small for
// others, and a zeroth-order step perturbs all of them by the same mu.
func spreadWarning(d *Vertical) string {
	type col struct {
		j   int
		max float64
	}
	var lo, hi col
	lo.max = math.Inf(1)
	for m, x := range d.PartTrain {
		if x == nil {
			continue
		}
		top := make([]float64, x.NCols)
		for k, j := range x.Indices {
			if v := math.Abs(float64(x.Values[k])); v > top[j] {
				top[j] = v
			}
		}
		for j, v := range top {
			g := d.Blocks[m].Lo + j
			if v > hi.max {
				hi = col{g, v}
			}
			if v > 0 && v < lo.max {
				lo = col{g, v}
			}
		}
	}
	if hi.max == 0 || math.IsInf(lo.max, 1) || hi.max < scaleSpread*lo.max {
		return ""
	}
	return fmt.Sprintf("the columns are on very different scales: %s reaches %.3g, %s only %.3g: one step size cannot fit both (and the perturbations of size mu are the same for all): give --scale standard (fitted on the training set only)",
		d.colName(hi.j), hi.max, d.colName(lo.j), lo.max)
}

func (d *Vertical) colName(j int) string {
	if j < len(d.Names) && d.Names[j] != "" {
		return strconv.Quote(d.Names[j])
	}
	return "column " + strconv.Itoa(j)
}

// checkSplitFiles checks that a split folder held the files role needs: a
// folder may hold one organisation's part only (asyrevel align's
// one-organisation form lists only its own file), which is that
// organisation's process's data and no other's.
func checkSplitFiles(dir string, man *SplitManifest, role int, d *Vertical) error {
	var names []string
	for _, e := range man.Files {
		names = append(names, e.Name)
	}
	if (role == RoleAll || role == RoleAggregator) && len(d.TrainY) == 0 {
		return fmt.Errorf("%w: %s holds no training labels (it holds %v: one organisation's part of a split is that organisation's process's data: asyrevel party --id M or aggregator --data)",
			ErrMismatch, dir, names)
	}
	for m, x := range d.PartTrain {
		if x == nil && (role == RoleAll || role == m+1) {
			return fmt.Errorf("%w: %s holds no training file of party %d (it holds %v: one organisation's part of a split is that organisation's process's data: asyrevel party --id M or aggregator --data)",
				ErrMismatch, dir, m+1, names)
		}
	}
	return nil
}

// Rows held out of training. With VerticalOptions.HoldOut > 0, that share of the
// training rows, chosen from the row count and the seed alone (so that a
// party's process and the aggregator's choose the same ones), is kept
// aside: not trained on, scored at every evaluation, and the evaluation
// best on them is the model kept; early stopping watches their loss. The
// test set, if any, is only reported: it never chooses.
//
// They travel as the first rows of the test split (Vertical.PartTest and
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

// holdOut keeps o.HoldOut of d's training rows aside (see above).
func holdOut(o *VerticalOptions, d *Vertical) error {
	if o.HoldOut <= 0 || d.NTrain < 2 || d.HeldOut > 0 || d.NTest > 0 && o.HoldOutWithoutTestOnly {
		return nil
	}
	train, held, err := TestSplit{Fraction: o.HoldOut, Shuffle: true, Seed: o.Seed}.Rows(d.NTrain)
	if err != nil {
		return fmt.Errorf("%w: --holdout: %w", ErrOptions, err)
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
func (d *Vertical) TestRows() int {
	if d.NTest > d.HeldOut {
		return d.NTest - d.HeldOut
	}
	return 0
}

// stackRows is a above b (the same columns).
func stackRows(a, b *Matrix) *Matrix {
	n := int64(len(a.Indices))
	out := &Matrix{NRows: a.NRows + b.NRows, NCols: a.NCols,
		Indptr:  make([]int64, 0, a.NRows+b.NRows+1),
		Indices: append(append(make([]int32, 0, len(a.Indices)+len(b.Indices)), a.Indices...), b.Indices...),
		Values:  append(append(make([]float32, 0, len(a.Values)+len(b.Values)), a.Values...), b.Values...)}
	out.Indptr = append(out.Indptr, a.Indptr...)
	for _, p := range b.Indptr[1:] {
		out.Indptr = append(out.Indptr, n+p)
	}
	return out
}
