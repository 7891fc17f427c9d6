package run

import (
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/asyrevel/asyrevel/aggregator"
	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/party"
	"github.com/asyrevel/asyrevel/zoo"
)

// Algorithm is one value of --algo: how the parties and the aggregator
// step. All of them run through the same pipeline (parties publish, the
// aggregator consumes and replies).
type Algorithm struct {
	Name string
	// Dist is the direction distribution of the zeroth-order algorithms.
	Dist zoo.Dist
	// Sync: SynREVEL, rounds over one batch shared by all parties; the
	// aggregator answers a round when every party's request is in.
	Sync bool
	// FirstOrder: TIG (split learning), gradients dF_0/dc back to the
	// parties, which back-propagate through white-box models.
	FirstOrder bool
	// NonF: all features at one party (q = 1): the non-federated
	// counterpart, AsyREVEL-Gau on the whole feature vector.
	NonF bool
}

// LookupAlgo returns the algorithm named name (one of Algorithms).
func LookupAlgo(name string) (Algorithm, error) {
	a := Algorithm{Name: name}
	switch name {
	case "asyrevel-gau":
	case "asyrevel-uni":
		a.Dist = zoo.Sphere
	case "synrevel-gau":
		a.Sync = true
	case "synrevel-uni":
		a.Dist, a.Sync = zoo.Sphere, true
	case "tig":
		a.FirstOrder = true
	case "nonf":
		a.NonF = true
	default:
		return a, fmt.Errorf("%w: --algo %q: available: %s", ErrConfig, name, strings.Join(Algorithms, ", "))
	}
	return a, nil
}

// defaults fills in the algorithm's own defaults (before the general ones).
func (a Algorithm) defaults(c *Config) error {
	switch {
	case a.NonF:
		if c.Parties == 0 {
			c.Parties = 1
		}
		if c.K == 0 {
			c.K = NonFWidth
		}
	case a.Sync:
		if c.Window == 0 {
			c.Window = 1
		}
	}
	return nil
}

// NonFWidth is the number of outputs of the single party of a nonf run on
// a multiclass set: the width the paper's 8-party network gives its head.
const NonFWidth = 8

// check refuses the combinations an algorithm cannot run.
func (a Algorithm) check(c *Config) error {
	switch {
	case a.NonF && c.Parties != 1:
		return fmt.Errorf("%w: --algo nonf puts all features at one party: --parties 1 (or leave it out), not %d", ErrConfig, c.Parties)
	case a.Sync && c.Window != 1:
		return fmt.Errorf("%w: --algo %s runs in rounds, one request in flight per party: --window 1 (or leave it out), not %d", ErrConfig, a.Name, c.Window)
	case a.FirstOrder && c.Model == "external":
		return fmt.Errorf("%w: --algo tig back-propagates the aggregator's gradients through each party's model, "+
			"and --model external is a black box that only gives outputs (%w): that is the model-applicability point of the "+
			"zeroth-order algorithms; train it with asyrevel-gau or asyrevel-uni", ErrConfig, model.ErrNoGradient)
	case a.FirstOrder && c.Delta:
		return fmt.Errorf("%w: --delta shapes the zeroth-order replies; --algo tig replies gradients", ErrConfig)
	case c.Straggler < 0 || c.Straggler > c.Parties || (c.Straggler > 0 && c.StragglerFactor < 1):
		return fmt.Errorf("%w: --straggler %d:%g: want a party in 1..%d and a factor of at least 1", ErrConfig, c.Straggler, c.StragglerFactor, c.Parties)
	case c.SimCompute < 0:
		return fmt.Errorf("%w: --sim-compute %v is negative", ErrConfig, c.SimCompute)
	}
	return nil
}

// defaultLR is the default initial step size of a party.
func (a Algorithm) defaultLR(model string, batch int) float64 {
	if a.FirstOrder {
		return DefaultFirstOrderLR
	}
	if a.NonF && model == "mlp" {
		// One network over all the features has about NonFWidth times the
		// parameters of one party's network of the federated run, and the
		// zeroth-order estimate's variance grows with the dimension: at
		// the federated step it diverged on MNIST (outputs past the
		// OutputBound, 18.6% after 45 s); at 1/8 of it, 86.7%
		// (asyrevel train --data mnist --algo nonf --model mlp --duration
		// 45s --lr L for L = 0.004, 0.0014, 0.0005: 18.6%, 81.0%, 86.7%).
		return DefaultLR(model, batch) / NonFWidth
	}
	return DefaultLR(model, batch)
}

func (a Algorithm) defaultHeadLR() float64 {
	if a.FirstOrder {
		return DefaultFirstOrderLR
	}
	return DefaultHeadLR
}

// DefaultFirstOrderLR is the default SGD step size of the first-order
// baseline (parties and head).
const DefaultFirstOrderLR = 0.05

// ParseStraggler reads --straggler M:S (party M's steps take S times as
// long).
func ParseStraggler(s string) (m int, factor float64, err error) {
	ms, fs, ok := strings.Cut(s, ":")
	if ok {
		if m, err = strconv.Atoi(ms); err == nil {
			factor, err = strconv.ParseFloat(fs, 64)
		}
	}
	if !ok || err != nil || m < 1 || factor < 1 {
		return 0, 0, fmt.Errorf("%w: --straggler %q: want PARTY:FACTOR with a party id and a factor of at least 1, e.g. 3:1.6", ErrConfig, s)
	}
	return m, factor, nil
}

// slowdown is party m's step-time factor.
func (c *Party) slowdown(m int) float64 {
	if c.Straggler == m {
		return c.StragglerFactor
	}
	return 1
}

// observer reads the parties' regularisation term after each evaluation
// for Hooks.OnObjective, on a goroutine of its own (the evaluation's
// callback runs in the aggregator's handler, which must not wait for a
// party's lock).
type observer struct {
	fn      func(aggregator.Point, float64)
	parties []*party.Party
	ch      chan aggregator.Point
	wg      sync.WaitGroup
}

func newObserver(cfg *job) *observer {
	if cfg.hooks.OnObjective == nil {
		return nil
	}
	return &observer{fn: cfg.hooks.OnObjective, ch: make(chan aggregator.Point, 4096)}
}

// onPoint wraps next (which may be nil) so that every point also reaches
// the observer.
func (o *observer) onPoint(next func(aggregator.Point)) func(aggregator.Point) {
	if o == nil {
		return next
	}
	return func(pt aggregator.Point) {
		if next != nil {
			next(pt)
		}
		o.ch <- pt
	}
}

func (o *observer) start(parties []*party.Party) {
	if o == nil {
		return
	}
	o.parties = parties
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		for pt := range o.ch {
			var reg float64
			for _, p := range o.parties {
				reg += p.Regularization()
			}
			o.fn(pt, reg)
		}
	}()
}

// stop waits until every point observed so far is reported.
func (o *observer) stop() {
	if o == nil {
		return
	}
	close(o.ch)
	o.wg.Wait()
}

// Algorithms that Train runs (LookupAlgo).
var Algorithms = []string{"asyrevel-gau", "asyrevel-uni", "synrevel-gau", "synrevel-uni", "tig", "nonf"}
