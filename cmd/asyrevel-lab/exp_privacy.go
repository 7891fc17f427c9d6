package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/asyrevel/asyrevel/experiment"
	"github.com/asyrevel/asyrevel/run"
)

func expPrivacy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("experiment privacy", "asyrevel experiment privacy [--quick] [--sets a9a,mnist] [--seeds N]\n\n"+
		"Label inference on a9a and MNIST (8 parties): the paper's wire format, delta and\n"+
		"batch-mean replies, clipped and noised means at several budgets, randomised\n"+
		"response, each attacked by a passive and an active party from the run's log;\n"+
		"test accuracy and privacy accounting of every run. Writes results/privacy.csv,\n"+
		"privacy.png (attack AUC against accuracy) and REPORT-privacy.md.", stderr)
	f := newExpFlags(fs)
	setsFlag := fs.String("sets", "a9a,mnist", "data sets: a9a, mnist, fashion-mnist")
	netEpochs := fs.Float64("net-epochs", 3, "passes over the training set per party on MNIST and Fashion-MNIST; other than 3,\nthe sets are named with it (mnist-8ep) and run the networks' settings (paper,\nmean-b256, auc0.6) with the paper's network (--model mlp; at 3, linear parties)")
	seeds := fs.Int("seeds", 3, "seeds per setting (--quick: 1)")
	epochs := fs.Float64("epochs", 8, "passes over the training set per party on a9a (MNIST: 3; --quick: 2 and 1)")
	attacker := fs.Int("attacker", 3, "the attacking party")
	aux := fs.Int("aux", 100, "labels the attacker knows (the derivative attack and TIG's direction scoring place\nthe classes with them)")
	only := fs.String("settings", "", "run only these settings (comma-separated, e.g. tig); their rows replace those of\nOUT/privacy.csv, whose other rows are kept")
	reportOnly := fs.Bool("report-only", false, "write privacy.png and REPORT-privacy.md again from OUT/privacy.csv, without\nrunning anything")
	log, err := f.parse(fs, args, stderr)
	if err != nil {
		return err
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
	if *only != "" {
		cmd += "; " + cmd + " --settings " + *only
	}
	if err := experiment.WritePrivacy(f.out, sum, cmd); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "privacy experiment: %d runs' attacks in %s -> %s/privacy.csv, privacy.png, REPORT-privacy.md\n",
		len(rows), time.Since(t0).Round(time.Second), f.out)
	return nil
}
