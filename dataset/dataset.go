package dataset

import (
	"errors"
	"strconv"
)

// Sentinel errors; wrapped with detail (file, line, field) by the loaders.
var (
	// ErrFormat reports input that does not follow its declared format.
	ErrFormat = errors.New("dataset: malformed input")
	// ErrUnknownFormat reports a file whose format could not be detected.
	ErrUnknownFormat = errors.New("dataset: unknown format")
	// ErrMismatch reports parts (train/test, party files) that do not line up.
	ErrMismatch = errors.New("dataset: parts do not match")
	// ErrSplitFile reports one file of a split folder (a party's columns,
	// the labels) given where a whole data set is expected: its folder is.
	ErrSplitFile = errors.New("dataset: one file of a split folder")
	// ErrTooDense reports a transformation (centring a sparse matrix) whose
	// result would exceed the memory the caller allowed.
	ErrTooDense = errors.New("dataset: result would be too dense")
	// ErrChecksum reports downloaded or local content whose SHA-256 differs
	// from the one on record.
	ErrChecksum = errors.New("dataset: checksum mismatch")
	// ErrUnavailable reports a data set that could not be obtained from any
	// source; the error says what to do instead.
	ErrUnavailable = errors.New("dataset: not available")
)

// Dataset is a labelled sample set: features X (one row per sample) and
// class labels Y in 0..Classes-1. For binary sets class 1 is the positive
// class (LIBSVM +1, CSV 1). LabelValues maps class index back to the label
// as written in the file.
type Dataset struct {
	Name        string
	Format      string // "libsvm", "csv", "idx", "synthetic"
	X           *Matrix
	Y           []int32
	Classes     int
	LabelValues []float64

	// IDs, if not nil, names each sample: a CSV file's id column (or its
	// data row number, 1-based, when it has none), or the original names
	// of the samples a split took. When nil, sample i is named by its
	// position i+1; see ID.
	IDs []string

	// Encoding records how the columns of a CSV file became the features
	// (one-hot categories, feature names). It is nil for other formats.
	// A test file read with the training set's Encoding gets the same
	// columns.
	Encoding *Encoding

	// ClassNames names the classes (ClassNames[c] for class c) if the file
	// does (scikit-learn's CSV layout), else nil.
	ClassNames []string

	// Missing is what the missing-value policy found in a CSV file and did
	// (CSVOptions.Missing); zero for other formats.
	Missing MissingCount
}

// Len is the number of samples.
func (d *Dataset) Len() int { return len(d.Y) }

// ID returns the name of sample i: IDs[i], or its 1-based position when
// the data set has no IDs.
func (d *Dataset) ID(i int) string {
	if d.IDs != nil {
		return d.IDs[i]
	}
	return strconv.Itoa(i + 1)
}

// FeatureNames returns the names of the columns of X, if the format names
// them (CSV: the column name, or "NAME=value" for a one-hot column), or nil.
func (d *Dataset) FeatureNames() []string {
	if d.Encoding == nil {
		return nil
	}
	return d.Encoding.Names()
}

// Subset returns a new data set holding the samples rows of d, in that
// order, with their IDs (so a sample keeps its name), d's classes and
// encoding. It panics if a row is out of range.
func (d *Dataset) Subset(rows []int) *Dataset {
	ids := make([]string, len(rows))
	y := make([]int32, len(rows))
	for k, i := range rows {
		ids[k], y[k] = d.ID(i), d.Y[i]
	}
	return &Dataset{
		Name:        d.Name,
		Format:      d.Format,
		X:           d.X.Rows(rows),
		Y:           y,
		Classes:     d.Classes,
		LabelValues: d.LabelValues,
		IDs:         ids,
		Encoding:    d.Encoding,
		ClassNames:  d.ClassNames,
	}
}
