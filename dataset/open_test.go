package dataset

import (
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writeFile writes content to dir/name, gzip-compressed if gz, and returns
// its path.
func writeFile(t testing.TB, dir, name, content string, gz bool) string {
	t.Helper()
	data := []byte(content)
	if gz {
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		if _, err := w.Write(data); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		data = b.Bytes()
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestOpen(t *testing.T) {
	const text = "+1 1:1 3:0.5\n-1 2:1\n"
	tests := []struct {
		file string
		gz   bool
		name string
	}{
		{"train.txt", false, "train.txt"},
		{"a9a", false, "a9a"},
		{"a9a.gz", true, "a9a"},
		{"a9a.t.gz", true, "a9a.t"},
		{"compressed.txt", true, "compressed.txt"}, // gzip without the extension
		{"plain.gz", false, "plain"},               // extension without gzip
	}
	dir := t.TempDir()
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			path := writeFile(t, dir, tt.file, text, tt.gz)
			d, err := Open(path, OpenOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if d.Name != tt.name || d.Format != FormatLIBSVM {
				t.Errorf("Name %q, Format %q; want %q, libsvm", d.Name, d.Format, tt.name)
			}
			if d.X.NRows != 2 || d.X.NCols != 3 || d.X.NNZ() != 3 || !slices.Equal(d.Y, []int32{1, 0}) {
				t.Errorf("got %dx%d nnz %d y %v", d.X.NRows, d.X.NCols, d.X.NNZ(), d.Y)
			}
		})
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	idx := string([]byte{0, 0, 8, 1, 0, 0, 0, 2, 3, 4})
	tests := []struct {
		name string
		path string
		opts OpenOptions
		want error
		msg  string
	}{
		{"folder", dir, OpenOptions{}, ErrUnknownFormat, "folder"},
		{"folder as libsvm", dir, OpenOptions{Format: FormatLIBSVM}, ErrUnknownFormat, "folder"},
		{"csv bad value", writeFile(t, dir, "x.csv.gz", "a,b,label\n1,2,0\n1,x,1\n", true), OpenOptions{}, ErrFormat, "line 3"},
		{"idx file", writeFile(t, dir, "labels-idx1-ubyte", idx, false), OpenOptions{}, ErrUnknownFormat, "IDX"},
		{"binary", writeFile(t, dir, "bin", "\x01\x02\x00\x03", false), OpenOptions{}, ErrUnknownFormat, "LIBSVM"},
		{"prose", writeFile(t, dir, "README", "hello world\n", false), OpenOptions{}, ErrUnknownFormat, "LIBSVM"},
		{"empty", writeFile(t, dir, "empty", "", false), OpenOptions{}, ErrUnknownFormat, "supported"},
		{"forced unknown", writeFile(t, dir, "ok", "+1 1:1\n", false), OpenOptions{Format: "parquet"}, ErrUnknownFormat, "parquet"},
		{"bad line", writeFile(t, dir, "bad", "+1 1:1\n-1 2:1 1:1\n", true), OpenOptions{}, ErrFormat, "line 2"},
		{"truncated gzip", truncatedGzip(t, dir), OpenOptions{}, ErrFormat, "gzip"},
		{"bad gzip header", writeFile(t, dir, "hdr", "\x1f\x8b\x00garbage", false), OpenOptions{}, ErrFormat, "gzip"},
		{"missing", filepath.Join(dir, "nope"), OpenOptions{}, os.ErrNotExist, "nope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Open(tt.path, tt.opts)
			if !errors.Is(err, tt.want) {
				t.Fatalf("error %v, want %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q does not mention %q", err, tt.msg)
			}
		})
	}
	// An empty file read as LIBSVM on purpose is an empty data set.
	d, err := Open(filepath.Join(dir, "empty"), OpenOptions{Format: FormatLIBSVM})
	if err != nil || d.Len() != 0 {
		t.Errorf("forced empty: %v, %v", d, err)
	}
}

// truncatedGzip writes a gzip file cut in the middle of its stream.
func truncatedGzip(t *testing.T, dir string) string {
	var text strings.Builder
	for i := range 5000 {
		text.WriteString([]string{"+1 1:0.5 7:1\n", "-1 2:0.25 9:3\n"}[i%2])
	}
	path := writeFile(t, dir, "cut.gz", text.String(), true)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data[:len(data)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestOpenPair(t *testing.T) {
	dir := t.TempDir()
	train := writeFile(t, dir, "tr.gz", "+1 1:1 4:1\n-1 2:1\n-1 3:1\n", true)
	tests := []struct {
		name string
		test string
		want error
		cols int
		y    []int32
	}{
		{"narrower test is padded", "-1 1:1\n+1 2:1\n", nil, 4, []int32{0, 1}},
		{"single-class test keeps the map", "+1 1:1\n+1 3:1\n", nil, 4, []int32{1, 1}},
		{"wider test", "-1 1:1\n+1 5:1\n", ErrMismatch, 0, nil},
		{"unseen label", "-1 1:1\n+3 2:1\n", ErrMismatch, 0, nil},
		{"malformed test", "-1 2:1 1:1\n", ErrFormat, 0, nil},
		{"csv test", "x,y\n1,2\n", ErrMismatch, 0, nil},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			test := writeFile(t, dir, "te"+strings.Repeat("x", i), tt.test, false)
			tr, te, err := OpenPair(train, test)
			if tt.want != nil {
				if !errors.Is(err, tt.want) {
					t.Fatalf("error %v, want %v", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tr.X.NCols != tt.cols || te.X.NCols != tt.cols {
				t.Errorf("columns %d and %d, want %d", tr.X.NCols, te.X.NCols, tt.cols)
			}
			if !slices.Equal(te.Y, tt.y) || !slices.Equal(te.LabelValues, tr.LabelValues) {
				t.Errorf("test labels %v %v, want %v %v", te.Y, te.LabelValues, tt.y, tr.LabelValues)
			}
		})
	}
	if _, _, err := OpenPair(filepath.Join(dir, "missing"), train); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing train: %v", err)
	}
}

func TestInspect(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "small.gz", "+1 1:1 4:1\n-1\n-1 2:1 3:0\n", true)
	got, err := Inspect(path)
	if err != nil {
		t.Fatal(err)
	}
	want := Info{
		Path: path, Format: FormatLIBSVM, Gzip: true,
		Samples: 3, Features: 4, Classes: 2,
		ClassCounts: []int{2, 1}, LabelValues: []float64{-1, 1},
		NNZ: 3, Density: 0.25, Label: "the first token of each line (LIBSVM)",
	}
	if got.String() != want.String() || !slices.Equal(got.ClassCounts, want.ClassCounts) {
		t.Errorf("Inspect =\n%v\nwant\n%v", got, want)
	}
	for _, s := range []string{"libsvm (gzip)", "samples:   3", "features:  4", "-1:", "2 (66.67%)", "density 0.25"} {
		if !strings.Contains(got.String(), s) {
			t.Errorf("report does not contain %q:\n%s", s, got)
		}
	}

	// Multiclass, unsorted labels in the file: counts follow the classes.
	path = writeFile(t, dir, "multi", "3 1:1\n1 1:1\n3 2:1\n2\n3\n", false)
	if got, err = Inspect(path); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.LabelValues, []float64{1, 2, 3}) || !slices.Equal(got.ClassCounts, []int{1, 1, 3}) || got.Gzip {
		t.Errorf("multiclass: %+v", got)
	}

	for _, bad := range []struct {
		path string
		want error
	}{
		{writeFile(t, dir, "bad", "+1 2:1 1:1\n", false), ErrFormat},
		{writeFile(t, dir, "c.csv", "a,b\n1,x\n", false), ErrFormat},
		{dir, ErrUnknownFormat},
	} {
		if _, err := Inspect(bad.path); !errors.Is(err, bad.want) {
			t.Errorf("Inspect(%s): error %v, want %v", bad.path, err, bad.want)
		}
	}
}

func TestInfoStringManyClasses(t *testing.T) {
	in := Info{Samples: 30, Classes: 30, ClassCounts: make([]int, 30)}
	s := in.String()
	if !strings.Contains(s, "and 10 more classes") || !strings.Contains(s, "format:    unknown") {
		t.Errorf("report:\n%s", s)
	}
}

func TestDetectFormat(t *testing.T) {
	long := "-1" + strings.Repeat(" 12345:0.123456", 10000) // longer than sniffSize
	tests := []struct {
		name  string
		head  string
		atEOF bool
		want  string
	}{
		{"libsvm", "+1 1:1 2:1\n-1 3:1\n", true, FormatLIBSVM},
		{"libsvm qid", "2 qid:1 1:0.5\n", true, FormatLIBSVM},
		{"libsvm leading blank and comment", "\n# header\n-1 1:1\n", true, FormatLIBSVM},
		{"libsvm label-only lines", "-1\n-1 \n+1 2:1\n", true, FormatLIBSVM},
		{"libsvm cut line", "+1 1:1\n-1 2:1 3:0.12", false, FormatLIBSVM},
		{"libsvm cut in the last token", "+1 1:1\n-1 2:1 3:0.1\xe2", false, FormatLIBSVM},
		{"libsvm line longer than the head", long[:sniffSize], false, FormatLIBSVM},
		{"csv", "a,b,c\n1,2,3\n", true, FormatCSV},
		{"csv quoted header", "\"ID\",\"LIMIT_BAL\"\n1,2\n", true, FormatCSV},
		{"idx", "\x00\x00\x08\x03\x00\x00\x00\x01", true, FormatIDX},
		{"empty", "", true, ""},
		{"blank", " \n\n", true, ""},
		{"prose", "hello world\n", true, ""},
		{"label then junk", "+1 foo\n", true, ""},
		{"second line junk", "+1 1:1\nfoo bar\n", true, ""},
		{"nul bytes", "+1 1:1\x00\n", true, ""},
		{"invalid utf-8", "+1 1:1 \xff\n", true, ""},
		{"one token cut", strings.Repeat("1", 100), false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := detectFormat([]byte(tt.head), tt.atEOF); got != tt.want {
				t.Errorf("detectFormat = %q, want %q", got, tt.want)
			}
		})
	}
}

// FuzzDetectFormat checks that detection never panics and that what it
// calls LIBSVM at EOF is either read by ReadLIBSVM or rejected with a
// format error (detection looks at the shape of tokens only).
func FuzzDetectFormat(f *testing.F) {
	for _, s := range []string{"+1 1:1\n", "a,b\n", "\x00\x00\x08\x01", "", "-1 qid:2 3:x\n"} {
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, head []byte, atEOF bool) {
		got := detectFormat(head, atEOF)
		switch got {
		case "", FormatLIBSVM, FormatCSV, FormatIDX:
		default:
			t.Fatalf("detectFormat = %q", got)
		}
		if got == FormatLIBSVM && atEOF {
			if _, err := ReadLIBSVM(bytes.NewReader(head), LIBSVMOptions{}); err != nil && !errors.Is(err, ErrFormat) {
				t.Fatalf("ReadLIBSVM: %v", err)
			}
		}
	})
}

// FuzzOpen feeds arbitrary (possibly gzip) file content through Open: it
// must load or fail with one of the package's errors, never panic.
func FuzzOpen(f *testing.F) {
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	w.Write([]byte("+1 1:1\n-1 2:1\n"))
	w.Close()
	f.Add(gz.Bytes())
	f.Add(gz.Bytes()[:gz.Len()-5])
	f.Add([]byte("+1 1:1\n"))
	f.Add([]byte("a,b\n"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "f")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		d, err := Open(path, OpenOptions{})
		if err != nil {
			if !errors.Is(err, ErrFormat) && !errors.Is(err, ErrUnknownFormat) {
				t.Fatalf("error %v wraps no sentinel", err)
			}
			return
		}
		if err := d.X.Check(); err != nil {
			t.Fatal(err)
		}
	})
}
