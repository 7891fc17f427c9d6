package dataset

import (
	"fmt"
	"slices"
)

// Block is the half-open column range [Lo, Hi) held by one party.
type Block struct {
	Lo int `json:"lo"`
	Hi int `json:"hi"`
}

// Len is the number of columns in b.
func (b Block) Len() int { return b.Hi - b.Lo }

// Blocks splits cols columns into q contiguous blocks of nearly equal width:
// the widths differ by at most one and the wider blocks come first, so 123
// columns over 8 parties are 16,16,16,15,15,15,15,15. It returns an error
// unless 1 <= q <= cols.
func Blocks(cols, q int) ([]Block, error) {
	if q < 1 || q > cols {
		return nil, fmt.Errorf("dataset: cannot split %d columns into %d blocks: need 1 <= blocks <= columns", cols, q)
	}
	base, extra := cols/q, cols%q
	blocks := make([]Block, q)
	lo := 0
	for m := range blocks {
		w := base
		if m < extra {
			w++
		}
		blocks[m] = Block{Lo: lo, Hi: lo + w}
		lo += w
	}
	return blocks, nil
}

// Columns returns a new matrix holding the columns [lo, hi) of m, re-indexed
// from 0, with the same rows. It makes one pass over the rows, finding each
// row's range by binary search, and allocates exactly. Columns panics if
// [lo, hi) is not a column range of m.
func (m *Matrix) Columns(lo, hi int) *Matrix {
	if lo < 0 || hi < lo || hi > m.NCols {
		panic(fmt.Sprintf("dataset: column range [%d,%d) out of [0,%d)", lo, hi, m.NCols))
	}
	// First the row lengths, by binary search in each sorted row, then one
	// copy of the entries into exactly sized slices.
	indptr := make([]int64, m.NRows+1)
	var nnz int64
	for i := range m.NRows {
		_, n := m.rowRange(i, lo, hi)
		nnz += n
		indptr[i+1] = nnz
	}
	out := &Matrix{
		NRows:   m.NRows,
		NCols:   hi - lo,
		Indptr:  indptr,
		Indices: make([]int32, nnz),
		Values:  make([]float32, nnz),
	}
	shift := int32(lo)
	for i := range m.NRows {
		s, n := m.rowRange(i, lo, hi)
		d := indptr[i]
		copy(out.Values[d:d+n], m.Values[s:s+n])
		dst := out.Indices[d : d+n]
		for k, j := range m.Indices[s : s+n] {
			dst[k] = j - shift
		}
	}
	return out
}

// rowRange returns the offset into m.Indices of the first entry of row i in
// the columns [lo, hi), and the number of such entries.
func (m *Matrix) rowRange(i, lo, hi int) (start, n int64) {
	a, b := m.Indptr[i], m.Indptr[i+1]
	row := m.Indices[a:b]
	s, _ := slices.BinarySearch(row, int32(lo))
	e, _ := slices.BinarySearch(row[s:], int32(hi))
	return a + int64(s), int64(e)
}

// VerticalSplit splits x by columns into q blocks, as Blocks(x.NCols, q)
// defines them, one matrix per party with its columns re-indexed from 0.
func VerticalSplit(x *Matrix, q int) ([]*Matrix, []Block, error) {
	blocks, err := Blocks(x.NCols, q)
	if err != nil {
		return nil, nil, err
	}
	parts := make([]*Matrix, q)
	for m, b := range blocks {
		parts[m] = x.Columns(b.Lo, b.Hi)
	}
	return parts, blocks, nil
}
