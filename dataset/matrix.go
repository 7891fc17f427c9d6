package dataset

import "fmt"

// Matrix is a row-major sparse matrix in compressed sparse row (CSR) form.
// Row i holds the column indices Indices[Indptr[i]:Indptr[i+1]] (strictly
// increasing) and the values Values[Indptr[i]:Indptr[i+1]]. Memory is
// proportional to the number of non-zeros: 8 bytes per stored entry plus 8
// bytes per row.
//
// A Matrix is read-only once built; it is safe for concurrent readers.
type Matrix struct {
	NRows, NCols int
	Indptr       []int64
	Indices      []int32
	Values       []float32
}

// Row returns the column indices and values of row i. The slices alias the
// matrix and must not be modified.
func (m *Matrix) Row(i int) (idx []int32, val []float32) {
	lo, hi := m.Indptr[i], m.Indptr[i+1]
	return m.Indices[lo:hi], m.Values[lo:hi]
}

// NNZ is the number of stored entries.
func (m *Matrix) NNZ() int { return len(m.Indices) }

// Check verifies the structural invariants of m and returns a descriptive
// error for the first violation.
func (m *Matrix) Check() error {
	if m.NRows < 0 || m.NCols < 0 {
		return fmt.Errorf("%w: negative shape %dx%d", ErrFormat, m.NRows, m.NCols)
	}
	if len(m.Indptr) != m.NRows+1 {
		return fmt.Errorf("%w: indptr has %d entries, want %d", ErrFormat, len(m.Indptr), m.NRows+1)
	}
	if m.Indptr[0] != 0 || m.Indptr[m.NRows] != int64(len(m.Indices)) || len(m.Indices) != len(m.Values) {
		return fmt.Errorf("%w: indptr/indices/values disagree", ErrFormat)
	}
	for i := 0; i < m.NRows; i++ {
		lo, hi := m.Indptr[i], m.Indptr[i+1]
		if hi < lo {
			return fmt.Errorf("%w: row %d has negative length", ErrFormat, i)
		}
		prev := int32(-1)
		for _, j := range m.Indices[lo:hi] {
			if j <= prev || int(j) >= m.NCols {
				return fmt.Errorf("%w: row %d: column %d out of order or out of range [0,%d)", ErrFormat, i, j, m.NCols)
			}
			prev = j
		}
	}
	return nil
}

// Rows returns a new matrix holding the rows of m listed in rows, in that
// order (a row may repeat), with m's columns. It panics if a row is out of
// range.
func (m *Matrix) Rows(rows []int) *Matrix {
	indptr := make([]int64, len(rows)+1)
	var nnz int64
	for k, i := range rows {
		nnz += m.Indptr[i+1] - m.Indptr[i]
		indptr[k+1] = nnz
	}
	out := &Matrix{NRows: len(rows), NCols: m.NCols, Indptr: indptr,
		Indices: make([]int32, nnz), Values: make([]float32, nnz)}
	for k, i := range rows {
		lo, hi := m.Indptr[i], m.Indptr[i+1]
		copy(out.Indices[indptr[k]:], m.Indices[lo:hi])
		copy(out.Values[indptr[k]:], m.Values[lo:hi])
	}
	return out
}
