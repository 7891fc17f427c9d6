package sim

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/asyrevel/asyrevel/run"

	"gonum.org/v1/gonum/optimize"

	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/zoo"
	"github.com/asyrevel/asyrevel/zoo/kernel"
)

// Curve point of the in-process reference loops.
type RefPoint struct {
	Seconds      float64 // training time, evaluation excluded
	Steps        int64   // party steps
	TestAccuracy float64
	TrainLoss    float64 // NaN when not measured
}

// RefResult is the outcome of a reference loop.
type RefResult struct {
	Curve         []RefPoint
	Steps         int64
	Seconds       float64
	TestAccuracy  float64
	TimeToTarget  float64 // -1 if not reached
	StepsToTarget int64
}

// RefConfig configures the single-process reference loops.
type RefConfig struct {
	Parties   int
	Dist      zoo.Dist
	Batch     int
	LR        zoo.Schedule // per party, by the party's own step count
	HeadLR    zoo.Schedule
	Mu        float64
	Lambda    float64
	Reg       model.Regularizer
	Seed      uint64
	MaxSteps  int64
	Duration  time.Duration
	EvalEvery int64 // party steps between evaluations
	TargetAcc float64
	// StopAtTarget ends the loop when TargetAcc is reached.
	StopAtTarget bool
	// run.NewLocal builds party m's model for d features.
	NewLocal func(m, d int) model.Local
	Head     model.Head
	OnPoint  func(RefPoint)
}

// ReferenceZO is a straightforward single-process implementation of
// AsyREVEL: plain loops over the parties in turn, no broker, no messages,
// no asynchrony. It takes the same steps as the runtimes (fresh outputs
// stored before h is computed, the same estimator and step sizes), so it is
// the yardstick for the pipeline's time to accuracy.
func ReferenceZO(ctx context.Context, data *run.Data, cfg RefConfig) (*RefResult, error) {
	q := cfg.Parties
	if q != len(data.PartTrain) || cfg.Batch < 1 || cfg.Mu <= 0 || cfg.EvalEvery < 1 {
		return nil, fmt.Errorf("%w: reference loop: parties %d (data split in %d), batch %d, mu %g, eval every %d",
			run.ErrConfig, q, len(data.PartTrain), cfg.Batch, cfg.Mu, cfg.EvalEvery)
	}
	if cfg.MaxSteps == 0 && cfg.Duration == 0 {
		return nil, fmt.Errorf("%w: reference loop needs a step or time budget", run.ErrConfig)
	}
	n := data.NTrain
	trainY := data.TrainY
	head := cfg.Head
	k := head.InDim() / q
	rng := rand.New(rand.NewPCG(cfg.Seed, 99))
	locals := make([]model.Local, q)
	w := make([][]float64, q)
	wp := make([][]float64, q)
	u := make([][]float64, q)
	phi := make([]float64, q)
	steps := make([]int, q)
	c := make([]float64, cfg.Batch*k)
	chat := make([]float64, cfg.Batch*k)
	ids := make([]uint32, cfg.Batch)
	for m := range q {
		locals[m] = cfg.NewLocal(m, data.Blocks[m].Len())
		np := locals[m].NumParams()
		w[m], wp[m], u[m] = make([]float64, np), make([]float64, np), make([]float64, np)
		locals[m].Init(w[m], rng)
		phi[m] = cfg.Dist.Phi(np)
	}
	w0 := make([]float64, head.NumParams())
	w0p := make([]float64, len(w0))
	u0 := make([]float64, len(w0))
	head.Init(w0, rng)
	var phi0 float64
	if len(w0) > 0 {
		phi0 = cfg.Dist.Phi(len(w0))
	}
	width := q * k
	table := make([]float64, n*width)
	all := make([]uint32, n)
	for i := range all {
		all[i] = uint32(i)
	}
	out := make([]float64, n*k)
	for m := range q {
		locals[m].Forward(w[m], data.PartTrain[m], all, out)
		kernel.Store(table, width, m*k, all, out)
	}
	hh, hb := make([]float64, cfg.Batch), make([]float64, cfg.Batch)
	ev := newEvaluator(data, q, k)
	loop := newRefLoop(budget{cfg.MaxSteps, cfg.Duration, cfg.TargetAcc, cfg.StopAtTarget}, cfg.OnPoint)
	for t := int64(0); ; t++ {
		if t%cfg.EvalEvery == 0 && loop.point(ctx, t, func() float64 { return ev.accuracy(locals, w, head, w0) }) {
			return loop.res, ctx.Err()
		}
		m := int(t % int64(q))
		x := data.PartTrain[m]
		for j := range ids {
			ids[j] = uint32(rng.IntN(n))
		}
		kernel.Probe(locals[m], x, ids, cfg.Dist, rng, cfg.Mu, w[m], wp[m], u[m], c, chat)
		kernel.Reply(head, w0, table, width, m*k, ids, c, chat, trainY, hh, hb)
		diff := kernel.MeanDiff(hh, hb) + kernel.RegDiff(cfg.Reg, cfg.Lambda, w[m], wp[m])
		kernel.Update(w[m], u[m], cfg.LR.At(steps[m]), phi[m], cfg.Mu, diff)
		steps[m]++
		if len(w0) > 0 {
			kernel.Direction(cfg.Dist, rng, cfg.Mu, w0, w0p, u0)
			d0 := kernel.HeadDiff(head, w0p, table, width, ids, trainY, hh, nil)
			kernel.Update(w0, u0, cfg.HeadLR.At(int(t)), phi0, cfg.Mu, d0)
		}
	}
}

// budget is when a reference loop stops.
type budget struct {
	maxSteps     int64
	duration     time.Duration
	target       float64
	stopAtTarget bool
}

// refLoop keeps the clock and the curve of a reference loop. The clock
// runs only between evaluations: evaluation time is not training time.
type refLoop struct {
	b       budget
	onPoint func(RefPoint)
	res     *RefResult
	clock   time.Duration
	start   time.Time
}

func newRefLoop(b budget, onPoint func(RefPoint)) *refLoop {
	return &refLoop{b: b, onPoint: onPoint, res: &RefResult{TimeToTarget: -1}, start: time.Now()}
}

// point evaluates at step t and reports whether the loop should stop.
func (l *refLoop) point(ctx context.Context, t int64, accuracy func() float64) (stop bool) {
	l.clock += time.Since(l.start)
	acc := accuracy()
	pt := RefPoint{Seconds: l.clock.Seconds(), Steps: t, TestAccuracy: acc, TrainLoss: math.NaN()}
	r := l.res
	r.Curve = append(r.Curve, pt)
	if l.onPoint != nil {
		l.onPoint(pt)
	}
	if l.b.target > 0 && r.TimeToTarget < 0 && acc >= l.b.target {
		r.TimeToTarget, r.StepsToTarget = pt.Seconds, t
	}
	r.Steps, r.Seconds, r.TestAccuracy = t, pt.Seconds, acc
	stop = (l.b.maxSteps > 0 && t >= l.b.maxSteps) || (l.b.duration > 0 && l.clock >= l.b.duration) || ctx.Err() != nil ||
		(l.b.stopAtTarget && r.TimeToTarget >= 0)
	l.start = time.Now()
	return stop
}

// evaluator scores a VFL model on the test set.
type evaluator struct {
	data  *run.Data
	q, k  int
	rows  []uint32
	out   []float64
	table []float64
}

func newEvaluator(data *run.Data, q, k int) *evaluator {
	e := &evaluator{data: data, q: q, k: k}
	if data.NTest == 0 {
		return e
	}
	n := data.NTest
	e.rows = make([]uint32, n)
	for i := range e.rows {
		e.rows[i] = uint32(i)
	}
	e.out = make([]float64, n*k)
	e.table = make([]float64, n*q*k)
	return e
}

func (e *evaluator) accuracy(locals []model.Local, w [][]float64, head model.Head, w0 []float64) float64 {
	if e.data.NTest == 0 {
		return math.NaN()
	}
	q, k := e.q, e.k
	width := q * k
	n := len(e.rows)
	for m := range q {
		locals[m].Forward(w[m], e.data.PartTest[m], e.rows, e.out)
		for i := range n {
			copy(e.table[i*width+m*k:i*width+(m+1)*k], e.out[i*k:(i+1)*k])
		}
	}
	correct := 0
	for i, y := range e.data.TestY {
		if head.Predict(w0, e.table[i*width:(i+1)*width]) == y {
			correct++
		}
	}
	return float64(correct) / float64(n)
}

// CentralResult is the centralised first-order reference for binary
// logistic regression.
type CentralResult struct {
	Objective     float64 // f* = mean logistic loss + lambda g(w*)
	TrainAccuracy float64
	TestAccuracy  float64 // NaN without a test set
	Iterations    int
	W             []float64
}

// CentralLogistic minimises the logistic-regression objective on all
// features at one place, mean_i log(1+exp(-y_i (w.x_i + b))) + lambda g(w)
// (b = 0 without bias; the intercept is not regularised), with L-BFGS
// (gonum/optimize). It gives f* and the reference accuracy that the
// federated runs are measured against.
func CentralLogistic(train, test *dataset.Dataset, reg model.Regularizer, lambda float64, bias bool) (*CentralResult, error) {
	if train.Classes != 2 {
		return nil, fmt.Errorf("%w: central logistic regression needs a binary set, got %d classes", run.ErrConfig, train.Classes)
	}
	d, n := train.X.NCols, train.Len()
	lin := model.NewLinear(d, 1)
	head := model.NewLogistic(1)
	rows := make([]uint32, n)
	for i := range rows {
		rows[i] = uint32(i)
	}
	np := d
	if bias {
		np++
	}
	z := make([]float64, n)
	dz := make([]float64, n)
	dc := make([]float64, 1)
	zc := make([]float64, 1)
	tmp := make([]float64, d)
	// scores writes w.x_i + b into z.
	scores := func(p []float64, x *dataset.Matrix, r []uint32, z []float64) {
		lin.Forward(p[:d], x, r, z)
		if bias {
			for i := range z {
				z[i] += p[d]
			}
		}
	}
	f := func(p []float64) float64 {
		scores(p, train.X, rows, z)
		var s float64
		for i, y := range train.Y {
			zc[0] = z[i]
			s += head.Loss(nil, zc, y)
		}
		v := s / float64(n)
		if reg != nil {
			v += lambda * reg.Value(p[:d])
		}
		return v
	}
	grad := func(g, p []float64) {
		scores(p, train.X, rows, z)
		var gb float64
		for i, y := range train.Y {
			dc[0] = 0
			zc[0] = z[i]
			head.Grad(nil, zc, y, nil, dc)
			dz[i] = dc[0] / float64(n)
			gb += dz[i]
		}
		clear(g)
		lin.Backward(p[:d], train.X, rows, dz, g[:d])
		if reg != nil {
			clear(tmp)
			reg.Grad(p[:d], tmp)
			for j := range tmp {
				g[j] += lambda * tmp[j]
			}
		}
		if bias {
			g[d] = gb
		}
	}
	res, err := optimize.Minimize(optimize.Problem{Func: f, Grad: grad}, make([]float64, np),
		&optimize.Settings{GradientThreshold: 1e-7, MajorIterations: 5000}, &optimize.LBFGS{})
	if err != nil && res == nil {
		return nil, fmt.Errorf("central solver: %w", err)
	}
	acc := func(ds *dataset.Dataset) float64 {
		if ds == nil || ds.Len() == 0 {
			return math.NaN()
		}
		r := make([]uint32, ds.Len())
		for i := range r {
			r[i] = uint32(i)
		}
		out := make([]float64, ds.Len())
		scores(res.X, ds.X, r, out)
		ok := 0
		for i, y := range ds.Y {
			if head.Predict(nil, out[i:i+1]) == y {
				ok++
			}
		}
		return float64(ok) / float64(ds.Len())
	}
	return &CentralResult{Objective: res.F, TrainAccuracy: acc(train), TestAccuracy: acc(test), Iterations: res.Stats.MajorIterations, W: res.X}, nil
}
