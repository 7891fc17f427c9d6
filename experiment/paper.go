package experiment

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/run"
)

// ErrNoTable4 is returned by RebuildTable4 for a folder without a
// table4.csv to rebuild from.
var ErrNoTable4 = errors.New("nothing to rebuild")

// PaperConfig is one of the paper's experiments as `asyrevel experiment
// NAME` gives it (the command line applies its --quick values first).
type PaperConfig struct {
	Name    string // fig3, table3, table4, fig4 or validate
	Command string // the command line, recorded in runs.csv
	Out     string // the results folder (CSV files, plots, REPORT.md)
	Quick   bool   // fig4: no real-pipeline checks
	Seed    uint64
	Locate  func(rel string) (string, error) // finds a data set's file
	Log     zerolog.Logger

	Sets             []Set
	SetsText, QsText string // --sets and --qs as given, for the report
	Qs, CheckQs      []int  // fig4 and validate

	Duration, NetDuration time.Duration // fig3, table4, validate
	Straggler             float64       // fig3, fig4, validate
	Batch, Window         int           // fig3, table3
	Steps, Steps0         int64         // table3
	Trials, NetTrials     int           // table4
	Table4Steps           int64         // table4 --steps
	FromTrials            bool          // table4: rebuild from table4_trials.csv, run nothing

	Suboptimality, NetworkLoss float64       // fig4
	Latency, Budget            time.Duration // fig4
	MaxSteps                   int64         // fig4
	Seeds, Parallel            int           // fig4

	Share float64 // validate: processor share of a party's cgroup
	Exe   string  // validate: this program, which runs the parties
}

// RunPaper runs one of the paper's experiments, writes its CSV files and
// its run (runs.csv) into p.Out, writes p.Out's REPORT.md again, and says
// what it wrote on stdout. An interrupted fig4 writes the sets whose
// simulations all finished and returns the interruption.
func RunPaper(ctx context.Context, p PaperConfig, stdout io.Writer) error {
	name, cmd, log, sets, qs, checkQs, q, locate := p.Name, p.Command, p.Log, p.Sets, p.Qs, p.CheckQs, p.Quick, p.Locate
	sec := Section{Name: name, Command: cmd, Machine: Machine(), Load: LoadAverage(), Started: time.Now()}
	out := p.Out
	var stopped error // an interrupt after part of the work, which is written
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	switch name {
	case "validate":
		f4 := Fig4Defaults(sets)
		f4.Locate, f4.StragglerFactor, f4.Seed, f4.Log = locate, p.Straggler, p.Seed, log
		cfg := ValidateConfig{Fig4: f4, Qs: qs, Share: p.Share, Duration: p.Duration, Exe: p.Exe}
		rows, _, err := Validate(ctx, cfg)
		if err != nil {
			return err
		}
		if err := WriteValidate(out, rows); err != nil {
			return err
		}
		sec.Settings = []string{fmt.Sprintf("set %s, q = %s, AsyREVEL-Gau and SynREVEL-Gau, %v of training a run, seed %d", p.SetsText, p.QsText, p.Duration, p.Seed),
			fmt.Sprintf("batch and step size as Figure 4's: %s", fig4Steps(f4)),
			fmt.Sprintf("CFS quota period %v; the straggler's share the party share over %g; the aggregator and broker's cgroup %g of a processor; calibration runs of %v",
				DefaultPeriod, p.Straggler, 1.0, DefaultCalibrate)}
		fmt.Fprintf(stdout, "wrote %s\n", filepath.Join(out, "validate.csv"))
	case "fig3":
		cfg := Fig3Config{Sets: sets, Locate: locate, Algos: Fig3Algos, Parties: 8, StragglerFactor: p.Straggler,
			Duration: p.Duration, NetDuration: p.NetDuration, Batch: p.Batch, Window: p.Window, Seed: p.Seed, Log: log}
		pts, runs, err := Fig3(ctx, cfg)
		if err != nil {
			return err
		}
		if err := WriteFig3(out, pts, runs); err != nil {
			return err
		}
		sec.Settings = []string{
			fmt.Sprintf("8 parties, batch %d, %d request(s) in flight per party for the asynchronous methods (SynREVEL: 1 by definition), seed %d", p.Batch, p.Window, p.Seed),
			fmt.Sprintf("party 8 a %gx straggler in every run (a delay proportional to its measured compute)", p.Straggler),
			fmt.Sprintf("logistic regression (linear parties, logistic head with intercept, nonconvex regulariser, lambda 1e-4) for %v a run; the paper's network (MLP d_m x 128 x 1, softmax head 8 x 10) for %v", p.Duration, p.NetDuration),
			"default step sizes of `asyrevel train` for each algorithm and model; embedded JetStream over TCP loopback",
		}
		fmt.Fprintf(stdout, "wrote %s, %s and %s\n", filepath.Join(out, "fig3.csv"), filepath.Join(out, "fig3_runs.csv"), filepath.Join(out, "fig3.png"))
	case "table3":
		cfg := Table3Config{Sets: sets, Locate: locate, Parties: 8, Batch: p.Batch, Steps: p.Steps, Steps0: p.Steps0, Seed: p.Seed, Log: log}
		rows, err := Table3(ctx, cfg)
		if err != nil {
			return err
		}
		if err := WriteTable3(out, rows); err != nil {
			return err
		}
		sec.Settings = []string{
			fmt.Sprintf("8 parties, batch %d, one request in flight per party; each configuration run for %d and for %d answered requests", p.Batch, p.Steps0, p.Steps),
			"embedded JetStream over TCP loopback: every message stored in the run's stream and delivered by a durable consumer",
		}
		fmt.Fprintf(stdout, "wrote %s\n", filepath.Join(out, "table3.csv"))
	case "table4":
		if p.FromTrials {
			return RebuildTable4(out, cmd, stdout)
		}
		cfg := Table4Config{Sets: sets, Locate: locate, Parties: 8, Trials: p.Trials, NetTrials: p.NetTrials,
			Duration: p.Duration, NetDuration: p.NetDuration, Steps: p.Table4Steps, Seed: p.Seed, Log: log}
		rows, trials, err := Table4(ctx, cfg)
		if err != nil {
			return err
		}
		// The sets of an earlier run that this one did not measure stay.
		oldRows, oldTrials, err := ReadTable4(out)
		if err != nil {
			log.Warn().Err(err).Msg("the earlier table4.csv is not kept")
		}
		var kept []string
		prev := sectionRun(out, "table4").Commands
		if rows, trials, kept = MergeTable4(oldRows, oldTrials, rows, trials); len(kept) > 0 && len(prev) > 0 {
			if p := Table4Provenance(prev, kept); len(p) > 0 {
				sec.Command = strings.Join(append(p, cmd), "\n")
			}
		}
		if err := WriteTable4(out, rows, trials); err != nil {
			return err
		}
		sec.Settings = []string{
			fmt.Sprintf("AsyREVEL-Gau and -Uni with 8 parties, NonF with 1; %d trials of %v on the logistic-regression sets, %d of %v on the network sets; seeds %d, %d, ...",
				p.Trials, p.Duration, p.NetTrials, p.NetDuration, p.Seed, p.Seed+1) + stepsText(p.Table4Steps),
			fmt.Sprintf("the defaults of `asyrevel train` (batch 64, window 8; on the network sets --model mlp with its own: batch %d, window %d, step size decaying over %d passes); "+
				"NonF's party on a network set is one MLP 784 x 128 x 8 (the head sees 8 values, as with 8 parties)", run.MLPBatch, run.MLPWindow, run.MLPDecayEpochs),
			"embedded JetStream over TCP loopback",
		}
		if len(kept) > 0 {
			sec.Settings = append(sec.Settings, fmt.Sprintf("the rows of %s are kept from an earlier run (the command before the last; "+
				"the table's last column gives each set's trials), the settings above are the last command's", strings.Join(kept, ", ")))
		}
		fmt.Fprintf(stdout, "wrote %s and %s\n", filepath.Join(out, "table4.csv"), filepath.Join(out, "table4_trials.csv"))
	case "fig4":
		if q {
			checkQs = nil
		}
		cfg := Fig4Defaults(sets)
		cfg.Locate, cfg.Qs, cfg.Suboptimality, cfg.NetworkLoss = locate, qs, p.Suboptimality, p.NetworkLoss
		cfg.StragglerFactor, cfg.Latency, cfg.Budget, cfg.MaxSteps = p.Straggler, p.Latency, p.Budget, p.MaxSteps
		cfg.Seed, cfg.Seeds, cfg.Log, cfg.CheckQs, cfg.Parallel = p.Seed, p.Seeds, log, checkQs, p.Parallel
		rows, checks, costs, err := Fig4(ctx, cfg)
		var kept []string
		if err != nil {
			// A full sweep takes hours a set: an interrupt keeps the sets
			// whose simulations all finished.
			if ctx.Err() == nil {
				return err
			}
			if rows, kept = finishedSets(rows, len(qs)*len(Fig4Modes)*max(p.Seeds, 1)); len(rows) == 0 {
				return err
			}
			var keptCosts []Fig4Cost
			for _, c := range costs {
				if slices.Contains(kept, c.Set) {
					keptCosts = append(keptCosts, c)
				}
			}
			costs, stopped = keptCosts, err
		}
		if err := WriteFig4(out, rows, checks, costs); err != nil {
			return err
		}
		sec.Settings = []string{
			fmt.Sprintf("q = %s; AsyREVEL-Gau (one request in flight per party) against SynREVEL-Gau; party q a %gx straggler (q > 1)", p.QsText, p.Straggler),
			fmt.Sprintf("target f - f* <= %g (logistic sets), training loss <= %g (network); budget %v virtual time or %d answered requests a run", p.Suboptimality, p.NetworkLoss, p.Budget, p.MaxSteps),
			fmt.Sprintf("%d seeds (%d, %d, ...) a configuration; costs measured here first (below), message time %s", p.Seeds, p.Seed, p.Seed+1, latencyText(p.Latency)),
			fmt.Sprintf("batch and step size: %s", fig4Steps(cfg)),
		}
		if stopped != nil {
			sec.Settings = append(sec.Settings, fmt.Sprintf("**interrupted**: only %s finished (%v); the other sets and any missing checks were not run",
				strings.Join(kept, ", "), stopped))
		}
		fmt.Fprintf(stdout, "wrote %s, %s and %s\n", filepath.Join(out, "fig4.csv"), filepath.Join(out, "fig4_check.csv"), filepath.Join(out, "fig4.png"))
	}
	sec.Duration = time.Since(sec.Started)
	if err := WriteSection(out, sec); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s took %v; %s written again from the CSV files\n", name, sec.Duration.Round(time.Second), filepath.Join(out, ReportFile))
	if stopped != nil {
		return fmt.Errorf("%s interrupted; the finished part is written: %w", name, stopped)
	}
	return nil
}

// finishedSets keeps the rows of the sets that have all theirs (per of
// them), in order, and names those sets.
func finishedSets(rows []Fig4Row, per int) ([]Fig4Row, []string) {
	count := map[string]int{}
	for _, r := range rows {
		count[r.Set]++
	}
	var keep []Fig4Row
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

// Fig4Defaults are the per-set settings of the speed-up
func Fig4Defaults(sets []Set) Fig4Config {
	cfg := Fig4Config{Sets: sets, Batch: map[string]int{}, LR: map[string]float64{},
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

func fig4Steps(cfg Fig4Config) string {
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

func stepsText(n int64) string {
	if n <= 0 {
		return ""
	}
	return fmt.Sprintf(" (logistic-regression runs bounded by %d answered requests, all parties together, the same for every method, the duration capping them)", n)
}

// Table4Provenance keeps, of the earlier table4 commands (in order), those
// that last measured one of the kept sets.
func Table4Provenance(cmds, kept []string) []string {
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

// RebuildTable4 rebuilds Table 4 from the runs already in dir (table4.csv
// for what the runs do not hold, table4_trials.csv for every run): the
// statistics, the paper's figures, the tests and the flags are computed
// again; nothing is run. The section keeps the commands and settings of
// the runs, with this command added.
func RebuildTable4(dir, cmd string, stdout io.Writer) error {
	rows, trials, err := ReadTable4(dir)
	if err != nil {
		return err
	}
	if len(rows) == 0 {
		return fmt.Errorf("%w: no table4.csv in %s to rebuild from", ErrNoTable4, dir)
	}
	rows = Table4FromTrials(rows, trials)
	if err := WriteTable4(dir, rows, trials); err != nil {
		return err
	}
	sec := Section{Name: "table4", Machine: Machine(), Load: LoadAverage(), Started: time.Now()}
	prev := sectionRun(dir, "table4")
	var keep []string
	for _, c := range prev.Commands {
		if !strings.Contains(c, "--from-trials") {
			keep = append(keep, c)
		}
	}
	sec.Command = strings.Join(append(keep, cmd), "\n")
	for _, s := range prev.Settings {
		if !strings.HasPrefix(s, "rebuilt by ") {
			sec.Settings = append(sec.Settings, s)
		}
	}
	sec.Settings = append(sec.Settings,
		"rebuilt by `"+cmd+"` from the runs in table4_trials.csv (the runs are the commands' above; the time and machine are the rebuild's)")
	sec.Duration = time.Since(sec.Started)
	if err := WriteSection(dir, sec); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "rebuilt %s and %s from %d runs\n", filepath.Join(dir, "table4.csv"), filepath.Join(dir, ReportFile), len(trials))
	return nil
}

// latencyText describes the simulation's message time.
func latencyText(l time.Duration) string {
	if l > 0 {
		return fmt.Sprintf("%v each way (given)", l)
	}
	return "measured through the embedded broker"
}
