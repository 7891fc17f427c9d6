package privacy

import "math"

// sparseRows is a sparse matrix in compressed rows, with a right-hand
// side: the linear system of the regression attack.
type sparseRows struct {
	ptr  []int
	cols []int32
	vals []float64
	rhs  []float64
	n    int // columns
}

func (a *sparseRows) addRow(cols []uint32, vals []float64, rhs float64) {
	if len(a.ptr) == 0 {
		a.ptr = append(a.ptr, 0)
	}
	for j, c := range cols {
		if vals[j] != 0 {
			a.cols = append(a.cols, int32(c))
			a.vals = append(a.vals, vals[j])
		}
	}
	a.ptr = append(a.ptr, len(a.cols))
	a.rhs = append(a.rhs, rhs)
}

func (a *sparseRows) rows() int { return len(a.rhs) }

// mul writes A x into y.
func (a *sparseRows) mul(x, y []float64) {
	for r := range a.rhs {
		var s float64
		for k := a.ptr[r]; k < a.ptr[r+1]; k++ {
			s += a.vals[k] * x[a.cols[k]]
		}
		y[r] = s
	}
}

// mulT writes A^T y into x.
func (a *sparseRows) mulT(y, x []float64) {
	clear(x)
	for r, v := range y {
		for k := a.ptr[r]; k < a.ptr[r+1]; k++ {
			x[a.cols[k]] += a.vals[k] * v
		}
	}
}

// cgls solves min ||A x - b||^2 + lambda ||x||^2 by conjugate gradients
// on the normal equations (CGLS, Hestenes-Stiefel / Paige-Saunders form),
// for at most iters iterations or until the normal-equation residual falls
// below tol times its start.
func cgls(a *sparseRows, lambda float64, iters int, tol float64) []float64 {
	n, m := a.n, a.rows()
	x := make([]float64, n)
	r := append([]float64(nil), a.rhs...)
	s := make([]float64, n)
	a.mulT(r, s)
	p := append([]float64(nil), s...)
	q := make([]float64, m)
	gamma := dot(s, s)
	g0 := gamma
	for it := 0; it < iters && gamma > tol*tol*g0 && gamma > 0; it++ {
		a.mul(p, q)
		delta := dot(q, q) + lambda*dot(p, p)
		if delta == 0 || math.IsNaN(delta) {
			break
		}
		alpha := gamma / delta
		for i := range x {
			x[i] += alpha * p[i]
		}
		for i := range r {
			r[i] -= alpha * q[i]
		}
		a.mulT(r, s)
		for i := range s {
			s[i] -= lambda * x[i]
		}
		g := dot(s, s)
		beta := g / gamma
		gamma = g
		for i := range p {
			p[i] = s[i] + beta*p[i]
		}
	}
	return x
}

func dot(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}
