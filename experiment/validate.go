package experiment

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/asyrevel/asyrevel/experiment/sim"

	"github.com/asyrevel/asyrevel/aggregator"
	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/run"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/zoo"
)

// ValidateConfig configures the real-time validation of Figure 4's
// simulation: the parties run as separate processes, each in a CPU cgroup
// whose quota gives it Share of a processor (the straggler, party q,
// Share/StragglerFactor), the aggregator and the broker in this process;
// the answered requests per second they reach are compared with what the
// simulation predicts at the same settings (each party's measured step
// over its share, the aggregator's measured reply, the measured latency).
type ValidateConfig struct {
	// Fig4 gives the set (its first), the batch and step sizes, the
	// straggler factor, the seed, the data's location and the log.
	Fig4 Fig4Config
	Qs   []int
	// Share is the processor share of a party (its CFS quota over its
	// period); Period the CFS period.
	Share  float64
	Period time.Duration
	// Duration is the training time of a run.
	Duration time.Duration
	// Exe is the asyrevel binary that runs the parties ("party" command).
	Exe string
	// Calibrate is the length of the run, at each q, that measures each
	// party process's CPU a step without quotas, the simulation's party
	// cost; default DefaultCalibrate.
	Calibrate time.Duration
	// AggShare is the processor share of this process's own cgroup, the
	// aggregator's and the broker's, during the runs; default 1. In a
	// cgroup of its own it competes with the machine's other work as the
	// parties' groups do (one group each, whatever its nice value).
	AggShare float64
}

// DefaultCalibrate is the default ValidateConfig.Calibrate.
const DefaultCalibrate = 8 * time.Second

// DefaultPeriod is the CFS period of the parties' cgroups: short, so that
// a quota is spread evenly over a step rather than spent in bursts.
const DefaultPeriod = 10 * time.Millisecond

// ValidateRow is one configuration: the real pipeline's rate against the
// simulation's.
type ValidateRow struct {
	Set       string
	Q         int
	Mode      string
	Share     float64 // a party's processor share (the straggler's is Share/factor)
	RealSteps int64   // answered requests
	RealSecs  float64 // training time
	SimSteps  int64   // answered requests simulated in RealSecs, the party costs the calibration's
	Error     float64 // real rate over simulated rate, minus 1
	// SimStepsMicro and ErrorMicro are the same with the cost model's
	// party costs (the kernel and the codec on a thread of their own,
	// fig4_costs.csv's), which Figure 4 used before the calibration.
	SimStepsMicro int64
	ErrorMicro    float64
	// SimStepsFluid and ErrorFluid are the calibrated costs with each
	// party's step its CPU over its share (no CFS periods), Figure 4's
	// way of applying a share.
	SimStepsFluid int64
	ErrorFluid    float64
	// CPU seconds a step, all parties together (start-up excluded): the
	// cost model's (MicroStepCPU), the calibration run's without quotas
	// (CalStepCPU, what the simulation uses), and this run's
	// (RunStepCPU); AggStepCPU is this process's (the aggregator and the
	// broker) a step in this run.
	MicroStepCPU, CalStepCPU, RunStepCPU, AggStepCPU float64
	// CalAggCPU is the calibration run's aggregator and broker CPU a
	// step, the simulation's aggregator cost; Load the machine's load
	// average (1 min) when the run started.
	CalAggCPU, Load float64
	PartyCPU        float64 // CPU seconds the party processes used, all of them
	QuotaCPU        float64 // CPU seconds their quotas allowed over their lifetimes
	Throttled       int64   // periods in which a party was throttled (all parties)
	Periods         int64   // periods counted (all parties)
	PartySteps      []int64 // the real run's steps of each party (its replies in the stream)
}

// Validate runs the validation. It returns ErrNoCgroup (wrapped) when this
// machine gives no CPU cgroup.
func Validate(ctx context.Context, cfg ValidateConfig) ([]ValidateRow, []Fig4Cost, error) {
	if len(cfg.Fig4.Sets) == 0 || cfg.Exe == "" || !(cfg.Share > 0) || cfg.Duration <= 0 {
		return nil, nil, fmt.Errorf("%w: validate: sets %d, binary %q, share %g, duration %v", run.ErrConfig, len(cfg.Fig4.Sets), cfg.Exe, cfg.Share, cfg.Duration)
	}
	if cfg.Period == 0 {
		cfg.Period = DefaultPeriod
	}
	if cfg.Calibrate <= 0 {
		cfg.Calibrate = DefaultCalibrate
	}
	if !(cfg.AggShare > 0) {
		cfg.AggShare = 1
	}
	// The cgroups first: without them there is nothing to validate.
	probe, err := newCPUGroup(fmt.Sprintf("asyrevel-probe-%d", os.Getpid()), 0.5, cfg.Period)
	if err != nil {
		return nil, nil, err
	}
	probe.remove()
	leave, err := enterCPUGroup(fmt.Sprintf("asyrevel-validate-agg-%d", os.Getpid()), cfg.AggShare, cfg.Period)
	if err != nil {
		return nil, nil, err
	}
	defer leave()
	set := cfg.Fig4.Sets[0]
	if set.Network || set.Preset != "" {
		return nil, nil, fmt.Errorf("%w: validate runs on a LIBSVM set (a9a, w8a), not %s", run.ErrConfig, set.Name)
	}
	train, err := cfg.Fig4.Locate(set.Train)
	if err != nil {
		return nil, nil, err
	}
	test, err := cfg.Fig4.Locate(set.Test)
	if err != nil {
		return nil, nil, err
	}
	cache := newLoaded(cfg.Fig4.Locate)
	var rows []ValidateRow
	var costs []Fig4Cost
	for _, q := range cfg.Qs {
		cost, err := fig4Costs(ctx, cfg.Fig4, cache, set, q)
		if err != nil {
			return rows, costs, err
		}
		costs = append(costs, cost)
		cal, err := calibrate(ctx, cfg, cache, set, train, test, q)
		if err != nil {
			return rows, costs, fmt.Errorf("validate %s q=%d: calibration: %w", set.Name, q, err)
		}
		cfg.Fig4.Log.Info().Int("q", q).Ints64("steps", cal.steps).Str("party_cpu_ms_a_step", fmtF(1e3*cal.meanStepCPU(), 3)).Msg("validate: calibration")
		for _, mode := range Fig4Modes {
			r, err := validateOne(ctx, cfg, cache, set, train, test, q, mode.Mode, mode.Algo, cost, cal)
			if err != nil {
				return rows, costs, fmt.Errorf("validate %s q=%d %s: %w", set.Name, q, mode.Mode, err)
			}
			cfg.Fig4.Log.Info().Int("q", q).Str("mode", r.Mode).Int64("real_steps", r.RealSteps).Int64("sim_steps", r.SimSteps).
				Str("error", fmtF(r.Error, 3)).Str("party_cpu", fmtF(r.PartyCPU, 2)).Str("quota_cpu", fmtF(r.QuotaCPU, 2)).Msg("validate")
			rows = append(rows, r)
		}
	}
	return rows, costs, nil
}

// realRun is what one run of the real pipeline measured.
type realRun struct {
	sum       *run.Summary
	steps     []int64   // replies to each party in the stream: its steps
	cpu       []float64 // each party process's CPU seconds from the first evaluation to the last (start-up excluded)
	trainSecs float64   // wall seconds between those evaluations
	aggCPU    float64   // this process's CPU seconds between them (the aggregator and the broker)
	partyCPU  float64   // the party processes' whole CPU seconds (start-up included)
	load      float64   // the machine's load average (1 min) at the start
	quotaCPU  float64   // CPU seconds their quotas allowed over their lifetimes (0 without quotas)
	throttled int64     // periods in which a party was throttled (all parties)
	periods   int64     // periods counted (all parties)
}

// aggStepCPU is this process's CPU seconds (the aggregator's and the
// broker's) a step over the training.
func (r *realRun) aggStepCPU() float64 {
	var n int64
	for _, v := range r.steps {
		n += v
	}
	if n == 0 {
		return math.NaN()
	}
	return r.aggCPU / float64(n)
}

// stepCPU is party m's CPU seconds a step over the training (m from 1).
func (r *realRun) stepCPU(m int) float64 {
	if r.steps[m-1] == 0 {
		return math.NaN()
	}
	return r.cpu[m-1] / float64(r.steps[m-1])
}

// meanStepCPU is the parties' CPU seconds over the training a step, all
// parties together.
func (r *realRun) meanStepCPU() float64 {
	var cpu float64
	var n int64
	for m := range r.cpu {
		cpu += r.cpu[m]
		n += r.steps[m]
	}
	if n == 0 {
		return math.NaN()
	}
	return cpu / float64(n)
}

// runReal runs the real pipeline for d: the aggregator and an embedded
// broker here, party m an `asyrevel party` process in a cgroup of its
// own with shares[m-1] of a processor (shares nil: no cgroups, each party
// takes what the machine gives it). Each party's CPU is read from
// /proc at the first evaluation (after its start-up) and at the last,
// its steps from the stream (its replies).
func runReal(ctx context.Context, cfg ValidateConfig, train, test string, q int, mode, algo string, tc *run.Config, shares []float64, d time.Duration) (*realRun, error) {
	dir, err := os.MkdirTemp("", "asyrevel-validate-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	srv, err := broker.StartServer(ctx, broker.ServerConfig{Dir: filepath.Join(dir, "store")})
	if err != nil {
		return nil, err
	}
	defer srv.Shutdown()
	runName := fmt.Sprintf("validate-%s-q%d-%d", mode, q, time.Now().UnixNano()%1e9)
	rr := &realRun{steps: make([]int64, q), cpu: make([]float64, q), load: loadAverage()}
	var (
		mu         sync.Mutex
		pids       = make([]int, q)
		first      []time.Duration // the parties' CPU, then this process's, at the first evaluation
		last       []time.Duration // and at the latest
		firstT     time.Time
		lastT      time.Time
		sampleErrs int
	)
	sample := func() []time.Duration {
		v := make([]time.Duration, q+1)
		for m, pid := range pids {
			c, err := processCPU(pid)
			if err != nil {
				sampleErrs++
			}
			v[m] = c
		}
		v[q] = selfCPU()
		return v
	}
	onPoint := func(aggregator.Point) {
		mu.Lock()
		defer mu.Unlock()
		if first == nil {
			first, firstT = sample(), time.Now()
			return
		}
		last, lastT = sample(), time.Now()
	}
	ac := run.New(func(c *run.Config) {
		c.Data = train
		c.Test = test
		c.Parties = q
		c.Algo = algo
		c.Model = "linear"
		c.Batch = tc.Batch
		c.Window = 1
		c.LR = tc.LR
		c.LRDecay = tc.LRDecay
		c.HeadLR = tc.HeadLR
		c.Seed = cfg.Fig4.Seed
		c.NATS = srv.URL()
		c.Run = runName
		c.Duration = d
		c.EvalEvery = d
	})
	args := func(m int) []string {
		a := []string{"party", "--nats", srv.URL(), "--run", runName, "--id", strconv.Itoa(m), "--parties", strconv.Itoa(q),
			"--data", train, "--test", test, "--algo", algo, "--batch", strconv.Itoa(tc.Batch), "--window", "1",
			"--lr", strconv.FormatFloat(tc.LR, 'g', -1, 64), "--seed", strconv.FormatUint(cfg.Fig4.Seed, 10), "--log", "warn"}
		if tc.LRDecay != 0 {
			a = append(a, "--lr-decay", strconv.FormatFloat(tc.LRDecay, 'g', -1, 64))
		}
		return a
	}
	rctx, cancel := context.WithTimeout(ctx, d+5*time.Minute)
	defer cancel()
	var aggErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		rr.sum, aggErr = run.Aggregate(rctx, ac, run.Hooks{OnPoint: onPoint})
	}()
	groups := make([]*cpuGroup, q)
	cmds := make([]*exec.Cmd, q)
	outs := make([]bytes.Buffer, q)
	defer func() {
		for _, c := range cmds {
			if c != nil && c.Process != nil && c.ProcessState == nil {
				_ = c.Process.Kill() // only our own children, by their process
				_ = c.Wait()
			}
		}
		for _, g := range groups {
			if g != nil {
				g.remove()
			}
		}
	}()
	fail := func(err error) (*realRun, error) {
		cancel()
		wg.Wait()
		return nil, err
	}
	started := time.Now()
	for m := 1; m <= q; m++ {
		if shares != nil {
			g, err := newCPUGroup(fmt.Sprintf("asyrevel-%s-p%d", runName, m), shares[m-1], cfg.Period)
			if err != nil {
				return fail(err)
			}
			groups[m-1] = g
		}
		c := exec.Command(cfg.Exe, args(m)...)
		c.Stdout, c.Stderr = &outs[m-1], &outs[m-1]
		if err := c.Start(); err != nil {
			return fail(err)
		}
		cmds[m-1] = c
		mu.Lock()
		pids[m-1] = c.Process.Pid
		mu.Unlock()
		if groups[m-1] != nil {
			if err := groups[m-1].add(c.Process.Pid); err != nil {
				return fail(err)
			}
		}
	}
	wg.Wait()
	if aggErr != nil {
		var b strings.Builder
		for m := range outs {
			fmt.Fprintf(&b, "\nparty %d: %s", m+1, strings.TrimSpace(outs[m].String()))
		}
		return nil, fmt.Errorf("%w%s", aggErr, b.String())
	}
	// Each party's steps: its replies in the stream.
	bus, err := broker.ConnectJetStream(ctx, broker.JetStreamConfig{Server: srv, Run: runName, Name: "validate"})
	if err != nil {
		return nil, err
	}
	for m := 1; m <= q; m++ {
		n, err := bus.Count(ctx, schemas.Subject(runName, schemas.KindReply, m))
		if err != nil {
			bus.Close()
			return nil, err
		}
		rr.steps[m-1] = int64(n)
	}
	bus.Close()
	for m, c := range cmds {
		done := make(chan error, 1)
		go func() { done <- c.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				return nil, fmt.Errorf("party %d: %w: %s", m+1, err, strings.TrimSpace(outs[m].String()))
			}
		case <-time.After(30 * time.Second):
			_ = c.Process.Kill()
			<-done
			return nil, fmt.Errorf("party %d did not stop within 30 s of the aggregator", m+1)
		}
		life := time.Since(started).Seconds()
		rr.partyCPU += (c.ProcessState.UserTime() + c.ProcessState.SystemTime()).Seconds()
		if groups[m] != nil {
			rr.quotaCPU += shares[m] * life
			th, per := groups[m].throttled()
			rr.throttled += th
			rr.periods += per
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if first == nil || last == nil || sampleErrs > 0 {
		return nil, fmt.Errorf("the parties' CPU could not be read at the evaluations (%d errors)", sampleErrs)
	}
	for m := range q {
		rr.cpu[m] = (last[m] - first[m]).Seconds()
	}
	rr.aggCPU, rr.trainSecs = (last[q] - first[q]).Seconds(), lastT.Sub(firstT).Seconds()
	if rr.sum.TrainSeconds <= 0 || rr.sum.Steps == 0 {
		return nil, errors.New("the real run made no step")
	}
	return rr, nil
}

// calibrate measures each party's CPU a step in the real pipeline at q,
// the parties without quotas (asynchronous, cfg.Calibrate long): the
// simulation's party cost, measured apart from the runs it predicts.
func calibrate(ctx context.Context, cfg ValidateConfig, cache *loaded, set Set, train, test string, q int) (*realRun, error) {
	data, err := cache.split(set, q)
	if err != nil {
		return nil, err
	}
	tc, err := fig4Config(cfg.Fig4, set, data, q, "asyrevel-gau")
	if err != nil {
		return nil, err
	}
	return runReal(ctx, cfg, train, test, q, "cal", "asyrevel-gau", &tc, nil, cfg.Calibrate)
}

func validateOne(ctx context.Context, cfg ValidateConfig, cache *loaded, set Set, train, test string, q int, mode, algo string, cost Fig4Cost, cal *realRun) (ValidateRow, error) {
	row := ValidateRow{Set: set.Name, Q: q, Mode: mode, Share: cfg.Share}
	data, err := cache.split(set, q)
	if err != nil {
		return row, err
	}
	tc, err := fig4Config(cfg.Fig4, set, data, q, algo)
	if err != nil {
		return row, err
	}
	shares := make([]float64, q)
	for m := range shares {
		shares[m] = cfg.Share
		if m == q-1 && q > 1 && cfg.Fig4.StragglerFactor > 1 {
			shares[m] = cfg.Share / cfg.Fig4.StragglerFactor
		}
	}
	rr, err := runReal(ctx, cfg, train, test, q, mode, algo, &tc, shares, cfg.Duration)
	if err != nil {
		return row, err
	}
	sum := rr.sum
	row.RealSteps, row.RealSecs, row.PartySteps = sum.Steps, sum.TrainSeconds, rr.steps
	row.PartyCPU, row.QuotaCPU, row.Throttled, row.Periods = rr.partyCPU, rr.quotaCPU, rr.throttled, rr.periods
	row.RunStepCPU, row.CalStepCPU = rr.meanStepCPU(), cal.meanStepCPU()
	row.AggStepCPU, row.CalAggCPU, row.Load = rr.aggStepCPU(), cal.aggStepCPU(), rr.load
	var micro float64
	for _, p := range cost.Party {
		micro += p.Step.Median
	}
	row.MicroStepCPU = micro / float64(q)
	// The simulation at the same settings, for as long as the real run
	// trained: each party's step its CPU cost over its share, the cost
	// the calibration run measured (and, for comparison, the cost model's
	// kernel-and-codec one).
	head, _ := run.NewHead(&tc, data.Classes)
	locals := make([]model.Local, q+1)
	for m := 1; m <= q; m++ {
		locals[m], _, _ = run.NewLocal(ctx, &tc, m, data.Blocks[m-1].Len(), data.Classes)
	}
	sched := tc.Schedule(data.NTrain)
	// cfs: the parties' steps under the CFS quota (full speed until the
	// period's budget is spent); otherwise each step is its CPU over the
	// share, as Figure 4 simulates.
	simulate := func(step func(m int) float64, agg float64, cfs bool) (int64, error) {
		sc := sim.SimConfig{Parties: q, Sync: mode == "sync", Dist: zoo.Gaussian, Batch: tc.Batch, LR: sched,
			HeadLR: zoo.Schedule{Eta0: tc.HeadLR, T0: sched.T0 * float64(q)}, Mu: tc.Mu, Lambda: tc.Lambda, Reg: model.Nonconvex{}, Seed: cfg.Fig4.Seed,
			StepCost: func(m int) float64 { return step(m) / shares[m-1] },
			Latency:  cost.Latency.Median, AggCost: agg, Budget: row.RealSecs, EvalEvery: row.RealSecs,
			NewLocal: func(m, d int) model.Local { return locals[m] }, Head: head}
		if cfs {
			sc.StepCost = step
			sc.Quota = func(m int) (float64, float64) { return shares[m-1], cfg.Period.Seconds() }
		}
		res, err := sim.Simulate(ctx, data, sc)
		if err != nil {
			return 0, err
		}
		return res.Steps, nil
	}
	if row.SimSteps, err = simulate(cal.stepCPU, cal.aggStepCPU()/cfg.AggShare, true); err != nil {
		return row, err
	}
	if row.SimStepsFluid, err = simulate(cal.stepCPU, cal.aggStepCPU()/cfg.AggShare, false); err != nil {
		return row, err
	}
	if row.SimStepsMicro, err = simulate(func(m int) float64 { return cost.Party[m-1].Step.Median }, cost.Agg.Median, false); err != nil {
		return row, err
	}
	row.Error, row.ErrorMicro, row.ErrorFluid = math.NaN(), math.NaN(), math.NaN()
	if row.SimStepsFluid > 0 {
		row.ErrorFluid = float64(row.RealSteps)/float64(row.SimStepsFluid) - 1
	}
	if row.SimSteps > 0 {
		row.Error = float64(row.RealSteps)/float64(row.SimSteps) - 1
	}
	if row.SimStepsMicro > 0 {
		row.ErrorMicro = float64(row.RealSteps)/float64(row.SimStepsMicro) - 1
	}
	return row, nil
}

// WriteValidate writes dir/validate.csv.
func WriteValidate(dir string, rows []ValidateRow) error {
	var recs [][]string
	for _, r := range rows {
		recs = append(recs, []string{r.Set, strconv.Itoa(r.Q), r.Mode, fmtF(r.Share, 3), strconv.FormatInt(r.RealSteps, 10), fmtF(r.RealSecs, 2),
			strconv.FormatInt(r.SimSteps, 10), fmtF(r.Error, 4), fmtF(r.PartyCPU, 2), fmtF(r.QuotaCPU, 2),
			strconv.FormatInt(r.Throttled, 10), strconv.FormatInt(r.Periods, 10),
			strconv.FormatInt(r.SimStepsMicro, 10), fmtF(r.ErrorMicro, 4),
			fmtF(1e3*r.MicroStepCPU, 4), fmtF(1e3*r.CalStepCPU, 4), fmtF(1e3*r.RunStepCPU, 4), fmtF(1e3*r.AggStepCPU, 4),
			fmtF(1e3*r.CalAggCPU, 4), fmtF(r.Load, 2), strconv.FormatInt(r.SimStepsFluid, 10), fmtF(r.ErrorFluid, 4)})
	}
	return run.WriteCSV(filepath.Join(dir, "validate.csv"), []string{"set", "parties", "mode", "party_share", "real_steps", "real_seconds",
		"sim_steps", "error", "party_cpu_seconds", "quota_cpu_seconds", "throttled_periods", "periods",
		"sim_steps_cost_model", "error_cost_model", "cost_model_step_ms", "calibrated_step_ms", "run_step_ms", "agg_broker_step_ms",
		"calibrated_agg_broker_step_ms", "load_average", "sim_steps_fluid", "error_fluid"}, recs)
}
