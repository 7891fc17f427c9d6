package party

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/asyrevel/asyrevel/model"
)

// alt is the state a party needs for the other algorithms of the pipeline
// (SynREVEL's shared sampling, TIG's gradients) and for simulated compute.
type alt struct {
	// sampler draws the batches of SynREVEL from the run's shared seed, so
	// that every party's k-th request covers the same samples.
	sampler *rand.Rand

	// TIG scratch: the replied gradient scaled by 1/batch, the parameter
	// gradient and the regulariser's gradient.
	wb   model.WhiteBox
	dout []float64
	grad []float64
	regG []float64

	// Simulated compute: each step is made to last slow * (measured
	// compute + cost). The sleep debt carries a timer's overshoot (or a
	// wanted delay too short to sleep) over to the next steps, so that the
	// mean step time is right even for delays of microseconds.
	on    bool
	slow  float64
	cost  time.Duration
	since time.Time // start of the current step's compute: the reply's arrival
	debt  time.Duration
}

// checkAlt checks the algorithm fields of cfg.
func checkAlt(cfg *Config) error {
	if cfg.Sync && cfg.Window != 1 {
		return fmt.Errorf("%w: party %d: SynREVEL runs in rounds: one request in flight (window 1), not %d", ErrConfig, cfg.ID, cfg.Window)
	}
	if cfg.Sync && cfg.FirstOrder {
		return fmt.Errorf("%w: party %d: the first-order baseline is asynchronous", ErrConfig, cfg.ID)
	}
	if cfg.FirstOrder {
		if _, ok := cfg.Model.(model.WhiteBox); !ok {
			return fmt.Errorf("%w: party %d: the first-order baseline (TIG) back-propagates through the party's model, and %s is a black box: %w",
				ErrConfig, cfg.ID, modelName(cfg.Model), model.ErrNoGradient)
		}
	}
	if cfg.Slowdown != 0 && cfg.Slowdown < 1 || cfg.StepCost < 0 {
		return fmt.Errorf("%w: party %d: slowdown %g (want >= 1) and step cost %v (want >= 0)", ErrConfig, cfg.ID, cfg.Slowdown, cfg.StepCost)
	}
	return nil
}

// initAlt prepares the state of the other algorithms; cfg is checked.
func (p *Party) initAlt() {
	cfg := &p.cfg
	a := &p.alt
	if cfg.Sync {
		a.sampler = rand.New(rand.NewPCG(cfg.SampleSeed, 0x5e1ec7))
	}
	if cfg.FirstOrder {
		a.wb = cfg.Model.(model.WhiteBox)
		a.dout = make([]float64, cfg.Batch*p.k)
		a.grad = make([]float64, len(p.w))
		a.regG = make([]float64, len(p.w))
		p.out.CHat = p.out.CHat[:0]
	}
	a.slow = max(cfg.Slowdown, 1)
	a.cost = cfg.StepCost
	a.on = a.slow > 1 || a.cost > 0
}

// begin marks the start of a step's compute (a reply arrived).
func (a *alt) begin() {
	if a.on {
		a.since = time.Now()
	}
}

// clock is the start of the step being prepared: the reply's arrival, or
// now for the first requests.
func (a *alt) clock() time.Time {
	if !a.on {
		return time.Time{}
	}
	t := a.since
	a.since = time.Time{}
	if t.IsZero() {
		t = time.Now()
	}
	return t
}

// delay sleeps so that the step begun at start lasts slow * (its measured
// compute + cost).
func (a *alt) delay(start time.Time) {
	if !a.on {
		return
	}
	measured := time.Since(start)
	want := time.Duration((a.slow-1)*float64(measured) + a.slow*float64(a.cost))
	a.debt += want
	// A long descheduling must not make the party fast for long after.
	a.debt = max(a.debt, -max(10*want, time.Millisecond))
	if a.debt <= 0 {
		return
	}
	t := time.Now()
	time.Sleep(a.debt)
	a.debt -= time.Since(t)
}

// Regularization is lambda g(w) at the party's current parameters (0
// without a regulariser): with the head's mean loss it makes the training
// objective f. For experiments; it never leaves the process.
func (p *Party) Regularization() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cfg.Reg == nil || p.cfg.Lambda == 0 {
		return 0
	}
	return p.cfg.Lambda * p.cfg.Reg.Value(p.w)
}
