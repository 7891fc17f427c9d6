package dataset

import (
	"bytes"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// dense expands m into a slice of rows, for comparisons.
func dense(m *Matrix) [][]float32 {
	out := make([][]float32, m.NRows)
	for i := range out {
		out[i] = make([]float32, m.NCols)
		idx, val := m.Row(i)
		for k, j := range idx {
			out[i][j] = val[k]
		}
	}
	return out
}

// equalDatasets reports the first difference between a and b, or "".
func equalDatasets(a, b *Dataset) string {
	switch {
	case a.X.NRows != b.X.NRows || a.X.NCols != b.X.NCols:
		return "shape"
	case !slices.Equal(a.X.Indptr, b.X.Indptr):
		return "indptr"
	case !slices.Equal(a.X.Indices, b.X.Indices):
		return "indices"
	case !slices.Equal(a.X.Values, b.X.Values):
		return "values"
	case !slices.Equal(a.Y, b.Y):
		return "labels"
	case a.Classes != b.Classes || !slices.Equal(a.LabelValues, b.LabelValues):
		return "classes"
	}
	return ""
}

func TestReadLIBSVM(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		opts   LIBSVMOptions
		x      [][]float32
		y      []int32
		labels []float64
	}{
		{
			name:   "binary +1/-1",
			in:     "+1 1:0.5 3:2\n-1 2:1\n",
			x:      [][]float32{{0.5, 0, 2}, {0, 1, 0}},
			y:      []int32{1, 0},
			labels: []float64{-1, 1},
		},
		{
			name:   "binary 1/0, no final newline",
			in:     "1 2:1\n0 1:-3.25e1",
			x:      [][]float32{{0, 1}, {-32.5, 0}},
			y:      []int32{1, 0},
			labels: []float64{0, 1},
		},
		{
			name:   "multiclass sorted",
			in:     "2 1:1\n0 2:1\n1 1:1\n2 2:2\n",
			x:      [][]float32{{1, 0}, {0, 1}, {1, 0}, {0, 2}},
			y:      []int32{2, 0, 1, 2},
			labels: []float64{0, 1, 2},
		},
		{
			name:   "CRLF, blank lines, tabs, comments, qid",
			in:     "\r\n-1\tqid:3 1:1\t4:2 # a comment\r\n\n   \n# only a comment\n+1 qid:3 2:1\r\n",
			x:      [][]float32{{1, 0, 0, 2}, {0, 1, 0, 0}},
			y:      []int32{0, 1},
			labels: []float64{-1, 1},
		},
		{
			name:   "empty rows (label only)",
			in:     "-1 \n+1 2:1\n-1\n",
			x:      [][]float32{{0, 0}, {0, 1}, {0, 0}},
			y:      []int32{0, 1, 0},
			labels: []float64{-1, 1},
		},
		{
			name:   "explicit zeros dropped but widen",
			in:     "+1 1:1 2:0 5:0\n-1 3:0.0 4:-0\n",
			x:      [][]float32{{1, 0, 0, 0, 0}, {0, 0, 0, 0, 0}},
			y:      []int32{1, 0},
			labels: []float64{-1, 1},
		},
		{
			name:   "padded to Features",
			in:     "+1 1:1\n",
			opts:   LIBSVMOptions{Features: 3},
			x:      [][]float32{{1, 0, 0}},
			y:      []int32{1},
			labels: []float64{-1, 1},
		},
		{
			name:   "fixed labels",
			in:     "-1 1:1\n-1 1:2\n",
			opts:   LIBSVMOptions{Labels: []float64{-1, 1}},
			x:      [][]float32{{1}, {2}},
			y:      []int32{0, 0},
			labels: []float64{-1, 1},
		},
		{
			name:   "single positive label completed to binary",
			in:     "+1 1:1\n",
			x:      [][]float32{{1}},
			y:      []int32{1},
			labels: []float64{-1, 1},
		},
		{
			name:   "single zero label completed to binary",
			in:     "0 1:1\n",
			x:      [][]float32{{1}},
			y:      []int32{0},
			labels: []float64{0, 1},
		},
		{
			name:   "single other label",
			in:     "7 1:1\n",
			x:      [][]float32{{1}},
			y:      []int32{0},
			labels: []float64{7},
		},
		{
			name:   "float labels and values",
			in:     "1.0 1:1e-3 2:+7 3:0x1p-2\n2.5 1:-.5\n",
			x:      [][]float32{{0.001, 7, 0.25}, {-0.5, 0, 0}},
			y:      []int32{0, 1},
			labels: []float64{1, 2.5},
		},
		{
			name:   "empty input",
			in:     "",
			x:      [][]float32{},
			y:      []int32{},
			labels: []float64{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := ReadLIBSVM(strings.NewReader(tt.in), tt.opts)
			if err != nil {
				t.Fatalf("ReadLIBSVM: %v", err)
			}
			if err := d.X.Check(); err != nil {
				t.Fatalf("Check: %v", err)
			}
			if got := dense(d.X); !slices.EqualFunc(got, tt.x, slices.Equal) {
				t.Errorf("X = %v, want %v", got, tt.x)
			}
			if !slices.Equal(d.Y, tt.y) && len(d.Y)+len(tt.y) > 0 {
				t.Errorf("Y = %v, want %v", d.Y, tt.y)
			}
			if !slices.Equal(d.LabelValues, tt.labels) || d.Classes != len(tt.labels) {
				t.Errorf("LabelValues = %v, Classes = %d, want %v", d.LabelValues, d.Classes, tt.labels)
			}
			if slices.Contains(d.X.Values, 0) {
				t.Errorf("explicit zero stored: %v", d.X.Values)
			}
			if d.Format != FormatLIBSVM {
				t.Errorf("Format = %q", d.Format)
			}
		})
	}
}

func TestReadLIBSVMErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		opts LIBSVMOptions
		want []error  // sentinels the error must wrap
		msg  []string // substrings of the message
	}{
		{"decreasing index", "+1 1:1\n\n-1 3:1 2:1\n", LIBSVMOptions{}, []error{ErrFormat}, []string{"line 3", `"2:1"`, "does not increase"}},
		{"duplicate index", "+1 2:1 2:1\n", LIBSVMOptions{}, []error{ErrFormat}, []string{"line 1", `"2:1"`}},
		{"zero index", "+1 0:1\n", LIBSVMOptions{}, []error{ErrFormat}, []string{"line 1", `"0:1"`}},
		{"negative index", "+1 -1:1\n", LIBSVMOptions{}, []error{ErrFormat}, []string{`"-1:1"`}},
		{"huge index", "+1 2147483648:1\n", LIBSVMOptions{}, []error{ErrFormat}, []string{"2147483648"}},
		{"no colon", "+1 1:1 7\n", LIBSVMOptions{}, []error{ErrFormat}, []string{`token "7"`, "index:value"}},
		{"missing value", "+1 1:\n", LIBSVMOptions{}, []error{ErrFormat}, []string{`"1:"`}},
		{"bad value", "+1 1:abc\n", LIBSVMOptions{}, []error{ErrFormat}, []string{`"1:abc"`}},
		{"nan value", "+1 1:NaN\n", LIBSVMOptions{}, []error{ErrFormat}, []string{`"1:NaN"`}},
		{"float32 overflow", "+1 1:1e39\n", LIBSVMOptions{}, []error{ErrFormat}, []string{`"1:1e39"`}},
		{"bad label", "+1 1:1\nyes 1:1\n", LIBSVMOptions{}, []error{ErrFormat}, []string{"line 2", `"yes"`, "label"}},
		{"feature without label", "1:1 2:1\n", LIBSVMOptions{}, []error{ErrFormat}, []string{"line 1", `"1:1"`}},
		{"infinite label", "inf 1:1\n", LIBSVMOptions{}, []error{ErrFormat}, []string{`"inf"`}},
		{"unseen test label", "-1 1:1\n+2 1:1\n", LIBSVMOptions{Labels: []float64{-1, 1}}, []error{ErrFormat, ErrMismatch}, []string{"line 2", `"+2"`, "training labels"}},
		{"bad options", "", LIBSVMOptions{Features: -1}, nil, []string{"Features"}},
		{"duplicate fixed labels", "", LIBSVMOptions{Labels: []float64{1, 1}}, nil, []string{"twice"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadLIBSVM(strings.NewReader(tt.in), tt.opts)
			if err == nil {
				t.Fatal("no error")
			}
			for _, s := range tt.want {
				if !errors.Is(err, s) {
					t.Errorf("error %q does not wrap %q", err, s)
				}
			}
			for _, s := range tt.msg {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %s", err, s)
				}
			}
		})
	}
}

// TestReadLIBSVMLongLines reads dense lines longer than the read buffer.
func TestReadLIBSVMLongLines(t *testing.T) {
	const cols = 40000 // about 10 bytes a token: 400 kB a line
	var b bytes.Buffer
	for i := range 3 {
		b.WriteString([]string{"-1", "+1", "-1"}[i])
		for j := 1; j <= cols; j++ {
			b.WriteString(" ")
			b.WriteString(strconv.Itoa(j))
			b.WriteString(":0.25")
		}
		b.WriteString("\r\n")
	}
	b.WriteString("+1 7:1 8:bad\n")
	if b.Len() < 2*readBufferSize {
		t.Fatalf("lines too short: %d bytes", b.Len())
	}
	_, err := ReadLIBSVM(bytes.NewReader(b.Bytes()), LIBSVMOptions{})
	if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "line 4") {
		t.Fatalf("error %v, want a format error on line 4", err)
	}
	in := b.Bytes()[:bytes.LastIndex(b.Bytes()[:b.Len()-1], []byte{'\n'})+1]
	d, err := ReadLIBSVM(bytes.NewReader(in), LIBSVMOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d.X.NRows != 3 || d.X.NCols != cols || d.X.NNZ() != 3*cols || !slices.Equal(d.Y, []int32{0, 1, 0}) {
		t.Fatalf("got %dx%d, nnz %d, y %v", d.X.NRows, d.X.NCols, d.X.NNZ(), d.Y)
	}
}

func TestWriteLIBSVMRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		cfg  SyntheticConfig
	}{
		{"binary sparse", SyntheticConfig{Samples: 500, Features: 300, Density: 0.05, Noise: 0.1, Seed: 1}},
		{"binary dense", SyntheticConfig{Samples: 200, Features: 20, Seed: 2}},
		{"multiclass", SyntheticConfig{Samples: 300, Features: 50, Classes: 5, Density: 0.3, Seed: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, _, err := Synthetic(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			if err := WriteLIBSVM(&b, d); err != nil {
				t.Fatal(err)
			}
			got, err := ReadLIBSVM(&b, LIBSVMOptions{Features: d.X.NCols, Labels: d.LabelValues})
			if err != nil {
				t.Fatal(err)
			}
			if diff := equalDatasets(got, d); diff != "" {
				t.Fatalf("round trip differs in %s", diff)
			}
		})
	}

	// Special values survive too, and the labels are written as values.
	d, err := ReadLIBSVM(strings.NewReader("+1 1:3.4028235e38 2:1e-45 3:-0.1\n-1\n"), LIBSVMOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteLIBSVM(&b, d); err != nil {
		t.Fatal(err)
	}
	if want := "+1 1:3.4028235e+38 2:1e-45 3:-0.1\n-1\n"; b.String() != want {
		t.Errorf("wrote %q, want %q", b.String(), want)
	}
	bad := &Dataset{X: d.X, Y: []int32{0}}
	if err := WriteLIBSVM(&b, bad); !errors.Is(err, ErrMismatch) {
		t.Errorf("short labels: error %v", err)
	}
}

// FuzzReadLIBSVM checks that any input either fails with ErrFormat or gives
// a well-formed data set that survives a write/read round trip.
func FuzzReadLIBSVM(f *testing.F) {
	for _, s := range []string{
		"+1 1:0.5 3:2\n-1 2:1\n",
		"1 2:1\r\n0 1:-3.25e1",
		"2 qid:1 1:1 # c\n\n0 2:1\n",
		"-1 \n",
		"+1 3:1 2:1\n",
		"1:1\n",
		"+1 1:1e39 2:nan\n",
		"-1 2147483647:1\n",
		"\x00\xff\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		d, err := ReadLIBSVM(bytes.NewReader(in), LIBSVMOptions{})
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error %v does not wrap ErrFormat", err)
			}
			return
		}
		if err := d.X.Check(); err != nil {
			t.Fatal(err)
		}
		if len(d.Y) != d.X.NRows || d.Classes != len(d.LabelValues) || !slices.IsSorted(d.LabelValues) {
			t.Fatalf("labels: %d rows, %d labels, classes %d %v", d.X.NRows, len(d.Y), d.Classes, d.LabelValues)
		}
		for _, y := range d.Y {
			if y < 0 || int(y) >= d.Classes {
				t.Fatalf("class %d out of range", y)
			}
		}
		for _, v := range d.X.Values {
			if v == 0 || math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("stored value %v", v)
			}
		}
		if d.X.NCols > 1<<20 {
			return // the round trip would be fine, just slow to compare
		}
		var b bytes.Buffer
		if err := WriteLIBSVM(&b, d); err != nil {
			t.Fatal(err)
		}
		back, err := ReadLIBSVM(&b, LIBSVMOptions{Features: d.X.NCols, Labels: d.LabelValues})
		if err != nil {
			t.Fatalf("reading back: %v", err)
		}
		if diff := equalDatasets(back, d); diff != "" {
			t.Fatalf("round trip differs in %s", diff)
		}
	})
}

func TestParseValue(t *testing.T) {
	tests := []struct {
		in   string
		want float32
		ok   bool
	}{
		{"1", 1, true},
		{"-1", -1, true},
		{"+7", 7, true},
		{"0.5", 0.5, true},
		{"-0.0132678", -0.0132678, true},
		{".25", 0.25, true},
		{"3.", 3, true},
		{"16777215", 16777215, true},
		{"16777217", 16777216, true}, // through strconv, rounded to even
		{"0.12345678901", 0.12345678901, true},
		{"1e-3", 0.001, true},
		{"1E+2", 100, true},
		{"0x1p4", 16, true},
		{"0x10", 0, false},
		{"3.4028235e38", math.MaxFloat32, true},
		{"1e-46", 0, true}, // underflows to zero: dropped by the reader
		{"", 0, false},
		{"-", 0, false},
		{".", 0, false},
		{"1.2.3", 0, false},
		{"1e39", 0, false},
		{"inf", 0, false},
		{"nan", 0, false},
		{"1_000", 0, false},
		{"abc", 0, false},
	}
	for _, tt := range tests {
		got, ok := parseValue([]byte(tt.in))
		if ok != tt.ok || got != tt.want {
			t.Errorf("parseValue(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

// FuzzParseShortDecimal checks the fast path against strconv.
func FuzzParseShortDecimal(f *testing.F) {
	for _, s := range []string{"1", "-0.0132678", "16777215", "0.0000000001", "9999999.9", "+.5", "1."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := parseShortDecimal([]byte(s))
		if !ok {
			return
		}
		want, err := strconv.ParseFloat(s, 32)
		if err != nil || got != float32(want) || math.Signbit(float64(got)) != math.Signbit(want) {
			t.Fatalf("parseShortDecimal(%q) = %v, strconv gives %v, %v", s, got, want, err)
		}
	})
}
