package report

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestWelch(t *testing.T) {
	// By hand: means 3 and 6, variances 2.5 and 10, n = 5 each:
	// t = -3/sqrt(2.5), df = 2.5^2 / (0.5^2/4 + 2^2/4) = 100/17; the
	// p-value by numerical integration of Student's t density: 0.1075312.
	w := WelchTest([]float64{1, 2, 3, 4, 5}, []float64{2, 4, 6, 8, 10})
	if math.Abs(w.T+3/math.Sqrt(2.5)) > 1e-12 || math.Abs(w.DF-100.0/17) > 1e-12 || math.Abs(w.P-0.10753119) > 1e-6 || w.Diff != -3 {
		t.Errorf("WelchTest = %+v, want t -1.8974, df 5.8824, p 0.1075312", w)
	}
	// Degenerate samples.
	if w := WelchTest([]float64{1}, []float64{1, 2}); !math.IsNaN(w.P) || w.Diff != -0.5 {
		t.Errorf("one value: %+v", w)
	}
	if w := WelchTest([]float64{2, 2}, []float64{1, 1, 1}); w.P != 0 || !math.IsInf(w.T, 1) {
		t.Errorf("no spread, different means: %+v", w)
	}
	if w := WelchTest([]float64{2, 2}, []float64{2, 2}); w.P != 1 {
		t.Errorf("no spread, equal means: %+v", w)
	}
	// Under the null the p-value is uniform: about 5% of tests of two
	// samples of one distribution (unequal sizes and variances) fall
	// below 0.05; and a real difference is found.
	rng := rand.New(rand.NewPCG(1, 2))
	draw := func(n int, mu, sd float64) []float64 {
		x := make([]float64, n)
		for i := range x {
			x[i] = mu + sd*rng.NormFloat64()
		}
		return x
	}
	const sims = 4000
	low, found := 0, 0
	for range sims {
		if WelchTest(draw(10, 0, 1), draw(6, 0, 3)).P < 0.05 {
			low++
		}
		if WelchTest(draw(10, 0, 0.1), draw(10, 0.25, 0.1)).P < 0.05 {
			found++
		}
	}
	if r := float64(low) / sims; r < 0.035 || r > 0.065 {
		t.Errorf("null rejected at 5%% in %.3f of the tests", r)
	}
	if r := float64(found) / sims; r < 0.9 {
		t.Errorf("a 2.5-sd difference found in %.3f of the tests", r)
	}
}
