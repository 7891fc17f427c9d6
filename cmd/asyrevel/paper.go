package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/experiment"
	"github.com/asyrevel/asyrevel/run"
)

// The paper's experiments: fig3, table3, table4, fig4 and all.

var paperSynopsis = map[string]string{
	"fig3": "asyrevel experiment fig3 [--quick] [--sets a9a,...] [--duration 20s] [--net-duration 2m]\n\n" +
		"Training loss against wall time for AsyREVEL-Gau/-Uni, SynREVEL-Gau/-Uni and TIG through the\n" +
		"pipeline (embedded JetStream), 8 parties, the last a straggler: fig3.csv, fig3.png, REPORT.md.",
	"table3": "asyrevel experiment table3 [--quick] [--sets a9a,mnist] [--steps 20000]\n\n" +
		"What one round of the zeroth-order algorithm and of TIG puts on the broker: payload and\n" +
		"bytes on the connections per round, round-trip time: table3.csv, REPORT.md.",
	"table4": "asyrevel experiment table4 [--quick] [--trials 10] [--duration 20s] [--net-trials 3] [--net-duration 14m]\n\n" +
		"Test accuracy over --trials seeds of AsyREVEL-Gau and -Uni (8 parties) against NonF (all\n" +
		"features at one party), with the centralised reference: table4.csv, REPORT.md.",
	"fig4": "asyrevel experiment fig4 [--quick] [--sets a9a,w8a,mnist] [--qs 1,2,4,8,16]\n\n" +
		"Speed-up in time to f - f* <= --suboptimality with q parties, AsyREVEL-Gau against SynREVEL-Gau\n" +
		"with a straggler, simulated on q machines in virtual time, checked against the real pipeline:\n" +
		"fig4.csv, fig4_check.csv, fig4.png, REPORT.md. A full run takes about an hour on a9a here,\n" +
		"hours on w8a and MNIST; an interrupt (Ctrl-C) writes the sets whose simulations all finished.",
	"validate": "asyrevel experiment validate [--sets a9a] [--qs 1,2] [--share 0.25] [--duration 30s]\n\n" +
		"Figure 4's simulation against the real pipeline with the parties as separate processes, each\n" +
		"limited to --share of a processor by a CPU cgroup (the straggler to share/1.6): answered requests\n" +
		"a second, real against simulated: validate.csv, REPORT.md. Needs the cgroup v1 cpu controller\n" +
		"writable (root); says so and exits otherwise.",
}

// paperFlags are an experiment's flags.
type paperFlags struct {
	exp             *expFlags
	sets            *string
	duration        *time.Duration
	netDuration     *time.Duration
	straggler       *float64
	batch, window   *int
	steps, steps0   *int64
	trials          *int
	t4steps         *int64
	netTrials       *int
	qs, checkQs     *string
	subopt, netLoss *float64
	latency         *time.Duration
	budget          *time.Duration
	maxSteps        *int64
	parallel        *int
	fromTrials      *bool
	seeds           *int
	share           *float64
}

func newPaperFlags(name string, fs *flag.FlagSet) *paperFlags {
	f := &paperFlags{exp: newExpFlags(fs)}
	switch name {
	case "fig3":
		f.sets = fs.String("sets", "uci-credit-card,give-me-some-credit,a9a,w8a,mnist,fashion-mnist", "data sets (quick: a9a,mnist)")
		f.duration = fs.Duration("duration", 20*time.Second, "training time of a run on a logistic-regression set (quick: 5s)")
		f.netDuration = fs.Duration("net-duration", 2*time.Minute, "training time of a run on a network set (quick: 20s)")
		f.straggler = fs.Float64("straggler", 1.6, "the last party's steps take this many times as long (1 = none)")
		f.batch = fs.Int("batch", 64, "samples per request")
		f.window = fs.Int("window", 1, "requests in flight per party for the asynchronous methods (1: the paper's algorithm)")
	case "table3":
		f.sets = fs.String("sets", "a9a,mnist", "data sets")
		f.batch = fs.Int("batch", 64, "samples per request")
		f.steps = fs.Int64("steps", 20000, "answered requests of the longer run (quick: 6000)")
		f.steps0 = fs.Int64("steps0", 4000, "answered requests of the shorter run (quick: 2000)")
	case "table4":
		f.sets = fs.String("sets", "uci-credit-card,give-me-some-credit,a9a,w8a,mnist,fashion-mnist", "data sets (quick: a9a,w8a,mnist)")
		f.trials = fs.Int("trials", 10, "runs (seeds) per method on a logistic-regression set (quick: 3)")
		f.duration = fs.Duration("duration", 20*time.Second, "training time of a run on a logistic-regression set (quick: 5s)")
		f.t4steps = fs.Int64("steps", 0, "bound a run on a logistic-regression set by answered requests (all parties together)\n"+
			"instead, the same for every method (the same work in every trial however loaded the machine;\n"+
			"--duration then caps it); choose it per set, large enough for every method to level off")
		f.netTrials = fs.Int("net-trials", 3, "runs per method on a network set (quick: 1)")
		f.netDuration = fs.Duration("net-duration", 14*time.Minute, "training time of a run on a network set (quick: 30s)")
		f.fromTrials = fs.Bool("from-trials", false, "run nothing: rebuild table4.csv and the report's section from the runs in\n--out's table4_trials.csv (the paper's figures, the tests, the flags)")
	case "validate":
		f.sets = fs.String("sets", "a9a", "the data set (a LIBSVM one: a9a or w8a)")
		f.qs = fs.String("qs", "1,2", "numbers of parties (each a process with its own quota: keep q x share under the free processors)")
		f.share = fs.Float64("share", 0.25, "processor share of a party's cgroup (the straggler's: share/straggler)")
		f.straggler = fs.Float64("straggler", 1.6, "the last party's share is the others' over this")
		f.duration = fs.Duration("duration", 30*time.Second, "training time of a run")
		f.checkQs = fs.String("check-qs", "", "unused")
	case "fig4":
		f.sets = fs.String("sets", "a9a,w8a,mnist", "data sets (quick: a9a)")
		f.qs = fs.String("qs", "1,2,4,8,16", "numbers of parties (quick: 1,4,16)")
		f.subopt = fs.Float64("suboptimality", 5e-4, "target f - f* on the logistic-regression sets")
		f.netLoss = fs.Float64("network-loss", 0.5, "target training loss on the network sets (no f* there)")
		f.straggler = fs.Float64("straggler", 1.6, "the last party's steps take this many times as long")
		f.latency = fs.Duration("latency", 0, "one-way message time in the simulation (0: measured through the embedded broker)")
		f.seeds = fs.Int("seeds", 3, "runs (seeds) of every q and mode: the time to target varies with the random draws")
		f.budget = fs.Duration("budget", 200000*time.Second, "virtual time a simulated run may take (quick: 4000s)")
		f.maxSteps = fs.Int64("max-steps", 8000000, "answered requests a simulated run may take (its real compute here; quick: 600000)")
		f.checkQs = fs.String("check-qs", "4", "numbers of parties of the real-pipeline checks (\"\" for none)")
		f.parallel = fs.Int("parallel", runtime.NumCPU(), "simulations run at a time (their results do not depend on it)")
	}
	return f
}

func expPaper(ctx context.Context, name string, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("experiment "+name, paperSynopsis[name], stderr)
	f := newPaperFlags(name, fs)
	log, err := f.exp.parse(fs, args, stderr)
	if err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	cmd := "asyrevel experiment " + name
	for _, a := range args {
		cmd += " " + a
	}
	return runPaper(ctx, name, f, fs, cmd, log, stdout)
}

// quick sets a flag's quick value unless it was given.
func quickDefault(fs *flag.FlagSet, quick bool, name, value string) {
	if quick && !flagGiven(fs, name) {
		_ = fs.Set(name, value)
	}
}

func runPaper(ctx context.Context, name string, f *paperFlags, fs *flag.FlagSet, cmd string, log zerolog.Logger, stdout io.Writer) error {
	q := f.exp.quick
	switch name {
	case "fig3":
		quickDefault(fs, q, "sets", "a9a,mnist")
		quickDefault(fs, q, "duration", "5s")
		quickDefault(fs, q, "net-duration", "20s")
	case "table3":
		quickDefault(fs, q, "steps", "6000")
		quickDefault(fs, q, "steps0", "2000")
	case "table4":
		quickDefault(fs, q, "sets", "a9a,w8a,mnist")
		quickDefault(fs, q, "trials", "3")
		quickDefault(fs, q, "duration", "5s")
		quickDefault(fs, q, "net-trials", "1")
		quickDefault(fs, q, "net-duration", "30s")
	case "fig4":
		quickDefault(fs, q, "sets", "a9a")
		quickDefault(fs, q, "qs", "1,4,16")
		quickDefault(fs, q, "suboptimality", "2e-3")
		quickDefault(fs, q, "max-steps", "600000")
		quickDefault(fs, q, "budget", "4000s")
	}
	sets, err := parseSets(*f.sets)
	if err != nil {
		return err
	}
	var qs, checkQs []int
	if name == "fig4" || name == "validate" {
		if qs, err = parseInts(*f.qs); err != nil {
			return err
		}
		if checkQs, err = parseInts(*f.checkQs); err != nil {
			return err
		}
	}
	locate := func(rel string) (string, error) { return f.exp.path(rel) }
	sec := experiment.Section{Name: name, Command: cmd, Machine: experiment.Machine(), Started: time.Now()}
	out := f.exp.out
	var stopped error // an interrupt after part of the work, which is written
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	switch name {
	case "validate":
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		f4 := fig4Defaults(sets)
		f4.Locate, f4.StragglerFactor, f4.Seed, f4.Log = locate, *f.straggler, f.exp.seed, log
		cfg := experiment.ValidateConfig{Fig4: f4, Qs: qs, Share: *f.share, Duration: *f.duration, Exe: exe}
		rows, costs, err := experiment.Validate(ctx, cfg)
		if err != nil {
			return err
		}
		if err := experiment.WriteValidate(out, rows); err != nil {
			return err
		}
		sec.Title = "Figure 4's simulation against real processes with limited processors"
		sec.Settings = []string{fmt.Sprintf("set %s, q = %s, AsyREVEL-Gau and SynREVEL-Gau, %v of training a run, seed %d", (*f.sets), *f.qs, *f.duration, f.exp.seed),
			fmt.Sprintf("batch and step size as Figure 4's: %s", fig4Steps(f4))}
		sec.Body = experiment.ValidateBody(rows, costs, cfg)
		fmt.Fprintf(stdout, "wrote %s\n", filepath.Join(out, "validate.csv"))
	case "fig3":
		cfg := experiment.Fig3Config{Sets: sets, Locate: locate, Algos: experiment.Fig3Algos, Parties: 8, StragglerFactor: *f.straggler,
			Duration: *f.duration, NetDuration: *f.netDuration, Batch: *f.batch, Window: *f.window, Seed: f.exp.seed, Log: log}
		pts, runs, err := experiment.Fig3(ctx, cfg)
		if err != nil {
			return err
		}
		if err := experiment.WriteFig3(out, pts, runs); err != nil {
			return err
		}
		sec.Title = "Figure 3: training loss against time"
		sec.Settings = []string{
			fmt.Sprintf("8 parties, batch %d, %d request(s) in flight per party for the asynchronous methods (SynREVEL: 1 by definition), seed %d", *f.batch, *f.window, f.exp.seed),
			fmt.Sprintf("party 8 a %gx straggler in every run (a delay proportional to its measured compute)", *f.straggler),
			fmt.Sprintf("logistic regression (linear parties, logistic head with intercept, nonconvex regulariser, lambda 1e-4) for %v a run; the paper's network (MLP d_m x 128 x 1, softmax head 8 x 10) for %v", *f.duration, *f.netDuration),
			"default step sizes of `asyrevel train` for each algorithm and model; embedded JetStream over TCP loopback",
		}
		sec.Body = experiment.Fig3Body(runs, *f.straggler)
		fmt.Fprintf(stdout, "wrote %s, %s and %s\n", filepath.Join(out, "fig3.csv"), filepath.Join(out, "fig3_runs.csv"), filepath.Join(out, "fig3.png"))
	case "table3":
		cfg := experiment.Table3Config{Sets: sets, Locate: locate, Parties: 8, Batch: *f.batch, Steps: *f.steps, Steps0: *f.steps0, Seed: f.exp.seed, Log: log}
		rows, err := experiment.Table3(ctx, cfg)
		if err != nil {
			return err
		}
		if err := experiment.WriteTable3(out, rows); err != nil {
			return err
		}
		sec.Title = "Table 3: communication per round"
		sec.Settings = []string{
			fmt.Sprintf("8 parties, batch %d, one request in flight per party; each configuration run for %d and for %d answered requests", *f.batch, *f.steps0, *f.steps),
			"embedded JetStream over TCP loopback: every message stored in the run's stream and delivered by a durable consumer",
		}
		sec.Body = experiment.Table3Body(rows)
		fmt.Fprintf(stdout, "wrote %s\n", filepath.Join(out, "table3.csv"))
	case "table4":
		if *f.fromTrials {
			return table4FromTrials(out, cmd, stdout)
		}
		cfg := experiment.Table4Config{Sets: sets, Locate: locate, Parties: 8, Trials: *f.trials, NetTrials: *f.netTrials,
			Duration: *f.duration, NetDuration: *f.netDuration, Steps: *f.t4steps, Seed: f.exp.seed, Log: log}
		rows, trials, err := experiment.Table4(ctx, cfg)
		if err != nil {
			return err
		}
		// The sets of an earlier run that this one did not measure stay.
		oldRows, oldTrials, err := experiment.ReadTable4(out)
		if err != nil {
			log.Warn().Err(err).Msg("the earlier table4.csv is not kept")
		}
		var kept []string
		prev := experiment.SectionCommand(out, "table4")
		if rows, trials, kept = experiment.MergeTable4(oldRows, oldTrials, rows, trials); len(kept) > 0 && prev != "" {
			if p := table4Provenance(strings.Split(prev, "\n    "), kept); len(p) > 0 {
				sec.Command = strings.Join(p, "\n    ") + "\n    " + cmd
			}
		}
		if err := experiment.WriteTable4(out, rows, trials); err != nil {
			return err
		}
		sec.Title = "Table 4: accuracy, federated against non-federated"
		sec.Settings = []string{
			fmt.Sprintf("AsyREVEL-Gau and -Uni with 8 parties, NonF with 1; %d trials of %v on the logistic-regression sets, %d of %v on the network sets; seeds %d, %d, ...",
				*f.trials, *f.duration, *f.netTrials, *f.netDuration, f.exp.seed, f.exp.seed+1) + stepsText(*f.t4steps),
			fmt.Sprintf("the defaults of `asyrevel train` (batch 64, window 8; on the network sets --model mlp with its own: batch %d, window %d, step size decaying over %d passes); "+
				"NonF's party on a network set is one MLP 784 x 128 x 8 (the head sees 8 values, as with 8 parties)", run.MLPBatch, run.MLPWindow, run.MLPDecayEpochs),
			"embedded JetStream over TCP loopback",
		}
		if len(kept) > 0 {
			sec.Settings = append(sec.Settings, fmt.Sprintf("the rows of %s are kept from an earlier run (the command before the last; "+
				"the table's last column gives each set's trials), the settings above are the last command's", strings.Join(kept, ", ")))
		}
		sec.Body = experiment.Table4Body(rows, trials)
		fmt.Fprintf(stdout, "wrote %s and %s\n", filepath.Join(out, "table4.csv"), filepath.Join(out, "table4_trials.csv"))
	case "fig4":
		if q {
			checkQs = nil
		}
		cfg := fig4Defaults(sets)
		cfg.Locate, cfg.Qs, cfg.Suboptimality, cfg.NetworkLoss = locate, qs, *f.subopt, *f.netLoss
		cfg.StragglerFactor, cfg.Latency, cfg.Budget, cfg.MaxSteps = *f.straggler, *f.latency, *f.budget, *f.maxSteps
		cfg.Seed, cfg.Seeds, cfg.Log, cfg.CheckQs, cfg.Parallel = f.exp.seed, *f.seeds, log, checkQs, *f.parallel
		rows, checks, costs, err := experiment.Fig4(ctx, cfg)
		var kept []string
		if err != nil {
			// A full sweep takes hours a set: an interrupt keeps the sets
			// whose simulations all finished.
			if ctx.Err() == nil {
				return err
			}
			if rows, kept = finishedSets(rows, len(qs)*len(experiment.Fig4Modes)*max(*f.seeds, 1)); len(rows) == 0 {
				return err
			}
			var keptCosts []experiment.Fig4Cost
			for _, c := range costs {
				if slices.Contains(kept, c.Set) {
					keptCosts = append(keptCosts, c)
				}
			}
			costs, stopped = keptCosts, err
		}
		if err := experiment.WriteFig4(out, rows, checks, costs); err != nil {
			return err
		}
		sec.Title = "Figure 4: speed-up with the number of parties"
		sec.Settings = []string{
			fmt.Sprintf("q = %s; AsyREVEL-Gau (one request in flight per party) against SynREVEL-Gau; party q a %gx straggler (q > 1)", *f.qs, *f.straggler),
			fmt.Sprintf("target f - f* <= %g (logistic sets), training loss <= %g (network); budget %v virtual time or %d answered requests a run", *f.subopt, *f.netLoss, *f.budget, *f.maxSteps),
			fmt.Sprintf("%d seeds (%d, %d, ...) a configuration; costs measured here first (below), message time %s", *f.seeds, f.exp.seed, f.exp.seed+1, latencyText(*f.latency)),
			fmt.Sprintf("batch and step size: %s", fig4Steps(cfg)),
		}
		if stopped != nil {
			sec.Settings = append(sec.Settings, fmt.Sprintf("**interrupted**: only %s finished (%v); the other sets and any missing checks were not run",
				strings.Join(kept, ", "), stopped))
		}
		sec.Body = experiment.Fig4Body(rows, checks, costs, cfg)
		fmt.Fprintf(stdout, "wrote %s, %s and %s\n", filepath.Join(out, "fig4.csv"), filepath.Join(out, "fig4_check.csv"), filepath.Join(out, "fig4.png"))
	}
	sec.Duration = time.Since(sec.Started)
	if err := experiment.WriteSection(out, sec); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s took %v; section %q of %s updated\n", name, sec.Duration.Round(time.Second), name, filepath.Join(out, experiment.ReportFile))
	if stopped != nil {
		return fmt.Errorf("%s interrupted; the finished part is written: %w", name, stopped)
	}
	return nil
}

// finishedSets keeps the rows of the sets that have all theirs (per of
// them), in order, and names those sets.
func finishedSets(rows []experiment.Fig4Row, per int) ([]experiment.Fig4Row, []string) {
	count := map[string]int{}
	for _, r := range rows {
		count[r.Set]++
	}
	var keep []experiment.Fig4Row
	var names []string
	for _, r := range rows {
		if count[r.Set] != per {
			continue
		}
		if len(names) == 0 || names[len(names)-1] != r.Set {
			names = append(names, r.Set)
		}
		keep = append(keep, r)
	}
	return keep, names
}

// fig4Defaults are the per-set settings of the speed-up experiment.
func fig4Defaults(sets []experiment.Set) experiment.Fig4Config {
	cfg := experiment.Fig4Config{Sets: sets, Batch: map[string]int{}, LR: map[string]float64{},
		LRDecay: map[string]float64{}, HeadLR: map[string]float64{}, CheckFactor: 4, CheckBudget: 2 * time.Minute}
	for _, s := range sets {
		switch s.Name {
		case "mnist", "fashion-mnist":
			// The network: the mlp defaults.
		default:
			// Logistic regression: a large batch and step, which reach
			// f - f* <= 5e-4 in the fewest steps measured here.
			cfg.Batch[s.Name], cfg.LR[s.Name], cfg.HeadLR[s.Name] = 1024, 1, 2
		}
	}
	return cfg
}

func fig4Steps(cfg experiment.Fig4Config) string {
	var parts []string
	for _, s := range cfg.Sets {
		lr := "default"
		if v := cfg.LR[s.Name]; v != 0 {
			lr = strconv.FormatFloat(v, 'g', -1, 64)
		}
		head := "default"
		if v := cfg.HeadLR[s.Name]; v != 0 {
			head = strconv.FormatFloat(v, 'g', -1, 64)
		}
		parts = append(parts, fmt.Sprintf("%s batch %d, party lr %s at q = 8 (times sqrt(q/8) with q parties), head lr %s", s.Name, cfg.Batch[s.Name], lr, head))
	}
	return strings.Join(parts, "; ")
}

func parseSets(s string) ([]experiment.Set, error) {
	var out []experiment.Set
	for _, n := range strings.Split(s, ",") {
		set, err := experiment.LookupSet(strings.TrimSpace(n))
		if err != nil {
			return nil, fmt.Errorf("%w: --sets: %v", errUsage, err)
		}
		out = append(out, set)
	}
	return out, nil
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%w: %q is not a positive number", errUsage, v)
		}
		out = append(out, n)
	}
	return out, nil
}

func expAll(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("experiment all", "asyrevel experiment all [--quick] [--out results]\n\n"+
		"Runs fig3, table3, table4 and fig4 in turn with their defaults (or --quick ones) and\n"+
		"rebuilds REPORT.md in --out.", stderr)
	e := newExpFlags(fs)
	if _, err := e.parse(fs, args, stderr); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(e.out, experiment.ReportFile)); err != nil && !os.IsNotExist(err) {
		return err
	}
	start := time.Now()
	for _, name := range []string{"fig3", "table3", "table4", "fig4"} {
		var sub []string
		if e.quick {
			sub = append(sub, "--quick")
		}
		if e.out != "results" {
			sub = append(sub, "--out", e.out)
		}
		if e.dataDir != "" {
			sub = append(sub, "--data-dir", e.dataDir)
		}
		if e.seed != 1 {
			sub = append(sub, "--seed", strconv.FormatUint(e.seed, 10))
		}
		fmt.Fprintf(stdout, "== asyrevel experiment %s %s\n", name, strings.Join(sub, " "))
		if err := expPaper(ctx, name, sub, stdout, stderr); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	fmt.Fprintf(stdout, "all four in %v; report: %s\n", time.Since(start).Round(time.Second), filepath.Join(e.out, experiment.ReportFile))
	return nil
}

func stepsText(n int64) string {
	if n <= 0 {
		return ""
	}
	return fmt.Sprintf(" (logistic-regression runs bounded by %d answered requests, all parties together, the same for every method, the duration capping them)", n)
}

// table4Provenance keeps, of the earlier table4 commands (in order), those
// that last measured one of the kept sets.
func table4Provenance(cmds, kept []string) []string {
	covers := func(cmd string) []string {
		f := strings.Fields(cmd)
		for i, a := range f {
			if v, ok := strings.CutPrefix(a, "--sets="); ok {
				return strings.Split(v, ",")
			}
			if a == "--sets" && i+1 < len(f) {
				return strings.Split(f[i+1], ",")
			}
		}
		if slices.Contains(f, "--quick") {
			return []string{"a9a", "w8a", "mnist"}
		}
		return []string{"uci-credit-card", "give-me-some-credit", "a9a", "w8a", "mnist", "fashion-mnist"}
	}
	last := map[string]int{}
	for i, c := range cmds {
		for _, set := range covers(c) {
			last[set] = i
		}
	}
	var out []string
	for i, c := range cmds {
		for _, set := range kept {
			if j, ok := last[set]; ok && j == i {
				out = append(out, c)
				break
			}
		}
	}
	return out
}

// table4FromTrials rebuilds Table 4 from the runs already in dir (table4.csv
// for what the runs do not hold, table4_trials.csv for every run): the
// statistics, the paper's figures, the tests and the flags are computed
// again; nothing is run. The section keeps the commands and settings of
// the runs, with this command added.
func table4FromTrials(dir, cmd string, stdout io.Writer) error {
	rows, trials, err := experiment.ReadTable4(dir)
	if err != nil {
		return err
	}
	if len(rows) == 0 {
		return fmt.Errorf("%w: no table4.csv in %s to rebuild from", errUsage, dir)
	}
	rows = experiment.Table4FromTrials(rows, trials)
	if err := experiment.WriteTable4(dir, rows, trials); err != nil {
		return err
	}
	sec := experiment.Section{Name: "table4", Title: "Table 4: accuracy, federated against non-federated", Machine: experiment.Machine(), Started: time.Now()}
	sec.Command = cmd
	if prev := experiment.SectionCommand(dir, "table4"); prev != "" {
		var keep []string
		for _, c := range strings.Split(prev, "\n    ") {
			if !strings.Contains(c, "--from-trials") {
				keep = append(keep, c)
			}
		}
		sec.Command = strings.Join(append(keep, cmd), "\n    ")
	}
	sec.Settings = append(experiment.SectionSettings(dir, "table4"),
		"rebuilt by `"+cmd+"` from the runs in table4_trials.csv (the runs are the commands' above; the time and machine are the rebuild's)")
	sec.Body = experiment.Table4Body(rows, trials)
	sec.Duration = time.Since(sec.Started)
	if err := experiment.WriteSection(dir, sec); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "rebuilt %s and the table4 section of %s from %d runs\n", filepath.Join(dir, "table4.csv"), filepath.Join(dir, experiment.ReportFile), len(trials))
	return nil
}

// latencyText describes the simulation's message time.
func latencyText(l time.Duration) string {
	if l > 0 {
		return fmt.Sprintf("%v each way (given)", l)
	}
	return "measured through the embedded broker"
}
