package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/experiment"
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
	p := experiment.PaperConfig{Name: name, Command: cmd, Out: f.exp.out, Quick: q, Seed: f.exp.seed, Log: log,
		Locate: f.exp.path, Sets: sets, SetsText: *f.sets, Qs: qs, CheckQs: checkQs}
	if f.qs != nil {
		p.QsText = *f.qs
	}
	for _, v := range []struct {
		dst *time.Duration
		src *time.Duration
	}{{&p.Duration, f.duration}, {&p.NetDuration, f.netDuration}, {&p.Latency, f.latency}, {&p.Budget, f.budget}} {
		if v.src != nil {
			*v.dst = *v.src
		}
	}
	for _, v := range []struct {
		dst *int
		src *int
	}{{&p.Batch, f.batch}, {&p.Window, f.window}, {&p.Trials, f.trials}, {&p.NetTrials, f.netTrials}, {&p.Seeds, f.seeds}, {&p.Parallel, f.parallel}} {
		if v.src != nil {
			*v.dst = *v.src
		}
	}
	for _, v := range []struct {
		dst *int64
		src *int64
	}{{&p.Steps, f.steps}, {&p.Steps0, f.steps0}, {&p.Table4Steps, f.t4steps}, {&p.MaxSteps, f.maxSteps}} {
		if v.src != nil {
			*v.dst = *v.src
		}
	}
	for _, v := range []struct {
		dst *float64
		src *float64
	}{{&p.Straggler, f.straggler}, {&p.Suboptimality, f.subopt}, {&p.NetworkLoss, f.netLoss}, {&p.Share, f.share}} {
		if v.src != nil {
			*v.dst = *v.src
		}
	}
	if f.fromTrials != nil {
		p.FromTrials = *f.fromTrials
	}
	if name == "validate" {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		p.Exe = exe
	}
	err = experiment.RunPaper(ctx, p, stdout)
	if errors.Is(err, experiment.ErrNoTable4) {
		return fmt.Errorf("%w: no table4.csv in %s to rebuild from", errUsage, p.Out)
	}
	return err
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
	fs := newFlagSet("experiment all", "asyrevel experiment all [--quick] [--out out/experiments]\n\n"+
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
		if flagGiven(fs, "out") {
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
