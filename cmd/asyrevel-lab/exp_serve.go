package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/asyrevel/asyrevel/experiment"
)

func expServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("experiment serve", "asyrevel experiment serve [--quick]\n\n"+
		"Trains a9a models (8 parties, in one process), then measures batch predictions per second on\n"+
		"a9a's test set for the memory bus and the embedded broker (TCP, in-process), the HTTP service's\n"+
		"latency (p50, p99, p99.9) for single-id requests at 100, 1,000 and 5,000 a second, signed and\n"+
		"not, and at 100 and 1,000 with party 8 behind a proxy adding 20 ms a round trip, and the\n"+
		"memory of a party's index of 1M ids: results/serve.csv and its REPORT.md section.", stderr)
	f := newExpFlags(fs)
	dur := fs.Duration("duration", 10*time.Second, "load time per rate")
	log, err := f.parse(fs, args, stderr)
	if err != nil {
		return err
	}
	started := time.Now()
	train, err := f.path("a9a/a9a.gz")
	if err != nil {
		return fmt.Errorf("experiment serve measures on a9a: %w", err)
	}
	test, err := f.path("a9a/a9a.t.gz")
	if err != nil {
		return err
	}
	cfg := experiment.ServeConfig{Data: train, Test: test, Duration: *dur, IndexIDs: 1_000_000, Log: log}
	if f.quick && !flagGiven(fs, "duration") {
		cfg.Duration, cfg.Repeats = 3*time.Second, 2
	}
	if cfg.Dir, err = os.MkdirTemp("", "asyrevel-serve-"); err != nil {
		return err
	}
	defer os.RemoveAll(cfg.Dir)
	r, err := experiment.Serve(ctx, cfg)
	if err != nil {
		return err
	}
	command := "asyrevel experiment serve"
	if f.quick {
		command += " --quick"
	}
	if err := os.MkdirAll(f.out, 0o755); err != nil {
		return err
	}
	if err := experiment.WriteServe(f.out, cfg, r, command, started); err != nil {
		return err
	}
	for _, row := range r.Rows {
		switch row.Kind {
		case "batch":
			fmt.Fprintf(stdout, "batch %-20s %10.0f predictions/s\n", row.Bus, row.Value)
		case "online":
			fmt.Fprintf(stdout, "online %s signed=%-5v %5.0f/s: p50 %.2f ms, p99 %.2f ms, p99.9 %.2f ms (%d ok, %d failed)\n", row.Bus, row.Signed, row.Rate, row.P50, row.P99, row.P999, row.OK, row.Failed)
		case "memory":
			fmt.Fprintf(stdout, "memory: %.1f MB for %d ids\n", row.Value/(1<<20), cfg.IndexIDs)
		case "sequential":
			fmt.Fprintf(stdout, "sequential %s signed=%-5v: p50 %.2f ms, p99 %.2f ms, %.0f µs CPU a request\n", row.Bus, row.Signed, row.P50, row.P99, row.Value)
		}
	}
	fmt.Fprintf(stdout, "accuracy %.10f (the run's test_accuracy %.10f)\nwrote %s and its section of %s\n", r.Accuracy, r.TrainAcc,
		filepath.Join(f.out, "serve.csv"), filepath.Join(f.out, experiment.ReportFile))
	return nil
}
