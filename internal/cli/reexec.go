package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/asyrevel/asyrevel/aggregator"
	"github.com/asyrevel/asyrevel/replay"
	"github.com/asyrevel/asyrevel/run"
)

// errMismatch reports a re-execution whose replies differ from the log's.
var errMismatch = errors.New("re-execution: the recorded replies are not what the aggregator computes")

type reexecFlags struct {
	on      bool
	summary string
	data    string
	preset  string
	key     string
}

func addReexecFlags(fs *flag.FlagSet) *reexecFlags {
	f := &reexecFlags{}
	fs.BoolVar(&f.on, "reexecute", false, "re-execute the aggregator on the recorded party messages and compare its replies\n(exit 0: every reply is what the aggregator's code computes; 1: the first difference)")
	fs.StringVar(&f.summary, "summary", "", "--reexecute: the run's summary.json (its settings: algorithm, parties, seed, mu,\nhead step size, batch, defense and its key)")
	fs.StringVar(&f.data, "data", "", "--reexecute: the aggregator's labels (its --data; default: the path the summary records)")
	fs.StringVar(&f.preset, "preset", "", "--reexecute: the run's --preset, if the summary's is not to be used")
	fs.StringVar(&f.key, "defense-key", "", "--reexecute: the aggregator's secret key, if the summary does not hold it")
	return f
}

func (f *reexecFlags) run(ctx context.Context, l *replay.Log, stdout, stderr io.Writer) error {
	if f.summary == "" {
		return fmt.Errorf("%w: re-execution needs the run's settings and the aggregator's labels:\n"+
			"  --summary OUT/summary.json   written by train or aggregator --out (algorithm, parties, seed, mu,\n"+
			"                               head step size, batch, defense and its secret key)\n"+
			"  --data PATH                  the aggregator's labels, if not at the path the summary records", errUsage)
	}
	raw, err := os.ReadFile(f.summary)
	if err != nil {
		return fmt.Errorf("--summary: %w", err)
	}
	var s struct {
		Run       string          `json:"run"`
		Settings  run.Settings    `json:"settings"`
		LabelFree json.RawMessage `json:"label_free"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return fmt.Errorf("--summary %s: %w", f.summary, err)
	}
	st := s.Settings
	var missing []string
	if st.Algo == "" || st.Parties == 0 {
		missing = append(missing, "the run's settings (this summary.json predates them: re-run with this version)")
	}
	if s.Run != "" && s.Run != l.Run() {
		return fmt.Errorf("%w: --summary is run %s's, the log is run %s's", errUsage, s.Run, l.Run())
	}
	cfg := run.Defaults()
	st.Apply(&cfg)
	cfg.Run, cfg.Test = l.Run(), "" // test labels play no part in the replies
	cfg.MaxSteps = 1                // replaced by the number of recorded replies
	if f.data != "" {
		cfg.Data, cfg.Synthetic = f.data, nil
		if spec, ok := strings.CutPrefix(f.data, "synthetic"); ok && (spec == "" || spec[0] == ':') {
			sc, err := parseSynthetic(strings.TrimPrefix(spec, ":"), st.Seed)
			if err != nil {
				return err
			}
			cfg.Synthetic = &sc
		}
	}
	if f.preset != "" {
		cfg.Preset = f.preset
	}
	if cfg.Synthetic == nil {
		if cfg.Data == "" {
			missing = append(missing, "the aggregator's labels: --data PATH")
		} else if _, err := os.Stat(cfg.Data); err != nil {
			missing = append(missing, fmt.Sprintf("the aggregator's labels: the summary's %s is not here (%v): --data PATH", cfg.Data, err))
		}
	}
	if f.key != "" {
		cfg.Defense.Key = f.key
	}
	d := &cfg.Defense
	if (d.Noise > 0 || d.NoiseMultiplier > 0 || d.LabelEpsilon > 0 || d.DrawBatches) && d.Key == "" {
		missing = append(missing, "the aggregator's secret key of the defense (noise, randomised response, batches): --defense-key HEX")
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: re-execution needs %s", errUsage, strings.Join(missing, "; and "))
	}
	data, err := run.LoadData(&cfg, run.RoleAggregator)
	if err != nil {
		return fmt.Errorf("loading the aggregator's labels: %w", err)
	}
	ac, err := run.AggregatorConfig(&cfg, data, nil)
	if err != nil {
		return err
	}
	defense := fmt.Sprintf("defense: reply %s", ac.Defense.Reply)
	if len(s.LabelFree) > 0 && string(s.LabelFree) != "null" {
		defense = "label-free: no replies to recompute"
	}
	fmt.Fprintf(stderr, "re-executing run %s: %s, %d parties, %d labels, %s\n", l.Run(), st.Algo, st.Parties, len(data.TrainY), defense)
	rep, err := replay.Reexecute(ctx, l, aggregator.NewReexecutor(ac), func(n uint64) { fmt.Fprintf(stderr, "%d messages\n", n) })
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "re-executed %d messages in %.2f s: %d of %d recorded replies recomputed exactly, %d different, %d missing, %d extra\n",
		rep.Messages, rep.Seconds, rep.Matched, rep.Recorded, rep.Differ, rep.Missing, rep.Extra)
	if len(rep.Rejected) > 0 {
		fmt.Fprintf(stdout, "party messages the fresh aggregator rejected: %v (state: evaluation rounds its clock did not request, which play no part in the replies)\n", rep.Rejected)
	}
	if rep.OK() {
		fmt.Fprintln(stdout, "every reply in the log is what the aggregator's code computes from what it received")
		return nil
	}
	fmt.Fprintf(stdout, "first difference: %s\n", rep.First)
	return fmt.Errorf("%w: %s", errMismatch, rep.First)
}
