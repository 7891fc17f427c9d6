package dataset

import (
	"bytes"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// shapeText streams deterministic LIBSVM text of a given shape without
// holding it: rows of cols features, each present with probability density,
// with values of the form ±0.dddddd. It records what a reader must find.
type shapeText struct {
	rows, cols int
	density    float64
	r          *rand.Rand
	row        int
	buf        []byte
	off        int

	// Expected content.
	nnz       int
	positives int
	valueSum  float64 // sum of the values as ReadLIBSVM stores them
	indexSum  int64   // sum of the 0-based column indices
}

func newShapeText(rows, cols int, density float64, seed uint64) *shapeText {
	return &shapeText{rows: rows, cols: cols, density: density, r: rand.New(rand.NewPCG(seed, 99))}
}

func (s *shapeText) Read(p []byte) (int, error) {
	for s.off == len(s.buf) {
		if s.row == s.rows {
			return 0, io.EOF
		}
		s.buf, s.off = s.line(s.buf[:0]), 0
		s.row++
	}
	n := copy(p, s.buf[s.off:])
	s.off += n
	return n, nil
}

// line appends the next sample.
func (s *shapeText) line(b []byte) []byte {
	if s.r.IntN(4) == 0 {
		b = append(b, "+1"...)
		s.positives++
	} else {
		b = append(b, "-1"...)
	}
	logq := math.Log1p(-s.density)
	for j := 0; ; j++ {
		if s.density < 1 {
			j += int(math.Floor(math.Log(1-s.r.Float64()) / logq))
		}
		if j >= s.cols {
			break
		}
		m := 1 + s.r.IntN(999999)
		neg := s.r.IntN(2) == 0
		b = append(b, ' ')
		b = appendUint(b, j+1)
		b = append(b, ':')
		if neg {
			b = append(b, '-')
		}
		b = append(b, "0."...)
		for d := 100000; d > 0; d /= 10 {
			b = append(b, byte('0'+m/d%10))
		}
		v := float32(m) / 1e6
		if neg {
			v = -v
		}
		s.nnz++
		s.valueSum += float64(v)
		s.indexSum += int64(j)
	}
	return append(b, '\n')
}

func appendUint(b []byte, n int) []byte {
	var tmp [20]byte
	i := len(tmp)
	for {
		i--
		tmp[i] = byte('0' + n%10)
		if n /= 10; n == 0 {
			break
		}
	}
	return append(b, tmp[i:]...)
}

// TestLargeShapes loads rcv1- and epsilon-shaped LIBSVM text, streamed from
// a generator: by default at full width and a fraction of the rows, in full
// with ASYREVEL_BIG=1 (rcv1: about 50M non-zeros, 0.8 GB of text; epsilon:
// 800M non-zeros, 8 GB of text, 10 GB of memory at the peak and a few
// minutes).
func TestLargeShapes(t *testing.T) {
	full := os.Getenv("ASYREVEL_BIG") == "1"
	tests := []struct {
		name       string
		rows, cols int
		density    float64
		fullRows   int
	}{
		{"rcv1", 677399 / 40, 47236, 0.00155, 677399},
		{"epsilon", 1000, 2000, 1, 400000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rows := tt.rows
			if full {
				rows = tt.fullRows
			} else if testing.Short() {
				rows /= 10
			}
			src := newShapeText(rows, tt.cols, tt.density, 1)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			start := time.Now()
			d, err := ReadLIBSVM(src, LIBSVMOptions{Features: tt.cols})
			if err != nil {
				t.Fatal(err)
			}
			elapsed := time.Since(start)
			if d.X.NRows != rows || d.X.NCols != tt.cols || d.X.NNZ() != src.nnz || d.Classes != 2 {
				t.Fatalf("%d x %d, nnz %d, %d classes; want %d x %d, nnz %d", d.X.NRows, d.X.NCols, d.X.NNZ(), d.Classes, rows, tt.cols, src.nnz)
			}
			if cap(d.X.Indices) != src.nnz || cap(d.X.Values) != src.nnz {
				t.Errorf("capacity %d, %d for %d entries", cap(d.X.Indices), cap(d.X.Values), src.nnz)
			}
			var vs float64
			var is int64
			pos := 0
			for _, v := range d.X.Values {
				vs += float64(v)
			}
			for _, j := range d.X.Indices {
				is += int64(j)
			}
			for _, y := range d.Y {
				pos += int(y)
			}
			if vs != src.valueSum || is != src.indexSum || pos != src.positives {
				t.Errorf("sums: values %v, indices %d, positives %d; want %v, %d, %d", vs, is, pos, src.valueSum, src.indexSum, src.positives)
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			kept := float64(after.HeapAlloc) - float64(before.HeapAlloc)
			t.Logf("%d x %d, %d non-zeros in %v (text generated on the fly); retained %.0f MB (%.2f bytes/entry), peak RSS %s",
				rows, tt.cols, src.nnz, elapsed, kept/1e6, kept/float64(src.nnz), peakRSS())
			runtime.KeepAlive(d)
		})
	}
}

// peakRSS reads the process's peak resident set size on Linux.
func peakRSS() string {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "unknown"
	}
	for line := range bytes.Lines(status) {
		if rest, ok := bytes.CutPrefix(line, []byte("VmHWM:")); ok {
			return strings.TrimSpace(string(rest))
		}
	}
	return "unknown"
}

// TestLargeVerticalSplit splits an rcv1-width matrix and checks that the
// parts add up.
func TestLargeVerticalSplit(t *testing.T) {
	tr, _, err := Synthetic(SyntheticConfig{Samples: 20000, Features: 47236, Density: 0.00155, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	parts, _, err := VerticalSplit(tr.X, 8)
	if err != nil {
		t.Fatal(err)
	}
	nnz := 0
	for _, p := range parts {
		if err := p.Check(); err != nil {
			t.Fatal(err)
		}
		nnz += p.NNZ()
	}
	if nnz != tr.X.NNZ() {
		t.Errorf("parts hold %d entries, want %d", nnz, tr.X.NNZ())
	}
}
