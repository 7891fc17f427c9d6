package dataset

import (
	"path/filepath"
	"slices"
	"testing"
)

// The CSV and IDX sets of shared/data/MANIFEST.md, loaded raw: exact sample
// and feature counts and class counts.
func TestRealCSV(t *testing.T) {
	dir := dataDir(t)
	tests := []struct {
		path              string
		samples, features int
		classCounts       []int
		firstID, lastID   string
		missing           int // missing cells, read as 0
	}{
		{"uci-credit-card/UCI_Credit_Card.csv.gz", 30000, 23, []int{23364, 6636}, "1", "30000", 0},
		{"give-me-some-credit/cs-training.csv.gz", 150000, 10, []int{139974, 10026}, "1", "150000", 29731 + 3924},
	}
	for _, tt := range tests {
		t.Run(filepath.Dir(tt.path), func(t *testing.T) {
			path := filepath.Join(dir, tt.path)
			d, err := Open(path, OpenOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if err := d.X.Check(); err != nil {
				t.Fatal(err)
			}
			if d.Format != FormatCSV || d.Len() != tt.samples || d.X.NCols != tt.features || !slices.Equal(classCounts(d), tt.classCounts) {
				t.Errorf("%s %d x %d, classes %v; want %d x %d, %v", d.Format, d.Len(), d.X.NCols, classCounts(d), tt.samples, tt.features, tt.classCounts)
			}
			if !slices.Equal(d.LabelValues, []float64{0, 1}) || d.ID(0) != tt.firstID || d.ID(d.Len()-1) != tt.lastID {
				t.Errorf("labels %v, ids %s..%s", d.LabelValues, d.ID(0), d.ID(d.Len()-1))
			}
			info, err := Inspect(path)
			if err != nil {
				t.Fatal(err)
			}
			if info.Samples != tt.samples || info.Features != tt.features || info.Missing.Cells != tt.missing || info.Format != FormatCSV || !info.Gzip {
				t.Errorf("Inspect:\n%v", info)
			}
		})
	}
}

func TestRealIDX(t *testing.T) {
	dir := dataDir(t)
	tests := []struct {
		dir         string
		train, test []int // class counts
	}{
		{"mnist", []int{5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949}, []int{980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009}},
		{"fashion-mnist", []int{6000, 6000, 6000, 6000, 6000, 6000, 6000, 6000, 6000, 6000}, []int{1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000}},
	}
	for _, tt := range tests {
		t.Run(tt.dir, func(t *testing.T) {
			if testing.Short() && tt.dir == "fashion-mnist" {
				t.Skip("-short: one IDX set is enough")
			}
			tr, te, err := OpenPair(filepath.Join(dir, tt.dir), "")
			if err != nil {
				t.Fatal(err)
			}
			for k, c := range []struct {
				d      *Dataset
				n      int
				counts []int
			}{{tr, 60000, tt.train}, {te, 10000, tt.test}} {
				d := c.d
				if err := d.X.Check(); err != nil {
					t.Fatal(err)
				}
				if d.Len() != c.n || d.X.NCols != 784 || d.Classes != 10 || !slices.Equal(classCounts(d), c.counts) {
					t.Errorf("split %d: %d x %d, classes %v", k, d.Len(), d.X.NCols, classCounts(d))
				}
				lo, hi := float32(1), float32(0)
				for _, v := range d.X.Values {
					lo, hi = min(lo, v), max(hi, v)
				}
				if lo <= 0 || hi != 1 {
					t.Errorf("pixel values in [%v, %v], want (0, 1]", lo, hi)
				}
			}
			if tr.Name != tt.dir || te.Name != tt.dir+"/t10k" {
				t.Errorf("names %q %q", tr.Name, te.Name)
			}
		})
	}
}

// classCounts counts the samples of each class.
func classCounts(d *Dataset) []int {
	counts := make([]int, d.Classes)
	for _, y := range d.Y {
		counts[y]++
	}
	return counts
}
