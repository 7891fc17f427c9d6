package privacy

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/asyrevel/asyrevel/model"
)

// The gradient attacks against known answers: split-learning gradients of
// a logistic head, dF0/dc = -y sigmoid(-y z), on an unbalanced task.
func TestGradientAttacks(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	n := 2000
	labels := make([]int32, n)
	v := &GradientView{K: 1}
	for i := range labels {
		if rng.Float64() < 0.25 {
			labels[i] = 1
		}
	}
	for r := range 500 {
		req := GradientRequest{}
		for range 8 {
			i := rng.IntN(n)
			// A model that fits class 0 better: larger margins for it.
			margin := 1.5 + 0.5*rng.NormFloat64()
			if labels[i] == 1 {
				margin = 0.2 + 0.5*rng.NormFloat64()
			}
			y := -1.0
			if labels[i] == 1 {
				y = 1
			}
			req.IDs = append(req.IDs, uint32(i))
			req.Grad = append(req.Grad, -y*model.Sigmoid(-margin))
		}
		_ = r
		v.Requests = append(v.Requests, req)
	}
	view := &View{Parties: []int{1}}
	inf, err := GradientSignAttack(v)
	s := score(t, inf, err, view, labels, nil)
	if s.AUC != 1 || s.Accuracy != 1 {
		t.Errorf("gradient sign: %+v", s)
	}
	inf, err = GradientNormAttack(v)
	s = score(t, inf, err, view, labels, nil)
	if s.AUC < 0.8 {
		t.Errorf("norm scoring on an unbalanced task: AUC %g", s.AUC)
	}
	var pos uint32
	for i, y := range labels {
		if y == 1 {
			pos = uint32(i)
			if len(inf.IDs) > 0 && slices.Contains(inf.IDs, pos) {
				break
			}
		}
	}
	inf, err = GradientDirectionAttack(v, pos)
	s = score(t, inf, err, view, labels, nil)
	if s.AUC != 1 {
		t.Errorf("direction scoring: AUC %g", s.AUC)
	}
}
