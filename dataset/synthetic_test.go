package dataset

import (
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestSyntheticShape(t *testing.T) {
	tests := []struct {
		name   string
		cfg    SyntheticConfig
		labels []float64
	}{
		{"binary dense", SyntheticConfig{Samples: 10000, TestSamples: 100, Features: 30, Seed: 1}, []float64{-1, 1}},
		{"binary sparse", SyntheticConfig{Samples: 9000, TestSamples: 1, Features: 1000, Density: 0.01, Seed: 2}, []float64{-1, 1}},
		{"multiclass", SyntheticConfig{Samples: 5000, Features: 20, Classes: 4, Density: 0.5, Seed: 3}, []float64{0, 1, 2, 3}},
		{"one column", SyntheticConfig{Samples: 10, Features: 1, Seed: 4}, []float64{-1, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, te, err := Synthetic(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			density := tt.cfg.Density
			if density == 0 {
				density = 1
			}
			for _, c := range []struct {
				d *Dataset
				n int
			}{{tr, tt.cfg.Samples}, {te, tt.cfg.TestSamples}} {
				d := c.d
				if err := d.X.Check(); err != nil {
					t.Fatal(err)
				}
				if d.Len() != c.n || d.X.NRows != c.n || d.X.NCols != tt.cfg.Features {
					t.Fatalf("shape %dx%d, %d labels; want %dx%d", d.X.NRows, d.X.NCols, d.Len(), c.n, tt.cfg.Features)
				}
				if d.Format != FormatSynthetic || d.Classes != len(tt.labels) || !equalFloats(d.LabelValues, tt.labels) {
					t.Errorf("format %q classes %d labels %v", d.Format, d.Classes, d.LabelValues)
				}
				counts := make([]int, d.Classes)
				for _, y := range d.Y {
					counts[y]++
				}
				if c.n >= 1000 {
					for k, n := range counts {
						if n < c.n/(4*d.Classes) {
							t.Errorf("class %d has %d of %d samples", k, n, c.n)
						}
					}
					cells := float64(c.n) * float64(tt.cfg.Features)
					got := float64(d.X.NNZ()) / cells
					if sd := math.Sqrt(density * (1 - density) / cells); math.Abs(got-density) > 5*sd+1e-12 {
						t.Errorf("density %.5f, want %.5f", got, density)
					}
				}
			}
		})
	}
}

func equalFloats(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestSyntheticDeterministic(t *testing.T) {
	cfg := SyntheticConfig{Samples: 3 * synthChunk / 2, TestSamples: 50, Features: 200, Density: 0.05, Noise: 0.1, Seed: 42}
	a, at, err := Synthetic(cfg)
	if err != nil {
		t.Fatal(err)
	}
	prev := runtime.GOMAXPROCS(1)
	b, bt, err := Synthetic(cfg)
	runtime.GOMAXPROCS(prev)
	if err != nil {
		t.Fatal(err)
	}
	if diff := equalDatasets(a, b); diff != "" {
		t.Errorf("same seed, different CPUs: train differs in %s", diff)
	}
	if diff := equalDatasets(at, bt); diff != "" {
		t.Errorf("same seed, different CPUs: test differs in %s", diff)
	}
	// The training set does not depend on the number of test samples.
	cfg.TestSamples = 7
	c, _, _ := Synthetic(cfg)
	if diff := equalDatasets(a, c); diff != "" {
		t.Errorf("train depends on TestSamples: differs in %s", diff)
	}
	cfg.Seed++
	d, _, _ := Synthetic(cfg)
	if equalDatasets(a, d) == "" {
		t.Error("different seeds give the same data")
	}
}

// TestSyntheticLearnable trains a plain softmax regression by SGD and checks
// that it reaches high test accuracy, near 1 - Noise.
func TestSyntheticLearnable(t *testing.T) {
	tests := []struct {
		name string
		cfg  SyntheticConfig
		want float64
	}{
		{"binary dense", SyntheticConfig{Samples: 20000, TestSamples: 5000, Features: 20, Noise: 0.02, Seed: 1}, 0.92},
		{"binary sparse", SyntheticConfig{Samples: 20000, TestSamples: 5000, Features: 100, Density: 0.2, Noise: 0.02, Seed: 2}, 0.90},
		{"multiclass", SyntheticConfig{Samples: 20000, TestSamples: 5000, Features: 20, Classes: 5, Noise: 0.02, Seed: 3}, 0.90},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, te, err := Synthetic(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			w := trainSoftmax(tr, 5)
			if acc := accuracy(w, te); acc < tt.want {
				t.Errorf("test accuracy %.4f, want >= %.2f", acc, tt.want)
			} else {
				t.Logf("test accuracy %.4f (noise %.2f)", acc, tt.cfg.Noise)
			}
		})
	}
}

// trainSoftmax fits a multinomial logistic regression (k x d weights plus
// biases) by plain SGD.
func trainSoftmax(d *Dataset, epochs int) [][]float64 {
	k, cols := d.Classes, d.X.NCols
	w := make([][]float64, k)
	for c := range w {
		w[c] = make([]float64, cols+1)
	}
	p := make([]float64, k)
	order := make([]int, d.Len())
	for i := range order {
		order[i] = i
	}
	r := rand.New(rand.NewPCG(1, 2))
	for e := range epochs {
		lr := 0.1 / (1 + float64(e))
		r.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, i := range order {
			softmax(w, d.X, i, p)
			p[d.Y[i]] -= 1
			idx, val := d.X.Row(i)
			for c := range w {
				g := lr * p[c]
				for n, j := range idx {
					w[c][j] -= g * float64(val[n])
				}
				w[c][cols] -= g
			}
		}
	}
	return w
}

func softmax(w [][]float64, x *Matrix, i int, p []float64) {
	idx, val := x.Row(i)
	m := math.Inf(-1)
	for c := range w {
		s := w[c][x.NCols]
		for n, j := range idx {
			s += w[c][j] * float64(val[n])
		}
		p[c] = s
		m = max(m, s)
	}
	sum := 0.0
	for c := range p {
		p[c] = math.Exp(p[c] - m)
		sum += p[c]
	}
	for c := range p {
		p[c] /= sum
	}
}

func accuracy(w [][]float64, d *Dataset) float64 {
	p := make([]float64, d.Classes)
	right := 0
	for i := range d.Len() {
		softmax(w, d.X, i, p)
		best := 0
		for c := range p {
			if p[c] > p[best] {
				best = c
			}
		}
		if best == int(d.Y[i]) {
			right++
		}
	}
	return float64(right) / float64(d.Len())
}

func TestSyntheticNoise(t *testing.T) {
	tests := []struct {
		name string
		cfg  SyntheticConfig
	}{
		{"binary all flipped", SyntheticConfig{Samples: 2000, Features: 10, Noise: 1, Seed: 5}},
		{"binary 10%", SyntheticConfig{Samples: 20000, Features: 10, Density: 0.5, Noise: 0.1, Seed: 6}},
		{"multiclass 30%", SyntheticConfig{Samples: 20000, Features: 10, Classes: 4, Noise: 0.3, Seed: 7}},
		{"multiclass all replaced", SyntheticConfig{Samples: 2000, Features: 10, Classes: 3, Noise: 1, Seed: 8}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			noisy, _, err := Synthetic(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			cfg := tt.cfg
			cfg.Noise = 0
			clean, _, _ := Synthetic(cfg)
			if diff := equalDatasets(clean, noisy); diff != "labels" {
				t.Fatalf("noise changed %q, want only the labels", diff)
			}
			changed := 0
			for i := range clean.Y {
				if clean.Y[i] != noisy.Y[i] {
					changed++
				}
			}
			n := float64(len(clean.Y))
			got := float64(changed) / n
			if sd := math.Sqrt(tt.cfg.Noise * (1 - tt.cfg.Noise) / n); math.Abs(got-tt.cfg.Noise) > 5*sd {
				t.Errorf("%.4f of the labels changed, want %.2f", got, tt.cfg.Noise)
			}
		})
	}
}

func TestSyntheticErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  SyntheticConfig
		msg  string
	}{
		{"no samples", SyntheticConfig{Features: 3}, "samples"},
		{"negative test", SyntheticConfig{Samples: 1, TestSamples: -1, Features: 3}, "samples"},
		{"no features", SyntheticConfig{Samples: 1}, "features"},
		{"one class", SyntheticConfig{Samples: 1, Features: 3, Classes: 1}, "classes"},
		{"density", SyntheticConfig{Samples: 1, Features: 3, Density: 1.5}, "density"},
		{"nan density", SyntheticConfig{Samples: 1, Features: 3, Density: math.NaN()}, "density"},
		{"noise", SyntheticConfig{Samples: 1, Features: 3, Noise: -0.1}, "noise"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := Synthetic(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %v, want one about %s", err, tt.msg)
			}
		})
	}
}

// TestSyntheticLarge checks the generator's speed at 1,000,000 x 100.
func TestSyntheticLarge(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping 1,000,000 x 100 generation in -short mode")
	}
	start := time.Now()
	tr, _, err := Synthetic(SyntheticConfig{Samples: 1_000_000, Features: 100, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	t.Logf("1,000,000 x 100 dense in %v on %d CPUs", elapsed, runtime.GOMAXPROCS(0))
	if tr.X.NNZ() != 100_000_000 {
		t.Errorf("nnz %d", tr.X.NNZ())
	}
	// Its speed is a benchmark's business (BenchmarkSynthetic), not a
	// test's: the time is logged only.
}

func BenchmarkSynthetic(b *testing.B) {
	for _, bc := range []struct {
		name string
		cfg  SyntheticConfig
	}{
		{"dense-100k-x-100", SyntheticConfig{Samples: 100_000, Features: 100}},
		{"rcv1-like-100k", SyntheticConfig{Samples: 100_000, Features: 47236, Density: 0.00155}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if _, _, err := Synthetic(bc.cfg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
