package experiment

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

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
// sweep runs in virtual time (Simulate): the real steps, each party's step
// taking Alpha times its model's number of parameters (a zeroth-order
// step, a direction draw and two forward passes, costs in proportion to
// the model's size) and each message Latency; the straggler's steps take
// StragglerFactor times as long. A check runs the real pipeline (embedded
// JetStream, each step sleeping the same simulated compute on top of its
// real one) for some configurations and compares its time with the
// simulation's.
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
	// Per set (by name): simulated compute per parameter and step, batch
	// size, initial step size and decay (0: run.Config's defaults). LR is
	// the step size with q = 8 parties; with q it is LR sqrt(q/8): a
	// zeroth-order step's stable size grows as the block it perturbs
	// shrinks (measured on a9a: 0.3 at q = 1 and 1 at q = 8 reach
	// f - f* <= 5e-4 in about the same number of steps).
	Alpha   map[string]time.Duration
	Batch   map[string]int
	LR      map[string]float64
	LRDecay map[string]float64
	HeadLR  map[string]float64
	Latency time.Duration // one way
	Budget  time.Duration // virtual time per run
	// MaxSteps bounds each simulated run's answered requests (its real
	// compute here).
	MaxSteps int64
	Seed     uint64
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

// Fig4Row is one simulated run.
type Fig4Row struct {
	Set      string
	Q        int
	Mode     string  // "async" or "sync"
	Params   int     // parameters of the largest party's model
	StepCost float64 // its simulated step, seconds (before the straggler's factor)
	Target   float64 // the objective to reach
	Reached  bool
	Seconds  float64 // virtual time to the target (the budget if not reached)
	Steps    int64   // answered requests at the target
	Final    float64 // the objective at the end
	Speedup  float64 // T(smallest q) / T(q), same mode; NaN if either did not reach the target
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

// Fig4 runs the experiment.
func Fig4(ctx context.Context, cfg Fig4Config) ([]Fig4Row, []Fig4Check, error) {
	var rows []Fig4Row
	var checks []Fig4Check
	cache := newLoaded(cfg.Locate)
	for _, set := range cfg.Sets {
		tr, te, err := cache.get(set)
		if err != nil {
			return rows, checks, err
		}
		target, checkTarget := cfg.NetworkLoss, cfg.NetworkLoss*cfg.CheckFactor
		if !set.Network {
			c, err := CentralLogistic(tr, te, model.Nonconvex{}, 1e-4, true)
			if err != nil {
				return rows, checks, err
			}
			target = c.Objective + cfg.Suboptimality
			checkTarget = c.Objective + cfg.CheckFactor*cfg.Suboptimality
			cfg.Log.Info().Str("set", set.Name).Str("f*", fmtF(c.Objective, 6)).Str("target", fmtF(target, 6)).Msg("central solver")
		}
		// The simulations are independent: run them Parallel at a time.
		setRows := make([]Fig4Row, len(Fig4Modes)*len(cfg.Qs))
		errs := make([]error, len(setRows))
		sem := make(chan struct{}, max(cfg.Parallel, 1))
		var wg sync.WaitGroup
		for i, mode := range Fig4Modes {
			for j, q := range cfg.Qs {
				k := i*len(cfg.Qs) + j
				wg.Add(1)
				go func() {
					defer wg.Done()
					sem <- struct{}{}
					defer func() { <-sem }()
					if err := ctx.Err(); err != nil {
						errs[k] = err
						return
					}
					r, _, err := fig4Sim(ctx, cfg, cache, set, q, mode.Mode == "sync", target, cfg.Budget)
					if err != nil {
						errs[k] = fmt.Errorf("%s q=%d %s: %w", set.Name, q, mode.Mode, err)
						return
					}
					r.Mode = mode.Mode
					cfg.Log.Info().Str("set", set.Name).Int("q", q).Str("mode", r.Mode).Bool("reached", r.Reached).
						Str("seconds", fmtF(r.Seconds, 3)).Int64("steps", r.Steps).Str("objective", fmtF(r.Final, 6)).
						Str("wall", fmtF(r.WallSeconds, 1)).Msg("fig4 simulation")
					setRows[k] = r
				}()
			}
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return rows, checks, err
		}
		speedups(setRows)
		rows = append(rows, setRows...)
		for _, q := range cfg.CheckQs {
			for _, mode := range Fig4Modes {
				c, err := fig4Check(ctx, cfg, cache, set, q, mode.Mode, mode.Algo, checkTarget)
				if err != nil {
					return rows, checks, fmt.Errorf("%s q=%d %s check: %w", set.Name, q, mode.Mode, err)
				}
				checks = append(checks, c)
			}
		}
	}
	return rows, checks, nil
}

// networkK is the outputs per party of the network with q parties: the
// head always sees 8 or more values (q = 8 is the paper's network, q = 1
// the NonF one).
func networkK(q int) int { return max(1, 8/q) }

// fig4Config is the run configuration of set with q parties.
func fig4Config(cfg Fig4Config, set Set, data *run.Data, q int, algo string) (run.Config, error) {
	tc := run.Config{Loaded: data, Parties: q, Algo: algo, Model: set.Model(), Batch: cfg.Batch[set.Name], Window: 1,
		Seed: cfg.Seed, LRDecay: cfg.LRDecay[set.Name], HeadLR: cfg.HeadLR[set.Name], Log: zerolog.Nop(), Duration: time.Hour}
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

func fig4Sim(ctx context.Context, cfg Fig4Config, cache *loaded, set Set, q int, sync bool, target float64, budget time.Duration) (Fig4Row, *SimResult, error) {
	start := time.Now()
	row := Fig4Row{Set: set.Name, Q: q, Target: target, Final: math.NaN(), Speedup: math.NaN()}
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
	alpha := cfg.Alpha[set.Name].Seconds()
	row.StepCost = alpha * float64(row.Params)
	sched := tc.Schedule(data.NTrain)
	res, err := Simulate(ctx, data, SimConfig{
		Parties: q, Sync: sync, Dist: zoo.Gaussian, Batch: tc.Batch, LR: sched,
		HeadLR: zoo.Schedule{Eta0: tc.HeadLR, T0: sched.T0 * float64(q)}, Mu: tc.Mu, Lambda: *tc.Lambda, Reg: model.Nonconvex{},
		Seed: cfg.Seed,
		StepCost: func(m int) float64 {
			c := alpha * float64(locals[m].NumParams())
			if m == tc.Straggler {
				c *= tc.StragglerFactor
			}
			return c
		},
		Latency: cfg.Latency.Seconds(), Budget: budget.Seconds(), EvalEvery: budget.Seconds() / 1e5, EvalGrowth: fig4EvalGrowth, Target: target, MaxSteps: cfg.MaxSteps,
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

// fig4Check runs the real pipeline for one configuration, each step
// sleeping its simulated compute, and the simulation of the same.
func fig4Check(ctx context.Context, cfg Fig4Config, cache *loaded, set Set, q int, mode, algo string, target float64) (Fig4Check, error) {
	c := Fig4Check{Set: set.Name, Q: q, Mode: mode, Target: target}
	r, _, err := fig4Sim(ctx, cfg, cache, set, q, mode == "sync", target, cfg.CheckBudget)
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
	tc.SimCompute = cfg.Alpha[set.Name]
	tc.Duration = cfg.CheckBudget
	tc.EvalEvery = max(cfg.CheckBudget/100, 100*time.Millisecond)
	var mu sync.Mutex
	var reached atomic.Bool
	tc.OnObjective = func(pt aggregator.Point, reg float64) {
		mu.Lock()
		defer mu.Unlock()
		if !c.RealReached && pt.TrainLoss+reg <= target {
			c.RealReached, c.RealSeconds, c.RealSteps = true, pt.Seconds, pt.Steps
			reached.Store(true)
		}
	}
	tc.StopWhen = reached.Load
	s, err := run.Train(ctx, tc)
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

// speedups fills Speedup: the time of the smallest q over the time of q,
// per mode.
func speedups(rows []Fig4Row) {
	base := map[string]Fig4Row{}
	for _, r := range rows {
		if b, ok := base[r.Mode]; !ok || r.Q < b.Q {
			base[r.Mode] = r
		}
	}
	for i := range rows {
		r := &rows[i]
		if b := base[r.Mode]; b.Reached && r.Reached && r.Seconds > 0 {
			r.Speedup = b.Seconds / r.Seconds
		}
	}
}

// WriteFig4 writes dir/fig4.csv, dir/fig4_check.csv and dir/fig4.png
// (speed-up against q, one panel per set, with the linear speed-up for
// reference).
func WriteFig4(dir string, rows []Fig4Row, checks []Fig4Check) error {
	var recs [][]string
	for _, r := range rows {
		recs = append(recs, []string{r.Set, strconv.Itoa(r.Q), r.Mode, strconv.Itoa(r.Params), fmtF(1e3*r.StepCost, 4),
			fmtF(r.Target, 6), strconv.FormatBool(r.Reached), fmtF(r.Seconds, 4), strconv.FormatInt(r.Steps, 10),
			fmtF(r.Final, 6), fmtF(r.Speedup, 3), strconv.FormatInt(r.MinSteps, 10), strconv.FormatInt(r.MaxSteps, 10), fmtF(r.WallSeconds, 1)})
	}
	if err := run.WriteCSV(filepath.Join(dir, "fig4.csv"), []string{"set", "parties", "mode", "params_per_party",
		"sim_step_ms", "target_objective", "reached", "virtual_seconds", "steps", "final_objective", "speedup",
		"min_party_steps", "max_party_steps", "wall_seconds"}, recs); err != nil {
		return err
	}
	recs = nil
	for _, c := range checks {
		recs = append(recs, []string{c.Set, strconv.Itoa(c.Q), c.Mode, fmtF(c.Target, 6), strconv.FormatBool(c.RealReached),
			fmtF(c.RealSeconds, 3), strconv.FormatInt(c.RealSteps, 10), strconv.FormatBool(c.SimReached), fmtF(c.SimSeconds, 3),
			strconv.FormatInt(c.SimSteps, 10)})
	}
	if err := run.WriteCSV(filepath.Join(dir, "fig4_check.csv"), []string{"set", "parties", "mode", "target_objective",
		"real_reached", "real_seconds", "real_steps", "sim_reached", "sim_seconds", "sim_steps"}, recs); err != nil {
		return err
	}
	var sets []string
	for _, r := range rows {
		if len(sets) == 0 || sets[len(sets)-1] != r.Set {
			sets = append(sets, r.Set)
		}
	}
	var panels []*plot.Plot
	for _, set := range sets {
		p := plot.New()
		p.Title.Text = set
		p.X.Label.Text = "parties q"
		p.Y.Label.Text = "speed-up T(1)/T(q)"
		p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
		p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
		p.Add(plotter.NewGrid())
		// The axes span every q of the set, reached or not: a panel whose
		// runs all missed the target has no points, and a log axis over
		// an empty range panics.
		qmax, ymax, drawn := 1.0, 1.0, 0
		for _, r := range rows {
			if r.Set == set {
				qmax = math.Max(qmax, float64(r.Q))
			}
		}
		for i, mode := range Fig4Modes {
			var xys plotter.XYs
			for _, r := range rows {
				if r.Set == set && r.Mode == mode.Mode && !math.IsNaN(r.Speedup) {
					xys = append(xys, plotter.XY{X: float64(r.Q), Y: r.Speedup})
					ymax = math.Max(ymax, r.Speedup)
				}
			}
			if len(xys) == 0 {
				continue
			}
			drawn++
			l, pts, err := plotter.NewLinePoints(xys)
			if err != nil {
				return err
			}
			l.Color, pts.Color = plotutil.Color(i), plotutil.Color(i)
			pts.Shape = plotutil.Shape(i)
			p.Add(l, pts)
			p.Legend.Add(fmt.Sprintf("%s (%s)", mode.Algo, mode.Mode), l, pts)
		}
		ideal, _ := plotter.NewLine(plotter.XYs{{X: 1, Y: 1}, {X: qmax, Y: qmax}})
		ideal.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
		p.Add(ideal)
		p.Legend.Add("linear", ideal)
		p.Legend.Top, p.Legend.Left = true, true
		p.Y.Min, p.Y.Max = 0.5, math.Max(ymax, qmax)*1.5
		p.X.Min, p.X.Max = 0.8, math.Max(qmax, 2)*1.25
		if drawn == 0 {
			p.Title.Text = set + " (no run reached the target)"
		}
		panels = append(panels, p)
	}
	if len(panels) == 0 {
		return nil
	}
	return run.SavePNG(filepath.Join(dir, "fig4.png"), [][]*plot.Plot{panels}, vg.Length(len(panels))*4*vg.Inch, 3.6*vg.Inch)
}
