package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/asyrevel/asyrevel/run"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/experiment"
	expreport "github.com/asyrevel/asyrevel/experiment/report"
	"github.com/asyrevel/asyrevel/experiment/sim"
	"github.com/asyrevel/asyrevel/internal/cli"
	"github.com/asyrevel/asyrevel/model"
)

const experimentUsage = `Usage: asyrevel experiment NAME [flags]

Experiments:
  reference    the single-process AsyREVEL loop (no broker, no messages) with the
               training flags of "asyrevel train": the yardstick for time to accuracy
  firstorder   the same vertically split network trained first-order
               (centralised back-propagation, SGD); --fo-lr, --momentum
  central      centralised logistic regression with L-BFGS: f* and the reference
               accuracy for a binary set (--data, --test)
  throughput   steps/s, bytes per step and messages stored on a9a with 8 parties for the
               in-memory bus and each transport design over NATS (TCP, in-process, a
               3-node cluster), windows 1, 8, 64 and batches 1, 16, 64:
               results/throughput.csv and .png
  tta          time to 84.5% test accuracy on a9a with 8 parties: the pipeline on each
               bus against the single-process reference loop: results/time_to_accuracy.csv
  scale        steps/s and peak resident memory with 8, 32 and 128 parties and with a
               million samples (synthetic data, one process each): results/scale.csv
  nn           the paper's network on MNIST and Fashion-MNIST: AsyREVEL-Gau, -Uni and
               first-order training: results/nn.csv and .png
  adversary    a rogue's bad messages of fifteen kinds during an a9a run on the broker, then
               on broker --roster and a stock nats-server (oversized, the auditor's reply
               subjects, dead joins, after the end): each refused or rejected and counted,
               the accuracy, the audit: results/adversary.csv
  privacy      label inference by a passive and an active party against the paper's wire
               format and the defenses, on a9a and MNIST: results/privacy.csv, privacy.png,
               REPORT-privacy.md; --goal: the default privacy against --privacy off as a
               user runs them (small tables, a9a, MNIST, Fashion-MNIST), with the attacks
               on each run's log: results/privacy-goal.csv and a REPORT.md section
  faults       kill -9 and SIGTERM of the aggregator and of a party in the middle of a run of
               separate processes, resumed with --resume; a party killed for good: accuracy
               against an uninterrupted run, lost and duplicated messages from the stream,
               recovery time: results/faults.csv and a REPORT.md section
  soak         a long 8-party run (--duration 10m) with its resident memory and store size
               sampled: flat memory, bytes per step: results/soak.csv
  serve        saved models served: batch predictions/s on a9a's test set (memory bus, broker
               over TCP and in-process), HTTP latency at 100, 1,000, 5,000 requests/s with 8
               parties, memory of a party's index of 1M ids: results/serve.csv, REPORT.md
  align        private entity alignment (ECDH PSI) against its group-arithmetic bound and a
               plain hashed join, 2 to 8 organisations, 10k to 1M ids: results/align.csv
  wan          AsyREVEL (window 1 and 8) against SynREVEL (batch 64 and 512) to a target
               accuracy over the real broker, every party behind a proxy that delays its
               link, one party farther: measured time to the target with q = 2, 4, 8, and
               what asynchrony and pipelining each buy: results/wan.csv, REPORT.md
  report       REPORT.md, REPORT-privacy.md and the plots from the CSV files of a results
               folder, nothing else (--results results, --out RESULTS/REPORT.md)

The paper's experiments (each writes CSV and PNG into --out and its section of REPORT.md):
  fig3         training loss against time: AsyREVEL-Gau/-Uni, SynREVEL-Gau/-Uni and TIG,
               one party a 1.6x straggler, on every available set
  table3       communication of a round, zeroth-order against TIG, measured on the broker
  table4       test accuracy over 10 trials: AsyREVEL-Gau/-Uni against NonF, every set
  fig4         speed-up with q = 1, 2, 4, 8, 16 parties, asynchronous against synchronous
               with a straggler, in time to f - f* <= 5e-4 (on q simulated machines)
  all          the four in turn; rebuilds REPORT.md

Common flags: --data-dir DIR (where "asyrevel data fetch" put the sets; default data,
else ../shared/data), --out DIR (default out/experiments; --out results updates the
committed results: "results/" above names that folder), --quick (a short version).
Each experiment also records its command in runs.csv and writes REPORT.md in --out again.

Run "asyrevel experiment NAME -h" for an experiment's flags.
`

func cmdExperiment(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, experimentUsage)
		if len(args) == 0 {
			return fmt.Errorf("%w: experiment needs a name", errUsage)
		}
		return nil
	}
	name, rest := args[0], args[1:]
	switch name {
	case "reference":
		return expReference(ctx, rest, stdout, stderr)
	case "firstorder":
		return expFirstOrder(ctx, rest, stdout, stderr)
	case "central":
		return expCentral(ctx, rest, stdout, stderr)
	case "throughput":
		return expThroughput(ctx, rest, stdout, stderr)
	case "adversary":
		return expAdversary(ctx, rest, stdout, stderr)
	case "tta":
		return expTTA(ctx, rest, stdout, stderr)
	case "scale":
		return expScale(ctx, rest, stdout, stderr)
	case "nn":
		return expNN(ctx, rest, stdout, stderr)
	case "privacy":
		return expPrivacy(ctx, rest, stdout, stderr)
	case "faults":
		return expFaults(ctx, rest, stdout, stderr)
	case "soak":
		return expSoak(ctx, rest, stdout, stderr)
	case "serve":
		return expServe(ctx, rest, stdout, stderr)
	case "align":
		return expAlign(ctx, rest, stdout, stderr)
	case "wan":
		return expWAN(ctx, rest, stdout, stderr)
	case "fig3", "table3", "table4", "fig4", "validate":
		return expPaper(ctx, name, rest, stdout, stderr)
	case "all":
		return expAll(ctx, rest, stdout, stderr)
	case "report":
		return expReport(rest, stdout, stderr)
	}
	return fmt.Errorf("%w: unknown experiment %q%s; 'asyrevel experiment help' lists them", errUsage, name, didYouMean(name, experimentNames))
}

// expReport writes the report of a results folder from its CSV files
// (package report).
func expReport(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("experiment report", "asyrevel experiment report [--results results] [--out FILE]\n\n"+
		"Writes REPORT.md (and REPORT-privacy.md and the plots, beside it) from the CSV files of\n"+
		"--results and its runs.csv, and from nothing else. Exit 1 if a CSV file could not be read\n"+
		"(the report says which, in its section).", stderr)
	results := fs.String("results", "results", "the folder of the CSV files")
	out := fs.String("out", "", "the report's file (default RESULTS/REPORT.md)")
	if err := fs.Parse(args); err != nil {
		return usageErr(err)
	}
	wrote, err := expreport.Write(expreport.Options{Results: *results, Out: *out})
	for _, p := range wrote {
		fmt.Fprintf(stdout, "wrote %s\n", p)
	}
	return err
}

func pointLogger(f *trainFlags) func(sim.RefPoint) {
	return func(p sim.RefPoint) {
		f.Log().Info().Str("elapsed", fmt.Sprintf("%.1fs", p.Seconds)).Int64("steps", p.Steps).
			Str("acc", fmt.Sprintf("%.2f%%", 100*p.TestAccuracy)).Msg("progress")
	}
}

func expReference(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("experiment reference", "asyrevel experiment reference --data PATH [train flags]\n\n"+
		"Runs AsyREVEL as a plain single-process loop over the parties in turn: no broker,\n"+
		"no messages, no asynchrony; evaluation time is not counted.", stderr)
	f := newTrainFlags(fs, cli.RoleReference)
	every := fs.Int64("eval-steps", 0, "party steps between evaluations (default: one pass of the data)")
	if err := f.Parse(fs, args, stderr); err != nil {
		return err
	}
	r, _, err := sim.ReferenceFor(ctx, *f.Config(), nil, *every, pointLogger(f))
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "reference %s: test accuracy %.2f%% after %d steps in %.1f s (%.0f steps/s)\n",
		f.Config().Algo, 100*r.TestAccuracy, r.Steps, r.Seconds, float64(r.Steps)/r.Seconds)
	printTarget(stdout, f.Config().TargetAcc, r, true)
	return nil
}

// printTarget says when a reference loop reached --target (and, if
// missed is set, that it did not).
func printTarget(w io.Writer, target float64, r *sim.RefResult, missed bool) {
	switch {
	case target <= 0:
	case r.TimeToTarget >= 0:
		fmt.Fprintf(w, "reached %.2f%% after %.2f s (%d steps)\n", 100*target, r.TimeToTarget, r.StepsToTarget)
	case missed:
		fmt.Fprintf(w, "did not reach %.2f%%\n", 100*target)
	}
}

func expFirstOrder(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("experiment firstorder", "asyrevel experiment firstorder --data PATH [train flags]\n\n"+
		"Trains the same vertically split network (--model, --parties, --k, --hidden) with\n"+
		"back-propagation and mini-batch SGD in one process: what the network reaches\n"+
		"when gradients are available.", stderr)
	f := newTrainFlags(fs, cli.RoleFirstOrder)
	lr := fs.Float64("fo-lr", 0.05, "SGD step size")
	mom := fs.Float64("momentum", 0.9, "SGD momentum")
	every := fs.Int64("eval-steps", 0, "steps between evaluations (default: a quarter pass)")
	if err := f.Parse(fs, args, stderr); err != nil {
		return err
	}
	r, err := sim.FirstOrderFor(ctx, *f.Config(), nil, *lr, *mom, *every, pointLogger(f))
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "first-order %s model: test accuracy %.2f%% after %d steps in %.1f s\n",
		f.Config().Model, 100*r.TestAccuracy, r.Steps, r.Seconds)
	printTarget(stdout, f.Config().TargetAcc, r, false)
	return nil
}

func expCentral(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("experiment central", "asyrevel experiment central --data PATH [--test PATH] [--lambda X] [--reg R]\n\n"+
		"Centralised logistic regression (all features at one place) with L-BFGS: the\n"+
		"objective f* and the reference accuracy for federated runs on a binary set. PATH may\n"+
		"be a split folder: its parties' columns are joined back for this baseline.", stderr)
	data := fs.String("data", "", "training set (a file, an IDX folder, or a split folder with its test set)")
	test := fs.String("test", "", "test set")
	preset := fs.String("preset", "", "preprocessing preset")
	scale := fs.String("scale", "", "scaling fitted on the training set: none, standard, std, minmax, maxabs")
	lambda := fs.Float64("lambda", 1e-4, "regularisation weight")
	regName := fs.String("reg", "nonconvex", "regulariser: nonconvex, l2 or none")
	bias := fs.Bool("bias", true, "fit an intercept (as asyrevel train's head does by default)")
	var csv dataset.CSVOptions
	addCSVFlags(fs, &csv)
	if err := fs.Parse(args); err != nil {
		return usageErr(err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if *data == "" {
		return fmt.Errorf("%w: --data is required", errUsage)
	}
	reg, err := model.ParseRegularizer(*regName)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	method, err := dataset.ParseScaleMethod(*scale)
	if err != nil {
		return fmt.Errorf("%w: --scale: %v", errUsage, err)
	}
	var tr, te *dataset.Dataset
	switch {
	case dataset.IsSplit(*data):
		if *test != "" || *preset != "" || csv.Given() {
			return fmt.Errorf("%w: %s is a split folder with its own test set and columns: drop --test, --preset and the CSV flags", errUsage, *data)
		}
		tr, te, err = dataset.ReadSplit(*data)
	case *preset != "":
		if csv.Given() {
			return fmt.Errorf("%w: --preset fixes the CSV columns: drop the CSV flags", errUsage)
		}
		p, perr := dataset.LookupPreset(*preset)
		if perr != nil {
			return perr
		}
		tr, te, err = p.Load(*data)
	default:
		tr, te, err = dataset.OpenPairOptions(*data, *test, dataset.OpenOptions{CSV: csv})
	}
	if err != nil {
		return err
	}
	if method != dataset.ScaleNone {
		if err := scaleSets(method, tr, te, stderr); err != nil {
			return err
		}
	}
	r, err := sim.CentralLogistic(tr, te, reg, *lambda, *bias)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "central logistic regression on %s: f* = %.6f, train accuracy %.2f%%", tr.Name, r.Objective, 100*r.TrainAccuracy)
	if !math.IsNaN(r.TestAccuracy) {
		fmt.Fprintf(stdout, ", test accuracy %.2f%%", 100*r.TestAccuracy)
	}
	fmt.Fprintf(stdout, " (%d L-BFGS iterations)\n", r.Iterations)
	return nil
}

// expFlags are the flags common to the paper experiments.
type expFlags struct {
	dataDir, out, logLevel string
	quick                  bool
	seed                   uint64
}

func newExpFlags(fs *flag.FlagSet) *expFlags {
	f := &expFlags{}
	fs.StringVar(&f.dataDir, "data-dir", "", "folder of the data sets, as laid out by \"asyrevel data fetch\"\n(default data, else ../shared/data)")
	fs.StringVar(&f.out, "out", experiment.DefaultOut, "folder for the results (results: the committed ones)")
	fs.BoolVar(&f.quick, "quick", false, "a short version (fewer configurations, shorter runs)")
	fs.Uint64Var(&f.seed, "seed", 1, "random seed")
	fs.StringVar(&f.logLevel, "log", "info", "log level")
	return f
}

// path finds rel (e.g. "a9a/a9a.gz") in the data folder.
func (f *expFlags) path(rel string) (string, error) { return experiment.DataDir(f.dataDir)(rel) }

// parse parses args and returns the logger they ask for.
func (f *expFlags) parse(fs *flag.FlagSet, args []string, stderr io.Writer) (zerolog.Logger, error) {
	if err := fs.Parse(args); err != nil {
		return zerolog.Nop(), usageErr(err)
	}
	return f.logger(stderr)
}

func (f *expFlags) logger(stderr io.Writer) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(f.logLevel)
	if err != nil {
		return zerolog.Nop(), fmt.Errorf("%w: --log %q", errUsage, f.logLevel)
	}
	return newLogger(stderr, lvl, false), nil
}

func a9aData(f *expFlags, parties int) (*run.Data, error) {
	return experiment.LoadA9A(f.path, parties)
}

func expThroughput(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("experiment throughput", "asyrevel experiment throughput [--quick] [--duration 4s]\n\n"+
		"Steps/s, CPU and bytes per step, and the messages sent against those the stream\n"+
		"stored, of the whole pipeline on a9a with 8 parties, for each transport variant\n"+
		"(the variants of one window and batch run one after the other; the ratios are\n"+
		"to the memory bus of the same window and batch).", stderr)
	f := newExpFlags(fs)
	dur := fs.Duration("duration", 4*time.Second, "training time per configuration")
	variants := fs.String("variants", strings.Join(experiment.Variants, ","), "what to compare: memory, or DESIGN[-sync][-s2|-plain][-nosign]-CONNECTION\n"+
		"(designs capture, core, ordered, acked; connections tcp, inprocess, cluster;\n"+
		"-failover: a cluster's participants given every node's URL, as separate processes are;\n"+
		"-sync: each message written before its ack; -s2: S2 store compression; -plain: none;\n"+
		"-nosign: the trust layer off, to measure its cost; memory-nosign too)")
	windows := fs.String("windows", "1,8,64", "requests in flight per party")
	batches := fs.String("batches", "1,16,64", "samples per request")
	log, err := f.parse(fs, args, stderr)
	if err != nil {
		return err
	}
	data, err := a9aData(f, 8)
	if err != nil {
		return err
	}
	cfg := experiment.ThroughputConfig{Data: data, Parties: 8, Variants: strings.Split(*variants, ","),
		Duration: *dur, Seed: f.seed, Log: log}
	if cfg.Windows, err = intList("windows", *windows); err != nil {
		return err
	}
	if cfg.Batches, err = intList("batches", *batches); err != nil {
		return err
	}
	if f.quick {
		if !flagGiven(fs, "windows") {
			cfg.Windows = []int{8}
		}
		if !flagGiven(fs, "batches") {
			cfg.Batches = []int{1, 64}
		}
		if !flagGiven(fs, "duration") {
			cfg.Duration = 1500 * time.Millisecond
		}
	}
	rows, err := experiment.Throughput(ctx, cfg)
	if err != nil {
		return err
	}
	if err := experiment.WriteThroughput(f.out, rows); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "variant\twindow\tbatch\tsteps/s\tx memory\tcpu us/step\tbytes/step\tstep wire bytes\tsent\tstored\tlost\t")
	for _, r := range rows {
		stored, lost := "-", "-"
		if r.MessagesStored >= 0 {
			stored, lost = fmt.Sprint(r.MessagesStored), fmt.Sprint(r.Lost)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%.3f\t%.1f\t%.0f\t%.0f\t%d\t%s\t%s\t\n", r.Variant, r.Window, r.Batch, r.StepsPerSec, r.Ratio,
			r.CPUPerStep, r.BytesPerStep, r.StepWireBytes, r.MessagesSent, stored, lost)
	}
	tw.Flush()
	fmt.Fprintf(stdout, "wrote %s and %s\n", filepath.Join(f.out, "throughput.csv"), filepath.Join(f.out, "throughput.png"))
	return nil
}

func expTTA(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("experiment tta", "asyrevel experiment tta [--quick] [--seeds 5]\n\n"+
		"Time to 84.5% test accuracy on a9a with 8 parties (batch 64, window 8): the pipeline\n"+
		"on each bus against the single-process reference loop with the same settings.", stderr)
	f := newExpFlags(fs)
	seeds := fs.Int("seeds", 5, "runs per system")
	target := fs.Float64("target", 0.845, "test accuracy to reach")
	batch := fs.Int("batch", 64, "samples per request")
	window := fs.Int("window", 8, "requests in flight per party")
	variants := fs.String("variants", experiment.DefaultVariant+",capture-inprocess,memory", "pipeline variants (see experiment throughput -h)")
	log, err := f.parse(fs, args, stderr)
	if err != nil {
		return err
	}
	data, err := a9aData(f, 8)
	if err != nil {
		return err
	}
	cfg := experiment.TTAConfig{Data: data, Parties: 8, Target: *target, Batch: *batch, Window: *window,
		Variants: strings.Split(*variants, ","), Budget: 60 * time.Second, EvalEvery: 100 * time.Millisecond, Log: log}
	n := *seeds
	if f.quick && !flagGiven(fs, "seeds") {
		n = 1
	}
	for i := range n {
		cfg.Seeds = append(cfg.Seeds, f.seed+uint64(i))
	}
	rows, err := experiment.TimeToAccuracy(ctx, cfg)
	if err != nil {
		return err
	}
	if err := experiment.WriteTTA(f.out, rows); err != nil {
		return err
	}
	ref := experiment.MedianSeconds(rows, "reference")
	fmt.Fprintf(stdout, "median time to %.1f%% over %d seeds (training time; wall time in the csv):\n", 100**target, n)
	fmt.Fprintf(stdout, "  %-22s %7.2f s\n", "reference (1 process)", ref)
	for _, b := range cfg.Variants {
		m := experiment.MedianSeconds(rows, b)
		fmt.Fprintf(stdout, "  %-22s %7.2f s  (%.2fx the reference)\n", b, m, m/ref)
	}
	fmt.Fprintf(stdout, "wrote %s\n", filepath.Join(f.out, "time_to_accuracy.csv"))
	return nil
}

func expNN(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("experiment nn", "asyrevel experiment nn [--quick] [--duration 10m]\n\n"+
		"The paper's network (8 parties, local MLP 98x128x1, softmax head 8x10) on MNIST and\n"+
		"Fashion-MNIST: AsyREVEL-Gau and -Uni through the pipeline, and first-order training.", stderr)
	f := newExpFlags(fs)
	dur := fs.Duration("duration", 14*time.Minute, "training time of each zeroth-order run")
	sets := fs.String("sets", "mnist,fashion-mnist", "data sets")
	lr := fs.Float64("lr", 0, "zeroth-order step size of the parties (default: the mlp default)")
	headLR := fs.Float64("head-lr", 0, "zeroth-order step size of the head (default 0.05)")
	batch := fs.Int("batch", 0, "samples per request (default: the mlp default, 256)")
	window := fs.Int("window", 0, "requests in flight per party (default: the mlp default, 4)")
	log, err := f.parse(fs, args, stderr)
	if err != nil {
		return err
	}
	cfg := experiment.NNConfig{Sets: map[string]string{}, Parties: 8, Duration: *dur, FOEpochs: 10, Batch: *batch, Window: *window,
		LR: *lr, HeadLR: *headLR, FOLR: 0.05, Seed: f.seed, Log: log, EvalEvery: max(*dur/60, time.Second)}
	if f.quick {
		if !flagGiven(fs, "duration") {
			cfg.Duration = 45 * time.Second
			cfg.EvalEvery = 3 * time.Second
		}
		cfg.FOEpochs = 1
	}
	for _, s := range strings.Split(*sets, ",") {
		p, err := f.path(s)
		if err != nil {
			return err
		}
		cfg.Sets[s] = p
		cfg.Order = append(cfg.Order, s)
	}
	rows, err := experiment.NN(ctx, cfg)
	if err != nil {
		return err
	}
	if err := experiment.WriteNN(f.out, rows); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "set\tmethod\ttest acc\tbest\tpaper\ttraining s\tsteps\ts to within 1 pt")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%.2f%%\t%.2f%%\t%.2f%%\t%.0f\t%d\t%.0f\n", r.Set, r.Method, 100*r.Accuracy, 100*r.BestAccuracy, 100*r.PaperAccuracy, r.Seconds, r.Steps, r.TimeToFinal)
	}
	tw.Flush()
	fmt.Fprintf(stdout, "wrote %s and %s\n", filepath.Join(f.out, "nn.csv"), filepath.Join(f.out, "nn.png"))
	return nil
}

// intList parses a comma-separated list of positive integers.
func intList(flagName, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 {
			return nil, fmt.Errorf("%w: --%s %q: want positive integers separated by commas", errUsage, flagName, s)
		}
		out = append(out, v)
	}
	return out, nil
}

func expScale(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("experiment scale", "asyrevel experiment scale [--quick] [--duration 10s]\n\n"+
		"Steps/s and peak resident memory of \"asyrevel train\" (one process each, synthetic data,\n"+
		"batch 64, window 8) with 8, 32 and 128 parties and with a million samples; the memory\n"+
		"per party and per sample.", stderr)
	f := newExpFlags(fs)
	dur := fs.Duration("duration", 10*time.Second, "training time per run")
	transport := fs.String("transport", "", "transport design (default: train's)")
	log, err := f.parse(fs, args, stderr)
	if err != nil {
		return err
	}
	bin, err := os.Executable()
	if err != nil {
		return err
	}
	cfg := experiment.ScaleConfig{Binary: bin, Runs: experiment.DefaultScaleRuns, Duration: *dur, Transport: *transport, Seed: f.seed, Log: log}
	if f.quick {
		cfg.Runs = []experiment.ScaleRun{{Parties: 8, Samples: 5000, Features: 64}, {Parties: 32, Samples: 5000, Features: 64}, {Parties: 8, Samples: 50000, Features: 64}}
		if !flagGiven(fs, "duration") {
			cfg.Duration = 2 * time.Second
		}
	}
	rows, err := experiment.Scale(ctx, cfg)
	if err != nil {
		return err
	}
	if err := experiment.WriteScale(f.out, rows); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "parties\tsamples\tfeatures\tsteps/s\tpeak RSS MB\twall s\tsent\tstored\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%.0f\t%.0f\t%.1f\t%d\t%d\t\n", r.Parties, r.Samples, r.Features, r.StepsPerSec,
			float64(r.PeakRSS)/(1<<20), r.WallSeconds, r.MessagesSent, r.MessagesStored)
	}
	tw.Flush()
	perParty, perSample := experiment.ScaleSlopes(rows)
	fmt.Fprintf(stdout, "memory per party %.1f MB, per sample %.0f bytes\n", perParty/(1<<20), perSample)
	fmt.Fprintf(stdout, "wrote %s\n", filepath.Join(f.out, "scale.csv"))
	return nil
}
