package privacy

import (
	"math"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/mat"
)

// CGLS against a dense solve of the regularised normal equations.
func TestCGLSAgainstDense(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	rows, n := 60, 25
	a := &sparseRows{n: n}
	dense := mat.NewDense(rows, n, nil)
	for r := range rows {
		var cols []uint32
		var vals []float64
		for c := range n {
			if rng.Float64() < 0.3 {
				v := rng.NormFloat64()
				cols, vals = append(cols, uint32(c)), append(vals, v)
				dense.Set(r, c, v)
			}
		}
		a.addRow(cols, vals, rng.NormFloat64())
	}
	lambda := 0.1
	x := cgls(a, lambda, 500, 1e-14)
	var ata mat.Dense
	ata.Mul(dense.T(), dense)
	for i := range n {
		ata.Set(i, i, ata.At(i, i)+lambda)
	}
	var atb mat.VecDense
	atb.MulVec(dense.T(), mat.NewVecDense(rows, a.rhs))
	var want mat.VecDense
	if err := want.SolveVec(&ata, &atb); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if math.Abs(x[i]-want.AtVec(i)) > 1e-8 {
			t.Fatalf("x[%d] = %g, dense solve %g", i, x[i], want.AtVec(i))
		}
	}
}
