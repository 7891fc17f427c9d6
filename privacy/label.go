package privacy

import (
	"fmt"
	"math"
	"slices"
)

var nan = math.NaN()

// LabelInference is what a label attack infers about the samples it
// covered.
type LabelInference struct {
	Attack  string
	Classes int
	// IDs are the covered samples, in increasing order.
	IDs []uint32
	// Score is, for a binary head, the score of class 1 of each covered
	// sample (higher: more likely class 1); for a multiclass head, Classes
	// scores per sample.
	Score []float64
	// Pred is the predicted class of each covered sample.
	Pred []int32
	// Others, for the loss attack, is the recovered sum of the other
	// parties' outputs (plus the head's intercept) of each covered sample
	// at its last visit (NaN when not recovered).
	Others []float64
	// Visits counts the requests the inference used.
	Visits int
	// Note says what the attack assumed or could not do.
	Note string
}

// accumulate collects a per-sample sum over visits into an inference.
type accumulate struct {
	sum    map[uint32]float64
	others map[uint32]float64
	visits int
}

func newAccumulate() *accumulate {
	return &accumulate{sum: map[uint32]float64{}, others: map[uint32]float64{}}
}

func (a *accumulate) binary(name string) *LabelInference {
	inf := &LabelInference{Attack: name, Classes: 2, Visits: a.visits}
	for id := range a.sum {
		inf.IDs = append(inf.IDs, id)
	}
	slices.Sort(inf.IDs)
	for _, id := range inf.IDs {
		s := a.sum[id]
		inf.Score = append(inf.Score, s)
		p := int32(0)
		if s > 0 {
			p = 1
		}
		inf.Pred = append(inf.Pred, p)
		if o, ok := a.others[id]; ok {
			inf.Others = append(inf.Others, o)
		} else if len(a.others) > 0 {
			inf.Others = append(inf.Others, nan)
		}
	}
	return inf
}

// needK1 checks that the view's parties send one output per sample.
func needK1(v *View, attack string) error {
	if v.K != 1 {
		return fmt.Errorf("%w: the %s attack reads one output per sample; this run has k = %d (use the derivative attack)", ErrView, attack, v.K)
	}
	return nil
}

// SignAttack infers binary labels from per-sample replies: the logistic
// loss is monotone in the margin y z, so h_bar - h has the sign of -y (c_hat
// - c). The score of class 1 sums -(h_bar - h) sign(c_hat - c) over the
// visits (a vote weighted by the size of the difference, which averages
// out noise).
func SignAttack(v *View) (*LabelInference, error) {
	if err := needK1(v, "sign"); err != nil {
		return nil, err
	}
	if err := notTIG(v, "sign"); err != nil {
		return nil, err
	}
	if v.Format == "mean" {
		return nil, fmt.Errorf("%w: the replies carry only batch means: use the regression attack", ErrView)
	}
	acc := newAccumulate()
	for i := range v.Requests {
		r := &v.Requests[i]
		vals := r.Values()
		if vals == nil {
			continue
		}
		acc.visits++
		for j, id := range r.IDs {
			dc := r.CHat[j] - r.C[j]
			if dc == 0 {
				acc.sum[id] += 0 // covered, no information
				continue
			}
			acc.sum[id] -= math.Copysign(1, dc) * vals[j]
		}
	}
	return acc.binary("sign"), nil
}

// LossAttack inverts the logistic loss the paper's replies carry: h =
// log(1 + e^-t) gives the margin t = y z = -log(e^h - 1), and with h_bar,
// (t_bar - t)/(c_hat - c) = y exactly. It also recovers y t - c, the sum of
// the other parties' outputs plus the intercept. It needs replies with h
// and h_bar.
func LossAttack(v *View) (*LabelInference, error) {
	if err := needK1(v, "loss"); err != nil {
		return nil, err
	}
	if v.Format != "h,h_bar" {
		return nil, fmt.Errorf("%w: the replies carry no loss values (%s): the loss attack needs the paper's h and h_bar", ErrView, v.Format)
	}
	acc := newAccumulate()
	var off int // visits whose estimate of y is not near +-1
	for i := range v.Requests {
		r := &v.Requests[i]
		if !r.Replied || r.H == nil {
			continue
		}
		acc.visits++
		for j, id := range r.IDs {
			dc := r.CHat[j] - r.C[j]
			t := -math.Log(math.Expm1(r.H[j]))
			tb := -math.Log(math.Expm1(r.HBar[j]))
			y := (tb - t) / dc
			if dc == 0 || math.IsNaN(y) || math.IsInf(y, 0) {
				acc.sum[id] += 0
				continue
			}
			if math.Abs(math.Abs(y)-1) > 0.05 {
				off++
			}
			acc.sum[id] += y
			if !math.IsInf(t, 0) {
				acc.others[id] = math.Copysign(1, y)*t - r.C[j]
			}
		}
	}
	inf := acc.binary("loss")
	if off > acc.visits/10 {
		inf.Note = fmt.Sprintf("%d sample visits gave |y| far from 1: the head does not look logistic", off)
	}
	return inf, nil
}

// RegressionAttack infers binary labels from replies of any format by
// least squares: each reply gives one equation (a batch mean) or one per
// sample, sum_i (c_hat_i - c_i) g_i = b mean(h_bar - h), where g_i, the
// derivative of sample i's loss with respect to its output, has the sign
// of -y_i. CGLS with a small ridge term solves for every g_i at once;
// the score of class 1 is -g_i. An active attacker's crafted requests
// (one sample perturbed per request) make it exact.
func RegressionAttack(v *View, iters int) (*LabelInference, error) {
	if err := needK1(v, "regression"); err != nil {
		return nil, err
	}
	if err := notTIG(v, "regression"); err != nil {
		return nil, err
	}
	if iters <= 0 {
		iters = 100
	}
	col := map[uint32]int32{}
	var ids []uint32
	index := func(id uint32) uint32 {
		c, ok := col[id]
		if !ok {
			c = int32(len(ids))
			col[id] = c
			ids = append(ids, id)
		}
		return uint32(c)
	}
	a := &sparseRows{}
	var cols []uint32
	var vals []float64
	visits := 0
	for i := range v.Requests {
		r := &v.Requests[i]
		if !r.Replied {
			continue
		}
		visits++
		// Only samples actually perturbed enter the system (the others
		// are not covered: nothing was learnt about them).
		if r.Mean {
			if len(r.Delta) == 0 {
				continue // no value: nothing to regress on
			}
			cols, vals = cols[:0], vals[:0]
			for j, id := range r.IDs {
				if d := r.CHat[j] - r.C[j]; d != 0 {
					cols = append(cols, index(id))
					vals = append(vals, d)
				}
			}
			a.addRow(cols, vals, float64(len(r.IDs))*r.Delta[0])
			continue
		}
		pv := r.Values()
		if len(pv) != len(r.IDs) || len(r.CHat) < len(r.IDs) || len(r.C) < len(r.IDs) {
			continue // a reply that does not fit its request
		}
		for j, id := range r.IDs {
			if d := r.CHat[j] - r.C[j]; d != 0 {
				a.addRow([]uint32{index(id)}, []float64{d}, pv[j])
			}
		}
	}
	if a.rows() == 0 {
		return nil, fmt.Errorf("%w: no replies", ErrView)
	}
	a.n = len(ids)
	// Ridge: a small fraction of the mean squared coefficient, so that
	// samples never perturbed stay at 0 and the rest are barely shrunk.
	var ss float64
	for _, x := range a.vals {
		ss += x * x
	}
	lambda := 1e-3 * ss / float64(max(1, a.n))
	g := cgls(a, lambda, iters, 1e-10)
	acc := newAccumulate()
	acc.visits = visits
	for c, id := range ids {
		acc.sum[id] = -g[c]
	}
	inf := acc.binary("regression")
	inf.Note = fmt.Sprintf("%d equations, %d unknowns, CGLS %d iterations", a.rows(), a.n, iters)
	return inf, nil
}

// DerivativeAttack infers multiclass labels (k = 1 output per party):
// each sample's derivative of the loss with respect to its output is
// estimated (per-sample replies: (h_bar - h)/(c_hat - c), averaged over
// visits; batch means: the regression), and a sample is given the class
// whose known samples' mean derivative is nearest. aux holds the labels
// the attacker knows (for example a few customers it has in common with
// the label holder); they are not scored.
func DerivativeAttack(v *View, classes int, aux map[uint32]int32) (*LabelInference, error) {
	der, err := derivatives(v, classes)
	if err != nil {
		return nil, err
	}
	inf, _, err := placeClasses(der, classes, aux, nil)
	if err != nil {
		return nil, err
	}
	inf.Visits = len(v.Requests)
	return inf, nil
}

// derivatives estimates each covered sample's loss derivative with
// respect to the party's output.
func derivatives(v *View, classes int) (map[uint32]float64, error) {
	if err := needK1(v, "derivative"); err != nil {
		return nil, err
	}
	if err := notTIG(v, "derivative"); err != nil {
		return nil, err
	}
	if classes < 2 {
		return nil, fmt.Errorf("%w: %d classes", ErrView, classes)
	}
	der := map[uint32]float64{}
	if v.Format == "mean" {
		inf, err := RegressionAttack(v, 0)
		if err != nil {
			return nil, err
		}
		for j, id := range inf.IDs {
			der[id] = -inf.Score[j]
		}
		return der, nil
	}
	sum, cnt := map[uint32]float64{}, map[uint32]float64{}
	for i := range v.Requests {
		r := &v.Requests[i]
		vals := r.Values()
		if vals == nil {
			continue
		}
		for j, id := range r.IDs {
			if dc := r.CHat[j] - r.C[j]; dc != 0 {
				sum[id] += vals[j] / dc
				cnt[id]++
			}
		}
	}
	for id, s := range sum {
		der[id] = s / cnt[id]
	}
	return der, nil
}

// placeClasses gives each sample of der not in aux the class whose known
// samples' mean derivative is nearest (a class without known samples takes
// its centroid from fallback, if given). It returns the centroids.
func placeClasses(der map[uint32]float64, classes int, aux map[uint32]int32, fallback []float64) (*LabelInference, []float64, error) {
	cen, cn := make([]float64, classes), make([]float64, classes)
	for id, y := range aux {
		if d, ok := der[id]; ok && y >= 0 && int(y) < classes {
			cen[y] += d
			cn[y]++
		}
	}
	known := 0
	for c := range cen {
		switch {
		case cn[c] > 0:
			cen[c] /= cn[c]
			known++
		case fallback != nil && !math.IsNaN(fallback[c]):
			cen[c] = fallback[c]
		default:
			cen[c] = nan
		}
	}
	if known < 2 {
		return nil, nil, fmt.Errorf("%w: the derivative attack needs known labels of at least 2 classes among the samples it saw (give --aux N)", ErrView)
	}
	inf := &LabelInference{Attack: "derivative", Classes: classes}
	for id := range der {
		if _, ok := aux[id]; !ok {
			inf.IDs = append(inf.IDs, id)
		}
	}
	slices.Sort(inf.IDs)
	for _, id := range inf.IDs {
		d := der[id]
		best, bc := math.Inf(1), int32(0)
		for c, m := range cen {
			s := -math.Abs(d - m)
			if math.IsNaN(m) {
				s = math.Inf(-1)
			}
			inf.Score = append(inf.Score, s)
			if -s < best {
				best, bc = -s, int32(c)
			}
		}
		inf.Pred = append(inf.Pred, bc)
	}
	inf.Note = fmt.Sprintf("%d known labels (%d classes) place the class centroids", len(aux), known)
	return inf, cen, nil
}

// NudgeAttack is the derivative attack of the multiclass active attacker
// (Active with Nudge): the run's requests are cut into windows of about
// equal size, each holding about perClass known samples of every class
// (the attacker probes its known samples in every batch); in each window
// the regression solves for each sample's loss derivative (the nudged
// blocks make it exact up to the noise) and the window's known samples
// place the classes. The windows follow the head, whose training moves
// the classes' values during the run. A class without a known sample in
// a window takes its centroid from the whole run.
func NudgeAttack(v *View, classes int, aux map[uint32]int32, perClass int) (*LabelInference, error) {
	if err := needK1(v, "nudge"); err != nil {
		return nil, err
	}
	if v.Format != "mean" {
		// Per-sample replies: each visit gives the derivative itself.
		inf, err := DerivativeAttack(v, classes, aux)
		if inf != nil {
			inf.Attack = "nudge"
		}
		return inf, err
	}
	if perClass <= 0 {
		perClass = 4
	}
	// Known samples' visits over the run set the number of windows.
	auxVisits := 0
	for i := range v.Requests {
		for _, id := range v.Requests[i].IDs {
			if _, ok := aux[id]; ok {
				auxVisits++
			}
		}
	}
	// A known sample sits in a whole block of requests: its visits over
	// one block count once.
	blockLen := 1
	if len(v.Requests) > 0 {
		blockLen = max(1, len(v.Requests[0].IDs))
	}
	windows := max(1, min(64, auxVisits/blockLen/(perClass*classes)))
	gder, err := derivatives(v, classes)
	if err != nil {
		return nil, err
	}
	global, gcen, err := placeClasses(gder, classes, aux, nil)
	if err != nil {
		return nil, err
	}
	global.Visits = len(v.Requests)
	if windows == 1 {
		global.Attack = "nudge"
		return global, nil
	}
	out := &LabelInference{Attack: "nudge", Classes: classes, Visits: len(v.Requests)}
	score := map[uint32][]float64{}
	per := (len(v.Requests) + windows - 1) / windows
	// Cut at block boundaries: a window starts where the batch changes.
	start := 0
	for start < len(v.Requests) {
		end := min(len(v.Requests), start+per)
		for end < len(v.Requests) && slices.Equal(v.Requests[end].IDs, v.Requests[end-1].IDs) {
			end++
		}
		w := *v
		w.Requests = v.Requests[start:end]
		start = end
		der, err := derivatives(&w, classes)
		if err != nil {
			continue
		}
		inf, _, err := placeClasses(der, classes, aux, gcen)
		if err != nil {
			continue // too few known samples in the window: the whole run places them
		}
		for j, id := range inf.IDs {
			score[id] = inf.Score[j*classes : (j+1)*classes]
		}
	}
	for j, id := range global.IDs {
		if _, ok := score[id]; !ok {
			score[id] = global.Score[j*classes : (j+1)*classes]
		}
	}
	for id := range score {
		out.IDs = append(out.IDs, id)
	}
	slices.Sort(out.IDs)
	for _, id := range out.IDs {
		s := score[id]
		out.Score = append(out.Score, s...)
		best := 0
		for c := range s {
			if s[c] > s[best] {
				best = c
			}
		}
		out.Pred = append(out.Pred, int32(best))
	}
	out.Note = fmt.Sprintf("%d windows, %d known labels", windows, len(aux))
	return out, nil
}

// ModelAttack is the reference every label attack is measured against:
// the party's own model, trained in the run, as a label predictor. The
// head sums the parties' outputs (z = sum_m c_m), so the party's own
// output c_m is a score of class 1 for every training sample; its last
// complete pass over the training set is used. What it reveals is what
// the party legitimately learns by training (generalisation from all the
// labels), not a leak of any one label: no label defense removes it
// without removing the training.
func ModelAttack(v *View) (*LabelInference, error) {
	if err := needK1(v, "model"); err != nil {
		return nil, err
	}
	sum := map[uint32]float64{}
	for _, m := range v.Parties {
		t, err := PartyTrajectories(v, m)
		if err != nil {
			return nil, err
		}
		w := t.Rounds * t.K
		for i := range t.N {
			sum[uint32(i)] += t.X[i*w+w-1]
		}
	}
	acc := newAccumulate()
	acc.visits = 1
	// Centre the scores: the intercept of the head is not the party's.
	var mean float64
	for _, s := range sum {
		mean += s
	}
	mean /= float64(len(sum))
	for id, s := range sum {
		acc.sum[id] = s - mean
	}
	inf := acc.binary("model")
	inf.Note = "the party's own model output on its last pass over the training set (scores centred)"
	return inf, nil
}
