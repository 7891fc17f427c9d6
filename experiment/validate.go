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

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/run"
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
}

// DefaultPeriod is the CFS period of the parties' cgroups: short, so that
// a quota is spread evenly over a step rather than spent in bursts.
const DefaultPeriod = 10 * time.Millisecond

// ValidateRow is one configuration: the real pipeline's rate against the
// simulation's.
type ValidateRow struct {
	Set        string
	Q          int
	Mode       string
	Share      float64 // a party's processor share (the straggler's is Share/factor)
	RealSteps  int64   // answered requests
	RealSecs   float64 // training time
	SimSteps   int64   // answered requests simulated in RealSecs
	Error      float64 // real rate over simulated rate, minus 1
	PartyCPU   float64 // CPU seconds the party processes used, all of them
	QuotaCPU   float64 // CPU seconds their quotas allowed over their lifetimes
	Throttled  int64   // periods in which a party was throttled (all parties)
	Periods    int64   // periods counted (all parties)
	PartySteps []int64 // the real run's updates of each party
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
	// The cgroups first: without them there is nothing to validate.
	probe, err := newCPUGroup(fmt.Sprintf("asyrevel-probe-%d", os.Getpid()), 0.5, cfg.Period)
	if err != nil {
		return nil, nil, err
	}
	probe.remove()
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
		for _, mode := range Fig4Modes {
			r, err := validateOne(ctx, cfg, cache, set, train, test, q, mode.Mode, mode.Algo, cost)
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

func validateOne(ctx context.Context, cfg ValidateConfig, cache *loaded, set Set, train, test string, q int, mode, algo string, cost Fig4Cost) (ValidateRow, error) {
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
	dir, err := os.MkdirTemp("", "asyrevel-validate-")
	if err != nil {
		return row, err
	}
	defer os.RemoveAll(dir)
	srv, err := broker.StartServer(ctx, broker.ServerConfig{Dir: filepath.Join(dir, "store")})
	if err != nil {
		return row, err
	}
	defer srv.Shutdown()
	runName := fmt.Sprintf("validate-%s-q%d-%d", mode, q, time.Now().UnixNano()%1e9)
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
		c.Duration = cfg.Duration
		c.EvalEvery = cfg.Duration
		c.Log = zerolog.Nop()
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
	rctx, cancel := context.WithTimeout(ctx, cfg.Duration+5*time.Minute)
	defer cancel()
	var sum *run.Summary
	var aggErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sum, aggErr = run.Aggregate(rctx, ac)
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
	started := time.Now()
	for m := 1; m <= q; m++ {
		g, err := newCPUGroup(fmt.Sprintf("asyrevel-%s-p%d", runName, m), shares[m-1], cfg.Period)
		if err != nil {
			cancel()
			wg.Wait()
			return row, err
		}
		groups[m-1] = g
		c := exec.Command(cfg.Exe, args(m)...)
		c.Stdout, c.Stderr = &outs[m-1], &outs[m-1]
		if err := c.Start(); err != nil {
			cancel()
			wg.Wait()
			return row, err
		}
		cmds[m-1] = c
		if err := g.add(c.Process.Pid); err != nil {
			cancel()
			wg.Wait()
			return row, err
		}
	}
	wg.Wait()
	if aggErr != nil {
		var b strings.Builder
		for m := range outs {
			fmt.Fprintf(&b, "\nparty %d: %s", m+1, strings.TrimSpace(outs[m].String()))
		}
		return row, fmt.Errorf("%w%s", aggErr, b.String())
	}
	for m, c := range cmds {
		done := make(chan error, 1)
		go func() { done <- c.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				return row, fmt.Errorf("party %d: %w: %s", m+1, err, strings.TrimSpace(outs[m].String()))
			}
		case <-time.After(30 * time.Second):
			_ = c.Process.Kill()
			<-done
			return row, fmt.Errorf("party %d did not stop within 30 s of the aggregator", m+1)
		}
		life := time.Since(started).Seconds()
		row.PartyCPU += (c.ProcessState.UserTime() + c.ProcessState.SystemTime()).Seconds()
		row.QuotaCPU += shares[m] * life
		th, per := groups[m].throttled()
		row.Throttled += th
		row.Periods += per
	}
	row.RealSteps, row.RealSecs, row.PartySteps = sum.Steps, sum.TrainSeconds, sum.PartySteps
	if row.RealSecs <= 0 || row.RealSteps == 0 {
		return row, errors.New("the real run made no step")
	}
	// The simulation at the same settings, for as long as the real run
	// trained: each party's step is its measured CPU cost over its share.
	head, _ := run.NewHead(&tc, data.Classes)
	locals := make([]model.Local, q+1)
	for m := 1; m <= q; m++ {
		locals[m], _, _ = run.NewLocal(ctx, &tc, m, data.Blocks[m-1].Len(), data.Classes)
	}
	sched := tc.Schedule(data.NTrain)
	res, err := Simulate(ctx, data, SimConfig{Parties: q, Sync: mode == "sync", Dist: zoo.Gaussian, Batch: tc.Batch, LR: sched,
		HeadLR: zoo.Schedule{Eta0: tc.HeadLR, T0: sched.T0 * float64(q)}, Mu: tc.Mu, Lambda: tc.Lambda, Reg: model.Nonconvex{}, Seed: cfg.Fig4.Seed,
		StepCost: func(m int) float64 { return cost.Party[m-1].Step.Median / shares[m-1] },
		Latency:  cost.Latency.Median, AggCost: cost.Agg.Median, Budget: row.RealSecs, EvalEvery: row.RealSecs,
		NewLocal: func(m, d int) model.Local { return locals[m] }, Head: head})
	if err != nil {
		return row, err
	}
	row.SimSteps = res.Steps
	row.Error = math.NaN()
	if res.Steps > 0 {
		row.Error = float64(row.RealSteps)/float64(res.Steps) - 1
	}
	return row, nil
}

// WriteValidate writes dir/validate.csv.
func WriteValidate(dir string, rows []ValidateRow) error {
	var recs [][]string
	for _, r := range rows {
		recs = append(recs, []string{r.Set, strconv.Itoa(r.Q), r.Mode, fmtF(r.Share, 3), strconv.FormatInt(r.RealSteps, 10), fmtF(r.RealSecs, 2),
			strconv.FormatInt(r.SimSteps, 10), fmtF(r.Error, 4), fmtF(r.PartyCPU, 2), fmtF(r.QuotaCPU, 2),
			strconv.FormatInt(r.Throttled, 10), strconv.FormatInt(r.Periods, 10)})
	}
	return run.WriteCSV(filepath.Join(dir, "validate.csv"), []string{"set", "parties", "mode", "party_share", "real_steps", "real_seconds",
		"sim_steps", "error", "party_cpu_seconds", "quota_cpu_seconds", "throttled_periods", "periods"}, recs)
}

// ValidateBody is the results part of the validate section.
func ValidateBody(rows []ValidateRow, costs []Fig4Cost, cfg ValidateConfig) string {
	if cfg.Period == 0 {
		cfg.Period = DefaultPeriod
	}
	var b strings.Builder
	var tab [][]string
	for _, r := range rows {
		used := "-"
		if r.QuotaCPU > 0 {
			used = fmtF(100*r.PartyCPU/r.QuotaCPU, 0) + "%"
		}
		thr := "-"
		if r.Periods > 0 {
			thr = fmtF(100*float64(r.Throttled)/float64(r.Periods), 0) + "%"
		}
		// Every answered request is one party's step.
		steps := r.RealSteps
		perStep, measured := "-", "-"
		if steps > 0 {
			perStep = fmtF(1e3*r.PartyCPU/float64(steps), 3)
		}
		for _, c := range costs {
			if c.Set == r.Set && c.Q == r.Q {
				var sum float64
				for _, p := range c.Party {
					sum += p.Step.Median
				}
				measured = fmtF(1e3*sum/float64(len(c.Party)), 3)
			}
		}
		tab = append(tab, []string{r.Set, strconv.Itoa(r.Q), r.Mode, fmtF(r.RealSecs, 1), fmtF(float64(r.RealSteps)/r.RealSecs, 0),
			fmtF(float64(r.SimSteps)/r.RealSecs, 0), fmt.Sprintf("%+.0f%%", 100*r.Error), used, thr, perStep, measured})
	}
	b.WriteString(mdTable([]string{"set", "q", "mode", "trained (s)", "real requests/s", "simulated requests/s", "error",
		"party CPU used of its quota", "periods throttled", "real party CPU a step (ms, start-up included)", "measured party step (ms, mean)"}, tab))
	fmt.Fprintf(&b, "\nEach party is a separate `asyrevel party` process in a CPU cgroup (cgroup v1 CFS quota: %g of a processor "+
		"every %v; the straggler, party q, %g/%g); the aggregator and an embedded JetStream broker run in the experiment's "+
		"process, over TCP loopback, without a quota. The simulation (`experiment.Simulate`) runs the same configuration "+
		"for as long as the real run trained, each party's step its measured CPU cost (`fig4_costs.csv`'s way, measured "+
		"again here) over its share, the aggregator's reply and the latency as measured. The error is the real rate of "+
		"answered requests over the simulated one, minus 1: the simulation is valid at a q only as far as that error; "+
		"where a party used much less CPU than its quota, something other than its quota (the aggregator, the broker, the "+
		"other jobs on this machine) held it back, and the simulation is not validated there. The last two columns compare a "+
		"party process's whole CPU a step (its messaging through the NATS client, decoding, garbage collection, and its "+
		"start-up: loading its columns) with the step the cost model measures (the kernel's arithmetic and the codec).\n",
		cfg.Share, cfg.Period, cfg.Share, cfg.Fig4.StragglerFactor)
	return b.String()
}
