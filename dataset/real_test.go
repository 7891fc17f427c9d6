package dataset

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// dataDir finds the offline data sets: $ASYREVEL_DATA, else shared/data
// next to the repository (../../shared/data from this package), else
// /work/shared/data. It skips the test if none exists.
func dataDir(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("short: reads the real data sets")
	}
	candidates := []string{os.Getenv("ASYREVEL_DATA"), filepath.Join("..", "..", "shared", "data"), "/work/shared/data"}
	for _, dir := range candidates {
		if dir == "" {
			continue
		}
		if fi, err := os.Stat(filepath.Join(dir, "a9a")); err == nil && fi.IsDir() {
			return dir
		}
	}
	t.Skip("real data sets not found (looked in $ASYREVEL_DATA, ../../shared/data and /work/shared/data); skipping")
	return ""
}

// realFile is a data file described in shared/data/MANIFEST.md.
type realFile struct {
	path              string
	samples, features int // features: as loaded (test files padded to the training width)
	nnz               int
	positives         int
}

var (
	a9a  = realFile{"a9a/a9a.gz", 32561, 123, 451592, 7841}
	a9aT = realFile{"a9a/a9a.t.gz", 16281, 123, 225731, 3846}
	w8a  = realFile{"w8a/w8a.gz", 49749, 300, 579586, 1479}
	w8aT = realFile{"w8a/w8a.t.gz", 14951, 300, 174276, 454}
)

func TestRealPairs(t *testing.T) {
	dir := dataDir(t)
	for _, pair := range [][2]realFile{{a9a, a9aT}, {w8a, w8aT}} {
		t.Run(filepath.Base(pair[0].path), func(t *testing.T) {
			tr, te, err := OpenPair(filepath.Join(dir, pair[0].path), filepath.Join(dir, pair[1].path))
			if err != nil {
				t.Fatal(err)
			}
			for k, d := range []*Dataset{tr, te} {
				want := pair[k]
				if err := d.X.Check(); err != nil {
					t.Fatalf("%s: %v", d.Name, err)
				}
				pos := 0
				for _, y := range d.Y {
					pos += int(y)
				}
				if d.Len() != want.samples || d.X.NCols != want.features || d.X.NNZ() != want.nnz || pos != want.positives {
					t.Errorf("%s: %d x %d, nnz %d, %d positives; want %d x %d, nnz %d, %d positives",
						d.Name, d.Len(), d.X.NCols, d.X.NNZ(), pos, want.samples, want.features, want.nnz, want.positives)
				}
				if d.Classes != 2 || d.LabelValues[0] != -1 || d.LabelValues[1] != 1 {
					t.Errorf("%s: classes %d %v", d.Name, d.Classes, d.LabelValues)
				}
			}
		})
	}
}

func TestRealInspect(t *testing.T) {
	dir := dataDir(t)
	tests := []struct {
		file     realFile
		features int // highest index, as Inspect reports it
	}{{a9a, 123}, {a9aT, 122}, {w8a, 300}, {w8aT, 300}}
	for _, tt := range tests {
		t.Run(tt.file.path, func(t *testing.T) {
			info, err := Inspect(filepath.Join(dir, tt.file.path))
			if err != nil {
				t.Fatal(err)
			}
			if info.Format != FormatLIBSVM || !info.Gzip || info.Samples != tt.file.samples || info.Features != tt.features ||
				info.NNZ != tt.file.nnz || info.Classes != 2 || info.ClassCounts[1] != tt.file.positives ||
				info.ClassCounts[0] != tt.file.samples-tt.file.positives {
				t.Errorf("Inspect:\n%v", info)
			}
		})
	}
	// A single IDX file is recognised and refused: its folder is the data set.
	if _, err := Inspect(filepath.Join(dir, "mnist/train-labels-idx1-ubyte.gz")); !errors.Is(err, ErrUnknownFormat) || !strings.Contains(err.Error(), "folder") {
		t.Errorf("Inspect(an IDX file): %v", err)
	}
}

// a9aText returns the decompressed a9a training file.
func a9aText(b *testing.B) []byte {
	f, err := os.Open(filepath.Join(dataDir(b), a9a.path))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		b.Fatal(err)
	}
	raw, err := io.ReadAll(gz)
	if err != nil {
		b.Fatal(err)
	}
	return raw
}

// BenchmarkReadLIBSVMa9a parses the decompressed a9a text (MB/s of text).
func BenchmarkReadLIBSVMa9a(b *testing.B) {
	raw := a9aText(b)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		d, err := ReadLIBSVM(bytes.NewReader(raw), LIBSVMOptions{})
		if err != nil || d.X.NNZ() != a9a.nnz {
			b.Fatal(d, err)
		}
	}
}

// BenchmarkOpenA9a loads a9a.gz from disk, decompression included (MB/s of
// decompressed text).
func BenchmarkOpenA9a(b *testing.B) {
	raw := a9aText(b)
	path := filepath.Join(dataDir(b), a9a.path)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Open(path, OpenOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}
