package dataset

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestReadCSV(t *testing.T) {
	tests := []struct {
		name   string
		text   string
		opts   CSVOptions
		ids    []string
		y      []int32
		labels []float64
		names  []string
		x      [][]float32
	}{
		{
			name:   "id and label by name, last-column label",
			text:   "ID,a,b,Label\n7,1.5,0,1\n9,0,-2,0\n",
			ids:    []string{"7", "9"},
			y:      []int32{1, 0},
			labels: []float64{0, 1},
			names:  []string{"a", "b"},
			x:      [][]float32{{1.5, 0}, {0, -2}},
		},
		{
			name:   "unnamed index column, label in the middle (GiveMeSomeCredit layout)",
			text:   ",SeriousDlqin2yrs,x,y2\n1,1,0.5,NA\n2,0,,3\n",
			ids:    []string{"1", "2"},
			y:      []int32{1, 0},
			labels: []float64{0, 1},
			names:  []string{"x", "y2"},
			x:      [][]float32{{0.5, 0}, {0, 3}},
		},
		{
			name:   "no id column: row numbers; quoted header, CRLF, BOM, spaces",
			text:   "\uFEFF\"f 1\",\"target\"\r\n 2 , +1\r\n3,-1\r\n",
			ids:    []string{"1", "2"},
			y:      []int32{1, 0},
			labels: []float64{-1, 1},
			names:  []string{"f 1"},
			x:      [][]float32{{2}, {3}},
		},
		{
			name:   "one-hot, binary indicator, dropped column, unknown category order",
			text:   "id,sex,color,junk,n,y\na,2,red,x,1,1\nb,1,blue,y,2e+05,0\nc,2.0,10,z,NA,1\n",
			opts:   CSVOptions{Categorical: []string{"sex", "color"}, BinaryIndicator: true, Drop: []string{"junk"}},
			ids:    []string{"a", "b", "c"},
			y:      []int32{1, 0, 1},
			labels: []float64{0, 1},
			names:  []string{"sex=2", "color=10", "color=blue", "color=red", "n"},
			x:      [][]float32{{1, 0, 0, 1, 1}, {0, 0, 1, 0, 2e5}, {1, 1, 0, 0, 0}},
		},
		{
			name:   "drop rows with missing values",
			text:   "id,c,v,y\n1,a,1,0\n2,,2,1\n3,b,NA,1\n4,b,4,\n5,b,5,1\n",
			opts:   CSVOptions{Categorical: []string{"c"}, Missing: MissingDrop},
			ids:    []string{"1", "5"},
			y:      []int32{0, 1},
			labels: []float64{0, 1},
			names:  []string{"c=a", "c=b", "v"},
			x:      [][]float32{{1, 0, 1}, {0, 1, 5}},
		},
		{
			name:   "custom NA, separator, explicit columns and labels",
			text:   "k;l;v;w\nx1;3;?;1\nx2;1;2;0\n",
			opts:   CSVOptions{Comma: ';', ID: "k", Label: "l", NA: []string{"?"}, Labels: []float64{1, 2, 3}},
			ids:    []string{"x1", "x2"},
			y:      []int32{2, 0},
			labels: []float64{1, 2, 3},
			names:  []string{"v", "w"},
			x:      [][]float32{{0, 1}, {2, 0}},
		},
		{
			name:   "no id column by choice",
			text:   "id,y\n5,1\n6,0\n",
			opts:   CSVOptions{ID: "-", Label: "y"},
			ids:    []string{"1", "2"},
			y:      []int32{1, 0},
			labels: []float64{0, 1},
			names:  []string{"id"},
			x:      [][]float32{{5}, {6}},
		},
		{
			name:   "header only",
			text:   "a,label\n",
			ids:    []string{},
			y:      []int32{},
			names:  []string{"a"},
			x:      [][]float32{},
			labels: nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := ReadCSV(strings.NewReader(tt.text), tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if err := d.X.Check(); err != nil {
				t.Fatal(err)
			}
			if d.Format != FormatCSV || !slices.Equal(d.IDs, tt.ids) || !slices.Equal(d.Y, tt.y) || !slices.Equal(d.LabelValues, tt.labels) {
				t.Errorf("ids %q y %v labels %v; want %q %v %v", d.IDs, d.Y, d.LabelValues, tt.ids, tt.y, tt.labels)
			}
			if !slices.Equal(d.FeatureNames(), tt.names) {
				t.Errorf("names %q, want %q", d.FeatureNames(), tt.names)
			}
			if got := dense(d.X); fmt.Sprint(got) != fmt.Sprint(tt.x) {
				t.Errorf("x = %v, want %v", got, tt.x)
			}
		})
	}
}

func TestReadCSVErrors(t *testing.T) {
	tests := []struct {
		name string
		text string
		opts CSVOptions
		want error
		msg  string
	}{
		{"empty", "", CSVOptions{}, ErrFormat, "no header"},
		{"ragged", "a,y\n1,0\n1,2,3\n", CSVOptions{}, ErrFormat, "line 3"},
		{"bad quote", "a,y\n\"1,0\n", CSVOptions{}, ErrFormat, "line"},
		{"text in a numeric column", "a,y\n1,0\nfoo,1\n", CSVOptions{}, ErrFormat, `line 3: column "a": value "foo"`},
		{"infinite", "a,y\n1e39,0\n", CSVOptions{}, ErrFormat, "finite"},
		{"label not a number", "a,y\n1,yes\n", CSVOptions{}, ErrFormat, "label"},
		{"missing label", "a,y\n1,NA\n", CSVOptions{}, ErrFormat, "missing"},
		{"missing value, error policy", "a,y\n1,0\n,1\n", CSVOptions{Missing: MissingError}, ErrFormat, "line 3"},
		{"duplicate id", "id,a,y\n1,1,0\n1,2,1\n", CSVOptions{}, ErrFormat, "already used on line 2"},
		{"empty id", "id,a,y\n,1,0\n", CSVOptions{}, ErrFormat, "id column"},
		{"duplicate header", "a,a,y\n1,2,0\n", CSVOptions{}, ErrFormat, "both"},
		{"unknown label column", "a,y\n1,0\n", CSVOptions{Label: "z"}, ErrFormat, `"z" is neither a name in the header`},
		{"unknown categorical column", "a,y\n1,0\n", CSVOptions{Categorical: []string{"b"}}, ErrFormat, "categorical"},
		{"label is categorical", "a,y\n1,0\n", CSVOptions{Categorical: []string{"y"}}, ErrFormat, "categorical"},
		{"id is label", "id,a\n1,0\n", CSVOptions{ID: "id", Label: "id"}, ErrFormat, "both"},
		{"label outside fixed labels", "a,y\n1,5\n", CSVOptions{Labels: []float64{0, 1}}, ErrMismatch, "label 5"},
		{"encoding column absent", "a,y\n1,0\n", CSVOptions{Encoding: &Encoding{Columns: []EncodedColumn{{Name: "b"}}}}, ErrMismatch, `"b"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadCSV(strings.NewReader(tt.text), tt.opts)
			if !errors.Is(err, tt.want) {
				t.Fatalf("error %v, want %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q does not mention %q", err, tt.msg)
			}
		})
	}
}

// A test file read with the training set's encoding gets the same columns,
// whatever categories it has.
func TestOpenPairCSV(t *testing.T) {
	dir := t.TempDir()
	train := writeFile(t, dir, "train.csv.gz", "id,c,v,label\n1,a,1,0\n2,b,2,1\n3,c,3,1\n", true)
	test := writeFile(t, dir, "test.csv", "label,v,c,extra,id\n1,5,b,9,10\n0,6,z,9,11\n", false)
	opts := OpenOptions{CSV: CSVOptions{Categorical: []string{"c"}}}
	tr, te, err := OpenPairOptions(train, test, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(te.FeatureNames(), tr.FeatureNames()) || te.X.NCols != 4 {
		t.Fatalf("test names %q, train %q", te.FeatureNames(), tr.FeatureNames())
	}
	// z is unknown to the encoding: no indicator; "extra" is ignored.
	if got := fmt.Sprint(dense(te.X)); got != "[[0 1 0 5] [0 0 0 6]]" || !slices.Equal(te.Y, []int32{1, 0}) || !slices.Equal(te.IDs, []string{"10", "11"}) {
		t.Errorf("test x %s y %v ids %v", got, te.Y, te.IDs)
	}
	// The test file lacks a column of the encoding.
	bad := writeFile(t, dir, "bad.csv", "id,v,label\n1,2,0\n", false)
	if _, _, err := OpenPairOptions(train, bad, opts); !errors.Is(err, ErrMismatch) {
		t.Errorf("missing column: %v", err)
	}
	// Names: the file name without .gz.
	if tr.Name != "train.csv" || te.Name != "test.csv" {
		t.Errorf("names %q %q", tr.Name, te.Name)
	}
	if _, err := Open(filepath.Join(dir, "test.csv"), OpenOptions{Format: FormatCSV, CSV: CSVOptions{Drop: []string{"c"}}}); err != nil {
		t.Errorf("forced csv: %v", err)
	}
}

func TestEncodingNames(t *testing.T) {
	e := &Encoding{Columns: []EncodedColumn{{Name: "a"}, {Name: "s", Categories: []string{"1", "2"}, Indicator: true}, {Name: "c", Categories: []string{"x", "y", "z"}}}}
	if e.Features() != 5 || strings.Join(e.Names(), " ") != "a s=2 c=x c=y c=z" {
		t.Errorf("features %d names %q", e.Features(), e.Names())
	}
	if MissingDrop.String() != "drop" || MissingPolicy(9).String() != "MissingPolicy(9)" {
		t.Error("MissingPolicy.String")
	}
}

// FuzzReadCSV: any input loads into a valid matrix or fails with ErrFormat
// (or ErrMismatch); never a panic.
func FuzzReadCSV(f *testing.F) {
	for _, s := range []string{
		"id,a,b,label\n1,0.5,NA,1\n2,,3,0\n",
		",SeriousDlqin2yrs,x\n1,1,0.5\n",
		"a,\"b\"\"c\",y\n1,2,0\n",
		"a,y\n1\n",
		"\uFEFFc,y\r\nred,1\r\nblue,0\r\n",
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, cat bool) {
		opts := CSVOptions{}
		if cat {
			// One-hot the second column, if there is one, and drop rows with NA.
			if head, _, ok := bytes.Cut(data, []byte("\n")); ok {
				if fields := strings.Split(strings.TrimSpace(string(head)), ","); len(fields) > 2 {
					opts.Categorical = []string{strings.TrimSpace(strings.Trim(fields[1], "\""))}
					opts.Missing = MissingDrop
				}
			}
		}
		d, err := ReadCSV(bytes.NewReader(data), opts)
		if err != nil {
			if !errors.Is(err, ErrFormat) && !errors.Is(err, ErrMismatch) {
				t.Fatalf("error %v wraps no sentinel", err)
			}
			return
		}
		if err := d.X.Check(); err != nil {
			t.Fatal(err)
		}
		if d.X.NRows != len(d.Y) || len(d.IDs) != len(d.Y) || d.X.NCols != d.Encoding.Features() {
			t.Fatalf("shape %dx%d, %d labels, %d ids", d.X.NRows, d.X.NCols, len(d.Y), len(d.IDs))
		}
		for _, v := range d.X.Values {
			if v == 0 || math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("stored value %v", v)
			}
		}
		for _, y := range d.Y {
			if y < 0 || int(y) >= d.Classes {
				t.Fatalf("class %d of %d", y, d.Classes)
			}
		}
	})
}
