package privacy

import (
	"fmt"
	"math"
	"slices"
)

// ErrNoTIG reports that this build cannot train TIG, whose traffic the
// gradient attacks read.
var ErrNoTIG = fmt.Errorf("%w: TIG not available: this build has no --algo tig (the baselines issue adds it)", ErrView)

// GradientView is what a party sees of split-learning (TIG) traffic: for
// each request, the sample ids and the gradient dF0/dc the aggregator
// sent back (k values per sample). It is filled from TIG's replies once
// that algorithm exists; the attacks below are independent of the wire.
type GradientView struct {
	K        int
	Requests []GradientRequest
}

// GradientRequest is one TIG exchange.
type GradientRequest struct {
	IDs  []uint32
	Grad []float64 // k per sample
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
		return nil, fmt.Errorf("%w: the gradient sign attack reads one output per sample", ErrView)
	}
	ids, g := v.perSample()
	acc := newAccumulate()
	acc.visits = len(v.Requests)
	for j, id := range ids {
		acc.sum[id] = -g[j][0]
	}
	return acc.binary("tig-sign"), nil
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
// of samples of the same class point the same way; with one sample known
// to be of class 1 (known), the score of class 1 is the cosine similarity
// with its gradient.
func GradientDirectionAttack(v *GradientView, known uint32) (*LabelInference, error) {
	ids, g := v.perSample()
	k := slices.Index(ids, known)
	if k < 0 {
		return nil, fmt.Errorf("%w: the known positive sample %d never appears in the view", ErrView, known)
	}
	ref := g[k]
	rn := math.Sqrt(dot(ref, ref))
	acc := newAccumulate()
	acc.visits = len(v.Requests)
	for j, id := range ids {
		if id == known {
			continue
		}
		n := math.Sqrt(dot(g[j], g[j]))
		if n == 0 || rn == 0 {
			acc.sum[id] = 0
			continue
		}
		acc.sum[id] = dot(g[j], ref) / (n * rn)
	}
	return acc.binary("tig-direction"), nil
}
