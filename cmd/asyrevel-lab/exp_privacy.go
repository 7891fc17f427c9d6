package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/experiment"
	expreport "github.com/asyrevel/asyrevel/experiment/report"
	"github.com/asyrevel/asyrevel/internal/cli"
	"github.com/asyrevel/asyrevel/run"
)

func expPrivacy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("experiment privacy", "asyrevel experiment privacy [--quick] [--sets a9a,mnist] [--seeds N]\n"+
		"asyrevel experiment privacy --goal [--quick] [--sets SETS] [--lengths 90s,15m] [--algos A,B]\n"+
		"asyrevel experiment privacy --goal --ceiling [--sets breast-cancer,wine] [--seeds N] [--draws R]\n\n"+
		"Label inference on a9a and MNIST (8 parties): the paper's wire format, delta and\n"+
		"batch-mean replies, clipped and noised means at several budgets, randomised\n"+
		"response, each attacked by a passive and an active party from the run's log;\n"+
		"test accuracy and privacy accounting of every run. Writes results/privacy.csv,\n"+
		"privacy.png (attack AUC against accuracy) and REPORT-privacy.md.\n\n"+
		"With --goal, the default privacy against --privacy off as a user runs them: each\n"+
		"row is one asyrevel train command (scikit-learn's breast cancer and wine split\n"+
		"over 3 parties, 5 seeds, no length; a9a, 8 parties, 10 s, 20 s, 60 s and no length\n"+
		"for each algorithm the switch defends; MNIST and Fashion-MNIST with make run's\n"+
		"command at 90 s and 15 min), its privacy.json bound, the strongest label attacks\n"+
		"of a passive and an active party read from its log, and the curious aggregator's\n"+
		"feature inference on MNIST 90 s and a9a 20 s. Writes privacy-goal.csv and\n"+
		"privacy-goal-feature.csv (a row run again replaces its earlier one) and the\n"+
		"report's section on them (Defended runs that learn).", stderr)
	f := newExpFlags(fs)
	setsFlag := fs.String("sets", "a9a,mnist", "data sets: a9a, mnist, fashion-mnist")
	netEpochs := fs.Float64("net-epochs", 3, "passes over the training set per party on MNIST and Fashion-MNIST; other than 3,\nthe sets are named with it (mnist-8ep) and run the networks' settings (paper,\nmean-b256, auc0.6) with the paper's network (--model mlp; at 3, linear parties)")
	seeds := fs.Int("seeds", 3, "seeds per setting (--quick: 1)")
	epochs := fs.Float64("epochs", 8, "passes over the training set per party on a9a (MNIST: 3; --quick: 2 and 1)")
	attacker := fs.Int("attacker", 3, "the attacking party")
	aux := fs.Int("aux", 100, "labels the attacker knows (the derivative attack and TIG's direction scoring place\nthe classes with them)")
	only := fs.String("settings", "", "run only these settings (comma-separated, e.g. tig); their rows replace those of\nOUT/privacy.csv, whose other rows are kept")
	reportOnly := fs.Bool("report-only", false, "write privacy.png and REPORT-privacy.md again from OUT/privacy.csv, without\nrunning anything")
	g := newGoalFlags(fs)
	log, err := f.parse(fs, args, stderr)
	if err != nil {
		return err
	}
	if g.ceiling {
		return expPrivacyCeiling(ctx, fs, f, g, *setsFlag, *seeds, stdout)
	}
	if g.goal {
		return expPrivacyGoal(ctx, fs, f, g, *setsFlag, *seeds, *attacker, *aux, log, stdout)
	}
	if *reportOnly {
		sum, err := experiment.ReadPrivacyCSV(filepath.Join(f.out, "privacy.csv"))
		if err != nil {
			return err
		}
		if err := experiment.WritePrivacy(f.out, sum, "asyrevel experiment privacy"); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %s/privacy.png and REPORT-privacy.md from privacy.csv\n", f.out)
		return nil
	}
	n := *seeds
	ep := map[string]float64{"a9a": *epochs, "mnist": *netEpochs}
	if f.quick {
		if !flagGiven(fs, "seeds") {
			n = 1
		}
		if !flagGiven(fs, "epochs") {
			ep["a9a"] = 2
		}
		ep["mnist"] = 1
	}
	cfg := experiment.PrivacyConfig{Sets: map[string]*run.Data{}, Parties: 8, Epochs: ep, Attacker: *attacker, Aux: *aux,
		Settings: experiment.DefaultPrivacySettings(f.quick), Log: log}
	// The networks: MNIST's settings for Fashion-MNIST; at another length
	// than the default, the sets are renamed and run the networks' rows.
	netName := cfg.SetNetworks(*netEpochs, f.quick)
	var old []experiment.PrivacySummary
	if *only != "" {
		if err := cfg.KeepSettings(strings.Split(*only, ",")); err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		if old, err = experiment.ReadPrivacyCSV(filepath.Join(f.out, "privacy.csv")); err != nil && !errors.Is(err, iofs.ErrNotExist) {
			return fmt.Errorf("--settings merges into %s/privacy.csv: %w", f.out, err)
		}
	}
	for i := range n {
		cfg.Seeds = append(cfg.Seeds, f.seed+uint64(i))
	}
	for _, set := range strings.Split(*setsFlag, ",") {
		d, err := experiment.LoadPrivacySet(f.path, set, 8)
		if errors.Is(err, experiment.ErrPrivacyPlan) {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		if err != nil {
			return err
		}
		if n, ok := netName[set]; ok {
			set = n
		}
		cfg.Sets[set], cfg.Order = d, append(cfg.Order, set)
	}
	tmp, err := os.MkdirTemp("", "asyrevel-privacy-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	cfg.Store = tmp
	t0 := time.Now()
	rows, err := experiment.Privacy(ctx, cfg)
	if err != nil {
		return err
	}
	sum := experiment.SummarizePrivacy(rows)
	if *only != "" {
		sum = experiment.MergePrivacy(old, sum)
	}
	cmd := "asyrevel experiment privacy"
	if f.quick {
		cmd += " --quick"
	}
	if flagGiven(fs, "seeds") {
		cmd += " --seeds " + strconv.Itoa(n)
	}
	if flagGiven(fs, "sets") {
		cmd += " --sets " + *setsFlag
	}
	if flagGiven(fs, "net-epochs") {
		cmd += " --net-epochs " + strconv.FormatFloat(*netEpochs, 'g', -1, 64)
	}
	var kept expreport.Run
	if *only != "" {
		cmd += " --settings " + *only
		// The rows kept come from the earlier commands: the section keeps
		// them and their notes, this command after them.
		if runs, err := expreport.ReadRuns(f.out); err == nil {
			kept = runs["privacy"]
		}
	}
	if err := experiment.WritePrivacy(f.out, sum, cmd); err != nil {
		return err
	}
	if len(kept.Commands) > 0 {
		cmds := append(slices.DeleteFunc(slices.Clone(kept.Commands), func(c string) bool { return c == cmd }), cmd)
		notes := append(slices.Clone(kept.Settings), fmt.Sprintf("the last command ran the %s rows of %s again; the start, length and load said here are its own",
			*only, *setsFlag))
		if err := experiment.WriteSection(f.out, experiment.Section{Name: "privacy", Command: strings.Join(cmds, "\n"), Started: t0, Settings: notes}); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "privacy experiment: %d runs' attacks in %s -> %s/privacy.csv, privacy.png, REPORT-privacy.md\n",
		len(rows), time.Since(t0).Round(time.Second), f.out)
	return nil
}

// goalFlags are the flags of experiment privacy --goal.
type goalFlags struct {
	goal                  bool
	lengths, algos        string
	sklearn               string
	activeMax, activeLen  time.Duration
	noActive, budget      bool
	featureAux, featureOf int
	privacies             string
	ceiling               bool
	draws                 int
}

func newGoalFlags(fs *flag.FlagSet) *goalFlags {
	g := &goalFlags{}
	fs.BoolVar(&g.goal, "goal", false, "the goal rows instead (see above): default privacy against --privacy off, as a\nuser runs them; --sets then chooses among breast-cancer, wine, a9a, mnist,\nfashion-mnist (default all), --seeds is the small tables' (default 5)")
	fs.StringVar(&g.lengths, "lengths", "", "--goal: only the rows of these lengths (10s, 20s, 60s, 90s, 15m, none)")
	fs.StringVar(&g.algos, "algos", "", "--goal: a9a's algorithms (default asyrevel-gau,asyrevel-uni,synrevel-gau,nonf)")
	fs.StringVar(&g.sklearn, "sklearn-data", "/usr/lib/python3/dist-packages/sklearn/datasets/data",
		"--goal: the folder of scikit-learn's breast_cancer.csv and wine_data.csv\n(Debian's python3-sklearn puts them there)")
	fs.DurationVar(&g.activeMax, "active-max", 0, "--goal: cap the active attacker's runs at this --duration (0: the row's own)")
	fs.DurationVar(&g.activeLen, "active-length", 0, "--goal: the active attacker's runs' --duration instead of the row's (0: the row's).\nThe attacker isolates one sample a request; a per-label budget ends its requests\nwhen spent, after which a longer run covers no more samples")
	fs.BoolVar(&g.noActive, "no-active", false, "--goal: no run with an active attacker (the rows' active columns stay empty)")
	fs.BoolVar(&g.budget, "budget", false, "--goal: add --privacy auc=0.6,profile=budget (the earlier default) beside MNIST 90 s\nand a9a 20 s")
	fs.StringVar(&g.privacies, "privacies", "", "--goal: only the rows of these privacies (default, off, budget: the --budget rows,\nwhich it implies; empty: all), e.g. --privacies budget to run the budget rows again")
	fs.IntVar(&g.featureAux, "feature-aux", 1000, "--goal: samples whose features the curious aggregator knows")
	fs.IntVar(&g.featureOf, "feature-target", 4, "--goal: the party whose features the aggregator infers")
	fs.BoolVar(&g.ceiling, "ceiling", false, "--goal: instead of the runs, the small tables' centralised ceilings on the goal\n"+
		"rows' splits (no broker; seconds): softmax regression on the true labels, on\n"+
		"randomised response at the bound, and on each party's label-free PCA; writes\n"+
		"privacy-ceiling.csv and its section of the report")
	fs.IntVar(&g.draws, "draws", 20, "--ceiling: randomised-response draws a seed")
	return g
}

// goalPrivacies is the set of goal rows' privacies that --privacies
// names (nil: all): default, off, or budget (experiment.BudgetPrivacy).
func goalPrivacies(names []string) (map[string]bool, error) {
	if len(names) == 0 {
		return nil, nil
	}
	keep := map[string]bool{}
	for _, n := range names {
		switch n {
		case experiment.PrivacyDefault, "off":
			keep[n] = true
		case "budget":
			keep[experiment.BudgetPrivacy] = true
		default:
			return nil, fmt.Errorf("%w: --privacies: %q (the goal rows have default, off, budget)", errUsage, n)
		}
	}
	return keep, nil
}

// expPrivacyCeiling runs experiment privacy --goal --ceiling.
func expPrivacyCeiling(ctx context.Context, fs *flag.FlagSet, f *expFlags, g *goalFlags, setsFlag string, seeds int, stdout io.Writer) error {
	o := experiment.CeilingConfig{Draws: g.draws, Data: experiment.GoalData{Show: map[string]string{}},
		Split: func(args []string) error { return cli.DataSplit(args, io.Discard, io.Discard) }}
	o.Sets = experiment.CeilingSets
	if flagGiven(fs, "sets") {
		o.Sets = strings.Split(setsFlag, ",")
	}
	n := seeds
	if !flagGiven(fs, "seeds") {
		n = 5
	}
	for i := range n {
		o.Seeds = append(o.Seeds, f.seed+uint64(i))
	}
	for _, set := range o.Sets {
		if _, ok := sklearnFiles[set]; !ok {
			return fmt.Errorf("%w: --ceiling: --sets %q (the ceilings are breast-cancer's and wine's)", errUsage, set)
		}
		if err := g.locateSklearn(&o.Data, set); err != nil {
			return err
		}
	}
	tmp, err := os.MkdirTemp("", "asyrevel-privacy-ceiling-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	o.Store = tmp
	cmd := []string{"asyrevel experiment privacy"}
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "out", "log", "data-dir", "sklearn-data":
		case "goal", "ceiling":
			cmd = append(cmd, "--"+fl.Name)
		default:
			cmd = append(cmd, "--"+fl.Name+" "+fl.Value.String())
		}
	})
	started := time.Now()
	rows, err := experiment.Ceiling(ctx, o)
	if err != nil {
		if errors.Is(err, experiment.ErrPrivacyPlan) {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		return err
	}
	if err := experiment.WriteCeiling(f.out, rows, strings.Join(cmd, " "), started); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "privacy ceilings: %d rows in %s -> %s/%s, REPORT.md\n", len(rows), time.Since(started).Round(time.Millisecond),
		f.out, experiment.CeilingFile)
	return nil
}

// expPrivacyGoal runs experiment privacy --goal.
func expPrivacyGoal(ctx context.Context, fs *flag.FlagSet, f *expFlags, g *goalFlags, setsFlag string, seeds, attacker, aux int,
	log zerolog.Logger, stdout io.Writer) error {
	split := func(s string) []string {
		if s == "" {
			return nil
		}
		return strings.Split(s, ",")
	}
	tmp, err := os.MkdirTemp("", "asyrevel-privacy-goal-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	cfg := experiment.GoalConfig{Build: cli.TrainConfig, Split: func(args []string) error { return cli.DataSplit(args, io.Discard, io.Discard) },
		Attacker: attacker, Aux: aux, Active: !g.noActive, ActiveMax: g.activeMax, ActiveLength: g.activeLen, FeatureAux: g.featureAux, FeatureTarget: g.featureOf,
		Store: tmp, Log: log}
	if f.quick {
		if cfg.Runs, err = experiment.GoalQuickPlan(tmp); err != nil {
			return err
		}
		if !flagGiven(fs, "feature-aux") {
			cfg.FeatureAux = 50
		}
		if !flagGiven(fs, "aux") {
			cfg.Aux = 30
		}
	} else {
		keep, err := goalPrivacies(split(g.privacies))
		if err != nil {
			return err
		}
		o := experiment.GoalPlanOptions{Lengths: split(g.lengths), Algos: split(g.algos), Budget: g.budget || keep[experiment.BudgetPrivacy],
			Data: experiment.GoalData{Show: map[string]string{}}}
		if flagGiven(fs, "sets") {
			o.Sets = split(setsFlag)
		} else {
			o.Sets = experiment.GoalSets
		}
		n := seeds
		if !flagGiven(fs, "seeds") {
			n = 5
		}
		for i := range n {
			o.Seeds = append(o.Seeds, f.seed+uint64(i))
		}
		locate := func(dst *string, rel string) error {
			p, err := f.path(rel)
			if err != nil {
				return err
			}
			*dst, o.Data.Show[p] = p, "data/"+rel
			return nil
		}
		for _, set := range o.Sets {
			switch set {
			case "a9a":
				if err := locate(&o.Data.A9A, "a9a/a9a.gz"); err != nil {
					return err
				}
				if err := locate(&o.Data.A9ATest, "a9a/a9a.t.gz"); err != nil {
					return err
				}
			case "mnist":
				if err := locate(&o.Data.MNIST, "mnist"); err != nil {
					return err
				}
			case "fashion-mnist":
				if err := locate(&o.Data.FashionMNIST, "fashion-mnist"); err != nil {
					return err
				}
			case "breast-cancer", "wine":
				if err := g.locateSklearn(&o.Data, set); err != nil {
					return err
				}
			}
		}
		if cfg.Runs, err = experiment.GoalPlan(o); err != nil {
			if errors.Is(err, experiment.ErrPrivacyPlan) {
				return fmt.Errorf("%w: %w", errUsage, err)
			}
			return err
		}
		if len(keep) > 0 {
			cfg.Runs = slices.DeleteFunc(cfg.Runs, func(r experiment.GoalRun) bool { return !keep[r.Privacy] })
		}
		if len(cfg.Runs) == 0 {
			return fmt.Errorf("%w: no goal row has these --sets, --lengths, --algos and --privacies", errUsage)
		}
	}
	// The command as run, without where it read and wrote.
	cmd := []string{"asyrevel experiment privacy"}
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "out", "log", "data-dir", "sklearn-data":
			return
		case "goal", "quick", "no-active", "budget":
			cmd = append(cmd, "--"+fl.Name)
			return
		}
		cmd = append(cmd, "--"+fl.Name+" "+fl.Value.String())
	})
	cmdline := strings.Join(cmd, " ")
	started := time.Now()
	cfg.OnRow = func(rows []experiment.GoalRow, feats []experiment.FeatureRow) error {
		return experiment.WriteGoal(f.out, rows, feats, cmdline, started)
	}
	rows, _, err := experiment.Goal(ctx, cfg)
	if err != nil {
		return err
	}
	failed := 0
	for _, r := range rows {
		if r.Error != "" {
			failed++
		}
	}
	fmt.Fprintf(stdout, "privacy goal rows: %d runs in %s -> %s/%s, %s, REPORT.md\n", len(rows), time.Since(started).Round(time.Second),
		f.out, experiment.GoalFile, experiment.GoalFeatureFile)
	if failed > 0 {
		return fmt.Errorf("%d of %d goal rows failed (their error is in %s)", failed, len(rows), experiment.GoalFile)
	}
	return nil
}

// sklearnFiles are scikit-learn's files of the small tables.
var sklearnFiles = map[string]string{"breast-cancer": "breast_cancer.csv", "wine": "wine_data.csv"}

// locateSklearn sets d's file of the small table set (breast-cancer or
// wine) from --sklearn-data, failing with the fix when it is not there.
func (g *goalFlags) locateSklearn(d *experiment.GoalData, set string) error {
	name := sklearnFiles[set]
	p := filepath.Join(g.sklearn, name)
	if _, err := os.Stat(p); err != nil {
		return fmt.Errorf("%s: scikit-learn's %s (--sklearn-data; Debian's python3-sklearn has it): %w", set, name, err)
	}
	if set == "wine" {
		d.Wine = p
	} else {
		d.BreastCancer = p
	}
	d.Show[p] = name
	return nil
}
