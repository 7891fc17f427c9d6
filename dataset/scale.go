package dataset

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// ScaleMethod names a per-column scaling; see Scaler.
type ScaleMethod string

// Scaling methods. Statistics are taken over every row of the matrix the
// Scaler is fitted on, implicit zeros included.
const (
	// ScaleNone leaves values as they are.
	ScaleNone ScaleMethod = ""
	// ScaleStandard standardises: (x - mean) / std. Centring turns the
	// zeros of a column with a non-zero mean into non-zeros, so the result
	// stores every entry of such columns: fine for a few hundred columns,
	// not for a large sparse set (see Scaler.MaxEntries and ScaleStd).
	ScaleStandard ScaleMethod = "standard"
	// ScaleStd divides by the standard deviation without centring,
	// x / std (scikit-learn's StandardScaler(with_mean=False)): unit
	// variance, and zeros stay zeros, so sparse sets stay sparse.
	ScaleStd ScaleMethod = "std"
	// ScaleMinMax maps the training range to [0, 1]: (x - min) / (max - min).
	// A column whose minimum is 0 (any sparse column of non-negative
	// values) stays sparse; others become dense as with ScaleStandard.
	// Test values outside the training range fall outside [0, 1].
	ScaleMinMax ScaleMethod = "minmax"
	// ScaleMaxAbs divides by the largest absolute value, into [-1, 1];
	// zeros stay zeros.
	ScaleMaxAbs ScaleMethod = "maxabs"
)

// ScaleMethods lists the methods, for usage messages.
var ScaleMethods = []ScaleMethod{ScaleStandard, ScaleStd, ScaleMinMax, ScaleMaxAbs}

// ParseScaleMethod reads a method name; "" and "none" are ScaleNone.
func ParseScaleMethod(s string) (ScaleMethod, error) {
	if s == "" || s == "none" {
		return ScaleNone, nil
	}
	if m := ScaleMethod(s); slices.Contains(ScaleMethods, m) {
		return m, nil
	}
	names := make([]string, len(ScaleMethods))
	for k, m := range ScaleMethods {
		names[k] = string(m)
	}
	return "", fmt.Errorf("dataset: unknown scaling %q (want none, %s)", s, strings.Join(names, ", "))
}

// DefaultMaxEntries is the default bound on the entries a Scaler stores:
// 2^28 entries, 2 GB.
const DefaultMaxEntries = 1 << 28

// Scaler scales each column x_j of a matrix to (x_j - Shift[j]) * Factor[j].
// Fit it on the training set only and apply it to the training and the
// test set, so that no statistic of the test set leaks into training. In
// a vertical split every column belongs to one party, so a party can fit
// and apply the scaling of its own columns alone: the result is the same.
//
// A column with a non-zero Shift is stored dense by Apply, because its
// zeros become non-zeros: this is the honest cost of centring sparse data.
// Apply refuses (ErrTooDense) when that would exceed MaxEntries; use
// ScaleStd or ScaleMaxAbs, which never shift, for large sparse sets.
type Scaler struct {
	Method ScaleMethod `json:"method"`
	Shift  []float64   `json:"shift"`
	Factor []float64   `json:"factor"`

	// MaxEntries bounds the entries Apply stores; 0 means
	// DefaultMaxEntries.
	MaxEntries int64 `json:"-"`
}

// NewScaler returns an unfitted Scaler for method.
func NewScaler(method ScaleMethod) *Scaler { return &Scaler{Method: method} }

// Fit computes the scaling from m. A constant column gets factor 1 (and,
// for ScaleStandard, becomes 0). ScaleNone fits the identity.
func (s *Scaler) Fit(m *Matrix) error {
	if s.Method != ScaleNone && !slices.Contains(ScaleMethods, s.Method) {
		return fmt.Errorf("dataset: unknown scaling %q", s.Method)
	}
	d, n := m.NCols, float64(m.NRows)
	count := make([]int, d)
	sum := make([]float64, d)
	lo, hi := make([]float64, d), make([]float64, d)
	for k := range lo {
		lo[k], hi[k] = math.Inf(1), math.Inf(-1)
	}
	for k, j := range m.Indices {
		v := float64(m.Values[k])
		count[j]++
		sum[j] += v
		lo[j], hi[j] = min(lo[j], v), max(hi[j], v)
	}
	mean := make([]float64, d)
	for j := range d {
		if n > 0 {
			mean[j] = sum[j] / n
		}
		if count[j] < m.NRows { // implicit zeros
			lo[j], hi[j] = min(lo[j], 0), max(hi[j], 0)
		}
		if count[j] == 0 && m.NRows == 0 {
			lo[j], hi[j] = 0, 0
		}
	}
	ss := make([]float64, d) // sum of squared deviations, two-pass
	for k, j := range m.Indices {
		dv := float64(m.Values[k]) - mean[j]
		ss[j] += dv * dv
	}
	s.Shift, s.Factor = make([]float64, d), make([]float64, d)
	for j := range d {
		std := 0.0
		if n > 0 {
			std = math.Sqrt((ss[j] + float64(m.NRows-count[j])*mean[j]*mean[j]) / n)
		}
		inv := func(x float64) float64 {
			if x == 0 || math.IsNaN(x) || math.IsInf(1/x, 0) {
				return 1
			}
			return 1 / x
		}
		switch s.Method {
		case ScaleNone:
			s.Factor[j] = 1
		case ScaleStandard:
			s.Shift[j], s.Factor[j] = mean[j], inv(std)
		case ScaleStd:
			s.Factor[j] = inv(std)
		case ScaleMinMax:
			s.Shift[j], s.Factor[j] = lo[j], inv(hi[j]-lo[j])
		case ScaleMaxAbs:
			s.Factor[j] = inv(max(-lo[j], hi[j]))
		}
	}
	return nil
}

// Dense returns the columns that Apply stores dense (non-zero Shift).
func (s *Scaler) Dense() []int {
	var cols []int
	for j, sh := range s.Shift {
		if sh != 0 {
			cols = append(cols, j)
		}
	}
	return cols
}

// Entries bounds the entries Apply(m) stores: m's entries outside the dense
// columns plus every entry of the dense columns.
func (s *Scaler) Entries(m *Matrix) int64 {
	dense := s.Dense()
	n := int64(m.NNZ())
	if len(dense) > 0 {
		inDense := int64(0)
		isDense := make([]bool, m.NCols)
		for _, j := range dense {
			isDense[j] = true
		}
		for _, j := range m.Indices {
			if isDense[j] {
				inDense++
			}
		}
		n += int64(m.NRows)*int64(len(dense)) - inDense
	}
	return n
}

// Apply returns a new matrix with every column scaled. m must have the
// columns the Scaler was fitted on (ErrMismatch). Values are computed in
// float64 and stored as float32; results that are exactly 0 are not stored.
// If the result would hold more than MaxEntries entries, Apply returns an
// error wrapping ErrTooDense instead.
func (s *Scaler) Apply(m *Matrix) (*Matrix, error) {
	if len(s.Factor) != m.NCols || len(s.Shift) != m.NCols {
		return nil, fmt.Errorf("%w: scaler fitted on %d columns, matrix has %d", ErrMismatch, len(s.Factor), m.NCols)
	}
	limit := s.MaxEntries
	if limit <= 0 {
		limit = DefaultMaxEntries
	}
	dense := s.Dense()
	if est := s.Entries(m); est > limit {
		return nil, fmt.Errorf("%w: %s scaling centres %d of %d columns, which stores %d entries (the input has %d; limit %d): use %q or %q for sparse data",
			ErrTooDense, s.Method, len(dense), m.NCols, est, m.NNZ(), limit, ScaleStd, ScaleMaxAbs)
	}
	out := &Matrix{NRows: m.NRows, NCols: m.NCols, Indptr: make([]int64, 1, m.NRows+1)}
	capacity := s.Entries(m)
	out.Indices, out.Values = make([]int32, 0, capacity), make([]float32, 0, capacity)
	put := func(j int32, x float64) {
		if v := float32((x - s.Shift[j]) * s.Factor[j]); v != 0 {
			out.Indices = append(out.Indices, j)
			out.Values = append(out.Values, v)
		}
	}
	for i := range m.NRows {
		idx, val := m.Row(i)
		k := 0
		for _, dj := range dense { // merge the row with the dense columns
			j := int32(dj)
			for k < len(idx) && idx[k] < j {
				put(idx[k], float64(val[k]))
				k++
			}
			if k < len(idx) && idx[k] == j {
				put(j, float64(val[k]))
				k++
			} else {
				put(j, 0)
			}
		}
		for ; k < len(idx); k++ {
			put(idx[k], float64(val[k]))
		}
		out.Indptr = append(out.Indptr, int64(len(out.Indices)))
	}
	out.Indices, out.Values = slices.Clip(out.Indices), slices.Clip(out.Values)
	return out, nil
}
