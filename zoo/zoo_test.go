package zoo

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"gonum.org/v1/gonum/floats"
)

// testFunc is f(x) = sum_j a_j x_j^2 / 2 + sin(b.x), smooth with known
// smoothed gradients.
type testFunc struct{ a, b []float64 }

func (f testFunc) value(x []float64) float64 {
	var q, s float64
	for j, xj := range x {
		q += f.a[j] * xj * xj / 2
		s += f.b[j] * xj
	}
	return q + math.Sin(s)
}

func (f testFunc) grad(x, g []float64) {
	var s float64
	for j, xj := range x {
		s += f.b[j] * xj
	}
	for j, xj := range x {
		g[j] = f.a[j]*xj + f.b[j]*math.Cos(s)
	}
}

// biasBound bounds |grad f_mu(x) - grad f(x)| coordinate by coordinate for
// the smoothing that dist's estimator is unbiased for.
//
// The quadratic part is unchanged by either smoothing (the direction has
// mean zero). For the sine, grad E[sin(s + mu b.v)] = b cos(s) E[cos(mu b.v)]
// because v is symmetric, and 0 <= 1 - E[cos(t)] <= E[t^2]/2, so
//
//	|bias_j| <= |b_j cos s| mu^2 E[(b.v)^2] / 2,
//
// with E[(b.v)^2] = |b|^2 for v ~ N(0, I) and |b|^2/(d+2) for v uniform in
// the unit ball (the smoothing of the sphere estimator).
func (f testFunc) biasBound(dist Dist, x []float64, mu float64, out []float64) {
	var s, bb float64
	for j, xj := range x {
		s += f.b[j] * xj
		bb += f.b[j] * f.b[j]
	}
	ev := bb
	if dist == Sphere {
		ev = bb / float64(len(x)+2)
	}
	for j := range x {
		out[j] = math.Abs(f.b[j]*math.Cos(s)) * mu * mu * ev / 2
	}
}

// estimatorStats draws n directions and returns the per-coordinate sample
// mean and standard deviation of (phi/mu)(f(x + mu u) - f(x)) u, computed
// with Perturb and estimate.
func estimatorStats(f testFunc, x []float64, dist Dist, phi, mu float64, n int, rng *rand.Rand) (mean, std []float64) {
	d := len(x)
	u := make([]float64, d)
	xp := make([]float64, d)
	v := make([]float64, d)
	sum := make([]float64, d)
	sumsq := make([]float64, d)
	f0 := f.value(x)
	for range n {
		dist.Draw(rng, u)
		Perturb(xp, x, u, mu)
		estimate(v, u, f.value(xp)-f0, mu, phi)
		for j, vj := range v {
			sum[j] += vj
			sumsq[j] += vj * vj
		}
	}
	mean = make([]float64, d)
	std = make([]float64, d)
	for j := range d {
		m := sum[j] / float64(n)
		mean[j] = m
		std[j] = math.Sqrt(math.Max(0, (sumsq[j]-float64(n)*m*m)/float64(n-1)))
	}
	return mean, std
}

// meanCheck reports the coordinates where |mean - ref| exceeds
// z std/sqrt(n) + bias.
func meanCheck(mean, std, ref, bias []float64, n int, z float64) (bad []int, worst float64) {
	for j := range mean {
		tol := z*std[j]/math.Sqrt(float64(n)) + bias[j]
		r := math.Abs(mean[j]-ref[j]) / tol
		worst = math.Max(worst, r)
		if r > 1 {
			bad = append(bad, j)
		}
	}
	return bad, worst
}

func TestEstimatorUnbiased(t *testing.T) {
	if testing.Short() {
		// 800,000 estimates in one goroutine: nothing for the race
		// detector, which made it 13 s of the race pass (the whole suite
		// runs it).
		t.Skip("short: a simulation with no concurrency")
	}
	const (
		d  = 10
		n  = 200_000
		mu = 0.05
		z  = 4.5
	)
	rng := rand.New(rand.NewPCG(1, 2))
	f := testFunc{a: make([]float64, d), b: make([]float64, d)}
	x := make([]float64, d)
	for j := range d {
		f.a[j] = 0.5 + 1.5*rng.Float64()
		f.b[j] = (0.2 + 0.6*rng.Float64()) * float64(1-2*rng.IntN(2))
		x[j] = 2*rng.Float64() - 1
	}
	ref := make([]float64, d)
	f.grad(x, ref)

	for _, tc := range []struct {
		name   string
		dist   Dist
		phi    float64
		reject bool // a negative control: the check must fail
	}{
		{"gau", Gaussian, Gaussian.Phi(d), false},
		{"uni", Sphere, Sphere.Phi(d), false},
		// The paper's d/mu with Gaussian directions: mean is d*grad.
		{"gau-paper-d-over-mu", Gaussian, d, true},
		// Sphere directions without the factor d: mean is grad/d.
		{"uni-without-d", Sphere, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mean, std := estimatorStats(f, x, tc.dist, tc.phi, mu, n, rng)
			bias := make([]float64, d)
			f.biasBound(tc.dist, x, mu, bias)
			bad, worst := meanCheck(mean, std, ref, bias, n, z)
			t.Logf("worst |mean-grad|/tolerance = %.3g, failing coordinates %v", worst, bad)
			if tc.reject {
				if len(bad) == 0 {
					t.Errorf("negative control accepted: mean %v, grad %v", mean, ref)
				}
				return
			}
			for _, j := range bad {
				t.Errorf("coordinate %d: mean %.5g, grad %.5g, std err %.3g, bias bound %.3g",
					j, mean[j], ref[j], std[j]/math.Sqrt(n), bias[j])
			}
		})
	}
}

// TestGaussianSmoothingExact uses a large mu, where grad f_mu is far from
// grad f, and compares the Gaussian estimator with the exact gradient of the
// Gaussian-smoothed f: a∘x + b cos(b.x) exp(-mu^2 |b|^2 / 2) (no bias term).
// The unsmoothed gradient must be rejected by the same check.
func TestGaussianSmoothingExact(t *testing.T) {
	const (
		d  = 10
		n  = 200_000
		mu = 1.0
		z  = 4.5
	)
	rng := rand.New(rand.NewPCG(5, 6))
	f := testFunc{a: make([]float64, d), b: make([]float64, d)}
	x := make([]float64, d)
	for j := range d {
		f.a[j] = 0.5 + 1.5*rng.Float64()
		f.b[j] = 0.6 + 0.3*rng.Float64()
		x[j] = 0.1 * (2*rng.Float64() - 1)
	}
	var s, bb float64
	for j := range d {
		s += f.b[j] * x[j]
		bb += f.b[j] * f.b[j]
	}
	smoothed := make([]float64, d)
	for j := range d {
		smoothed[j] = f.a[j]*x[j] + f.b[j]*math.Cos(s)*math.Exp(-mu*mu*bb/2)
	}
	plain := make([]float64, d)
	f.grad(x, plain)
	mean, std := estimatorStats(f, x, Gaussian, 1, mu, n, rng)
	zero := make([]float64, d)
	if bad, worst := meanCheck(mean, std, smoothed, zero, n, z); len(bad) > 0 {
		t.Errorf("smoothed gradient rejected (worst ratio %.3g) at %v: mean %v, want %v", worst, bad, mean, smoothed)
	}
	if bad, worst := meanCheck(mean, std, plain, zero, n, z); len(bad) == 0 {
		t.Errorf("unsmoothed gradient accepted at mu = %v (worst ratio %.3g)", mu, worst)
	}
}

// TestSecondMoment checks E[u] = 0 and E[u u^T] = I (Gaussian) or I/d
// (Sphere) entry by entry within z sample standard errors, and unit norm for
// the sphere.
func TestSecondMoment(t *testing.T) {
	const (
		d = 8
		n = 100_000
		z = 4.5
	)
	for _, tc := range []struct {
		dist Dist
		want float64 // diagonal of E[u u^T]
	}{
		{Gaussian, 1},
		{Sphere, 1.0 / d},
	} {
		t.Run(tc.dist.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, uint64(tc.dist)))
			u := make([]float64, d)
			var m1, s1 [d]float64
			var m2, s2 [d][d]float64
			for range n {
				tc.dist.Draw(rng, u)
				var nn float64
				for i, ui := range u {
					nn += ui * ui
					m1[i] += ui
					s1[i] += ui * ui
					for j, uj := range u {
						p := ui * uj
						m2[i][j] += p
						s2[i][j] += p * p
					}
				}
				if tc.dist == Sphere && math.Abs(nn-1) > 1e-12 {
					t.Fatalf("sphere draw has squared norm %v", nn)
				}
			}
			check := func(what string, sum, sumsq, want float64) {
				m := sum / n
				se := math.Sqrt((sumsq/n - m*m) / (n - 1))
				if math.Abs(m-want) > z*se {
					t.Errorf("%s = %.5g, want %.5g (std err %.3g)", what, m, want, se)
				}
			}
			for i := range d {
				check("E[u_i]", m1[i], s1[i], 0)
				for j := range d {
					want := 0.0
					if i == j {
						want = tc.want
					}
					check("E[u_i u_j]", m2[i][j], s2[i][j], want)
				}
			}
		})
	}
}

func TestDrawDeterministic(t *testing.T) {
	for _, dist := range []Dist{Gaussian, Sphere} {
		a, b := make([]float64, 5), make([]float64, 5)
		dist.Draw(rand.New(rand.NewPCG(7, 7)), a)
		dist.Draw(rand.New(rand.NewPCG(7, 7)), b)
		for i := range a {
			if a[i] != b[i] {
				t.Fatalf("%v: same seed gave %v and %v", dist, a, b)
			}
		}
	}
}

func TestAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	u := make([]float64, 100)
	w := make([]float64, 100)
	for _, dist := range []Dist{Gaussian, Sphere} {
		if n := testing.AllocsPerRun(100, func() { dist.Draw(rng, u) }); n != 0 {
			t.Errorf("%v.Draw allocates %v times", dist, n)
		}
	}
	if n := testing.AllocsPerRun(100, func() {
		Perturb(w, w, u, 1e-3)
		estimate(w, u, 0.5, 1e-3, 1)
		AddScaled(w, -1e-3, u)
	}); n != 0 {
		t.Errorf("Perturb/Coef/AddScaled allocate %v times", n)
	}
}

func TestParseDist(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Dist
		err  bool
	}{
		{"gau", Gaussian, false},
		{"gaussian", Gaussian, false},
		{"GAU", Gaussian, false},
		{"uni", Sphere, false},
		{"sphere", Sphere, false},
		{"", 0, true},
		{"uniform-cube", 0, true},
	} {
		got, err := ParseDist(tc.in)
		if (err != nil) != tc.err || (!tc.err && got != tc.want) {
			t.Errorf("ParseDist(%q) = %v, %v", tc.in, got, err)
		}
		if !tc.err {
			var d Dist
			txt, _ := got.MarshalText()
			if err := d.UnmarshalText(txt); err != nil || d != got {
				t.Errorf("text round trip of %v gave %v, %v", got, d, err)
			}
		}
	}
	if Gaussian.String() != "gau" || Sphere.String() != "uni" {
		t.Errorf("String: %q %q", Gaussian, Sphere)
	}
}

func TestPhi(t *testing.T) {
	if Gaussian.Phi(98) != 1 || Sphere.Phi(98) != 98 {
		t.Errorf("Phi(98): gau %v uni %v", Gaussian.Phi(98), Sphere.Phi(98))
	}
}

func TestEstimateArithmetic(t *testing.T) {
	w := []float64{1, 2, 3}
	u := []float64{0.5, -1, 2}
	dst := make([]float64, 3)
	Perturb(dst, w, u, 0.1)
	want := []float64{1.05, 1.9, 3.2}
	for i := range dst {
		if math.Abs(dst[i]-want[i]) > 1e-15 {
			t.Fatalf("Perturb = %v, want %v", dst, want)
		}
	}
	estimate(dst, u, 0.02, 0.1, 3) // (3/0.1)*0.02 = 0.6
	want = []float64{0.3, -0.6, 1.2}
	for i := range dst {
		if math.Abs(dst[i]-want[i]) > 1e-15 {
			t.Fatalf("estimate = %v, want %v", dst, want)
		}
	}
	AddScaled(w, -0.5, dst)
	want = []float64{0.85, 2.3, 2.4}
	for i := range w {
		if math.Abs(w[i]-want[i]) > 1e-15 {
			t.Fatalf("AddScaled = %v, want %v", w, want)
		}
	}
}

func TestSchedule(t *testing.T) {
	for _, tc := range []struct {
		s    Schedule
		t    int
		want float64
	}{
		{Schedule{Eta0: 1e-3}, 0, 1e-3},
		{Schedule{Eta0: 1e-3}, 1_000_000, 1e-3},
		{Schedule{Eta0: 3e-3, T0: 1e5}, 0, 3e-3},
		{Schedule{Eta0: 3e-3, T0: 1e5}, 300_000, 1.5e-3},
	} {
		if got := tc.s.At(tc.t); math.Abs(got-tc.want) > 1e-15 {
			t.Errorf("%v.At(%d) = %v, want %v", tc.s, tc.t, got, tc.want)
		}
	}
}

func TestPanics(t *testing.T) {
	for name, fn := range map[string]func(){
		"Perturb length": func() { Perturb(make([]float64, 2), make([]float64, 3), make([]float64, 2), 1) },
		"Coef mu=0":      func() { Coef(1, 0, 1) },
		"AddScaled":      func() { AddScaled(make([]float64, 2), 1, make([]float64, 1)) },
		"Sphere dim 0":   func() { Sphere.Draw(rand.New(rand.NewPCG(1, 1)), nil) },
		"bad Dist":       func() { Dist(9).Draw(rand.New(rand.NewPCG(1, 1)), make([]float64, 2)) },
		"Phi dim 0":      func() { Gaussian.Phi(0) },
		"Schedule t<0":   func() { Schedule{Eta0: 1, T0: 1}.At(-1) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			fn()
		}()
	}
}

func BenchmarkDraw(b *testing.B) {
	for _, dist := range []Dist{Gaussian, Sphere} {
		for _, d := range []int{16, 98 * 128} {
			b.Run(dist.String()+"/d="+strconv.Itoa(d), func(b *testing.B) {
				rng := rand.New(rand.NewPCG(1, 2))
				u := make([]float64, d)
				b.ReportAllocs()
				for b.Loop() {
					dist.Draw(rng, u)
				}
			})
		}
	}
}

// estimate writes the two-point gradient estimate dst = Coef(diff, mu, phi) u,
// where diff = f(w + mu u) - f(w) and phi is Dist.Phi of the dimension: the
// step the kernel takes along u, as a vector for the tests of its mean.
func estimate(dst, u []float64, diff, mu, phi float64) {
	floats.ScaleTo(dst, Coef(diff, mu, phi), u)
}
