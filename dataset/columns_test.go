package dataset

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
)

// The label column is found by name, by position, or from scikit-learn's
// layout, and otherwise not guessed.
func TestCSVLabelColumn(t *testing.T) {
	cases := []struct {
		name    string
		text    string
		opts    CSVOptions
		label   string // the label column's name, "" for an error
		y       []int32
		classes []string
		err     error
		msg     string
	}{
		{"named", "a,Target,b\n1,0,2\n3,1,4\n", CSVOptions{}, "Target", []int32{0, 1}, nil, nil, ""},
		{"by name", "Outcome,a\n1,2\n0,3\n", CSVOptions{Label: "Outcome"}, "Outcome", []int32{1, 0}, nil, nil, ""},
		{"by position", "Outcome,a\n1,2\n0,3\n", CSVOptions{Label: "0"}, "Outcome", []int32{1, 0}, nil, nil, ""},
		{"a name wins over a position", "x,0\n5,1\n6,0\n", CSVOptions{Label: "0"}, "0", []int32{1, 0}, nil, nil, ""},
		{"not guessed", "Outcome,a,b\n1,2,0.5\n0,3,0.25\n", CSVOptions{}, "", nil, nil, ErrNoLabel, `--label NAME or --label INDEX; columns: 0 "Outcome", 1 "a", 2 "b"`},
		{"scikit-learn layout", "3,2,setosa,versicolor,virginica\n5.1,3.5,0\n4.9,3.0,1\n6.3,3.3,2\n", CSVOptions{}, "target", []int32{0, 1, 2}, []string{"setosa", "versicolor", "virginica"}, nil, ""},
		{"scikit-learn layout, wrong count", "4,2,a,b\n5.1,3.5,0\n4.9,3.0,1\n", CSVOptions{}, "", nil, nil, ErrFormat, "says 4 samples, the file has 2"},
		{"numbers for a header", "5.1,3.5,0\n4.9,3.0,1\n", CSVOptions{}, "", nil, nil, ErrFormat, "not column names"},
		{"skip rows", "exported 2024\n# tool v3\na,y\n1,0\n2,1\n", CSVOptions{SkipRows: 2}, "y", []int32{0, 1}, nil, nil, ""},
		{"skip rows, line numbers", "note\na,y\n1,0\nx,1\n", CSVOptions{SkipRows: 1}, "", nil, nil, ErrFormat, "line 4"},
		{"fractional labels", "a,y\n1,0.5\n2,1.5\n", CSVOptions{}, "", nil, nil, ErrNoLabel, "not whole numbers"},
		{"too many classes", "a,y\n" + rows(150), CSVOptions{}, "", nil, nil, ErrNoLabel, "150 classes"},
		{"text column hint", "a,colour,y\n1,red,0\n", CSVOptions{}, "", nil, nil, ErrFormat, "--categorical colour"},
		{"categorical by position", "a,colour,y\n1,red,0\n2,blue,1\n", CSVOptions{Categorical: []string{"1"}}, "y", []int32{0, 1}, nil, nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, tab, err := readCSV(strings.NewReader(tc.text), tc.opts)
			if tc.label == "" {
				if !errors.Is(err, tc.err) || err == nil || !strings.Contains(err.Error(), tc.msg) {
					t.Fatalf("error %v, want %v mentioning %q", err, tc.err, tc.msg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tab.label != tc.label || !slices.Equal(d.Y, tc.y) || !slices.Equal(d.ClassNames, tc.classes) {
				t.Fatalf("label %q y %v classes %q; want %q %v %q", tab.label, d.Y, d.ClassNames, tc.label, tc.y, tc.classes)
			}
		})
	}
}

func rows(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%d,%d\n", i, i)
	}
	return b.String()
}

// A stratified split keeps every class's share to within a row and takes
// exactly round(fraction * n) test rows.
func TestStratifiedSplit(t *testing.T) {
	y := make([]int32, 0, 1003)
	for c, n := range []int{700, 290, 13} {
		for range n {
			y = append(y, int32(c))
		}
	}
	d := &Dataset{X: &Matrix{NRows: len(y), NCols: 0, Indptr: make([]int64, len(y)+1)}, Y: y, Classes: 3}
	for _, frac := range []float64{0.1, 0.2, 0.33} {
		tr, te, err := TrainTestSplit(d, TestSplit{Fraction: frac, Shuffle: true, Stratify: true, Seed: 5})
		if err != nil {
			t.Fatal(err)
		}
		if want := int(math.Round(frac * float64(len(y)))); te.Len() != want || tr.Len()+te.Len() != len(y) {
			t.Fatalf("fraction %g: %d test rows, want %d", frac, te.Len(), want)
		}
		for c, n := range []int{700, 290, 13} {
			got := 0
			for _, v := range te.Y {
				if v == int32(c) {
					got++
				}
			}
			if math.Abs(float64(got)-frac*float64(n)) > 1 {
				t.Errorf("fraction %g, class %d: %d test rows of %d", frac, c, got, n)
			}
		}
	}
	if _, _, err := TrainTestSplit(d, TestSplit{Fraction: 0.2, Stratify: true}); err == nil {
		t.Error("a stratified split without Shuffle was accepted")
	}
}

// ReadSplit joins the parties' columns back into the data set that was
// split.
func TestReadSplitRoundTrip(t *testing.T) {
	tr, err := ReadCSV(strings.NewReader("id,a,b,c,d,e,y\n1,1,0,2,0,3,0\n2,0,4,0,5,0,1\n3,6,7,8,9,1,1\n"), CSVOptions{})
	if err != nil {
		t.Fatal(err)
	}
	te, err := ReadCSV(strings.NewReader("id,a,b,c,d,e,y\n9,1,1,1,1,1,1\n"), CSVOptions{Encoding: tr.Encoding, Labels: tr.LabelValues})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := WriteSplit(dir, 3, tr, te, SplitSource{}); err != nil {
		t.Fatal(err)
	}
	gtr, gte, err := ReadSplit(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ got, want *Dataset }{{gtr, tr}, {gte, te}} {
		if fmt.Sprint(dense(c.got.X)) != fmt.Sprint(dense(c.want.X)) || !slices.Equal(c.got.Y, c.want.Y) || !slices.Equal(c.got.IDs, c.want.IDs) {
			t.Errorf("read back %v %v %v, wrote %v %v %v", dense(c.got.X), c.got.Y, c.got.IDs, dense(c.want.X), c.want.Y, c.want.IDs)
		}
	}
}
