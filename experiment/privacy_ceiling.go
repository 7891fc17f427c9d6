package experiment

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/optimize"
	"gonum.org/v1/gonum/stat"

	"github.com/asyrevel/asyrevel/dataset"
)

// The ceilings of the small tables (issue 31): centralised reference
// models, with no broker and no run, on exactly the splits of the goal
// rows (breast cancer and wine, 3 parties, the goal's seeds). They say how
// far a model can go under the goal's constraints (every label's inference
// AUC at most the bound, one value a party a sample), whatever the
// protocol: a defended run cannot beat the best of them that keeps to the
// constraints. Written to privacy-ceiling.csv.

// The ceiling rows' kinds.
const (
	// CeilingUndefended: softmax regression on all columns with the true
	// labels (the --privacy off reference; no bound).
	CeilingUndefended = "undefended"
	// CeilingRR: the same solver on labels passed once through randomised
	// response at the bound (rrKeep), one row a draw.
	CeilingRR = "rr"
	// CeilingRRStack: each party's one-value projection of the CeilingRR
	// model, and a head refitted on the true labels over the q projections
	// (the label holder's own model, which costs no budget).
	CeilingRRStack = "rr-stack"
	// CeilingPCA1: each party's PCA to 1 dimension, fitted on its own
	// training rows without labels, and a head on the true labels.
	CeilingPCA1 = "pca1"
	// CeilingPCA3: the same with 3 dimensions a party: 3 values a party a
	// sample, outside DESIGN.md's form rule (--k 1 on these tables).
	CeilingPCA3 = "pca3"
)

// CeilingKinds are the kinds in the order of the CSV file and the report.
var CeilingKinds = []string{CeilingUndefended, CeilingRR, CeilingRRStack, CeilingPCA1, CeilingPCA3}

// CeilingSets are the sets with ceiling rows.
var CeilingSets = []string{"breast-cancer", "wine"}

// CeilingConfig configures the ceiling rows.
type CeilingConfig struct {
	Data  GoalData // the small tables' CSV files (and how the report names them)
	Sets  []string // of CeilingSets (empty: both)
	Seeds []uint64 // the goal rows' split seeds
	// Draws is the randomised-response draws a seed (default 20).
	Draws int
	// AUC is the bound: the largest label-inference AUC (default 0.6, the
	// default privacy's).
	AUC float64
	// Split runs `asyrevel data split` with its arguments (as GoalConfig's).
	Split func(args []string) error
	// Store is the folder for the splits (each removed once read).
	Store string
}

// CeilingRow is one ceiling model's test accuracy on one seed's split
// (and, for the randomised-response kinds, one draw).
type CeilingRow struct {
	Set  string
	Seed uint64
	Kind string
	Draw int // 1..Draws for CeilingRR and CeilingRRStack; 0 otherwise
	// Parties, Classes, TrainRows, TestRows describe the split.
	Parties, Classes, TrainRows, TestRows int
	// Values is what a party sends a sample: the values the model needs of
	// its columns (a linear model over all columns: Classes-1 logit
	// differences). InForm: Values is 1, DESIGN.md's form at --k 1.
	Values int
	InForm bool
	// TrueLabels: the model (or its head) trains on the true labels.
	Labels string
	// AUCBound is the largest label-inference AUC a party can reach
	// (NaN: none, the undefended reference; 0.5: no label-dependent value
	// reaches a party). Epsilon and Keep are randomised response's.
	AUCBound, Epsilon, Keep float64
	Flipped                 int // labels randomised response changed
	TestAccuracy            float64
	L2                      float64
	Split                   string // the `asyrevel data split` command of the goal rows
}

// ceilingL2 is the L2 weight of every fit: the objective is the mean
// cross-entropy plus ceilingL2/2 times the squared weights (not the
// intercepts) over the training rows' count, as scikit-learn's
// LogisticRegression with C = 1 (the 98.25% on breast cancer).
func ceilingL2(n int) float64 { return 1 / float64(n) }

// Ceiling computes the ceiling rows: for each set and seed, the goal rows'
// split, then every kind of CeilingKinds.
func Ceiling(ctx context.Context, cfg CeilingConfig) ([]CeilingRow, error) {
	if cfg.Split == nil {
		return nil, errors.New("experiment: the ceiling rows need the data split command (CeilingConfig.Split)")
	}
	sets := cfg.Sets
	if len(sets) == 0 {
		sets = CeilingSets
	}
	for _, s := range sets {
		if !slices.Contains(CeilingSets, s) {
			return nil, planError(fmt.Sprintf("--sets: %q (the ceiling rows have %s)", s, CeilingSets))
		}
	}
	if cfg.Draws <= 0 {
		cfg.Draws = 20
	}
	if cfg.AUC == 0 {
		cfg.AUC = 0.6
	}
	if cfg.AUC <= 0.5 || cfg.AUC >= 1 {
		return nil, planError(fmt.Sprintf("the bound's AUC %g is not in (0.5, 1)", cfg.AUC))
	}
	// The goal rows' own plan gives the splits, so the two cannot differ.
	runs, err := GoalPlan(GoalPlanOptions{Data: cfg.Data, Sets: sets, Seeds: cfg.Seeds})
	if err != nil {
		return nil, err
	}
	var out []CeilingRow
	for _, g := range runs {
		if g.Privacy != PrivacyDefault || len(g.Split) == 0 {
			continue
		}
		if err := ctx.Err(); err != nil {
			return out, err
		}
		dir := filepath.Join(cfg.Store, fmt.Sprintf("ceiling-%s-%d", g.Set, g.Seed))
		err := cfg.Split(append([]string{"--out", dir}, g.Split...))
		var data *dataset.Vertical
		if err == nil {
			var man *dataset.SplitManifest
			if man, err = dataset.ReadManifest(dir); err == nil {
				data, err = dataset.LoadVertical(dataset.VerticalOptions{Path: dir, Parties: man.Q}, dataset.RoleAll)
			}
		}
		os.RemoveAll(dir)
		if err != nil {
			return out, fmt.Errorf("%s seed %d: %w", g.Set, g.Seed, err)
		}
		rows, err := ceilingRows(data, cfg.AUC, cfg.Draws, g.Seed)
		if err != nil {
			return out, fmt.Errorf("%s seed %d: %w", g.Set, g.Seed, err)
		}
		// The split's half of the goal row's command (GoalRun.Command).
		split := "asyrevel data split --out " + GoalSplitDir + " " + showArgs(g, g.Split)
		for i := range rows {
			rows[i].Set, rows[i].Seed, rows[i].Split = g.Set, g.Seed, split
		}
		out = append(out, rows...)
	}
	return out, nil
}

// showArgs is args as g.Command shows them.
func showArgs(g GoalRun, args []string) string {
	s := ""
	for i, a := range args {
		if v, ok := g.Show[a]; ok {
			a = v
		}
		if i > 0 {
			s += " "
		}
		s += a
	}
	return s
}

// ceilingData is a split as dense matrices: all columns side by side
// (party 1's first), each party's block, the labels.
type ceilingData struct {
	xtr, xte   *mat.Dense
	blocks     []dataset.Block
	ytr, yte   []int32
	classes, q int
}

func denseOf(parts []*dataset.Matrix, blocks []dataset.Block, d int) *mat.Dense {
	n := parts[0].NRows
	x := mat.NewDense(n, d, nil)
	for m, p := range parts {
		for i := range n {
			idx, val := p.Row(i)
			for k, j := range idx {
				x.Set(i, blocks[m].Lo+int(j), float64(val[k]))
			}
		}
	}
	return x
}

// ceilingRows computes one split's rows (Set, Seed and Split left empty).
func ceilingRows(v *dataset.Vertical, auc float64, draws int, seed uint64) ([]CeilingRow, error) {
	q := len(v.PartTrain)
	if q == 0 || v.NTrain == 0 || v.TestRows() == 0 || v.HeldOut != 0 {
		return nil, fmt.Errorf("experiment: a ceiling needs a split with training and test rows (parties %d, train %d, test %d, held out %d)",
			q, v.NTrain, v.TestRows(), v.HeldOut)
	}
	cd := ceilingData{xtr: denseOf(v.PartTrain, v.Blocks, v.Features), xte: denseOf(v.PartTest, v.Blocks, v.Features),
		blocks: v.Blocks, ytr: v.TrainY, yte: v.TestY, classes: v.Classes, q: q}
	K := cd.classes
	l2 := ceilingL2(len(cd.ytr))
	base := CeilingRow{Parties: q, Classes: K, TrainRows: len(cd.ytr), TestRows: len(cd.yte), L2: l2, AUCBound: math.NaN(), Epsilon: math.NaN(), Keep: math.NaN()}
	var out []CeilingRow
	add := func(kind string, draw, values int, labels string, bound float64, acc float64) *CeilingRow {
		r := base
		r.Kind, r.Draw, r.Values, r.InForm, r.Labels, r.AUCBound, r.TestAccuracy = kind, draw, values, values == 1, labels, bound, acc
		out = append(out, r)
		return &out[len(out)-1]
	}

	// 1. Undefended: all columns, true labels.
	w, err := fitSoftmax(cd.xtr, cd.ytr, K, l2)
	if err != nil {
		return nil, fmt.Errorf("undefended: %w", err)
	}
	add(CeilingUndefended, 0, K-1, "true", math.NaN(), softmaxAccuracy(w, cd.xte, cd.yte, K))

	// 2 and 3. Randomised response at the bound, and its stacking.
	priors := make([]float64, K)
	for _, y := range cd.ytr {
		priors[y]++
	}
	for k := range priors {
		priors[k] /= float64(len(cd.ytr))
	}
	keep := rrKeep(auc, priors)
	eps := rrEpsilon(keep, K)
	bound := rrAttackAUC(keep, priors)
	for r := 1; r <= draws; r++ {
		rng := rand.New(rand.NewPCG(seed, uint64(r)))
		noisy, flipped := randomise(cd.ytr, K, keep, rng)
		w, err := fitSoftmax(cd.xtr, noisy, K, l2)
		if err != nil {
			return nil, fmt.Errorf("randomised response, draw %d: %w", r, err)
		}
		row := add(CeilingRR, r, K-1, "randomised", bound, softmaxAccuracy(w, cd.xte, cd.yte, K))
		row.Epsilon, row.Keep, row.Flipped = eps, keep, flipped
		ztr, zte := stackProjections(w, &cd)
		h, err := fitSoftmax(ztr, cd.ytr, K, l2)
		if err != nil {
			return nil, fmt.Errorf("randomised response's head, draw %d: %w", r, err)
		}
		row = add(CeilingRRStack, r, 1, "randomised; head: true", bound, softmaxAccuracy(h, zte, cd.yte, K))
		row.Epsilon, row.Keep, row.Flipped = eps, keep, flipped
	}

	// 4 and 5. Label-free PCA a party, head on the true labels.
	for _, c := range []struct {
		kind string
		dims int
	}{{CeilingPCA1, 1}, {CeilingPCA3, 3}} {
		ztr, zte, values, err := pcaProjections(&cd, c.dims)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.kind, err)
		}
		h, err := fitSoftmax(ztr, cd.ytr, K, l2)
		if err != nil {
			return nil, fmt.Errorf("%s's head: %w", c.kind, err)
		}
		add(c.kind, 0, values, "head: true", 0.5, softmaxAccuracy(h, zte, cd.yte, K))
	}
	return out, nil
}

// Softmax regression with an intercept a class: the parameters w hold
// class k's weights at w[k*(d+1) : k*(d+1)+d] and its intercept at
// w[k*(d+1)+d]. The objective is the mean cross-entropy over the rows plus
// l2/2 times the squared weights (the intercepts are not penalised).
// K = 2 is logistic regression (with the penalty split between the two
// weight vectors).

// softmaxObjective is the objective of (x, y) and its gradient.
func softmaxObjective(x *mat.Dense, y []int32, K int, l2 float64) (func([]float64) float64, func(g, w []float64)) {
	n, d := x.Dims()
	z := make([]float64, K)
	// eval writes the objective, and if g is not nil its gradient.
	eval := func(w, g []float64) float64 {
		if g != nil {
			clear(g)
		}
		var loss float64
		for i := range n {
			row := x.RawRowView(i)
			for k := range K {
				wk := w[k*(d+1) : (k+1)*(d+1)]
				s := wk[d]
				for j, v := range row {
					s += wk[j] * v
				}
				z[k] = s
			}
			lse := logSumExp(z)
			loss += lse - z[y[i]]
			if g == nil {
				continue
			}
			for k := range K {
				e := math.Exp(z[k] - lse)
				if int32(k) == y[i] {
					e--
				}
				e /= float64(n)
				gk := g[k*(d+1) : (k+1)*(d+1)]
				for j, v := range row {
					gk[j] += e * v
				}
				gk[d] += e
			}
		}
		f := loss / float64(n)
		for k := range K {
			wk := w[k*(d+1) : k*(d+1)+d]
			for j, v := range wk {
				f += l2 / 2 * v * v
				if g != nil {
					g[k*(d+1)+j] += l2 * v
				}
			}
		}
		return f
	}
	return func(w []float64) float64 { return eval(w, nil) }, func(g, w []float64) { eval(w, g) }
}

func logSumExp(z []float64) float64 {
	m := slices.Max(z)
	var s float64
	for _, v := range z {
		s += math.Exp(v - m)
	}
	return m + math.Log(s)
}

// fitSoftmax minimises softmaxObjective by L-BFGS from zero.
func fitSoftmax(x *mat.Dense, y []int32, K int, l2 float64) ([]float64, error) {
	_, d := x.Dims()
	f, grad := softmaxObjective(x, y, K, l2)
	res, err := optimize.Minimize(optimize.Problem{Func: f, Grad: grad}, make([]float64, K*(d+1)),
		&optimize.Settings{GradientThreshold: 1e-6, MajorIterations: 10000}, &optimize.LBFGS{})
	if res == nil {
		return nil, fmt.Errorf("softmax regression: %w", err)
	}
	if err != nil || res.Status != optimize.GradientThreshold {
		// L-BFGS may stop on a line search that can no longer decrease the
		// objective once it is at its floating-point floor: accept that
		// (the status is not GradientThreshold), but not a gradient far
		// from zero.
		g := make([]float64, len(res.X))
		grad(g, res.X)
		if n := normInf(g); n > 1e-4 || math.IsNaN(n) {
			return nil, fmt.Errorf("softmax regression stopped (%v, %v) with gradient %.3g", res.Status, err, n)
		}
	}
	return res.X, nil
}

func normInf(g []float64) float64 {
	var m float64
	for _, v := range g {
		if math.IsNaN(v) {
			return math.NaN()
		}
		m = max(m, math.Abs(v))
	}
	return m
}

// softmaxPredict is the class of the largest score of row x.
func softmaxPredict(w, x []float64, K int) int32 {
	d := len(x)
	best, bs := int32(0), math.Inf(-1)
	for k := range K {
		wk := w[k*(d+1) : (k+1)*(d+1)]
		s := wk[d]
		for j, v := range x {
			s += wk[j] * v
		}
		if s > bs {
			best, bs = int32(k), s
		}
	}
	return best
}

func softmaxAccuracy(w []float64, x *mat.Dense, y []int32, K int) float64 {
	n, _ := x.Dims()
	ok := 0
	for i := range n {
		if softmaxPredict(w, x.RawRowView(i), K) == y[i] {
			ok++
		}
	}
	return float64(ok) / float64(n)
}

// Randomised response over K classes reports the true label with
// probability keep and each of the K-1 others with probability
// (1-keep)/(K-1): the aggregator's mechanism (dp.KeepProb's, drawn the
// same way), which is eps-label-DP with eps = ln(keep (K-1)/(1-keep)).
//
// The keep whose attack AUC is the bound A. An attacker who reads the
// randomised label r of a sample and knows the mechanism and the class
// priors pi infers class c one-vs-rest (positives: y = c; negatives:
// y != c, of classes distributed as nu_j = pi_j/(1-pi_c)). With
// q = (1-keep)/(K-1):
//
//	P(r = c | y = c) = keep,  P(r = c | y != c) = q,
//	P(r = j | y = c) = q,     P(r = j | y != c) = nu_j keep + (1-nu_j) q   (j != c).
//
// By Neyman and Pearson, ranking the samples by the likelihood ratio
// L(r) = P(r | y = c)/P(r | y != c) gives the ROC curve above every other
// score's of r, hence the largest AUC: the best attack. L(c) = keep/q >= 1
// and L(j) = q/(q + nu_j (keep - q)) <= 1, so r = c ranks first and the
// other values follow by their nu_j (larger nu_j last). The AUC of this
// ranking is, over the values a, b of r,
//
//	AUC_c = sum_{L(a) > L(b)} P(a | y = c) P(b | y != c) + 1/2 sum_{L(a) = L(b)} P(a | y = c) P(b | y != c).
//
// With K = 2 this is keep, whatever the priors (the binary case:
// keep = A, eps = ln(A/(1-A)), 0.405 for A = 0.6). With K > 2 and the
// negatives' classes balanced it is (1 + keep - q)/2, with unbalanced ones
// a little more. rrKeep takes the largest keep whose worst class's AUC_c
// is at most A (AUC_c grows with keep, from 1/2 at keep = 1/K: bisection).
//
// This bounds attacks that read the randomised label; one that also knows
// a sample's features has, for K > 2, only the pairwise eps-DP bound
// e^eps/(1+e^eps), above A at this eps (the accountant's, dp.AUCBoundPure,
// would choose a smaller eps). The multiclass rows are therefore generous to
// randomised response: they add less noise than the default privacy could.

// rrClassAUC is AUC_c above: the best attack's one-vs-rest AUC for class c.
func rrClassAUC(keep float64, priors []float64, c int) float64 {
	K := len(priors)
	q := (1 - keep) / float64(K-1)
	pos := make([]float64, K)
	neg := make([]float64, K)
	ratio := make([]float64, K)
	for j := range K {
		if j == c {
			pos[j], neg[j] = keep, q
		} else {
			nu := priors[j] / (1 - priors[c])
			pos[j], neg[j] = q, nu*keep+(1-nu)*q
		}
		ratio[j] = pos[j] / neg[j]
	}
	var auc float64
	for a := range K {
		for b := range K {
			switch d := ratio[a] - ratio[b]; {
			case math.Abs(d) <= 1e-12*max(ratio[a], ratio[b]):
				auc += pos[a] * neg[b] / 2
			case d > 0:
				auc += pos[a] * neg[b]
			}
		}
	}
	return auc
}

// rrAttackAUC is the worst class's best attack AUC (binary: keep).
func rrAttackAUC(keep float64, priors []float64) float64 {
	worst := 0.5
	for c, p := range priors {
		if p > 0 && p < 1 {
			worst = max(worst, rrClassAUC(keep, priors, c))
		}
	}
	return worst
}

// rrKeep is the largest keep probability whose worst class's best attack
// AUC is at most auc, for classes of these priors.
func rrKeep(auc float64, priors []float64) float64 {
	lo, hi := 1/float64(len(priors)), 1.0
	for range 200 {
		mid := (lo + hi) / 2
		if rrAttackAUC(mid, priors) <= auc {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// rrEpsilon is randomised response's eps at this keep over K classes.
func rrEpsilon(keep float64, K int) float64 {
	return math.Log(keep * float64(K-1) / (1 - keep))
}

// randomise passes y through randomised response once, as the aggregator
// does (aggregator/defense.go): each label kept with probability keep,
// else replaced by one of the others, uniformly.
func randomise(y []int32, K int, keep float64, rng *rand.Rand) ([]int32, int) {
	out := slices.Clone(y)
	flipped := 0
	for i, v := range y {
		if rng.Float64() >= keep {
			o := int32(rng.IntN(K - 1))
			if o >= v {
				o++
			}
			out[i] = o
			flipped++
		}
	}
	return out, flipped
}

// pcaBasis is a party's PCA: the training rows' column means and the
// first dims directions, applied to its block [lo, hi) of x.
type pcaBasis struct {
	lo, hi int
	mean   []float64
	vecs   *mat.Dense // (hi-lo) x dims
}

func fitPCA(x *mat.Dense, lo, hi, dims int) (*pcaBasis, error) {
	n, _ := x.Dims()
	block := x.Slice(0, n, lo, hi)
	var pc stat.PC
	if !pc.PrincipalComponents(block, nil) {
		return nil, errors.New("PCA: the decomposition failed")
	}
	var all mat.Dense
	pc.VectorsTo(&all)
	dims = min(dims, hi-lo)
	b := &pcaBasis{lo: lo, hi: hi, mean: make([]float64, hi-lo), vecs: mat.DenseCopyOf(all.Slice(0, hi-lo, 0, dims))}
	for j := range hi - lo {
		b.mean[j] = stat.Mean(mat.Col(nil, j, block), nil)
	}
	return b, nil
}

// project writes the block's scores of every row of x into dst's columns
// from col on.
func (b *pcaBasis) project(x, dst *mat.Dense, col int) {
	n, _ := x.Dims()
	_, dims := b.vecs.Dims()
	c := make([]float64, b.hi-b.lo)
	for i := range n {
		row := x.RawRowView(i)[b.lo:b.hi]
		for j := range c {
			c[j] = row[j] - b.mean[j]
		}
		for k := range dims {
			var s float64
			for j, v := range c {
				s += v * b.vecs.At(j, k)
			}
			dst.Set(i, col+k, s)
		}
	}
}

// pcaProjections are each party's PCA scores to dims dimensions (fitted on
// its training rows, no labels), side by side; values is the most scores
// a party sends (dims, or fewer columns).
func pcaProjections(cd *ceilingData, dims int) (ztr, zte *mat.Dense, values int, err error) {
	var bases []*pcaBasis
	width := 0
	for _, bl := range cd.blocks {
		b, err := fitPCA(cd.xtr, bl.Lo, bl.Hi, dims)
		if err != nil {
			return nil, nil, 0, err
		}
		bases = append(bases, b)
		_, k := b.vecs.Dims()
		width += k
		values = max(values, k)
	}
	ntr, _ := cd.xtr.Dims()
	nte, _ := cd.xte.Dims()
	ztr, zte = mat.NewDense(ntr, width, nil), mat.NewDense(nte, width, nil)
	col := 0
	for _, b := range bases {
		b.project(cd.xtr, ztr, col)
		b.project(cd.xte, zte, col)
		_, k := b.vecs.Dims()
		col += k
	}
	return ztr, zte, values, nil
}

// stackProjections are each party's one value of softmax model w: its
// block's class scores (K values a sample, W_k x over its columns) reduced
// to their first principal component over the training rows (with K = 2
// the scores are opposite, and this is their difference up to scale: the
// party's share of the logit). No label is used beyond w's.
func stackProjections(w []float64, cd *ceilingData) (ztr, zte *mat.Dense) {
	K := cd.classes
	_, d := cd.xtr.Dims()
	scores := func(x *mat.Dense, bl dataset.Block) *mat.Dense {
		n, _ := x.Dims()
		s := mat.NewDense(n, K, nil)
		for i := range n {
			row := x.RawRowView(i)
			for k := range K {
				var v float64
				for j := bl.Lo; j < bl.Hi; j++ {
					v += w[k*(d+1)+j] * row[j]
				}
				s.Set(i, k, v)
			}
		}
		return s
	}
	ntr, _ := cd.xtr.Dims()
	nte, _ := cd.xte.Dims()
	ztr, zte = mat.NewDense(ntr, cd.q, nil), mat.NewDense(nte, cd.q, nil)
	for m, bl := range cd.blocks {
		str, ste := scores(cd.xtr, bl), scores(cd.xte, bl)
		b, err := fitPCA(str, 0, K, 1)
		if err != nil {
			// All of the party's scores equal (its weights zero): its value
			// carries nothing; leave it 0.
			continue
		}
		b.project(str, ztr, m)
		b.project(ste, zte, m)
	}
	return ztr, zte
}

// ceilingHeader are the columns of CeilingFile.
var ceilingHeader = []string{"set", "seed", "kind", "draw", "parties", "classes", "train_rows", "test_rows", "values_per_party", "in_form",
	"labels", "auc_bound", "epsilon", "keep", "flipped", "test_accuracy", "l2", "split", "command"}

func (r CeilingRow) record(command string) []string {
	itoa := strconv.Itoa
	return []string{r.Set, strconv.FormatUint(r.Seed, 10), r.Kind, itoa(r.Draw), itoa(r.Parties), itoa(r.Classes), itoa(r.TrainRows), itoa(r.TestRows),
		itoa(r.Values), strconv.FormatBool(r.InForm), r.Labels, numText(r.AUCBound, 4), numText(r.Epsilon, 4), numText(r.Keep, 4), itoa(r.Flipped),
		numText(r.TestAccuracy, 4), numText(r.L2, 6), r.Split, command}
}

// CeilingFile is the ceiling rows' file in a results folder.
const CeilingFile = "privacy-ceiling.csv"

// WriteCeiling writes rows to dir's privacy-ceiling.csv (rows of the same
// set and seed replace the earlier ones; others are kept), records the
// command, and writes the report again.
func WriteCeiling(dir string, rows []CeilingRow, cmdline string, started time.Time) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var recs [][]string
	for _, r := range rows {
		recs = append(recs, r.record(cmdline))
	}
	// The key is (set, seed, kind, draw): a run of other seeds keeps
	// these.
	if err := mergeCSV(filepath.Join(dir, CeilingFile), ceilingHeader, 4, recs); err != nil {
		return err
	}
	return WriteSection(dir, Section{Name: "privacy-ceiling", Command: cmdline, Started: started,
		Settings: []string{"centralised, no broker: gonum's L-BFGS on each split's rows, in one process"}})
}
