package privacy

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// ErrNotTIG reports a view whose replies carry no gradients: the gradient
// attacks read TIG (split learning, --algo tig) traffic only.
var ErrNotTIG = errors.New("privacy: the replies carry no gradients: the tig-* attacks read the traffic of a TIG run (asyrevel train --algo tig)")

// GradientView is what a party sees of split-learning (TIG) traffic: for
// each request, the sample ids and the gradient dF0/dc the aggregator
// sent back (k values per sample).
type GradientView struct {
	K        int
	Requests []GradientRequest
}

// GradientRequest is one TIG exchange.
type GradientRequest struct {
	IDs  []uint32
	Grad []float64 // k per sample
}

// Gradients returns the TIG exchanges of a view (the requests answered
// with a gradient), or ErrNotTIG if there are none.
func (v *View) Gradients() (*GradientView, error) {
	g := &GradientView{K: max(v.K, 1)}
	for i := range v.Requests {
		r := &v.Requests[i]
		if r.Replied && r.Grad != nil {
			g.Requests = append(g.Requests, GradientRequest{IDs: r.IDs, Grad: r.Grad})
		}
	}
	if len(g.Requests) == 0 {
		format := v.Format
		if format == "" {
			format = "no replies"
		}
		return nil, fmt.Errorf("%w (run %s: %s)", ErrNotTIG, v.Run, format)
	}
	return g, nil
}

// notTIG refuses a TIG view in an attack that reads zeroth-order replies
// (function values and c_hat).
func notTIG(v *View, attack string) error {
	if v.Format == "grad" {
		return fmt.Errorf("%w: run %s is TIG (gradient replies, no c_hat): the %s attack reads zeroth-order replies; use tig-sign, tig-norm or tig-direction", ErrView, v.Run, attack)
	}
	return nil
}

// perSample averages each sample's gradients over its visits.
func (v *GradientView) perSample() (ids []uint32, g [][]float64) {
	sum := map[uint32][]float64{}
	cnt := map[uint32]float64{}
	for _, r := range v.Requests {
		for j, id := range r.IDs {
			if (j+1)*v.K > len(r.Grad) {
				break
			}
			s := sum[id]
			if s == nil {
				s = make([]float64, v.K)
				sum[id] = s
			}
			for t := range v.K {
				s[t] += r.Grad[j*v.K+t]
			}
			cnt[id]++
		}
	}
	for id := range sum {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		s := sum[id]
		for t := range s {
			s[t] /= cnt[id]
		}
		g = append(g, s)
	}
	return ids, g
}

// GradientSignAttack: with one output per party into a logistic head,
// dF0/dc = -y sigmoid(-y z): its sign is the label. The score of class 1
// is -g.
func GradientSignAttack(v *GradientView) (*LabelInference, error) {
	if v.K != 1 {
		return nil, fmt.Errorf("%w: the gradient sign attack reads one output per sample (a logistic head); this run has k = %d: use tig-direction", ErrView, v.K)
	}
	ids, g := v.perSample()
	acc := newAccumulate()
	acc.visits = len(v.Requests)
	for j, id := range ids {
		acc.sum[id] = -g[j][0]
	}
	inf := acc.binary("tig-sign")
	inf.Note = "binary logistic head: the sign of dF0/dc is -y"
	return inf, nil
}

// GradientNormAttack (norm scoring, Li et al. 2022): on an unbalanced
// binary task the minority class's samples are fitted worse, so their
// gradients are larger; the score of class 1 (the minority) is the norm.
func GradientNormAttack(v *GradientView) (*LabelInference, error) {
	ids, g := v.perSample()
	acc := newAccumulate()
	acc.visits = len(v.Requests)
	var norms []float64
	for _, x := range g {
		norms = append(norms, math.Sqrt(dot(x, x)))
	}
	med := slices.Clone(norms)
	slices.Sort(med)
	for j, id := range ids {
		acc.sum[id] = norms[j] - med[len(med)/2]
	}
	inf := acc.binary("tig-norm")
	inf.Note = "class 1 is taken to be the minority class; predictions split at the median norm"
	return inf, nil
}

// GradientDirectionAttack (direction scoring, Li et al. 2022): gradients
// of samples of the same class point the same way. known holds labels the
// attacker knows (a few samples it has in common with the label holder;
// they are not scored). Binary (classes = 2): the score of class 1 is the
// cosine similarity with the mean gradient of the known class-1 samples.
// Multiclass: a sample's gradient is compared with each class's mean
// gradient over its known samples (cosine similarity for k > 1; minus the
// distance for k = 1, where a cosine is only a sign), and given the
// nearest class.
func GradientDirectionAttack(v *GradientView, classes int, known map[uint32]int32) (*LabelInference, error) {
	if classes < 2 {
		return nil, fmt.Errorf("%w: %d classes", ErrView, classes)
	}
	ids, g := v.perSample()
	at := make(map[uint32]int, len(ids))
	for j, id := range ids {
		at[id] = j
	}
	cen := make([][]float64, classes)
	cn := make([]float64, classes)
	for id, y := range known {
		j, ok := at[id]
		if !ok || y < 0 || int(y) >= classes {
			continue
		}
		if cen[y] == nil {
			cen[y] = make([]float64, v.K)
		}
		for t, x := range g[j] {
			cen[y][t] += x
		}
		cn[y]++
	}
	placed := 0
	for c := range cen {
		if cn[c] > 0 {
			for t := range cen[c] {
				cen[c][t] /= cn[c]
			}
			placed++
		}
	}
	cosine := func(a, b []float64) float64 {
		na, nb := math.Sqrt(dot(a, a)), math.Sqrt(dot(b, b))
		if na == 0 || nb == 0 {
			return 0
		}
		return dot(a, b) / (na * nb)
	}
	if classes == 2 {
		if cen[1] == nil {
			return nil, fmt.Errorf("%w: direction scoring needs a known class-1 sample among those the party saw (give --aux N)", ErrView)
		}
		acc := newAccumulate()
		acc.visits = len(v.Requests)
		for j, id := range ids {
			if _, ok := known[id]; !ok {
				acc.sum[id] = cosine(g[j], cen[1])
			}
		}
		inf := acc.binary("tig-direction")
		inf.Note = fmt.Sprintf("cosine similarity with the mean gradient of %g known class-1 samples", cn[1])
		return inf, nil
	}
	if placed < 2 {
		return nil, fmt.Errorf("%w: direction scoring of a multiclass head needs known labels of at least 2 classes among the samples the party saw (give --aux N)", ErrView)
	}
	inf := &LabelInference{Attack: "tig-direction", Classes: classes, Visits: len(v.Requests)}
	for j, id := range ids {
		if _, ok := known[id]; ok {
			continue
		}
		inf.IDs = append(inf.IDs, id)
		best, bc := math.Inf(-1), int32(0)
		for c := range classes {
			s := math.Inf(-1)
			switch {
			case cen[c] == nil:
			case v.K == 1:
				s = -math.Abs(g[j][0] - cen[c][0])
			default:
				s = cosine(g[j], cen[c])
			}
			inf.Score = append(inf.Score, s)
			if s > best {
				best, bc = s, int32(c)
			}
		}
		inf.Pred = append(inf.Pred, bc)
	}
	inf.Note = fmt.Sprintf("%d known labels (%d classes) place the class mean gradients", len(known), placed)
	return inf, nil
}
