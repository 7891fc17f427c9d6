package dataset

import (
	"fmt"
	"os"
	"path/filepath"
)

// IsSplit reports whether dir is a split folder (it has a ManifestFile).
func IsSplit(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, ManifestFile))
	return err == nil
}

// ReadSplit reads a split folder written by WriteSplit back into whole
// data sets: for each set, the parties' columns joined side by side in
// their blocks' order, with the labels and the sample ids. It checks the
// files against the manifest and their ids against each other first. The
// test set is nil if the folder has none. This is for centralised
// baselines, which see all the columns: a federated run never joins them.
func ReadSplit(dir string) (train, test *Dataset, err error) {
	man, err := ReadManifest(dir)
	if err != nil {
		return nil, nil, err
	}
	if err := man.Verify(dir); err != nil {
		return nil, nil, err
	}
	name := datasetName(dir)
	for _, set := range man.Sets {
		labels, err := LoadLabels(filepath.Join(dir, LabelsFileName(set.Split)))
		if err != nil {
			return nil, nil, err
		}
		parts := make([]*PartyData, man.Q)
		for m := range parts {
			if parts[m], err = LoadPartyFile(filepath.Join(dir, PartyFileName(m+1, set.Split))); err != nil {
				return nil, nil, err
			}
		}
		if err := Align(labels, parts...); err != nil {
			return nil, nil, fmt.Errorf("%s: %s set: %w", dir, set.Split, err)
		}
		d := &Dataset{
			Name: name, Format: "split", X: joinColumns(parts, man.Features, len(labels.IDs)),
			Y: labels.Y, Classes: man.Classes, LabelValues: man.LabelValues, IDs: labels.IDs,
		}
		switch set.Split {
		case "train":
			train = d
		case "test":
			d.Name = name + "/test"
			test = d
		}
	}
	if train == nil {
		return nil, nil, fmt.Errorf("%w: %s has no training set", ErrMismatch, dir)
	}
	return train, test, nil
}

// joinColumns puts the parties' matrices side by side: party m's column j
// becomes column Lo_m + j.
func joinColumns(parts []*PartyData, features, rows int) *Matrix {
	nnz := 0
	for _, p := range parts {
		nnz += p.X.NNZ()
	}
	x := &Matrix{NRows: rows, NCols: features, Indptr: make([]int64, 1, rows+1),
		Indices: make([]int32, 0, nnz), Values: make([]float32, 0, nnz)}
	for i := range rows {
		for _, p := range parts { // blocks are in increasing column order
			idx, val := p.X.Row(i)
			for k, j := range idx {
				x.Indices = append(x.Indices, j+int32(p.Lo))
				x.Values = append(x.Values, val[k])
			}
		}
		x.Indptr = append(x.Indptr, int64(len(x.Indices)))
	}
	return x
}
