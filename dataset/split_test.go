package dataset

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestBlocks(t *testing.T) {
	tests := []struct {
		cols, q int
		widths  []int
	}{
		{123, 8, []int{16, 16, 16, 15, 15, 15, 15, 15}},
		{300, 8, []int{38, 38, 38, 38, 37, 37, 37, 37}},
		{784, 4, []int{196, 196, 196, 196}},
		{10, 1, []int{10}},
		{5, 5, []int{1, 1, 1, 1, 1}},
		{7, 3, []int{3, 2, 2}},
		{47236, 7, []int{6748, 6748, 6748, 6748, 6748, 6748, 6748}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d/%d", tt.cols, tt.q), func(t *testing.T) {
			blocks, err := Blocks(tt.cols, tt.q)
			if err != nil {
				t.Fatal(err)
			}
			widths := make([]int, len(blocks))
			lo := 0
			for m, b := range blocks {
				if b.Lo != lo {
					t.Errorf("block %d starts at %d, want %d", m, b.Lo, lo)
				}
				widths[m], lo = b.Len(), b.Hi
			}
			if lo != tt.cols || !slices.Equal(widths, tt.widths) {
				t.Errorf("widths %v ending at %d, want %v ending at %d", widths, lo, tt.widths, tt.cols)
			}
		})
	}
}

func TestBlocksErrors(t *testing.T) {
	for _, tt := range []struct{ cols, q int }{{10, 0}, {10, -1}, {10, 11}, {0, 1}, {0, 0}} {
		if b, err := Blocks(tt.cols, tt.q); err == nil || !strings.Contains(err.Error(), "blocks") {
			t.Errorf("Blocks(%d, %d) = %v, %v; want an error", tt.cols, tt.q, b, err)
		}
	}
}

func TestColumns(t *testing.T) {
	d, err := ReadLIBSVM(strings.NewReader("+1 1:1 2:2 5:5\n-1\n+1 3:3 4:4\n-1 2:7 3:8 4:9 5:10\n"), LIBSVMOptions{})
	if err != nil {
		t.Fatal(err)
	}
	full := dense(d.X)
	for lo := 0; lo <= 5; lo++ {
		for hi := lo; hi <= 5; hi++ {
			sub := d.X.Columns(lo, hi)
			if err := sub.Check(); err != nil {
				t.Fatalf("[%d,%d): %v", lo, hi, err)
			}
			if cap(sub.Indices) != sub.NNZ() || cap(sub.Values) != sub.NNZ() {
				t.Errorf("[%d,%d): capacity %d/%d for %d entries", lo, hi, cap(sub.Indices), cap(sub.Values), sub.NNZ())
			}
			got := dense(sub)
			for i := range full {
				if !slices.Equal(got[i], full[i][lo:hi]) {
					t.Errorf("[%d,%d) row %d = %v, want %v", lo, hi, i, got[i], full[i][lo:hi])
				}
			}
		}
	}
	for _, r := range [][2]int{{-1, 2}, {3, 2}, {0, 6}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Columns(%d, %d) did not panic", r[0], r[1])
				}
			}()
			d.X.Columns(r[0], r[1])
		}()
	}
}

func TestVerticalSplit(t *testing.T) {
	x, _, err := Synthetic(SyntheticConfig{Samples: 1000, Features: 123, Density: 0.1, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []int{1, 2, 3, 8, 123} {
		parts, blocks, err := VerticalSplit(x.X, q)
		if err != nil {
			t.Fatal(err)
		}
		if len(parts) != q || len(blocks) != q {
			t.Fatalf("q=%d: %d parts, %d blocks", q, len(parts), len(blocks))
		}
		// Joining the parts row by row gives back the matrix.
		nnz := 0
		for i := range x.X.NRows {
			var idx []int32
			var val []float32
			for m, p := range parts {
				if p.NRows != x.X.NRows || p.NCols != blocks[m].Len() {
					t.Fatalf("q=%d part %d is %dx%d", q, m, p.NRows, p.NCols)
				}
				pi, pv := p.Row(i)
				for k := range pi {
					idx = append(idx, pi[k]+int32(blocks[m].Lo))
				}
				val = append(val, pv...)
			}
			wi, wv := x.X.Row(i)
			if !slices.Equal(idx, wi) || !slices.Equal(val, wv) {
				t.Fatalf("q=%d row %d differs", q, i)
			}
			nnz += len(idx)
		}
		if nnz != x.X.NNZ() {
			t.Errorf("q=%d: %d entries, want %d", q, nnz, x.X.NNZ())
		}
	}
	if _, _, err := VerticalSplit(x.X, 124); err == nil {
		t.Error("q > columns: no error")
	}
}
