package dataset

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// matrixOf builds a Matrix from dense rows.
func matrixOf(rows [][]float32) *Matrix {
	m := &Matrix{NRows: len(rows), Indptr: []int64{0}}
	if len(rows) > 0 {
		m.NCols = len(rows[0])
	}
	for _, r := range rows {
		for j, v := range r {
			if v != 0 {
				m.Indices = append(m.Indices, int32(j))
				m.Values = append(m.Values, v)
			}
		}
		m.Indptr = append(m.Indptr, int64(len(m.Indices)))
	}
	return m
}

func TestScaler(t *testing.T) {
	// Column 0: 0, 2, 4 (mean 2, std sqrt(8/3)); column 1: 0, 0, 3 (sparse,
	// non-negative); column 2: constant 5; column 3: -1, 0, 1.
	train := matrixOf([][]float32{{0, 0, 5, -1}, {2, 0, 5, 0}, {4, 3, 5, 1}})
	test := matrixOf([][]float32{{6, 0, 5, 0}})
	sd0, sd1, sd3 := math.Sqrt(8.0/3), math.Sqrt(2), math.Sqrt(2.0/3)
	tests := []struct {
		method    ScaleMethod
		train     [][]float64
		test      []float64
		denseCols int
	}{
		{ScaleNone, [][]float64{{0, 0, 5, -1}, {2, 0, 5, 0}, {4, 3, 5, 1}}, []float64{6, 0, 5, 0}, 0},
		{ScaleStandard, [][]float64{{-2 / sd0, -1 / sd1, 0, -1 / sd3}, {0, -1 / sd1, 0, 0}, {2 / sd0, 2 / sd1, 0, 1 / sd3}}, []float64{4 / sd0, -1 / sd1, 0, 0}, 3},
		{ScaleStd, [][]float64{{0, 0, 5, -1 / sd3}, {2 / sd0, 0, 5, 0}, {4 / sd0, 3 / sd1, 5, 1 / sd3}}, []float64{6 / sd0, 0, 5, 0}, 0},
		{ScaleMinMax, [][]float64{{0, 0, 0, 0}, {0.5, 0, 0, 0.5}, {1, 1, 0, 1}}, []float64{1.5, 0, 0, 0.5}, 2},
		{ScaleMaxAbs, [][]float64{{0, 0, 1, -1}, {0.5, 0, 1, 0}, {1, 1, 1, 1}}, []float64{1.5, 0, 1, 0}, 0},
	}
	for _, tt := range tests {
		t.Run(string(tt.method)+"/", func(t *testing.T) {
			s := NewScaler(tt.method)
			if err := s.Fit(train); err != nil {
				t.Fatal(err)
			}
			if len(s.Dense()) != tt.denseCols {
				t.Errorf("dense columns %v, want %d", s.Dense(), tt.denseCols)
			}
			for k, c := range []struct {
				m    *Matrix
				want [][]float64
			}{{train, tt.train}, {test, [][]float64{tt.test}}} {
				got, err := s.Apply(c.m)
				if err != nil {
					t.Fatal(err)
				}
				if err := got.Check(); err != nil {
					t.Fatal(err)
				}
				if n := s.Entries(c.m); int64(got.NNZ()) > n {
					t.Errorf("%d entries, Entries said at most %d", got.NNZ(), n)
				}
				for i, row := range dense(got) {
					for j, v := range row {
						if math.Abs(float64(v)-c.want[i][j]) > 1e-6 {
							t.Errorf("set %d [%d][%d] = %v, want %v", k, i, j, v, c.want[i][j])
						}
					}
				}
			}
		})
	}
}

func TestScalerErrors(t *testing.T) {
	m := matrixOf([][]float32{{1, 0}, {3, 0}})
	s := NewScaler(ScaleStandard)
	if err := s.Fit(m); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(matrixOf([][]float32{{1, 2, 3}})); !errors.Is(err, ErrMismatch) {
		t.Errorf("wrong width: %v", err)
	}
	// A sparse matrix that centring would densify beyond the limit.
	sparse := &Matrix{NRows: 1000, NCols: 1000, Indptr: make([]int64, 1001)}
	for i := range 1000 {
		sparse.Indices = append(sparse.Indices, int32(i))
		sparse.Values = append(sparse.Values, 1)
		sparse.Indptr[i+1] = int64(i + 1)
	}
	s = &Scaler{Method: ScaleStandard, MaxEntries: 100000}
	if err := s.Fit(sparse); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(sparse); !errors.Is(err, ErrTooDense) || !strings.Contains(err.Error(), `"std"`) {
		t.Errorf("densify: %v", err)
	}
	s = &Scaler{Method: ScaleStd, MaxEntries: 1000}
	if err := s.Fit(sparse); err != nil {
		t.Fatal(err)
	}
	if out, err := s.Apply(sparse); err != nil || out.NNZ() != 1000 {
		t.Errorf("std on sparse: %v", err)
	}
	if err := NewScaler("zscore").Fit(m); err == nil {
		t.Error("unknown method fitted")
	}
	for _, c := range []struct {
		in   string
		want ScaleMethod
	}{{"", ScaleNone}, {"none", ScaleNone}, {"standard", ScaleStandard}, {"maxabs", ScaleMaxAbs}} {
		if got, err := ParseScaleMethod(c.in); err != nil || got != c.want {
			t.Errorf("ParseScaleMethod(%q) = %q, %v", c.in, got, err)
		}
	}
	if _, err := ParseScaleMethod("z"); err == nil || !strings.Contains(err.Error(), "minmax") {
		t.Errorf("ParseScaleMethod(z): %v", err)
	}
}
