package experiment

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/asyrevel/asyrevel/experiment/sim"

	"github.com/asyrevel/asyrevel/run"

	"github.com/rs/zerolog"
)

// TTAConfig configures the time-to-accuracy experiment: the pipeline on
// each bus against the single-process reference loop, same settings.
type TTAConfig struct {
	Data      *run.Data
	Parties   int
	Target    float64
	Seeds     []uint64
	Batch     int
	Window    int
	Variants  []string      // pipeline variants (see Variants)
	Budget    time.Duration // give up after this much training time
	EvalEvery time.Duration // pipeline evaluation period (the time resolution)
	Log       zerolog.Logger
}

// TTARow is one run of the time-to-accuracy experiment.
type TTARow struct {
	System        string // "reference" or the variant
	Seed          uint64
	Seconds       float64 // training time to the target (-1 if not reached)
	Steps         int64   // party steps at the target
	WallSeconds   float64 // the whole run, setup included (pipeline only)
	FinalAccuracy float64
}

// TimeToAccuracy runs every configuration once per seed.
func TimeToAccuracy(ctx context.Context, cfg TTAConfig) ([]TTARow, error) {
	var rows []TTARow
	for _, seed := range cfg.Seeds {
		tc := run.New(func(c *run.Config) {
			c.Parties = cfg.Parties
			c.Algo = "asyrevel-gau"
			c.Batch = cfg.Batch
			c.Window = cfg.Window
			c.Duration = cfg.Budget
			c.TargetAcc = cfg.Target
			c.StopAtTarget = true
			c.EvalEvery = cfg.EvalEvery
			c.Seed = seed
		})
		ref, _, err := sim.ReferenceFor(ctx, tc, cfg.Data, int64(max(2000/cfg.Batch, 50)), nil)
		if err != nil {
			return rows, fmt.Errorf("reference: %w", err)
		}
		r := TTARow{System: "reference", Seed: seed, Seconds: ref.TimeToTarget, Steps: ref.StepsToTarget, FinalAccuracy: ref.TestAccuracy, WallSeconds: ref.Seconds}
		if ref.TimeToTarget < 0 {
			r.Steps = -1
		}
		cfg.Log.Info().Str("system", r.System).Uint64("seed", seed).Str("seconds", fmtF(r.Seconds, 3)).Int64("steps", r.Steps).Msg("time to accuracy")
		rows = append(rows, r)
		for _, name := range cfg.Variants {
			v, err := parseVariant(name)
			if err != nil {
				return rows, err
			}
			tb := tc
			tb.Run = shortRun()
			v.apply(&tb)
			s, err := run.Train(ctx, tb, run.Hooks{Loaded: cfg.Data})
			if err != nil {
				return rows, fmt.Errorf("%s: %w", name, err)
			}
			r := TTARow{System: name, Seed: seed, Seconds: s.TimeToTarget, Steps: -1, WallSeconds: s.WallSeconds, FinalAccuracy: s.TestAccuracy}
			for _, p := range s.Curve {
				if p.TestAccuracy >= cfg.Target {
					r.Steps = p.Steps
					break
				}
			}
			cfg.Log.Info().Str("system", r.System).Uint64("seed", seed).Str("seconds", fmtF(r.Seconds, 3)).Int64("steps", r.Steps).
				Str("wall", fmtF(r.WallSeconds, 2)).Msg("time to accuracy")
			rows = append(rows, r)
		}
	}
	return rows, nil
}

// MedianSeconds is the median time to target of a system's runs; a run
// that did not reach the target counts as +Inf.
func MedianSeconds(rows []TTARow, system string) float64 {
	var v []float64
	for _, r := range rows {
		if r.System == system {
			s := r.Seconds
			if s < 0 {
				s = inf
			}
			v = append(v, s)
		}
	}
	if len(v) == 0 {
		return nanF
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// WriteTTA writes rows to dir/time_to_accuracy.csv.
func WriteTTA(dir string, rows []TTARow) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var recs [][]string
	for _, r := range rows {
		recs = append(recs, []string{r.System, strconv.FormatUint(r.Seed, 10), fmtF(r.Seconds, 3), strconv.FormatInt(r.Steps, 10),
			fmtF(r.WallSeconds, 3), fmtF(r.FinalAccuracy, 4)})
	}
	if err := run.WriteCSV(filepath.Join(dir, "time_to_accuracy.csv"),
		[]string{"system", "seed", "seconds_to_target", "steps_to_target", "wall_seconds", "final_accuracy"}, recs); err != nil {
		return err
	}
	return record(dir, "tta")
}
