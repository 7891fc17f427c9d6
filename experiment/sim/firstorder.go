package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/asyrevel/asyrevel/run"

	"github.com/asyrevel/asyrevel/model"
)

// FirstOrderConfig configures FirstOrder.
type FirstOrderConfig struct {
	Parties   int
	Batch     int
	LR        float64 // SGD step size
	Momentum  float64 // heavy-ball momentum (0 = plain SGD)
	Lambda    float64
	Reg       model.Regularizer
	Seed      uint64
	MaxSteps  int64 // mini-batch steps (all parties at once)
	Duration  time.Duration
	EvalEvery int64
	TargetAcc float64
	NewLocal  func(m, d int) model.Local // must return model.WhiteBox
	Head      model.WhiteBoxHead
	OnPoint   func(RefPoint)
}

// FirstOrder trains the same vertically split network centrally with
// back-propagation and mini-batch SGD: every party's white-box model and
// the head in one process. It is the first-order yardstick for the
// zeroth-order runs (what the network reaches when gradients are
// available); it refuses black-box models with model.ErrNoGradient.
func FirstOrder(ctx context.Context, data *run.Data, cfg FirstOrderConfig) (*RefResult, error) {
	q := cfg.Parties
	if q != len(data.PartTrain) || cfg.Batch < 1 || cfg.LR <= 0 || cfg.EvalEvery < 1 {
		return nil, fmt.Errorf("%w: first-order loop: parties %d (data in %d), batch %d, lr %g", run.ErrConfig, q, len(data.PartTrain), cfg.Batch, cfg.LR)
	}
	if cfg.MaxSteps == 0 && cfg.Duration == 0 {
		return nil, fmt.Errorf("%w: first-order loop needs a step or time budget", run.ErrConfig)
	}
	n := data.NTrain
	head := cfg.Head
	k := head.InDim() / q
	rng := rand.New(rand.NewPCG(cfg.Seed, 7))
	locals := make([]model.WhiteBox, q)
	plain := make([]model.Local, q)
	w := make([][]float64, q)
	g := make([][]float64, q)
	vel := make([][]float64, q)
	regG := make([][]float64, q)
	for m := range q {
		l := cfg.NewLocal(m, data.Blocks[m].Len())
		wb, ok := l.(model.WhiteBox)
		if !ok {
			return nil, fmt.Errorf("party %d: %w", m+1, model.ErrNoGradient)
		}
		locals[m], plain[m] = wb, l
		np := l.NumParams()
		w[m], g[m], vel[m], regG[m] = make([]float64, np), make([]float64, np), make([]float64, np), make([]float64, np)
		l.Init(w[m], rng)
	}
	w0 := make([]float64, head.NumParams())
	g0 := make([]float64, len(w0))
	v0 := make([]float64, len(w0))
	head.Init(w0, rng)
	ids := make([]uint32, cfg.Batch)
	c := make([][]float64, q)
	dc := make([][]float64, q)
	for m := range q {
		c[m] = make([]float64, cfg.Batch*k)
		dc[m] = make([]float64, cfg.Batch*k)
	}
	row := make([]float64, q*k)
	drow := make([]float64, q*k)
	ev := newEvaluator(data, q, k)
	inv := 1 / float64(cfg.Batch)
	loop := newRefLoop(budget{cfg.MaxSteps, cfg.Duration, cfg.TargetAcc, false}, cfg.OnPoint)
	for t := int64(0); ; t++ {
		if t%cfg.EvalEvery == 0 && loop.point(ctx, t, func() float64 { return ev.accuracy(plain, w, head, w0) }) {
			return loop.res, ctx.Err()
		}
		for j := range ids {
			ids[j] = uint32(rng.IntN(n))
		}
		for m := range q {
			locals[m].Forward(w[m], data.PartTrain[m], ids, c[m])
		}
		clear(g0)
		for j, id := range ids {
			for m := range q {
				copy(row[m*k:(m+1)*k], c[m][j*k:(j+1)*k])
			}
			clear(drow)
			head.Grad(w0, row, data.TrainY[id], g0, drow)
			for m := range q {
				for o := range k {
					dc[m][j*k+o] = drow[m*k+o] * inv
				}
			}
		}
		for m := range q {
			clear(g[m])
			locals[m].Backward(w[m], data.PartTrain[m], ids, dc[m], g[m])
			if cfg.Reg != nil && cfg.Lambda != 0 {
				clear(regG[m])
				cfg.Reg.Grad(w[m], regG[m])
				for i := range g[m] {
					g[m][i] += cfg.Lambda * regG[m][i]
				}
			}
			sgd(w[m], g[m], vel[m], cfg.LR, cfg.Momentum)
		}
		for i := range g0 {
			g0[i] *= inv
		}
		sgd(w0, g0, v0, cfg.LR, cfg.Momentum)
	}
}

func sgd(w, g, v []float64, lr, momentum float64) {
	for i := range w {
		v[i] = momentum*v[i] - lr*g[i]
		w[i] += v[i]
	}
}
