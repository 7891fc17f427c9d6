package privacy

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/schemas"
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
	// Direction scoring with the labels of a few known samples (not scored).
	known, per := map[uint32]int32{}, [2]int{}
	for i, y := range labels {
		if per[y] < 3 {
			known[uint32(i)] = y
			per[y]++
		}
	}
	inf, err = GradientDirectionAttack(v, 2, known)
	s = score(t, inf, err, view, labels, nil)
	for id := range known {
		if slices.Contains(inf.IDs, id) {
			t.Errorf("direction scoring scored the known sample %d", id)
		}
	}
	if s.AUC != 1 {
		t.Errorf("direction scoring: AUC %g", s.AUC)
	}
	if _, err := GradientDirectionAttack(v, 2, map[uint32]int32{0: 0}); err == nil {
		t.Error("direction scoring without a known class-1 sample")
	}
}

// Multiclass split learning: a softmax head over q parties' single outputs,
// dF0/dc_m = sum_j W[j][m] (p_j - [y = j]); the class sets the gradient's
// value apart (W's column differs per class), which the direction attack
// places with a few known labels. The sign attack refuses k > 1, and the
// zeroth-order attacks refuse a TIG view.
func TestGradientDirectionMulticlass(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	const n, classes, q = 1500, 5, 4
	labels := make([]int32, n)
	for i := range labels {
		labels[i] = int32(rng.IntN(classes))
	}
	head := model.NewSoftmax(q, classes)
	w0 := make([]float64, head.NumParams())
	head.Init(w0, rng)
	// A trained-looking head: c carries the class, well separated.
	for k := 1; k <= 2; k++ {
		gv := &GradientView{K: k}
		for range 600 {
			req := GradientRequest{}
			for range 8 {
				i := rng.IntN(n)
				c := make([]float64, q)
				for m := range c {
					c[m] = 0.3*rng.NormFloat64() + float64(labels[i]) - 2
				}
				g := make([]float64, q)
				head.Grad(w0, c, labels[i], nil, g)
				req.IDs = append(req.IDs, uint32(i))
				req.Grad = append(req.Grad, g[:k]...)
			}
			gv.Requests = append(gv.Requests, req)
		}
		known := map[uint32]int32{}
		for i := 0; len(known) < 50; i++ {
			known[uint32(i)] = labels[i]
		}
		inf, err := GradientDirectionAttack(gv, classes, known)
		s := score(t, inf, err, &View{Parties: []int{1}}, labels, nil)
		if s.Accuracy < 0.6 || s.AUC < 0.85 {
			t.Errorf("k=%d: multiclass direction scoring: accuracy %g AUC %g", k, s.Accuracy, s.AUC)
		}
		if _, err := GradientSignAttack(gv); (err == nil) != (k == 1) {
			t.Errorf("k=%d: sign attack error %v", k, err)
		}
	}
	tv := &View{Run: "t", Parties: []int{1}, K: 1, Format: "grad", Requests: []Request{{IDs: []uint32{1}, C: []float64{0.5}, Replied: true, Grad: []float64{0.2}}}}
	for name, f := range map[string]func() (*LabelInference, error){
		"sign":       func() (*LabelInference, error) { return SignAttack(tv) },
		"regression": func() (*LabelInference, error) { return RegressionAttack(tv, 10) },
		"derivative": func() (*LabelInference, error) { return DerivativeAttack(tv, 3, map[uint32]int32{1: 0}) },
	} {
		if _, err := f(); !errors.Is(err, ErrView) {
			t.Errorf("%s attack on a TIG view: %v", name, err)
		}
	}
	if _, err := (&View{Run: "z", Format: "delta", Requests: []Request{{Replied: true}}}).Gradients(); !errors.Is(err, ErrNotTIG) {
		t.Errorf("gradients of a zeroth-order view: %v", err)
	}
}

// A TIG log read back: requests with c only, replies with gradients; a
// gradient reply of the wrong length and a zeroth-order reply to a TIG
// request are rejected; the gradient attacks read what validates.
func TestViewReadsTIGTraffic(t *testing.T) {
	h := func(seq uint64) schemas.Header {
		return schemas.Header{Version: schemas.Version, Party: 1, Seq: seq}
	}
	l := publishLog(t, "tig", []logMsg{
		{schemas.KindHello, &schemas.Hello{Header: h(1), Model: "mlp", InDim: 3, OutDim: 1, NTrain: 10}, nil},
		{schemas.KindOutput, &schemas.PartyOutput{Header: h(2), IDs: []uint32{1, 2}, C: []float64{0.5, -0.5}}, nil},
		{schemas.KindReply, &schemas.Reply{Header: h(1), ReqSeq: 2, Grad: []float64{-0.3, 0.4}}, nil},
		{schemas.KindOutput, &schemas.PartyOutput{Header: h(3), IDs: []uint32{3, 4}, C: []float64{0.1, 0.2}}, nil},
		{schemas.KindReply, &schemas.Reply{Header: h(2), ReqSeq: 3, Grad: []float64{-0.3}}, nil},      // one gradient for two samples
		{schemas.KindReply, &schemas.Reply{Header: h(3), ReqSeq: 3, Delta: []float64{1, 2}}, nil},     // function values to a TIG request
		{schemas.KindReply, &schemas.Reply{Header: h(4), ReqSeq: 3, Grad: []float64{0.2, -0.1}}, nil}, // the valid answer
	})
	v, err := ReadView(context.Background(), l, 1)
	if err != nil {
		t.Fatal(err)
	}
	if v.Format != "grad" || v.Invalid != 2 || len(v.Requests) != 2 || !v.Requests[1].Replied {
		t.Fatalf("view: format %q invalid %d requests %+v", v.Format, v.Invalid, v.Requests)
	}
	g, err := v.Gradients()
	if err != nil {
		t.Fatal(err)
	}
	inf, err := GradientSignAttack(g)
	if err != nil {
		t.Fatal(err)
	}
	want := []int32{1, 0, 0, 1} // -sign(g)
	if !slices.Equal(inf.IDs, []uint32{1, 2, 3, 4}) || !slices.Equal(inf.Pred, want) {
		t.Errorf("gradient sign on the log: ids %v pred %v, want %v", inf.IDs, inf.Pred, want)
	}
}
