package experiment

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/asyrevel/asyrevel/experiment/report"
	"github.com/asyrevel/asyrevel/experiment/sim"

	"github.com/rs/zerolog"
	"gonum.org/v1/gonum/stat"

	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/run"
)

// Table4Config configures the losslessness experiment (the paper's Table
// 4): test accuracy of AsyREVEL-Gau and -Uni (q parties) against NonF (all
// features at one party), Trials runs each with seeds Seed, Seed+1, ...
type Table4Config struct {
	Sets        []Set
	Locate      Locate
	Parties     int
	Trials      int
	NetTrials   int // trials on the network sets
	Duration    time.Duration
	NetDuration time.Duration
	// Steps, if set, bounds a run on a logistic-regression set by answered
	// requests (all parties together, the same for every method) instead
	// of by Duration, so that every trial does the same work however
	// loaded the machine is (Duration then only caps it). Equal steps are
	// the fair bound for zeroth-order methods: q parties perturbing d/q
	// parameters each for T/q steps and one party perturbing d for T both
	// converge at a rate of order d/T. Too few, and the comparison is of
	// how far each has got, not of where it ends (UCI credit card: NonF
	// 79.85% after 25,000 steps, 80.51% after 200,000; w8a: AsyREVEL-Gau
	// 97.10% after 25,000, 97.92% after 1,000,000): the step budget is
	// chosen per set, large enough for both to level off.
	Steps int64
	Seed  uint64
	Log   zerolog.Logger
}

// runSteps is the step bound of a run on set (0: none).
func (cfg *Table4Config) runSteps(set Set) int64 {
	if cfg.Steps <= 0 || set.Network {
		return 0
	}
	return cfg.Steps
}

// Table4Trial is one run.
type Table4Trial struct {
	Set, Algo string
	Seed      uint64
	Accuracy  float64
	Steps     int64
	Seconds   float64
	Failed    string // why the run failed ("" if it did not)
}

// Table4Row summarises a set and method.
type Table4Row struct {
	Set, Algo string
	Trials    int
	Mean, SD  float64
	Min, Max  float64
	Central   float64 // centralised L-BFGS logistic regression (binary sets; NaN otherwise)
	Majority  float64 // the test set's majority-class rate
	Paper     float64 // the paper's figure for this set and method; NaN where not known
	Duration  time.Duration
	MaxSteps  int64 // answered requests a run (0: Duration bounds the runs)
	Failed    int   // runs that failed (not in the mean)
	StepsMean float64
}

// Table4 runs the experiment.
func Table4(ctx context.Context, cfg Table4Config) ([]Table4Row, []Table4Trial, error) {
	var rows []Table4Row
	var trials []Table4Trial
	cache := newLoaded(cfg.Locate)
	for _, set := range cfg.Sets {
		tr, te, err := cache.get(set)
		if err != nil {
			return rows, trials, err
		}
		central, majority := math.NaN(), math.NaN()
		if te != nil {
			counts := map[int32]int{}
			for _, y := range te.Y {
				counts[y]++
			}
			best := 0
			for _, c := range counts {
				best = max(best, c)
			}
			majority = float64(best) / float64(te.Len())
		}
		if !set.Network {
			c, err := sim.CentralLogistic(tr, te, model.Nonconvex{}, 1e-4, true)
			if err != nil {
				return rows, trials, err
			}
			central = c.TestAccuracy
		}
		n, dur := cfg.Trials, cfg.Duration
		if set.Network {
			n, dur = cfg.NetTrials, cfg.NetDuration
		}
		for _, algo := range report.Table4Algos {
			q := cfg.Parties
			if algo == "nonf" {
				q = 1
			}
			data, err := cache.split(set, q)
			if err != nil {
				return rows, trials, err
			}
			var accs, steps []float64
			failed := 0
			for i := range n {
				seed := cfg.Seed + uint64(i)
				tc := run.New(func(c *run.Config) {
					c.Parties = q
					c.Algo = algo
					c.Model = set.Model()
					c.Duration = dur
					c.EvalEvery = dur / 10
					c.Seed = seed
				})
				if steps := cfg.runSteps(set); steps > 0 {
					tc.MaxSteps = steps
				}
				s, err := run.Train(ctx, tc, run.Hooks{Loaded: data})
				if err != nil && ctx.Err() != nil {
					return rows, trials, fmt.Errorf("%s %s seed %d: %w", set.Name, algo, seed, err)
				}
				if err != nil {
					// A run that fails (one that diverges until the
					// aggregator rejects its outputs) is a result: it is
					// recorded, and the other runs go on.
					cfg.Log.Warn().Err(err).Str("set", set.Name).Str("algo", algo).Uint64("seed", seed).Msg("table4 trial failed")
					trials = append(trials, Table4Trial{Set: set.Name, Algo: algo, Seed: seed, Accuracy: math.NaN(), Failed: err.Error()})
					failed++
					continue
				}
				t := Table4Trial{Set: set.Name, Algo: algo, Seed: seed, Accuracy: s.TestAccuracy, Steps: s.Steps, Seconds: s.TrainSeconds}
				trials = append(trials, t)
				accs, steps = append(accs, t.Accuracy), append(steps, float64(t.Steps))
				cfg.Log.Info().Str("set", set.Name).Str("algo", algo).Uint64("seed", seed).Str("acc", fmtF(100*t.Accuracy, 2)+"%").
					Int64("steps", t.Steps).Msg("table4 trial")
			}
			r := Table4Row{Set: set.Name, Algo: algo, Trials: n, Central: central, Majority: majority, Duration: dur}
			r.MaxSteps = cfg.runSteps(set)
			r.summarise(accs, steps, failed)
			rows = append(rows, r)
		}
	}
	return rows, trials, nil
}

// summarise fills the row's statistics from its finished runs' accuracies
// and steps, and the paper's figure.
func (r *Table4Row) summarise(accs, steps []float64, failed int) {
	r.Paper = report.PaperFigure(r.Set, r.Algo)
	r.Failed = failed
	r.Mean, r.SD, r.Min, r.Max, r.StepsMean = math.NaN(), math.NaN(), math.Inf(1), math.Inf(-1), math.NaN()
	if len(accs) > 0 {
		r.Mean, r.SD = stat.MeanStdDev(accs, nil)
		r.StepsMean = stat.Mean(steps, nil)
	}
	if len(accs) < 2 {
		r.SD = math.NaN()
	}
	for _, a := range accs {
		r.Min, r.Max = math.Min(r.Min, a), math.Max(r.Max, a)
	}
}

// Table4FromTrials recomputes every row's statistics (mean, spread,
// failures, steps) and the paper's figures from the runs in trials, keeping
// what the runs do not hold (the centralised accuracy, the majority rate,
// the budget): Table 4 regenerated from table4_trials.csv without running
// anything.
func Table4FromTrials(rows []Table4Row, trials []Table4Trial) []Table4Row {
	out := make([]Table4Row, len(rows))
	for i, r := range rows {
		var accs, steps []float64
		failed := 0
		for _, t := range trials {
			if t.Set != r.Set || t.Algo != r.Algo {
				continue
			}
			if t.Failed != "" || math.IsNaN(t.Accuracy) {
				failed++
				continue
			}
			accs, steps = append(accs, t.Accuracy), append(steps, float64(t.Steps))
		}
		r.Trials = len(accs) + failed
		r.summarise(accs, steps, failed)
		out[i] = r
	}
	return out
}

// WriteTable4 writes dir/table4.csv (per set and method) and
// dir/table4_trials.csv (every run).
func WriteTable4(dir string, rows []Table4Row, trials []Table4Trial) error {
	var recs [][]string
	for _, r := range rows {
		recs = append(recs, []string{r.Set, r.Algo, strconv.Itoa(r.Trials), fmtF(r.Mean, 5), fmtF(r.SD, 5), fmtF(r.Min, 4), fmtF(r.Max, 4),
			fmtF(r.Central, 4), fmtF(r.Majority, 4), fmtF(r.Paper, 4), fmtF(r.Duration.Seconds(), 0), fmtF(r.StepsMean, 0), strconv.FormatInt(r.MaxSteps, 10), strconv.Itoa(r.Failed)})
	}
	if err := run.WriteCSV(filepath.Join(dir, "table4.csv"), []string{"set", "algo", "trials", "mean_accuracy", "sd", "min", "max",
		"central_lbfgs", "majority_rate", "paper", "seconds_per_trial", "mean_steps", "max_steps", "failed"}, recs); err != nil {
		return err
	}
	recs = nil
	for _, t := range trials {
		recs = append(recs, []string{t.Set, t.Algo, strconv.FormatUint(t.Seed, 10), fmtF(t.Accuracy, 5), strconv.FormatInt(t.Steps, 10), fmtF(t.Seconds, 1), t.Failed})
	}
	return run.WriteCSV(filepath.Join(dir, "table4_trials.csv"), []string{"set", "algo", "seed", "test_accuracy", "steps", "seconds", "failed"}, recs)
}

// ReadTable4 reads back what WriteTable4 wrote in dir (no files: nil and
// no error).
func ReadTable4(dir string) ([]Table4Row, []Table4Trial, error) {
	recs, err := readCSV(filepath.Join(dir, "table4.csv"), "set", 12)
	if err != nil || recs == nil {
		return nil, nil, err
	}
	num := func(s string) float64 {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return math.NaN()
		}
		return v
	}
	var rows []Table4Row
	for _, r := range recs {
		n, _ := strconv.Atoi(r[2])
		rows = append(rows, Table4Row{Set: r[0], Algo: r[1], Trials: n, Mean: num(r[3]), SD: num(r[4]), Min: num(r[5]), Max: num(r[6]),
			Central: num(r[7]), Majority: num(r[8]), Paper: num(r[9]), Duration: time.Duration(num(r[10]) * float64(time.Second)), StepsMean: num(r[11])})
		if len(r) > 12 {
			rows[len(rows)-1].MaxSteps, _ = strconv.ParseInt(r[12], 10, 64)
		}
		if len(r) > 13 {
			rows[len(rows)-1].Failed, _ = strconv.Atoi(r[13])
		}
	}
	recs, err = readCSV(filepath.Join(dir, "table4_trials.csv"), "set", 6)
	if err != nil {
		return nil, nil, err
	}
	var trials []Table4Trial
	for _, r := range recs {
		seed, _ := strconv.ParseUint(r[2], 10, 64)
		steps, _ := strconv.ParseInt(r[4], 10, 64)
		trials = append(trials, Table4Trial{Set: r[0], Algo: r[1], Seed: seed, Accuracy: num(r[3]), Steps: steps, Seconds: num(r[5])})
		if len(r) > 6 {
			trials[len(trials)-1].Failed = r[6]
		}
	}
	return rows, trials, nil
}

// MergeTable4 keeps the rows and trials of old whose sets the new run did
// not measure, in front of the new ones; kept lists those sets.
func MergeTable4(oldRows []Table4Row, oldTrials []Table4Trial, rows []Table4Row, trials []Table4Trial) (mr []Table4Row, mt []Table4Trial, kept []string) {
	var fresh []string
	for _, r := range rows {
		if !slices.Contains(fresh, r.Set) {
			fresh = append(fresh, r.Set)
		}
	}
	for _, r := range oldRows {
		if !slices.Contains(fresh, r.Set) {
			mr = append(mr, r)
			if !slices.Contains(kept, r.Set) {
				kept = append(kept, r.Set)
			}
		}
	}
	for _, t := range oldTrials {
		if !slices.Contains(fresh, t.Set) {
			mt = append(mt, t)
		}
	}
	return append(mr, rows...), append(mt, trials...), kept
}

// readCSV reads a CSV file with a header whose first column is first and
// at least cols columns (nil if the file does not exist).
func readCSV(path, first string, cols int) ([][]string, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(recs) == 0 || len(recs[0]) < cols || recs[0][0] != first {
		return nil, fmt.Errorf("%s: not a file of this version", path)
	}
	return recs[1:], nil
}
