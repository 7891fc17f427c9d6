package metric

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// Hanley and McNeil's standard error against an independent check: the
// spread of AUCs measured on many samples drawn from two known score
// distributions. The formula is evaluated at the distributions' true AUC,
// and the simulated AUCs' standard deviation must match it within 10%
// (the exponential assumption is exact for the first case and close for
// the binormal ones; 4000 draws give the standard deviation within about
// 2.2%). The 95% interval must also cover the true AUC in 93% to 97% of
// the draws. The seed is fixed: the test gives the same answer every run.
func TestAUCStdErrSimulated(t *testing.T) {
	if testing.Short() {
		// 16,000 AUCs in one goroutine: nothing for the race detector,
		// which makes it a minute's work (the whole suite runs it).
		t.Skip("short: a simulation with no concurrency")
	}
	const draws = 4000
	for _, tc := range []struct {
		name     string
		pos, neg int
		truth    float64
		draw     func(r *rand.Rand, positive bool) float64
	}{
		// Exponential scores, negatives of mean 1, positives of mean
		// A/(1-A): a negative scores below a positive with probability
		// A, and below both of two with A/(2-A), Hanley and McNeil's Q1
		// (their model, where the formula is exact).
		{"exponential, AUC 0.65, 28 vs 253", 28, 253, 0.65, func(r *rand.Rand, p bool) float64 {
			if p {
				return r.ExpFloat64() * 0.65 / 0.35
			}
			return r.ExpFloat64()
		}},
		// Binormal, unit variances, positives shifted by d: AUC Φ(d/√2).
		{"binormal, AUC 0.60, 100 vs 400", 100, 400, phi(0.358 / math.Sqrt2), normal(0.358)},
		{"binormal, AUC 0.76, 60 vs 60", 60, 60, phi(1.0 / math.Sqrt2), normal(1.0)},
		{"binormal, AUC 0.5, 30 vs 250", 30, 250, 0.5, normal(0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(31, 32))
			n := tc.pos + tc.neg
			scores, positive := make([]float64, n), make([]bool, n)
			for i := range positive {
				positive[i] = i < tc.pos
			}
			se := AUCStdErr(tc.truth, tc.pos, tc.neg)
			var sum, sq float64
			covered := 0
			for range draws {
				for i := range scores {
					scores[i] = tc.draw(rng, positive[i])
				}
				a := AUC(scores, positive)
				sum += a
				sq += a * a
				lo, hi, err := AUCInterval(a, tc.pos, tc.neg)
				if err != nil {
					t.Fatal(err)
				}
				if lo <= tc.truth && tc.truth <= hi {
					covered++
				}
			}
			mean := sum / draws
			sd := math.Sqrt((sq - draws*mean*mean) / (draws - 1))
			if math.Abs(mean-tc.truth) > 3*se/math.Sqrt(draws)+1e-3 {
				t.Errorf("simulated AUCs' mean %.4f, want the distributions' %.4f", mean, tc.truth)
			}
			t.Logf("sd %.5f se %.5f ratio %.3f covered %d", sd, se, sd/se, covered)
			if r := sd / se; r < 0.9 || r > 1.1 {
				t.Errorf("simulated AUCs' standard deviation %.5f, Hanley-McNeil %.5f (ratio %.3f, want 0.9..1.1)", sd, se, r)
			}
			if c := float64(covered) / draws; c < 0.93 || c > 0.97 {
				t.Errorf("the 95%% interval covered the true AUC in %.3f of the draws", c)
			}
		})
	}
}

func normal(shift float64) func(r *rand.Rand, positive bool) float64 {
	return func(r *rand.Rand, p bool) float64 {
		if p {
			return r.NormFloat64() + shift
		}
		return r.NormFloat64()
	}
}

func phi(x float64) float64 { return 0.5 * math.Erfc(-x/math.Sqrt2) }

// The formula's values by hand, its edges, and the counts that give no
// interval.
func TestAUCInterval(t *testing.T) {
	for _, tc := range []struct {
		name     string
		auc      float64
		pos, neg int
		se       float64 // NaN: no interval
		lo, hi   float64
	}{
		// A = 0.5: Q1 = 1/3, Q2 = 1/3; SE² = (0.25 + 9/12 + 9/12)/100.
		{"chance, 10 vs 10", 0.5, 10, 10, math.Sqrt(1.75 / 100), 0.5 - z95*math.Sqrt(0.0175), 0.5 + z95*math.Sqrt(0.0175)},
		// A = 0.8: Q1 = 0.8/1.2, Q2 = 1.28/1.8.
		{"0.8, 20 vs 50", 0.8, 20, 50, math.Sqrt((0.16 + 19*(0.8/1.2-0.64) + 49*(1.28/1.8-0.64)) / 1000), math.NaN(), math.NaN()},
		{"perfect", 1, 5, 5, 0, 1, 1},
		{"clipped at 1", 0.99, 3, 3, math.NaN(), math.NaN(), 1},
		{"no positive", 0.6, 0, 281, math.NaN(), math.NaN(), math.NaN()},
		{"no negative", 0.6, 281, 0, math.NaN(), math.NaN(), math.NaN()},
		{"AUC not a number", math.NaN(), 20, 20, math.NaN(), math.NaN(), math.NaN()},
		{"AUC above 1", 1.2, 20, 20, math.NaN(), math.NaN(), math.NaN()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			se := AUCStdErr(tc.auc, tc.pos, tc.neg)
			lo, hi, err := AUCInterval(tc.auc, tc.pos, tc.neg)
			valid := tc.pos > 0 && tc.neg > 0 && tc.auc >= 0 && tc.auc <= 1
			if !valid {
				if !math.IsNaN(se) || !errors.Is(err, ErrCounts) {
					t.Fatalf("SE %g, error %v: want NaN and ErrCounts", se, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !math.IsNaN(tc.se) && math.Abs(se-tc.se) > 1e-12 {
				t.Errorf("SE %.6f, want %.6f", se, tc.se)
			}
			if !math.IsNaN(tc.lo) && math.Abs(lo-tc.lo) > 1e-12 {
				t.Errorf("lower end %.6f, want %.6f", lo, tc.lo)
			}
			if !math.IsNaN(tc.hi) && math.Abs(hi-tc.hi) > 1e-12 {
				t.Errorf("upper end %.6f, want %.6f", hi, tc.hi)
			}
			if lo > tc.auc || hi < tc.auc || lo < 0 || hi > 1 {
				t.Errorf("interval [%g, %g] around %g", lo, hi, tc.auc)
			}
		})
	}
}
