package experiment

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/run"
)

// Fig3Algos are the methods of the paper's Figure 3.
var Fig3Algos = []string{"asyrevel-gau", "asyrevel-uni", "synrevel-gau", "synrevel-uni", "tig"}

// Fig3Config configures the loss-against-time experiment (the paper's
// Figure 3): every method through the pipeline on every set, one party a
// straggler, training loss against wall time.
type Fig3Config struct {
	Sets            []Set
	Locate          Locate
	Algos           []string
	Parties         int
	StragglerFactor float64 // party q's steps take this much longer (every method)
	Duration        time.Duration
	NetDuration     time.Duration // for the network sets
	// Steps, if set, bounds each run in steps too (tests: what a run
	// learns must not depend on how busy the machine is).
	Steps         int64
	Batch, Window int
	Seed          uint64
	Log           zerolog.Logger
}

// Fig3Point is one evaluation of one run.
type Fig3Point struct {
	Set, Algo    string
	Seconds      float64
	Steps        int64
	TrainLoss    float64
	TestAccuracy float64
}

// Fig3Run summarises one run.
type Fig3Run struct {
	Set, Algo     string
	Steps         int64
	Seconds       float64
	StepsPerSec   float64
	FinalLoss     float64
	FinalAccuracy float64
	MaxStaleness  uint32
}

// Fig3 runs the experiment.
func Fig3(ctx context.Context, cfg Fig3Config) ([]Fig3Point, []Fig3Run, error) {
	var pts []Fig3Point
	var runs []Fig3Run
	cache := newLoaded(cfg.Locate)
	for _, set := range cfg.Sets {
		data, err := cache.split(set, cfg.Parties)
		if err != nil {
			return pts, runs, err
		}
		dur := cfg.Duration
		if set.Network {
			dur = cfg.NetDuration
		}
		for _, algo := range cfg.Algos {
			tc := run.New(func(c *run.Config) {
				c.Parties = cfg.Parties
				c.Algo = algo
				c.Model = set.Model()
				c.Batch = cfg.Batch
				c.Window = cfg.Window
				c.Duration = dur
				c.MaxSteps = cfg.Steps
				c.EvalEvery = max(dur/40, 250*time.Millisecond)
				c.Seed = cfg.Seed
				c.Straggler = cfg.Parties
				c.StragglerFactor = cfg.StragglerFactor
			})
			if a, _ := run.LookupAlgo(algo); a.Sync {
				tc.Window = 1 // rounds: one request in flight by definition
			}
			if cfg.StragglerFactor <= 1 {
				tc.Straggler, tc.StragglerFactor = 0, 0
			}
			cfg.Log.Info().Str("set", set.Name).Str("algo", algo).Dur("duration", dur).Msg("fig3 run")
			s, err := run.Train(ctx, tc, run.Hooks{Loaded: data})
			if err != nil {
				return pts, runs, fmt.Errorf("%s %s: %w", set.Name, algo, err)
			}
			for _, p := range s.Curve {
				pts = append(pts, Fig3Point{Set: set.Name, Algo: algo, Seconds: p.Seconds, Steps: p.Steps, TrainLoss: p.TrainLoss, TestAccuracy: p.TestAccuracy})
			}
			runs = append(runs, Fig3Run{Set: set.Name, Algo: algo, Steps: s.Steps, Seconds: s.TrainSeconds, StepsPerSec: s.StepsPerSec,
				FinalLoss: s.TrainLoss, FinalAccuracy: s.TestAccuracy, MaxStaleness: s.MaxStaleness})
			cfg.Log.Info().Str("set", set.Name).Str("algo", algo).Str("loss", fmtF(s.TrainLoss, 4)).Str("acc", fmtF(100*s.TestAccuracy, 2)+"%").
				Str("steps/s", fmtF(s.StepsPerSec, 0)).Msg("done")
		}
	}
	return pts, runs, nil
}

// WriteFig3 writes dir/fig3.csv (every evaluation) and dir/fig3_runs.csv;
// the report draws fig3.png from them.
func WriteFig3(dir string, pts []Fig3Point, runs []Fig3Run) error {
	var recs [][]string
	for _, p := range pts {
		recs = append(recs, []string{p.Set, p.Algo, fmtF(p.Seconds, 3), strconv.FormatInt(p.Steps, 10), fmtF(p.TrainLoss, 6), fmtF(p.TestAccuracy, 4)})
	}
	if err := run.WriteCSV(filepath.Join(dir, "fig3.csv"), []string{"set", "algo", "seconds", "steps", "train_loss", "test_accuracy"}, recs); err != nil {
		return err
	}
	recs = nil
	for _, r := range runs {
		recs = append(recs, []string{r.Set, r.Algo, strconv.FormatInt(r.Steps, 10), fmtF(r.Seconds, 2), fmtF(r.StepsPerSec, 0),
			fmtF(r.FinalLoss, 6), fmtF(r.FinalAccuracy, 4), strconv.FormatUint(uint64(r.MaxStaleness), 10)})
	}
	return run.WriteCSV(filepath.Join(dir, "fig3_runs.csv"), []string{"set", "algo", "steps", "seconds", "steps_per_second",
		"final_train_loss", "final_test_accuracy", "max_staleness"}, recs)
}
