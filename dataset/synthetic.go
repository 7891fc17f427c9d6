package dataset

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
)

// SyntheticConfig describes a synthetic classification problem; see
// Synthetic.
type SyntheticConfig struct {
	Samples     int // training samples, at least 1
	TestSamples int // test samples, 0 or more
	Features    int // columns, at least 1

	// Classes is the number of classes: 2 (or 0) for a binary problem,
	// more for a multiclass one.
	Classes int

	// Density is the probability that an entry is non-zero, in (0, 1];
	// 1 (or 0) makes a dense matrix.
	Density float64

	// Noise is the probability that a label is replaced by another class
	// (flipped, for a binary problem), in [0, 1].
	Noise float64

	// Seed determines the data: the same configuration and Seed give the
	// same data sets, whatever the number of CPUs.
	Seed uint64
}

// Rows are generated in chunks of synthChunk rows, each from its own random
// stream, so the result does not depend on how chunks are spread over
// goroutines.
const synthChunk = 4096

// Random stream kinds, mixed into the per-chunk seeds.
const (
	streamTeacher = iota + 1
	streamTrain
	streamTest
	streamNoise = 16 // added to the kind of the stream whose labels are noised
)

// Synthetic generates a training and a test set that a linear model can
// fit, from a fixed random linear teacher.
//
// The teacher is drawn once from Seed: a weight vector w in R^Features for a
// binary problem, a matrix W in R^{Classes x Features} for a multiclass
// one, with independent N(0, 1) entries and no intercept. Each entry x_ij of
// a sample is non-zero with probability Density, independently (the
// positions of a row are drawn by geometric skips, so the cost is
// proportional to the non-zeros), and a non-zero value is N(0, 1) rounded to
// float32. The label is the teacher's decision on the stored values:
// class 1 (label +1) if w^T x > 0 and class 0 (label -1) otherwise, or, for
// Classes > 2, argmax_c (W x)_c, which is the most likely class of the
// linear-softmax model softmax(W x) (labels 0..Classes-1). Then, with
// probability Noise, the label is replaced by one of the other classes
// chosen uniformly.
//
// Without noise the classes are linearly separable, so a linear model gets
// close to 100% accuracy given enough samples; with label noise p the
// attainable accuracy is about 1-p. Train and test samples are independent
// draws from the same distribution; the training set does not depend on
// TestSamples, and changing Noise changes only labels. A sample with no non-zero entry has score 0 and class 0.
//
// Generation runs on all CPUs: 1,000,000 x 100 dense takes one to two
// seconds on two CPUs and holds 800 MB (8 bytes per entry).
func Synthetic(cfg SyntheticConfig) (train, test *Dataset, err error) {
	if cfg.Classes == 0 {
		cfg.Classes = 2
	}
	if cfg.Density == 0 {
		cfg.Density = 1
	}
	switch {
	case cfg.Samples < 1 || cfg.TestSamples < 0:
		err = fmt.Errorf("samples %d and test samples %d: need at least 1 and 0", cfg.Samples, cfg.TestSamples)
	case cfg.Features < 1 || cfg.Features > math.MaxInt32:
		err = fmt.Errorf("features %d out of [1, %d]", cfg.Features, math.MaxInt32)
	case cfg.Classes < 2 || cfg.Classes > maxInferredClasses:
		err = fmt.Errorf("classes %d out of [2, %d]", cfg.Classes, maxInferredClasses)
	case !(cfg.Density > 0 && cfg.Density <= 1):
		err = fmt.Errorf("density %v out of (0, 1]", cfg.Density)
	case !(cfg.Noise >= 0 && cfg.Noise <= 1):
		err = fmt.Errorf("noise %v out of [0, 1]", cfg.Noise)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("dataset: synthetic: %w", err)
	}
	g := newSynth(cfg)
	return g.generate(cfg.Samples, streamTrain), g.generate(cfg.TestSamples, streamTest), nil
}

// synth generates samples from a teacher.
type synth struct {
	cfg    SyntheticConfig
	k      int       // number of teacher outputs: 1 (binary) or Classes
	w      []float64 // teacher, Features x k, row-major
	logq   float64   // log(1 - Density), for geometric skips
	labels []float64
}

func newSynth(cfg SyntheticConfig) *synth {
	g := &synth{cfg: cfg, k: cfg.Classes}
	if cfg.Classes == 2 {
		g.k = 1
		g.labels = []float64{-1, 1}
	} else {
		g.labels = make([]float64, cfg.Classes)
		for c := range g.labels {
			g.labels[c] = float64(c)
		}
	}
	r := streamRand(cfg.Seed, streamTeacher, 0)
	g.w = make([]float64, cfg.Features*g.k)
	for i := range g.w {
		g.w[i] = r.NormFloat64()
	}
	g.logq = math.Log1p(-cfg.Density)
	return g
}

// streamRand is the random source of one chunk of one stream.
func streamRand(seed uint64, kind, chunk int) *rand.Rand {
	return rand.New(rand.NewPCG(splitmix(seed^splitmix(uint64(kind))), splitmix(uint64(kind)<<48^uint64(chunk))))
}

// splitmix is the SplitMix64 finaliser, used to spread seeds.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// generate makes n samples from the stream kind.
func (g *synth) generate(n, kind int) *Dataset {
	d := g.cfg.Features
	dense := g.cfg.Density == 1
	x := &Matrix{NRows: n, NCols: d, Indptr: make([]int64, n+1)}
	y := make([]int32, n)
	chunks := (n + synthChunk - 1) / synthChunk
	// Sparse chunks are generated into their own slices and joined at the
	// end; dense ones are written in place.
	var partIdx [][]int32
	var partVal [][]float32
	if dense {
		x.Indices = make([]int32, n*d)
		x.Values = make([]float32, n*d)
		for i := range x.Indptr {
			x.Indptr[i] = int64(i) * int64(d)
		}
	} else {
		partIdx = make([][]int32, chunks)
		partVal = make([][]float32, chunks)
	}
	parallel(chunks, func(c int) {
		r := streamRand(g.cfg.Seed, kind, c)
		noise := streamRand(g.cfg.Seed, kind+streamNoise, c)
		scores := make([]float64, g.k)
		lo, hi := c*synthChunk, min((c+1)*synthChunk, n)
		var idx []int32
		var val []float32
		if !dense {
			expect := int(float64(hi-lo)*float64(d)*g.cfg.Density*1.05) + 16
			idx, val = make([]int32, 0, expect), make([]float32, 0, expect)
		}
		for i := lo; i < hi; i++ {
			clear(scores)
			if dense {
				row := x.Values[i*d : (i+1)*d]
				cols := x.Indices[i*d : (i+1)*d]
				for j := range row {
					v := normal32(r)
					row[j], cols[j] = v, int32(j)
					g.score(scores, j, v)
				}
			} else {
				start := len(idx)
				for j := g.skip(r, -1); j < d; j = g.skip(r, j) {
					v := normal32(r)
					idx, val = append(idx, int32(j)), append(val, v)
					g.score(scores, j, v)
				}
				x.Indptr[i+1] = int64(len(idx) - start) // row length for now
			}
			y[i] = g.label(noise, scores)
		}
		if !dense {
			partIdx[c], partVal[c] = idx, val
		}
	})
	if !dense {
		for i := range n {
			x.Indptr[i+1] += x.Indptr[i]
		}
		x.Indices = make([]int32, x.Indptr[n])
		x.Values = make([]float32, x.Indptr[n])
		parallel(chunks, func(c int) {
			at := x.Indptr[c*synthChunk]
			copy(x.Indices[at:], partIdx[c])
			copy(x.Values[at:], partVal[c])
			partIdx[c], partVal[c] = nil, nil
		})
	}
	return &Dataset{
		Name:        "synthetic",
		Format:      FormatSynthetic,
		X:           x,
		Y:           y,
		Classes:     g.cfg.Classes,
		LabelValues: append([]float64(nil), g.labels...),
	}
}

// skip returns the next non-zero column after j: a geometric skip with
// success probability Density. It returns at least Features at the end.
func (g *synth) skip(r *rand.Rand, j int) int {
	u := 1 - r.Float64() // (0, 1]
	gap := math.Floor(math.Log(u) / g.logq)
	if gap >= float64(g.cfg.Features) {
		return g.cfg.Features
	}
	return j + 1 + int(gap)
}

// score adds column j with value v to the teacher's outputs.
func (g *synth) score(scores []float64, j int, v float32) {
	if g.k == 1 {
		scores[0] += g.w[j] * float64(v)
		return
	}
	w := g.w[j*g.k : (j+1)*g.k]
	for c := range scores {
		scores[c] += w[c] * float64(v)
	}
}

// label is the teacher's class for scores, with label noise drawn from r.
// The noise has its own random stream, so the features and the clean
// labels do not depend on Noise.
func (g *synth) label(r *rand.Rand, scores []float64) int32 {
	var y int
	if g.k == 1 {
		if scores[0] > 0 {
			y = 1
		}
	} else {
		for c, s := range scores {
			if s > scores[y] {
				y = c
			}
		}
	}
	if g.cfg.Noise > 0 && r.Float64() < g.cfg.Noise {
		y = (y + 1 + r.IntN(g.cfg.Classes-1)) % g.cfg.Classes
	}
	return int32(y)
}

// normal32 is a non-zero N(0, 1) draw rounded to float32.
func normal32(r *rand.Rand) float32 {
	for {
		if v := float32(r.NormFloat64()); v != 0 {
			return v
		}
	}
}

// parallel calls f(0..n-1) on up to GOMAXPROCS goroutines.
func parallel(n int, f func(int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers <= 1 {
		for i := range n {
			f(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				f(i)
			}
		})
	}
	wg.Wait()
}
