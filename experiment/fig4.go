package experiment

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asyrevel/asyrevel/experiment/sim"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/aggregator"
	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/run"
	"github.com/asyrevel/asyrevel/zoo"
)

// Fig4Config configures the speed-up experiment (the paper's Figure 4):
// time to reach a target objective with q = 1, 2, 4, ... parties,
// asynchronous (AsyREVEL-Gau) against synchronous (SynREVEL-Gau), one
// party a straggler.
//
// This machine has 2 cores: q parties cannot each have a processor. So the
// sweep runs in virtual time (Simulate): the real steps (package
// zoo/kernel, as the runtimes compute them), ordered by when they would
// happen on q machines. What a step costs is measured here first, for each
// set and q (measureCosts): each party's step on its own block of features
// (its non-zeros and the batch), the aggregator's answer to a request, and
// a message's time through the embedded broker. The straggler's steps take
// StragglerFactor times the slowest party's measured cost. A check runs the real pipeline
// (embedded JetStream, real compute only) for some configurations and
// compares its time with the simulation's.
type Fig4Config struct {
	Sets   []Set
	Locate Locate
	Qs     []int
	// Suboptimality is the target f - f* for the logistic sets, f* from
	// the centralised L-BFGS solver on the same objective.
	Suboptimality float64
	// NetworkLoss is the target training objective for the network sets,
	// which have no f*.
	NetworkLoss     float64
	StragglerFactor float64
	// Per set (by name): batch size, initial step size and decay (0:
	// run.Config's defaults). LR is the step size with q = 8 parties; with
	// q it is LR sqrt(q/8): a zeroth-order step's stable size grows as the
	// block it perturbs shrinks (measured on a9a: 0.3 at q = 1 and 1 at
	// q = 8 reach f - f* <= 5e-4 in about the same number of steps).
	Batch   map[string]int
	LR      map[string]float64
	LRDecay map[string]float64
	HeadLR  map[string]float64
	// Latency, if not 0, replaces the measured one-way message time.
	Latency time.Duration
	Budget  time.Duration // virtual time per run
	// MaxSteps bounds each simulated run's answered requests (its real
	// compute here).
	MaxSteps int64
	Seed     uint64
	// Seeds is how many runs (seeds Seed, Seed+1, ...) each configuration
	// gets (at least 1): the times to target vary with the random draws.
	Seeds int
	// Checks are real pipeline runs compared with the simulation: at
	// these q, each mode, to the target CheckFactor times farther from f*
	// (or CheckFactor times the network loss), at most CheckBudget each.
	CheckQs     []int
	CheckFactor float64
	CheckBudget time.Duration
	Log         zerolog.Logger
	// Parallel is how many simulations run at a time (at least 1); their
	// results do not depend on it (virtual time).
	Parallel int
}

// seeds is the list of seeds of a configuration.
func (cfg Fig4Config) seeds() []uint64 {
	s := make([]uint64, max(cfg.Seeds, 1))
	for i := range s {
		s[i] = cfg.Seed + uint64(i)
	}
	return s
}

// Fig4Row is one simulated run.
type Fig4Row struct {
	Set      string
	Q        int
	Mode     string // "async" or "sync"
	Seed     uint64
	Params   int     // parameters of the largest party's model
	StepCost float64 // the slowest party's measured step, seconds (before the straggler's factor)
	AggCost  float64 // the aggregator's measured time per answered request, seconds
	Latency  float64 // one-way message time, seconds
	Target   float64 // the objective to reach
	Reached  bool
	Seconds  float64 // virtual time to the target (the budget if not reached)
	Steps    int64   // answered requests at the target
	Final    float64 // the objective at the end
	// Speedup is the median time over the seeds at the smallest q over
	// this run's time, same mode; NaN if either did not reach the target.
	Speedup float64
	// MinSteps and MaxSteps are the fewest and most updates of a party.
	MinSteps, MaxSteps int64
	WallSeconds        float64 // how long the simulation took here
}

// Fig4Check compares a real pipeline run with the simulation of the same
// configuration.
type Fig4Check struct {
	Set                     string
	Q                       int
	Mode                    string
	Target                  float64
	RealReached, SimReached bool
	RealSeconds, SimSeconds float64
	RealSteps, SimSteps     int64
}

// Fig4Modes are the two algorithms compared.
var Fig4Modes = []struct{ Mode, Algo string }{{"async", "asyrevel-gau"}, {"sync", "synrevel-gau"}}

// Fig4 runs the experiment: for each set, it measures the costs at every
// q, then simulates every q, mode and seed.
func Fig4(ctx context.Context, cfg Fig4Config) ([]Fig4Row, []Fig4Check, []Fig4Cost, error) {
	var rows []Fig4Row
	var checks []Fig4Check
	var costs []Fig4Cost
	cache := newLoaded(cfg.Locate)
	seeds := cfg.seeds()
	for _, set := range cfg.Sets {
		tr, te, err := cache.get(set)
		if err != nil {
			return rows, checks, costs, err
		}
		target, checkTarget := cfg.NetworkLoss, cfg.NetworkLoss*cfg.CheckFactor
		if !set.Network {
			c, err := sim.CentralLogistic(tr, te, model.Nonconvex{}, run.DefaultLambda, true)
			if err != nil {
				return rows, checks, costs, err
			}
			target = c.Objective + cfg.Suboptimality
			checkTarget = c.Objective + cfg.CheckFactor*cfg.Suboptimality
			cfg.Log.Info().Str("set", set.Name).Str("f*", fmtF(c.Objective, 6)).Str("target", fmtF(target, 6)).Msg("central solver")
		}
		setCosts := map[int]Fig4Cost{}
		for _, q := range cfg.Qs {
			c, err := fig4Costs(ctx, cfg, cache, set, q)
			if err != nil {
				return rows, checks, costs, fmt.Errorf("%s q=%d costs: %w", set.Name, q, err)
			}
			setCosts[q] = c
			costs = append(costs, c)
			cfg.Log.Info().Str("set", set.Name).Int("q", q).Str("party_ms", fmtF(1e3*c.SlowestParty(), 4)).
				Str("agg_ms", fmtF(1e3*c.Agg.Median, 4)).Str("latency_ms", fmtF(1e3*c.Latency.Median, 4)).Msg("fig4 costs")
		}
		n := len(Fig4Modes) * len(cfg.Qs) * len(seeds)
		setRows := make([]Fig4Row, n)
		errs := make([]error, n)
		sem := make(chan struct{}, max(cfg.Parallel, 1))
		var wg sync.WaitGroup
		k := 0
		for _, mode := range Fig4Modes {
			for _, q := range cfg.Qs {
				for _, seed := range seeds {
					wg.Add(1)
					go func(k int) {
						defer wg.Done()
						sem <- struct{}{}
						defer func() { <-sem }()
						if err := ctx.Err(); err != nil {
							errs[k] = err
							return
						}
						r, _, err := fig4Sim(ctx, cfg, cache, set, q, mode.Mode == "sync", target, cfg.Budget, setCosts[q], seed)
						if err != nil {
							errs[k] = fmt.Errorf("%s q=%d %s seed %d: %w", set.Name, q, mode.Mode, seed, err)
							return
						}
						r.Mode = mode.Mode
						cfg.Log.Info().Str("set", set.Name).Int("q", q).Str("mode", r.Mode).Uint64("seed", seed).Bool("reached", r.Reached).
							Str("seconds", fmtF(r.Seconds, 3)).Int64("steps", r.Steps).Str("objective", fmtF(r.Final, 6)).
							Str("wall", fmtF(r.WallSeconds, 1)).Msg("fig4 simulation")
						setRows[k] = r
					}(k)
					k++
				}
			}
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return rows, checks, costs, err
		}
		speedups(setRows)
		rows = append(rows, setRows...)
		for _, q := range cfg.CheckQs {
			for _, mode := range Fig4Modes {
				c, err := fig4Check(ctx, cfg, cache, set, q, mode.Mode, mode.Algo, checkTarget)
				if err != nil {
					return rows, checks, costs, fmt.Errorf("%s q=%d %s check: %w", set.Name, q, mode.Mode, err)
				}
				checks = append(checks, c)
			}
		}
	}
	return rows, checks, costs, nil
}

// fig4Costs measures what set costs with q parties on this machine: each
// party's step on its block, the aggregator's answer, a message's time.
func fig4Costs(ctx context.Context, cfg Fig4Config, cache *loaded, set Set, q int) (Fig4Cost, error) {
	c := Fig4Cost{Set: set.Name, Q: q}
	data, err := cache.split(set, q)
	if err != nil {
		return c, err
	}
	tc, err := fig4Config(cfg, set, data, q, "asyrevel-gau")
	if err != nil {
		return c, err
	}
	c.Batch = tc.Batch
	head, k := run.NewHead(&tc, data.Classes)
	for m := 1; m <= q; m++ {
		if err := ctx.Err(); err != nil {
			return c, err
		}
		local, closeLocal, err := run.NewLocal(ctx, &tc, m, data.Blocks[m-1].Len(), data.Classes)
		if err != nil {
			return c, err
		}
		x := data.PartTrain[m-1]
		pc := PartyCost{Params: local.NumParams(), NNZ: float64(x.NNZ()) / float64(max(x.NRows, 1))}
		pc.Step, c.CPU = measureSteps(partyStep(local, x, tc.Batch, zoo.Gaussian, tc.Mu, tc.Lambda, model.Nonconvex{}, cfg.Seed+uint64(m)))
		closeLocal()
		c.Party = append(c.Party, pc)
	}
	c.Agg, _ = measureSteps(aggStep(head, q, k, data.NTrain, tc.Batch, zoo.Gaussian, tc.Mu, cfg.Seed))
	if cfg.Latency > 0 {
		l := cfg.Latency.Seconds()
		c.Latency = Spread{Median: l, Lo: l, Hi: l}
		return c, nil
	}
	up, down := messageSizes(tc.Batch, k, data.NTrain)
	c.Latency, err = measureLatency(ctx, up, down)
	return c, err
}

// networkK is a party's outputs on a network set with q parties: 8/q, so
// that the head sees 8 values whatever q (at least 1).
func networkK(q int) int { return max(1, 8/q) }

// fig4Config is the run configuration of set with q parties.
func fig4Config(cfg Fig4Config, set Set, data *run.Data, q int, algo string) (run.Config, error) {
	tc := run.New(func(c *run.Config) {
		c.Parties = q
		c.Algo = algo
		c.Model = set.Model()
		c.Batch = cfg.Batch[set.Name]
		c.Window = 1
		c.Seed = cfg.Seed
		c.LRDecay = cfg.LRDecay[set.Name]
		c.HeadLR = cfg.HeadLR[set.Name]
		c.Duration = time.Hour
	})
	if set.Network {
		tc.K = networkK(q)
	}
	lr := cfg.LR[set.Name]
	if lr == 0 {
		if err := tc.Prepare(); err != nil {
			return tc, err
		}
		lr = tc.LR
	}
	tc.LR = lr * math.Sqrt(float64(q)/8)
	if q > 1 && cfg.StragglerFactor > 1 {
		tc.Straggler, tc.StragglerFactor = q, cfg.StragglerFactor
	}
	return tc, tc.Prepare()
}

// fig4EvalGrowth is the relative spacing of the simulation's evaluations:
// a time to target is known to 1% (evenly spaced ones, budget/400 apart,
// made the fast runs' times multiples of the spacing and their speed-ups
// coarse).
const fig4EvalGrowth = 0.01

// fig4Sim simulates set with q parties at the measured costs.
func fig4Sim(ctx context.Context, cfg Fig4Config, cache *loaded, set Set, q int, sync bool, target float64, budget time.Duration, cost Fig4Cost, seed uint64) (Fig4Row, *sim.SimResult, error) {
	start := time.Now()
	row := Fig4Row{Set: set.Name, Q: q, Seed: seed, Target: target, Final: math.NaN(), Speedup: math.NaN(),
		StepCost: cost.SlowestParty(), AggCost: cost.Agg.Median, Latency: cost.Latency.Median}
	if len(cost.Party) != q {
		return row, nil, fmt.Errorf("%w: costs of %d parties for q = %d", run.ErrConfig, len(cost.Party), q)
	}
	data, err := cache.split(set, q)
	if err != nil {
		return row, nil, err
	}
	tc, err := fig4Config(cfg, set, data, q, "asyrevel-gau")
	if err != nil {
		return row, nil, err
	}
	head, _ := run.NewHead(&tc, data.Classes)
	locals := make([]model.Local, q+1)
	for m := 1; m <= q; m++ {
		locals[m], _, _ = run.NewLocal(context.Background(), &tc, m, data.Blocks[m-1].Len(), data.Classes)
		row.Params = max(row.Params, locals[m].NumParams())
	}
	sched := tc.Schedule(data.NTrain)
	res, err := sim.Simulate(ctx, data, sim.SimConfig{
		Parties: q, Sync: sync, Dist: zoo.Gaussian, Batch: tc.Batch, LR: sched,
		HeadLR: zoo.Schedule{Eta0: tc.HeadLR, T0: sched.T0 * float64(q)}, Mu: tc.Mu, Lambda: tc.Lambda, Reg: model.Nonconvex{},
		Seed: seed,
		StepCost: func(m int) float64 {
			if m == tc.Straggler {
				// Slower than every other party: its factor times the
				// slowest party's step. Its own block may be the cheapest
				// (a9a's last 8 columns: 0.06 non-zeros a row), and
				// 1.6 times that would make it the fastest.
				return tc.StragglerFactor * cost.SlowestParty()
			}
			return cost.Party[m-1].Step.Median
		},
		Latency: cost.Latency.Median, AggCost: cost.Agg.Median,
		Budget: budget.Seconds(), EvalEvery: budget.Seconds() / 1e5, EvalGrowth: fig4EvalGrowth, Target: target, MaxSteps: cfg.MaxSteps,
		NewLocal: func(m, d int) model.Local { return locals[m] }, Head: head,
	})
	if err != nil {
		return row, nil, err
	}
	row.Reached, row.Seconds, row.Steps = res.Reached, res.Seconds, res.Steps
	if n := len(res.Curve); n > 0 {
		row.Final = res.Curve[n-1].Objective
	}
	row.MinSteps, row.MaxSteps = math.MaxInt64, 0
	for _, s := range res.PartySteps {
		row.MinSteps, row.MaxSteps = min(row.MinSteps, s), max(row.MaxSteps, s)
	}
	row.WallSeconds = time.Since(start).Seconds()
	return row, res, nil
}

// fig4Check runs the real pipeline for one configuration, real compute
// only, and the simulation of the same at the measured costs.
func fig4Check(ctx context.Context, cfg Fig4Config, cache *loaded, set Set, q int, mode, algo string, target float64) (Fig4Check, error) {
	c := Fig4Check{Set: set.Name, Q: q, Mode: mode, Target: target}
	cost, err := fig4Costs(ctx, cfg, cache, set, q)
	if err != nil {
		return c, err
	}
	r, _, err := fig4Sim(ctx, cfg, cache, set, q, mode == "sync", target, cfg.CheckBudget, cost, cfg.Seed)
	if err != nil {
		return c, err
	}
	c.SimReached, c.SimSeconds, c.SimSteps = r.Reached, r.Seconds, r.Steps
	data, err := cache.split(set, q)
	if err != nil {
		return c, err
	}
	tc, err := fig4Config(cfg, set, data, q, algo)
	if err != nil {
		return c, err
	}
	tc.Duration = cfg.CheckBudget
	tc.EvalEvery = max(cfg.CheckBudget/100, 100*time.Millisecond)
	var mu sync.Mutex
	var reached atomic.Bool
	hooks := run.Hooks{Loaded: data, StopWhen: reached.Load}
	hooks.OnObjective = func(pt aggregator.Point, reg float64) {
		mu.Lock()
		defer mu.Unlock()
		if !c.RealReached && pt.TrainLoss+reg <= target {
			c.RealReached, c.RealSeconds, c.RealSteps = true, pt.Seconds, pt.Steps
			reached.Store(true)
		}
	}
	s, err := run.Train(ctx, tc, hooks)
	if err != nil {
		return c, err
	}
	mu.Lock()
	defer mu.Unlock()
	if !c.RealReached {
		c.RealSeconds, c.RealSteps = s.TrainSeconds, s.Steps
	}
	cfg.Log.Info().Str("set", set.Name).Int("q", q).Str("mode", mode).Str("real_s", fmtF(c.RealSeconds, 2)).
		Str("sim_s", fmtF(c.SimSeconds, 2)).Bool("real_reached", c.RealReached).Bool("sim_reached", c.SimReached).Msg("fig4 check")
	return c, nil
}

// speedups fills Speedup: the median time over the seeds at the set's
// smallest q over the run's time, per set and mode (NaN unless every run
// at the smallest q and this one reached the target). The report computes
// its speed-ups from the times, with their intervals; this column is each
// run's alone.
func speedups(rows []Fig4Row) {
	type key struct{ set, mode string }
	qmin := map[key]int{}
	for _, r := range rows {
		if b, ok := qmin[key{r.Set, r.Mode}]; !ok || r.Q < b {
			qmin[key{r.Set, r.Mode}] = r.Q
		}
	}
	base := map[key]float64{}
	for k, q := range qmin {
		base[k] = medianTime(rows, k.set, q, k.mode)
	}
	for i := range rows {
		r := &rows[i]
		if b := base[key{r.Set, r.Mode}]; !math.IsNaN(b) && r.Reached && r.Seconds > 0 {
			r.Speedup = b / r.Seconds
		}
	}
}

// timesOf are the times to target of the runs of set, q and mode, and
// whether every one reached the target.
func timesOf(rows []Fig4Row, set string, q int, mode string) (t []float64, all bool) {
	all = true
	for _, r := range rows {
		if r.Set == set && r.Q == q && r.Mode == mode {
			if !r.Reached {
				all = false
				continue
			}
			t = append(t, r.Seconds)
		}
	}
	return t, all && len(t) > 0
}

// medianTime is the median time to target of set, q and mode over the
// seeds (NaN unless every run reached it).
func medianTime(rows []Fig4Row, set string, q int, mode string) float64 {
	t, all := timesOf(rows, set, q, mode)
	if !all {
		return math.NaN()
	}
	return median(t)
}

// median of x (NaN if empty); x is sorted in place.
func median(x []float64) float64 {
	if len(x) == 0 {
		return math.NaN()
	}
	slices.Sort(x)
	if n := len(x); n%2 == 1 {
		return x[n/2]
	} else {
		return (x[n/2-1] + x[n/2]) / 2
	}
}

// WriteFig4 writes dir/fig4.csv (every simulated run), dir/fig4_costs.csv
// (the measured costs) and dir/fig4_check.csv; the report draws fig4.png
// from them.
func WriteFig4(dir string, rows []Fig4Row, checks []Fig4Check, costs []Fig4Cost) error {
	var recs [][]string
	for _, r := range rows {
		recs = append(recs, []string{r.Set, strconv.Itoa(r.Q), r.Mode, strconv.FormatUint(r.Seed, 10), strconv.Itoa(r.Params),
			fmtF(1e3*r.StepCost, 5), fmtF(1e3*r.AggCost, 5), fmtF(1e3*r.Latency, 5),
			fmtF(r.Target, 6), strconv.FormatBool(r.Reached), fmtF(r.Seconds, 4), strconv.FormatInt(r.Steps, 10),
			fmtF(r.Final, 6), fmtF(r.Speedup, 3), strconv.FormatInt(r.MinSteps, 10), strconv.FormatInt(r.MaxSteps, 10), fmtF(r.WallSeconds, 1)})
	}
	if err := run.WriteCSV(filepath.Join(dir, "fig4.csv"), []string{"set", "parties", "mode", "seed", "params_per_party",
		"party_step_ms", "agg_reply_ms", "latency_ms", "target_objective", "reached", "virtual_seconds", "steps", "final_objective", "speedup",
		"min_party_steps", "max_party_steps", "wall_seconds"}, recs); err != nil {
		return err
	}
	recs = nil
	for _, c := range costs {
		clock := "wall"
		if c.CPU {
			clock = "thread_cpu"
		}
		for m, p := range c.Party {
			recs = append(recs, []string{c.Set, strconv.Itoa(c.Q), "party", strconv.Itoa(m + 1), strconv.Itoa(c.Batch), strconv.Itoa(p.Params),
				fmtF(p.NNZ, 2), fmtF(1e3*p.Step.Median, 5), fmtF(1e3*p.Step.Lo, 5), fmtF(1e3*p.Step.Hi, 5), clock})
		}
		recs = append(recs, []string{c.Set, strconv.Itoa(c.Q), "aggregator", "0", strconv.Itoa(c.Batch), "", "",
			fmtF(1e3*c.Agg.Median, 5), fmtF(1e3*c.Agg.Lo, 5), fmtF(1e3*c.Agg.Hi, 5), clock})
		recs = append(recs, []string{c.Set, strconv.Itoa(c.Q), "latency", "", strconv.Itoa(c.Batch), "", "",
			fmtF(1e3*c.Latency.Median, 5), fmtF(1e3*c.Latency.Lo, 5), fmtF(1e3*c.Latency.Hi, 5), "wall_p10_p90"})
	}
	if err := run.WriteCSV(filepath.Join(dir, "fig4_costs.csv"), []string{"set", "parties", "what", "party", "batch", "params",
		"nnz_per_row", "median_ms", "lo_ms", "hi_ms", "clock"}, recs); err != nil {
		return err
	}
	recs = nil
	for _, c := range checks {
		recs = append(recs, []string{c.Set, strconv.Itoa(c.Q), c.Mode, fmtF(c.Target, 6), strconv.FormatBool(c.RealReached),
			fmtF(c.RealSeconds, 3), strconv.FormatInt(c.RealSteps, 10), strconv.FormatBool(c.SimReached), fmtF(c.SimSeconds, 3),
			strconv.FormatInt(c.SimSteps, 10)})
	}
	return run.WriteCSV(filepath.Join(dir, "fig4_check.csv"), []string{"set", "parties", "mode", "target_objective",
		"real_reached", "real_seconds", "real_steps", "sim_reached", "sim_seconds", "sim_steps"}, recs)
}
