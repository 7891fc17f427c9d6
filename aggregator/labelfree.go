package aggregator

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/schemas"
)

// LabelFree is the label-free profile of a run: the parties code their
// rows without labels (model.Codebook) and send the codes in their initial
// pass and evaluations; they send no request, and the aggregator answers
// none. The aggregator fits its own head (model.Embed) on the codes and
// the labels, first-order, and keeps the head that was best on HoldOut of
// the training rows. Nothing a party receives depends on a label: the
// parties are told to stop, and the log is sealed, as soon as their codes
// are in, before the head reads a label.
type LabelFree struct {
	// HoldOut is the share of the training rows kept aside to choose the
	// head (default 0.1; at least one row).
	HoldOut float64
	// Batch, LR and Decay are the head's minibatch, Adam step size and
	// L2 weight decay (defaults 128, 2e-3, 1e-5).
	Batch int
	LR    float64
	Decay float64
	// Patience is how many samples (in epochs of the fit rows, at least
	// MinPatienceSteps minibatches) may go by without a held-out loss
	// lower than the best by Tolerance before the fit stops (default 3).
	Patience  float64
	Tolerance float64
	// MaxEpochs bounds the fit (0: Patience and the run's Duration alone).
	MaxEpochs int
	// Others are more heads over the same codes to try beside
	// Config.Head (an Embed with and without a hidden layer, say): the one
	// best on the held-out rows is kept (Result.Fit says which).
	Others []model.Head
}

// Stop reasons of a label-free run (Result.StopReason).
const (
	ReasonConverged = "converged"
	ReasonEpochs    = "epochs reached"
)

// FitReport is what a label-free run's head fit did (Result.Fit).
type FitReport struct {
	Codes           int     `json:"codes"`
	Hidden          int     `json:"hidden"`     // of the head kept
	Candidates      int     `json:"candidates"` // heads tried
	Epochs          int     `json:"epochs"`
	BestEpoch       int     `json:"best_epoch"`
	HeldOutRows     int     `json:"held_out_rows"`
	HeldOutLoss     float64 `json:"held_out_loss"`
	HeldOutAccuracy float64 `json:"held_out_accuracy"`
}

// MinPatienceSteps is the least number of minibatches the head's fit waits
// for an improvement: on a small set an epoch is a step or two.
const MinPatienceSteps = 400

func (c *LabelFree) defaults() {
	if c.HoldOut <= 0 {
		c.HoldOut = 0.1
	}
	if c.Batch <= 0 {
		c.Batch = 128
	}
	if c.LR <= 0 {
		c.LR = 2e-3
	}
	if c.Decay < 0 {
		c.Decay = 0
	} else if c.Decay == 0 {
		c.Decay = 1e-5
	}
	if c.Patience <= 0 {
		c.Patience = 3
	}
	if c.Tolerance < 0 {
		c.Tolerance = 0
	}
}

// coder is a head whose inputs are codes (model.Embed).
type coder interface {
	model.WhiteBoxHead
	IsCode(v float64) bool
}

// labelFree is the aggregator's state of the profile.
type labelFree struct {
	cfg     LabelFree
	head    coder
	started bool
	// chosen is the head the fit keeps (the best candidate on the
	// held-out rows), params its parameters (nil before the first epoch).
	chosen coder
	params []float64
	// flushed is closed once the stop and the final seal are confirmed
	// in the stream (nil before).
	flushed chan struct{}
}

func (a *Aggregator) initLabelFree() error {
	c := a.cfg.LabelFree
	if c == nil {
		return nil
	}
	h, ok := a.cfg.Head.(coder)
	if !ok {
		return fmt.Errorf("%w: a label-free run needs a head over codes (model.Embed), not %T", ErrConfig, a.cfg.Head)
	}
	if a.cfg.FirstOrder {
		return fmt.Errorf("%w: a label-free run answers no request: it has no TIG form", ErrConfig)
	}
	a.lf = &labelFree{cfg: *c, head: h}
	a.lf.cfg.defaults()
	if n := len(a.cfg.Labels); n < 2 {
		return fmt.Errorf("%w: a label-free run needs at least 2 training rows (one to fit, one to hold out), got %d", ErrConfig, n)
	}
	return nil
}

// ErrNoRequests rejects a request in a label-free run.
var errNoRequests = fmt.Errorf("%w: this run is label-free: it answers no request (a party's codes come in its evaluations)", schemas.ErrState)

// checkCodes rejects an evaluation chunk of a label-free run whose values
// are not codes of the head.
func (a *Aggregator) checkCodes(c []float64) error {
	if a.lf == nil {
		return nil
	}
	for i, v := range c {
		if !a.lf.head.IsCode(v) {
			return fmt.Errorf("%w: value %d of a label-free party's chunk is %v, not a code in 0..%d", schemas.ErrShape, i, v, codesOf(a.lf.head)-1)
		}
	}
	return nil
}

// scoreLabelFree is score for a label-free run (a.mu held): the first
// evaluation brought the test set's codes (the training set's are in the
// table since the initial pass). The parties have sent all they will:
// they are told to stop and the log is sealed, with nothing that depends
// on a label in it; then the head is fitted on the codes, in a goroutine
// of its own. A later round (the final one of a stop that came from
// elsewhere) ends the run as score does.
func (a *Aggregator) scoreLabelFree(r *round) bool {
	if a.lf.started || r.final {
		return false
	}
	a.lf.started = true
	a.control(schemas.CtlStop, 0, 0, "the parties' codes are in; the label holder fits its head on them")
	a.seal(true)
	a.phase = stopping
	train := slices.Clone(a.table)
	var test []float64
	if r.splits&schemas.EvalTest != 0 {
		test = slices.Clone(a.eval.tables[1])
	}
	a.lf.flushed = make(chan struct{})
	go func() {
		// What the parties were told, and the final seal, reach the
		// stream before the fit: nothing is published after them, so the
		// run's end needs no flush (a broker may seal the stream once the
		// final seal and the parties' receipts are in).
		defer close(a.lf.flushed)
		if err := a.bus.Flush(a.ctx); err != nil {
			a.cfg.Log.Warn().Err(err).Msg("flushing the stop and the final seal")
		}
	}()
	go a.fitHead(train, test)
	return true
}

// candidate is one head the fit tries: its parameters, Adam's moments,
// and its best on the held-out rows.
type candidate struct {
	head              coder
	params, g, m1, m2 []float64
	best              []float64
	bestLoss          float64
	bestPt            Point
	bestStep, steps   int
	done              bool
	// workers compute a minibatch's gradient in parallel: a head (its
	// scratch space) and a gradient each.
	heads []coder
	gs    [][]float64
	loss  []float64
}

func newCandidate(h coder, params []float64) *candidate {
	np := h.NumParams()
	c := &candidate{head: h, params: params, g: make([]float64, np), m1: make([]float64, np), m2: make([]float64, np),
		best: slices.Clone(params), bestLoss: math.Inf(1)}
	if e, ok := h.(copier); ok {
		for range max(1, min(runtime.GOMAXPROCS(0), maxFitWorkers)) {
			c.heads = append(c.heads, e.Copy())
			c.gs = append(c.gs, make([]float64, np))
		}
	} else {
		c.heads, c.gs = []coder{h}, [][]float64{make([]float64, np)}
	}
	c.loss = make([]float64, len(c.heads))
	return c
}

// copier is a head that can make a copy of itself for another goroutine.
type copier interface{ Copy() *model.Embed }

// maxFitWorkers bounds the goroutines of the head's fit.
const maxFitWorkers = 8

// grad writes the minibatch's summed gradient into c.g and returns its
// summed loss, the rows split among the workers.
func (c *candidate) grad(batch []int, train []float64, w int, y []int32) float64 {
	nw := len(c.heads)
	if len(batch) < 64*nw {
		nw = 1 // too little to share
	}
	var wg sync.WaitGroup
	for k := range nw {
		part := batch[k*len(batch)/nw : (k+1)*len(batch)/nw]
		work := func() {
			h, g := c.heads[k], c.gs[k]
			clear(g)
			var loss float64
			for _, i := range part {
				x := train[i*w : (i+1)*w]
				loss += h.Loss(c.params, x, y[i])
				h.Grad(c.params, x, y[i], g, nil)
			}
			c.loss[k] = loss
		}
		if k == nw-1 {
			work()
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); work() }()
	}
	wg.Wait()
	copy(c.g, c.gs[0])
	loss := c.loss[0]
	for k := 1; k < nw; k++ {
		for j, v := range c.gs[k] {
			c.g[j] += v
		}
		loss += c.loss[k]
	}
	return loss
}

// fitHead fits the candidate heads (Config.Head, then LabelFree.Others) on
// the training codes with the labels: Adam over minibatches, the rows
// shuffled with the run's seed, an epoch of each candidate in turn. A
// candidate stops once its held-out loss has not improved for Patience
// epochs; the fit ends when every candidate has stopped, the run's
// duration or MaxEpochs is reached, or the run is stopped. Each epoch
// makes a curve point of the best head so far on the held-out rows,
// which is the run's head at the end.
func (a *Aggregator) fitHead(train, test []float64) {
	cfg := a.lf.cfg
	w := a.width
	y := a.cfg.Labels
	n := len(y)
	rng := rand.New(rand.NewPCG(a.cfg.Seed, 0x6c61626566726565)) // "labefree"
	order := rng.Perm(n)
	nh := max(1, int(math.Round(cfg.HoldOut*float64(n))))
	nh = min(nh, n-1)
	hold, fit := order[:nh], order[nh:]
	a.mu.Lock()
	cands := []*candidate{newCandidate(a.lf.head, slices.Clone(a.w0))}
	a.mu.Unlock()
	for i, h := range cfg.Others {
		c, ok := h.(coder)
		if !ok || c.InDim() != a.lf.head.InDim() || c.Classes() != a.lf.head.Classes() {
			a.cfg.Log.Error().Int("head", i).Msg("a label-free candidate head does not take the run's codes: left out")
			continue
		}
		p := make([]float64, c.NumParams())
		c.Init(p, a.step.rng)
		cands = append(cands, newCandidate(c, p))
	}
	mean := func(h coder, params []float64, rows []int, t []float64, labels []int32) (loss, acc float64) {
		correct := 0
		for _, i := range rows {
			c := t[i*w : (i+1)*w]
			loss += h.Loss(params, c, labels[i])
			if h.Predict(params, c) == labels[i] {
				correct++
			}
		}
		return loss / float64(len(rows)), float64(correct) / float64(len(rows))
	}
	var testRows []int
	if test != nil {
		testRows = make([]int, len(a.cfg.TestLabels))
		for i := range testRows {
			testRows[i] = i
		}
	}
	perEpoch := max(1, (len(fit)+cfg.Batch-1)/cfg.Batch)
	patience := max(int(math.Ceil(cfg.Patience*float64(perEpoch))), MinPatienceSteps)
	// An epoch of a small set is a step or two: a curve point every
	// pointEvery epochs keeps the curve to a few hundred points.
	pointEvery := max(1, 64/perEpoch)
	chosen := cands[0]
	reason := ""
	for epoch := 1; reason == ""; epoch++ {
		rng.Shuffle(len(fit), func(i, j int) { fit[i], fit[j] = fit[j], fit[i] })
		active := 0
		for _, c := range cands {
			if c.done || reason != "" {
				continue
			}
			var trainLoss float64
			for s := 0; s < len(fit) && reason == ""; s += cfg.Batch {
				batch := fit[s:min(s+cfg.Batch, len(fit))]
				trainLoss += c.grad(batch, train, w, y)
				c.steps++
				b1, b2 := 1-math.Pow(0.9, float64(c.steps)), 1-math.Pow(0.999, float64(c.steps))
				inv := 1 / float64(len(batch))
				for k, v := range c.params {
					gk := c.g[k]*inv + cfg.Decay*v
					c.m1[k] = 0.9*c.m1[k] + 0.1*gk
					c.m2[k] = 0.999*c.m2[k] + 0.001*gk*gk
					c.params[k] -= cfg.LR * c.m1[k] / b1 / (math.Sqrt(c.m2[k]/b2) + 1e-8)
				}
				reason = a.fitStop()
			}
			holdLoss, holdAcc := mean(c.head, c.params, hold, train, y)
			if math.IsInf(c.bestLoss, 1) && !math.IsNaN(holdLoss) || holdLoss < c.bestLoss-cfg.Tolerance*math.Abs(c.bestLoss) {
				c.bestLoss, c.bestStep = holdLoss, c.steps
				copy(c.best, c.params)
				c.bestPt = Point{TrainLoss: trainLoss / float64(len(fit)), TestAccuracy: math.NaN(), TestLoss: math.NaN(),
					HeldOutLoss: holdLoss, HeldOutAccuracy: holdAcc, Epoch: epoch}
				if test != nil {
					c.bestPt.TestLoss, c.bestPt.TestAccuracy = mean(c.head, c.best, testRows, test, a.cfg.TestLabels)
				}
			}
			if c.steps-c.bestStep >= patience || cfg.MaxEpochs > 0 && epoch >= cfg.MaxEpochs {
				c.done = true
			}
			if !c.done {
				active++
			}
			if c.bestLoss < chosen.bestLoss {
				chosen = c
			}
		}
		switch {
		case reason != "":
		case active == 0 && cfg.MaxEpochs > 0 && epoch >= cfg.MaxEpochs:
			reason = ReasonEpochs
		case active == 0:
			reason = ReasonConverged
		}
		a.mu.Lock()
		if a.phase == done || a.stop.closed {
			a.mu.Unlock()
			return // the run ended meanwhile (interrupted, failed)
		}
		a.lf.chosen = chosen.head
		a.lf.params = chosen.best
		a.res.Fit = &FitReport{Codes: codesOf(chosen.head), Hidden: hiddenOf(chosen.head), Candidates: len(cands), Epochs: epoch,
			BestEpoch: chosen.bestPt.Epoch, HeldOutRows: len(hold), HeldOutLoss: chosen.bestLoss, HeldOutAccuracy: chosen.bestPt.HeldOutAccuracy}
		if epoch%pointEvery == 0 || reason != "" {
			pt := chosen.bestPt
			pt.Epoch = epoch
			pt.Seconds = time.Since(a.start).Seconds()
			a.addPoint(pt)
		}
		if reason != "" {
			a.endLabelFree(chosen.bestPt, reason)
		}
		a.mu.Unlock()
	}
}

// hiddenOf is the hidden units of head h (0 if it does not say).
func hiddenOf(h model.Head) int {
	if c, ok := h.(interface{ Hidden() int }); ok {
		return c.Hidden()
	}
	return 0
}

// fitStop says why the fit must stop now ("" to go on): the run's
// duration, or the run leaving its training phase.
func (a *Aggregator) fitStop() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.phase == done || a.stop.closed:
		return "stopped"
	case a.cfg.Duration > 0 && time.Since(a.start) >= a.cfg.Duration:
		return "duration reached"
	}
	return ""
}

// endLabelFree ends a label-free run (a.mu held) with the best head's
// point as its final one.
func (a *Aggregator) endLabelFree(best Point, reason string) {
	a.res.Training = time.Since(a.start)
	best.Final = true
	best.Seconds = a.res.Training.Seconds()
	a.res.Final = best
	a.res.Curve = append(a.res.Curve, best)
	if a.cfg.OnPoint != nil {
		a.cfg.OnPoint(best)
	}
	a.stop.reason = reason
	a.cfg.Log.Info().Str("reason", reason).Int("best_epoch", best.Epoch).Int("hidden", a.res.Fit.Hidden).Float64("held_out_loss", best.HeldOutLoss).Msg("the head's fit ends; the best head on the held-out rows is kept")
	a.end()
}

// addPoint records an evaluation point (a.mu held).
func (a *Aggregator) addPoint(pt Point) {
	if dt := pt.Seconds - a.eval.lastPt.at.Seconds(); dt > 0 {
		msgs := a.msgCount()
		pt.MsgsPerSec = float64(msgs-a.eval.lastPt.msgs) / dt
		a.eval.lastPt.msgs = msgs
	}
	a.eval.lastPt.at = time.Duration(pt.Seconds * float64(time.Second))
	a.res.Curve = append(a.res.Curve, pt)
	if a.cfg.TargetAcc > 0 && a.res.TimeToTarget < 0 && pt.TestAccuracy >= a.cfg.TargetAcc {
		a.res.TimeToTarget = pt.Seconds
	}
	if a.cfg.OnPoint != nil {
		a.cfg.OnPoint(pt)
	}
}

// codesOf is the codes an input of head h takes (0 if it does not say).
func codesOf(h model.Head) int {
	if c, ok := h.(interface{ Codes() int }); ok {
		return c.Codes()
	}
	return 0
}
