package privacy

import (
	"fmt"
	"image/color"
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/privacy/metric"
	"github.com/asyrevel/asyrevel/schemas"
)

// Trajectories are the outputs a party sent for every training sample
// over the evaluation rounds (the initial pass and each training-split
// round without holes): what the aggregator receives, sample by sample.
type Trajectories struct {
	Party  int
	Rounds int
	K      int
	N      int
	X      []float64 // N x (Rounds*K), row-major
}

// PartyTrajectories collects party m's training-split outputs over the
// rounds of a view read for m (the aggregator's view of m).
func PartyTrajectories(v *View, m int) (*Trajectories, error) {
	var rounds []EvalRound
	for _, r := range v.Evals[m] {
		if r.Split != schemas.SplitInit && r.Split != schemas.SplitTrain {
			continue
		}
		full := true
		for _, c := range r.C {
			if math.IsNaN(c) {
				full = false
				break
			}
		}
		if full {
			rounds = append(rounds, r)
		}
	}
	if len(rounds) == 0 {
		return nil, fmt.Errorf("%w: party %d sent no complete pass over the training set", ErrView, m)
	}
	k := v.K
	n := len(rounds[0].C) / k
	t := &Trajectories{Party: m, Rounds: len(rounds), K: k, N: n, X: make([]float64, n*len(rounds)*k)}
	w := len(rounds) * k
	for ri, r := range rounds {
		for i := range n {
			copy(t.X[i*w+ri*k:i*w+ri*k+k], r.C[i*k:i*k+k])
		}
	}
	return t, nil
}

// FeatureScore is the feature inference attack scored against the truth.
type FeatureScore struct {
	Attack   string    `json:"attack"`
	Attacker string    `json:"attacker"`
	Run      string    `json:"run"`
	Target   int       `json:"target_party"`
	Features int       `json:"features"`
	Rounds   int       `json:"rounds"`
	Aux      int       `json:"aux_samples"`
	Samples  int       `json:"samples_covered"` // scored (the non-auxiliary samples)
	R2       float64   `json:"r2"`              // pooled over the features
	MeanCorr float64   `json:"mean_correlation"`
	PerR2    []float64 `json:"per_feature_r2"`
	Note     string    `json:"note,omitempty"`
}

// FeatureAttack is the curious aggregator's feature inference: it knows
// the features of the aux samples (truth rows auxIDs) of the target party,
// fits a ridge regression from each sample's output trajectory (with an
// intercept) to the features on them, and predicts every other sample's
// features. For a linear model whose weights changed over at least d_m
// rounds the map is exactly linear. truth is the party's training matrix,
// read for the auxiliary rows (the attacker's knowledge) and by the
// scorer for the rest.
func FeatureAttack(t *Trajectories, truth *dataset.Matrix, aux []int) (*FeatureScore, error) {
	if truth.NRows != t.N {
		return nil, fmt.Errorf("privacy: truth has %d rows, the party sent %d", truth.NRows, t.N)
	}
	d := truth.NCols
	p := t.Rounds*t.K + 1
	if len(aux) < 2 {
		return nil, fmt.Errorf("%w: feature inference needs auxiliary samples: --aux N", ErrView)
	}
	row := func(i int, dst []float64) {
		dst[0] = 1
		copy(dst[1:], t.X[i*(p-1):(i+1)*(p-1)])
	}
	dense := func(i int, dst []float64) {
		clear(dst)
		idx, val := truth.Row(i)
		for j, c := range idx {
			dst[c] = float64(val[j])
		}
	}
	xa := mat.NewDense(len(aux), p, nil)
	ya := mat.NewDense(len(aux), d, nil)
	isAux := make([]bool, t.N)
	for r, i := range aux {
		row(i, xa.RawRowView(r))
		dense(i, ya.RawRowView(r))
		isAux[i] = true
	}
	// Ridge, scaled to the inputs: lambda = 1e-6 trace(X'X)/p.
	var xtx mat.Dense
	xtx.Mul(xa.T(), xa)
	var tr float64
	for i := range p {
		tr += xtx.At(i, i)
	}
	for i := range p {
		xtx.Set(i, i, xtx.At(i, i)+1e-6*tr/float64(p))
	}
	var xty, beta mat.Dense
	xty.Mul(xa.T(), ya)
	if err := beta.Solve(&xtx, &xty); err != nil {
		return nil, fmt.Errorf("privacy: feature regression: %w", err)
	}
	s := &FeatureScore{Attack: "feature", Attacker: "aggregator", Target: t.Party, Features: d, Rounds: t.Rounds, Aux: len(aux)}
	pred := make([][]float64, d)
	tru := make([][]float64, d)
	x := make([]float64, p)
	y := make([]float64, d)
	out := mat.NewVecDense(d, nil)
	for i := range t.N {
		if isAux[i] {
			continue
		}
		row(i, x)
		out.MulVec(beta.T(), mat.NewVecDense(p, x))
		dense(i, y)
		for j := range d {
			pred[j] = append(pred[j], out.AtVec(j))
			tru[j] = append(tru[j], y[j])
		}
		s.Samples++
	}
	var res, tot, corr float64
	nc := 0
	for j := range d {
		r2 := metric.R2(pred[j], tru[j])
		s.PerR2 = append(s.PerR2, nanTo(r2, 0))
		var mean float64
		for _, v := range tru[j] {
			mean += v
		}
		mean /= float64(len(tru[j]))
		for k, v := range tru[j] {
			res += (v - pred[j][k]) * (v - pred[j][k])
			tot += (v - mean) * (v - mean)
		}
		if c := metric.Pearson(pred[j], tru[j]); !math.IsNaN(c) {
			corr += c
			nc++
		}
	}
	s.R2 = 1 - res/tot
	if nc > 0 {
		s.MeanCorr = corr / float64(nc)
	}
	if t.Rounds*t.K < d {
		s.Note = fmt.Sprintf("%d outputs per sample for %d features: fewer rounds than features", t.Rounds*t.K, d)
	}
	return s, nil
}

func nanTo(v, d float64) float64 {
	if math.IsNaN(v) {
		return d
	}
	return v
}

// AuxSamples picks n distinct sample ids of 0..total-1 with a seeded
// generator: the samples whose labels or features an attacker knows.
func AuxSamples(total, n int, seed uint64) []int {
	n = min(n, total)
	perm := rand.New(rand.NewPCG(seed, 0xa0)).Perm(total)
	return perm[:n]
}

// KnownLabels are the labels of n auxiliary samples (AuxSamples).
func KnownLabels(labels []int32, n int, seed uint64) map[uint32]int32 {
	m := map[uint32]int32{}
	for _, i := range AuxSamples(len(labels), n, seed) {
		m[uint32(i)] = labels[i]
	}
	return m
}

// PlotFeatures draws the per-feature R squared of a feature attack.
func PlotFeatures(path string, s *FeatureScore) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("feature inference of party %d by the aggregator (%d aux samples, %d rounds): R2 %.3f", s.Target, s.Aux, s.Rounds, s.R2)
	p.X.Label.Text = "feature of the party"
	p.Y.Label.Text = "R squared"
	vals := make(plotter.Values, len(s.PerR2))
	for i, v := range s.PerR2 {
		vals[i] = max(v, -0.1)
	}
	bars, err := plotter.NewBarChart(vals, vg.Points(max(2, 300/float64(max(1, len(vals))))))
	if err != nil {
		return err
	}
	bars.Color = color.RGBA{R: 44, G: 160, B: 44, A: 255}
	p.Add(plotter.NewGrid(), bars)
	p.Y.Min, p.Y.Max = -0.1, 1
	return p.Save(7*vg.Inch, 4*vg.Inch, path)
}
