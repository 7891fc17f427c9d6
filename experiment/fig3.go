package experiment

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"time"

	"github.com/rs/zerolog"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

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
	Batch, Window   int
	Seed            uint64
	Log             zerolog.Logger
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
				c.Loaded = data
				c.Parties = cfg.Parties
				c.Algo = algo
				c.Model = set.Model()
				c.Batch = cfg.Batch
				c.Window = cfg.Window
				c.Duration = dur
				c.EvalEvery = max(dur/40, 250*time.Millisecond)
				c.Seed = cfg.Seed
				c.Straggler = cfg.Parties
				c.StragglerFactor = cfg.StragglerFactor
				c.Log = zerolog.Nop()
			})
			if a, _ := run.LookupAlgo(algo); a.Sync {
				tc.Window = 1 // rounds: one request in flight by definition
			}
			if cfg.StragglerFactor <= 1 {
				tc.Straggler, tc.StragglerFactor = 0, 0
			}
			cfg.Log.Info().Str("set", set.Name).Str("algo", algo).Dur("duration", dur).Msg("fig3 run")
			s, err := run.Train(ctx, tc)
			if err != nil {
				return pts, runs, fmt.Errorf("%s %s: %w", set.Name, algo, err)
			}
			for _, p := range s.Curve {
				pts = append(pts, Fig3Point{Set: set.Name, Algo: algo, Seconds: p.Seconds, Steps: p.Steps, TrainLoss: p.TrainLoss, TestAccuracy: p.TestAccuracy})
			}
			runs = append(runs, Fig3Run{Set: set.Name, Algo: algo, Steps: s.Steps, Seconds: s.TrainSeconds, StepsPerSec: s.StepsPerSec,
				FinalLoss: s.TrainLoss, FinalAccuracy: s.TestAccuracy, MaxStaleness: s.MaxStaleness})
			cfg.Log.Info().Str("set", set.Name).Str("algo", algo).Str("loss", fmtF(s.TrainLoss, 4)).Str("acc", pct(s.TestAccuracy)).
				Str("steps/s", fmtF(s.StepsPerSec, 0)).Msg("done")
		}
	}
	return pts, runs, nil
}

// WriteFig3 writes dir/fig3.csv (every evaluation), dir/fig3_runs.csv and
// dir/fig3.png (training loss against time, one panel per set).
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
	if err := run.WriteCSV(filepath.Join(dir, "fig3_runs.csv"), []string{"set", "algo", "steps", "seconds", "steps_per_second",
		"final_train_loss", "final_test_accuracy", "max_staleness"}, recs); err != nil {
		return err
	}
	var sets []string
	for _, r := range runs {
		if len(sets) == 0 || sets[len(sets)-1] != r.Set {
			sets = append(sets, r.Set)
		}
	}
	var grid [][]*plot.Plot
	for i, set := range sets {
		p := plot.New()
		p.Title.Text = set
		p.X.Label.Text = "training time (s)"
		p.Y.Label.Text = "training loss"
		p.Add(plotter.NewGrid())
		lo, hi := math.Inf(1), math.Inf(-1)
		for j, algo := range algosOf(runs, set) {
			var xys plotter.XYs
			for _, pt := range pts {
				if pt.Set == set && pt.Algo == algo && !math.IsNaN(pt.TrainLoss) {
					xys = append(xys, plotter.XY{X: pt.Seconds, Y: pt.TrainLoss})
				}
			}
			if len(xys) < 2 {
				continue
			}
			// The y range: from the lowest loss to the loss after the
			// first tenth of the slowest curve, so that the ends are
			// visible (the first points are far above).
			for _, xy := range xys[1:] {
				lo = math.Min(lo, xy.Y)
			}
			hi = math.Max(hi, xys[min(len(xys)-1, max(1, len(xys)/10))].Y)
			l, err := plotter.NewLine(xys)
			if err != nil {
				return err
			}
			l.Color, l.Dashes = plotutil.Color(j), plotutil.Dashes(j)
			l.Width = vg.Points(1.2)
			p.Add(l)
			p.Legend.Add(algo, l)
		}
		if lo < hi {
			p.Y.Min, p.Y.Max = lo-0.05*(hi-lo), hi
		}
		p.Legend.Top = true
		if i%3 == 0 {
			grid = append(grid, nil)
		}
		grid[len(grid)-1] = append(grid[len(grid)-1], p)
	}
	if len(grid) == 0 {
		return nil
	}
	for len(grid[len(grid)-1]) < min(3, len(sets)) {
		grid[len(grid)-1] = append(grid[len(grid)-1], nil)
	}
	return run.SavePNG(filepath.Join(dir, "fig3.png"), grid, vg.Length(min(3, len(sets)))*4.2*vg.Inch, vg.Length(len(grid))*3.4*vg.Inch)
}

func algosOf(runs []Fig3Run, set string) []string {
	var out []string
	for _, r := range runs {
		if r.Set == set {
			out = append(out, r.Algo)
		}
	}
	return out
}
