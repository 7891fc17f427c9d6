package dp

import (
	"math"
	"math/rand/v2"
	"testing"
)

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol*max(1, math.Abs(b)) }

// Closed forms of the Gaussian mechanism.
func TestGaussianClosedForms(t *testing.T) {
	if r := GaussianRho(2, 4); r != 0.125 {
		t.Errorf("rho(2,4) = %g, want 1/8", r)
	}
	// Composition: k mechanisms of rho each are k rho, i.e. one mechanism
	// with sigma/sqrt(k).
	if r := 10 * GaussianRho(1, 3); !near(r, GaussianRho(1, 3/math.Sqrt(10)), 1e-12) {
		t.Errorf("composition %g", r)
	}
	// delta at eps = 0 is the total variation distance between N(0,1) and
	// N(mu,1): 2 Phi(mu/2) - 1.
	for _, mu := range []float64{0.1, 0.5, 1, 2, 5} {
		if d := GaussianDelta(mu, 0); !near(d, 2*normCDF(mu/2)-1, 1e-12) {
			t.Errorf("mu %g: delta(0) = %g, want %g", mu, d, 2*normCDF(mu/2)-1)
		}
	}
	// The classic calibration sigma = sqrt(2 ln(1.25/delta))/eps gives
	// (eps, delta)-DP for eps < 1: the exact epsilon must be at most eps.
	for _, eps := range []float64{0.1, 0.5, 0.9} {
		delta := 1e-5
		sigma := math.Sqrt(2*math.Log(1.25/delta)) / eps
		got := Epsilon(GaussianRho(1, sigma), delta)
		if got > eps || got < 0.5*eps {
			t.Errorf("classic calibration for eps %g: exact eps %g", eps, got)
		}
	}
}

// The exact epsilon inverts GaussianDelta, and the generic conversions
// are valid upper bounds, RDP tighter than the classic one.
func TestEpsilonOrder(t *testing.T) {
	for _, rho := range []float64{1e-4, 0.01, 0.064, 0.5, 2, 20} {
		for _, delta := range []float64{1e-3, 1e-5, 1e-9} {
			e := Epsilon(rho, delta)
			if d := GaussianDelta(Mu(rho), e); !near(d, delta, 1e-6) && e > 0 {
				t.Errorf("rho %g delta %g: eps %g gives delta %g", rho, delta, e, d)
			}
			r, z := epsilonRDP(rho, delta), EpsilonZCDP(rho, delta)
			if !(e <= r*(1+1e-9) && r <= z*(1+1e-9)) {
				t.Errorf("rho %g delta %g: exact %g, rdp %g, zcdp %g: want exact <= rdp <= zcdp", rho, delta, e, r, z)
			}
		}
	}
	// A known value: rho = 0.5, delta = 1e-5: the classic bound is
	// 0.5 + 2 sqrt(0.5 ln 1e5) = 5.2985.
	if z := EpsilonZCDP(0.5, 1e-5); !near(z, 0.5+2*math.Sqrt(0.5*math.Log(1e5)), 1e-12) || !near(z, 5.2985, 1e-4) {
		t.Errorf("zcdp(0.5, 1e-5) = %g", z)
	}
	if e := Epsilon(0, 1e-5); e != 0 {
		t.Errorf("no loss: %g", e)
	}
	if e := Epsilon(math.Inf(1), 1e-5); !math.IsInf(e, 1) {
		t.Errorf("no noise: %g", e)
	}
}

// The Gaussian trade-off AUC against a Monte Carlo of the optimal test
// (the likelihood ratio, i.e. the value itself) between N(0,1) and N(mu,1).
func TestAUCBoundGaussianMonteCarlo(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, mu := range []float64{0.358, 1, 2} {
		n := 200000
		wins := 0
		for range n {
			if mu+rng.NormFloat64() > rng.NormFloat64() {
				wins++
			}
		}
		mc := float64(wins) / float64(n)
		if b := AUCBoundGaussian(mu); math.Abs(b-mc) > 0.005 {
			t.Errorf("mu %g: bound %g, Monte Carlo %g", mu, b, mc)
		}
	}
	if mu := MuForAUC(0.6); !near(AUCBoundGaussian(mu), 0.6, 1e-9) || !near(mu, math.Sqrt2*0.2533471, 1e-5) {
		t.Errorf("mu for AUC 0.6 = %g", mu)
	}
}

// Randomised response: binary with eps reports the truth with
// probability e^eps/(1+e^eps), which is also its AUC bound.
func TestRandomisedResponse(t *testing.T) {
	eps := math.Log(1.5) // keep 0.6, flip 0.4
	if p := KeepProb(eps, 2); !near(p, 0.6, 1e-12) {
		t.Errorf("keep %g, want 0.6", p)
	}
	if a := AUCBoundPure(eps); !near(a, 0.6, 1e-12) {
		t.Errorf("auc bound %g, want 0.6", a)
	}
	// k classes: the likelihood ratio of any report is at most e^eps.
	p := KeepProb(1, 10)
	q := (1 - p) / 9
	if !near(p/q, math.E, 1e-12) {
		t.Errorf("ratio %g, want e", p/q)
	}
}

func TestRhoForEpsilon(t *testing.T) {
	for _, eps := range []float64{0.1, 1, 3, 8} {
		rho := RhoForEpsilon(eps, 1e-5)
		if e := Epsilon(rho, 1e-5); !near(e, eps, 1e-6) {
			t.Errorf("eps %g: rho %g gives eps %g", eps, rho, e)
		}
	}
}

// epsilonRDP, the tests' check of Epsilon, is the tighter generic conversion of rho-zCDP through Renyi
// DP of every order alpha > 1: min over alpha of alpha rho +
// (ln(1/delta) + (alpha-1) ln(1-1/alpha) - ln alpha) / (alpha-1)
// (Canonne, Kamath and Steinke 2020, Proposition 12), over a grid of
// orders refined around the best one.
func epsilonRDP(rho, delta float64) float64 {
	if rho <= 0 {
		return 0
	}
	if delta <= 0 || math.IsInf(rho, 1) {
		return math.Inf(1)
	}
	f := func(a float64) float64 {
		return a*rho + (math.Log(1/delta)+(a-1)*math.Log(1-1/a)-math.Log(a))/(a-1)
	}
	best, ba := math.Inf(1), 0.0
	for a := 1.0001; a < 1e7; a *= 1.05 {
		if v := f(a); v < best {
			best, ba = v, a
		}
	}
	lo, hi := ba/1.05, ba*1.05
	for range 100 { // golden-section refinement (f is convex in alpha here)
		m1, m2 := lo+(hi-lo)*0.382, lo+(hi-lo)*0.618
		if f(m1) < f(m2) {
			hi = m2
		} else {
			lo = m1
		}
	}
	return max(0, min(best, f((lo+hi)/2)))
}
