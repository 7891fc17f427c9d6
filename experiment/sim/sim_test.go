package sim

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/run"
	"github.com/asyrevel/asyrevel/zoo"
)

// small is a synthetic problem that a linear model learns to about 95%.
func small() *dataset.SyntheticConfig {
	return &dataset.SyntheticConfig{Samples: 4000, TestSamples: 1000, Features: 24, Classes: 2, Noise: 0.02, Seed: 3}
}

func smallData(t *testing.T, q int) *run.Data {
	t.Helper()
	tc := run.New(func(c *run.Config) {
		c.Synthetic = small()
		c.Parties = q
	})
	if err := tc.Prepare(); err != nil {
		t.Fatal(err)
	}
	d, err := run.LoadData(&tc, run.RoleAll)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestFirstOrderLearns(t *testing.T) {
	data := smallData(t, 3)
	tc := run.New(func(c *run.Config) {
		c.Parties = 3
		c.Model = "mlp"
		c.Hidden = 16
		c.Batch = 32
		c.Epochs = 3
	})
	r, err := FirstOrderFor(context.Background(), tc, data, 0.05, 0.9, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	// 0.9286, the same on every run (seeded): a tenth of the training
	// rows is held out for early stopping since the held-out split is
	// never the test set. Chance is 0.5.
	if r.TestAccuracy < 0.92 {
		t.Errorf("first-order MLP accuracy %.4f, want at least 0.92", r.TestAccuracy)
	}
}

func TestFirstOrderRefusesBlackBox(t *testing.T) {
	tc := run.New(func(c *run.Config) {
		c.Parties = 2
		c.Model = "external"
		c.ModelCmd = "/bin/false"
		c.Batch = 8
		c.Epochs = 1
	})
	if _, err := FirstOrderFor(context.Background(), tc, smallData(t, 2), 0.1, 0, 0, nil); err == nil || !strings.Contains(err.Error(), "black") {
		t.Fatalf("first-order with a black-box model: %v", err)
	}
}

func simData(t *testing.T, q int) (*SimConfig, func() *SimResult) {
	t.Helper()
	data := smallData(t, q)
	cfg := &SimConfig{Parties: q, Dist: zoo.Gaussian, Batch: 16, LR: zoo.Schedule{Eta0: 0.03, T0: 100}, HeadLR: zoo.Schedule{Eta0: 0.05},
		Mu: 1e-3, Lambda: 1e-4, Reg: model.Nonconvex{}, Seed: 1, Latency: 0.001, AggCost: 0.0001, Budget: 10, EvalEvery: 1,
		NewLocal: func(m, d int) model.Local { return model.NewLinear(d, 1) }, Head: model.NewLogisticBias(q)}
	return cfg, func() *SimResult {
		r, err := Simulate(context.Background(), data, *cfg)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
}

// Virtual time follows the cost model exactly: an asynchronous party makes
// a step every compute + 2 latencies + the aggregator's time (when the
// aggregator is not the bottleneck); a synchronous round lasts as long as
// the slowest party's step.
func TestSimulateTiming(t *testing.T) {
	cfg, sim := simData(t, 3)
	cfg.StepCost = func(m int) float64 { return []float64{0, 0.01, 0.02, 0.04}[m] }
	r := sim()
	// 10 s: party 1 steps every 0.0121 s (826 steps), party 2 every 0.0221
	// (452), party 3 every 0.0421 (237).
	for m, want := range []float64{10 / 0.0121, 10 / 0.0221, 10 / 0.0421} {
		if got := float64(r.PartySteps[m]); math.Abs(got-want) > 2 {
			t.Errorf("async party %d: %v steps in 10 s, want %.0f", m+1, got, want)
		}
	}
	cfg.Sync = true
	r = sim()
	// A round: the straggler's 0.04 s, 2 latencies, 3 answers of 0.0001 s.
	want := 10 / (0.04 + 0.002 + 0.0003)
	for m, got := range r.PartySteps {
		if math.Abs(float64(got)-want) > 2 {
			t.Errorf("sync party %d: %d steps in 10 s, want %.0f", m+1, got, want)
		}
	}
}

// The simulation learns: the objective falls to within reach of the
// centralised optimum, and a target stops it.
func TestSimulateLearns(t *testing.T) {
	if testing.Short() {
		t.Skip("short: simulations to convergence")
	}
	for _, sync := range []bool{false, true} {
		cfg, sim := simData(t, 4)
		cfg.Sync = sync
		cfg.StepCost = func(m int) float64 { return 0.001 }
		cfg.Budget, cfg.EvalEvery = 20, 0.5
		r := sim()
		first, last := r.Curve[0].Objective, r.Curve[len(r.Curve)-1].Objective
		t.Logf("sync=%v: objective %.4f -> %.4f in %d steps", sync, first, last, r.Steps)
		if !(last < 0.5*first) {
			t.Errorf("sync=%v: objective %.4f -> %.4f", sync, first, last)
		}
		cfg.Target = (first + last) / 2
		if r := sim(); !r.Reached || r.Seconds >= 20 {
			t.Errorf("sync=%v: target %.4f not reached early: %+v", sync, cfg.Target, r.Curve[len(r.Curve)-1])
		}
	}
}

// A cancelled simulation stops at its next evaluation with the context's
// error (Ctrl-C on experiment fig4).
func TestSimulateCancelled(t *testing.T) {
	cfg, _ := simData(t, 2)
	cfg.StepCost = func(int) float64 { return 0.01 }
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r, err := Simulate(ctx, smallData(t, 2), *cfg)
	if !errors.Is(err, context.Canceled) || r == nil || r.Steps != 0 {
		t.Errorf("cancelled: %v, result %+v", err, r)
	}
}

// Geometric evaluation spacing (EvalGrowth): consecutive evaluations are
// max(EvalEvery, EvalGrowth*t) apart, so a time to target is known to a
// relative EvalGrowth at every scale; the objective at each point is the
// same as with even spacing at that time (evaluation changes nothing).
func TestSimulateEvalGrowth(t *testing.T) {
	if testing.Short() {
		t.Skip("short: a long simulation")
	}
	cfg, sim := simData(t, 2)
	cfg.StepCost = func(m int) float64 { return 0.001 }
	cfg.Budget, cfg.EvalEvery, cfg.EvalGrowth = 20, 0.01, 0.05
	r := sim()
	if len(r.Curve) < 10 {
		t.Fatalf("%d evaluations", len(r.Curve))
	}
	for i := 1; i < len(r.Curve); i++ {
		prev, got := r.Curve[i-1].Seconds, r.Curve[i].Seconds-r.Curve[i-1].Seconds
		if want := max(cfg.EvalEvery, cfg.EvalGrowth*prev); math.Abs(got-want) > 1e-9 {
			t.Fatalf("evaluation %d at %.4f s: %.5f s after the one before, want %.5f", i, r.Curve[i].Seconds, got, want)
		}
	}
	// 0.01 apart up to 0.2 s (20), then 5% apart up to 20 s (log(100)/log(1.05) = 95).
	if n := len(r.Curve); n < 100 || n > 130 {
		t.Errorf("%d evaluations, want about 115", n)
	}
	// The same run evaluated evenly passes the same objective at a shared time.
	geo := r.Curve
	cfg.EvalGrowth = 0
	even := sim().Curve
	for _, p := range geo {
		for _, q := range even {
			if math.Abs(p.Seconds-q.Seconds) < 1e-9 && p.Objective != q.Objective {
				t.Errorf("objective at %.2f s: %v with geometric spacing, %v with even", p.Seconds, p.Objective, q.Objective)
			}
		}
	}
}

// MaxSteps ends a run at that many answered requests, with an evaluation
// there, however far off the next scheduled evaluation is (it was checked
// only at evaluations: a cap of 10 ran to the next one, 37,554 requests
// later, in a long-budget MNIST run).
func TestSimulateMaxSteps(t *testing.T) {
	for _, sync := range []bool{false, true} {
		t.Run(map[bool]string{false: "async", true: "sync"}[sync], func(t *testing.T) {
			cfg, sim := simData(t, 2)
			cfg.Sync = sync
			cfg.StepCost = func(m int) float64 { return 0.001 }
			cfg.Budget, cfg.EvalEvery, cfg.MaxSteps = 1e6, 1e5, 50
			r := sim()
			if r.Steps < 50 || r.Steps > 50+int64(cfg.Parties) {
				t.Fatalf("ended at %d answered requests, want 50 (a round more at most)", r.Steps)
			}
			last := r.Curve[len(r.Curve)-1]
			if last.Steps != r.Steps || last.Seconds != r.Seconds || last.Seconds > 1 {
				t.Fatalf("last evaluation %+v, result at %d requests %.3f s", last, r.Steps, r.Seconds)
			}
		})
	}
}

// A CFS quota runs work at full speed until the period's budget is
// spent, then waits for the next period; over many periods a busy party
// gets share of a processor, an idle one its bursts at full speed.
func TestCFSQuota(t *testing.T) {
	const period = 0.010
	for _, tc := range []struct {
		name      string
		share     float64
		start     float64
		cpu       float64
		want      float64
		usedFirst float64 // CPU already spent in the first period
	}{
		{"within the budget: full speed", 0.25, 0.001, 0.0005, 0.0015, 0},
		{"budget spent: next period", 0.25, 0.001, 0.003, 0.0105, 0},
		{"three periods", 0.25, 0, 0.0075, 0.0225, 0},
		{"budget already spent", 0.25, 0.004, 0.001, 0.011, 0.0025},
		{"period ends before the budget", 0.5, 0.008, 0.004, 0.012, 0},
	} {
		c := &cfsQuota{share: tc.share, period: period, cur: 0, used: tc.usedFirst}
		if got := c.run(tc.start, tc.cpu); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%s: ends at %.6f, want %.6f", tc.name, got, tc.want)
		}
	}
	// A party always busy gets its share: 1,000 steps of 0.3 ms at a
	// quarter of a processor take 1.2 s.
	c := &cfsQuota{share: 0.25, period: period, cur: -1}
	t1 := 0.0
	for range 1000 {
		t1 = c.run(t1, 0.0003)
	}
	if math.Abs(t1-1.2) > period {
		t.Errorf("1,000 steps of 0.3 ms at share 0.25 end at %.4f s, want 1.2 s", t1)
	}
}
