package experiment

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/asyrevel/asyrevel/run"

	"github.com/rs/zerolog"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// PaperNN are the paper's test accuracies for its neural network, as the
// project's issue quotes them.
var PaperNN = map[string]float64{"mnist": 0.9189, "fashion-mnist": 0.8132}

// NNConfig configures the neural-network experiment: the paper's network
// (8 parties, local MLP d_m x 128 x 1, softmax head 8 x 10) on IDX sets,
// trained by AsyREVEL-Gau and -Uni through the pipeline and first-order.
type NNConfig struct {
	Sets      map[string]string // name -> IDX folder
	Order     []string
	Parties   int
	Duration  time.Duration // per zeroth-order run
	FOEpochs  float64       // first-order epochs
	Batch     int
	Window    int
	LR        float64 // zeroth-order party step size
	HeadLR    float64
	FOLR      float64
	Seed      uint64
	Log       zerolog.Logger
	EvalEvery time.Duration
}

// NNRow is one run of the neural-network experiment.
type NNRow struct {
	Set, Method   string
	Accuracy      float64
	Seconds       float64 // training time
	Steps         int64
	BestAccuracy  float64
	TimeToFinal   float64 // first time within 1 point of the final accuracy
	PaperAccuracy float64
	Curve         []RefPoint
}

// NN runs the neural-network experiment.
func NN(ctx context.Context, cfg NNConfig) ([]NNRow, error) {
	var rows []NNRow
	for _, set := range cfg.Order {
		dir := cfg.Sets[set]
		base := run.New(func(c *run.Config) {
			c.Data = dir
			c.Parties = cfg.Parties
			c.Model = "mlp"
			c.K = 1
			c.Batch = cfg.Batch
			c.Window = cfg.Window
			c.LR = cfg.LR
			c.HeadLR = cfg.HeadLR
			c.Seed = cfg.Seed
			c.Log = zerolog.Nop()
			c.EvalEvery = cfg.EvalEvery
		})
		if err := base.Prepare(); err != nil {
			return rows, err
		}
		data, err := run.LoadData(&base, run.RoleAll)
		if err != nil {
			return rows, fmt.Errorf("%s: %w", set, err)
		}
		base.Loaded = data
		for _, algo := range []string{"asyrevel-gau", "asyrevel-uni"} {
			tc := base
			tc.Algo, tc.Duration = algo, cfg.Duration
			cfg.Log.Info().Str("set", set).Str("method", algo).Dur("duration", cfg.Duration).Msg("training")
			s, err := run.Train(ctx, tc)
			if err != nil {
				return rows, fmt.Errorf("%s %s: %w", set, algo, err)
			}
			r := NNRow{Set: set, Method: algo, Accuracy: s.TestAccuracy, Seconds: s.TrainSeconds, Steps: s.Steps, PaperAccuracy: PaperNN[set]}
			for _, p := range s.Curve {
				r.Curve = append(r.Curve, RefPoint{Seconds: p.Seconds, Steps: p.Steps, TestAccuracy: p.TestAccuracy, TrainLoss: p.TrainLoss})
			}
			finish(&r)
			cfg.Log.Info().Str("set", set).Str("method", algo).Str("acc", fmtF(100*r.Accuracy, 2)).Msg("done")
			rows = append(rows, r)
		}
		tc := base
		tc.Epochs = cfg.FOEpochs
		cfg.Log.Info().Str("set", set).Str("method", "first-order").Msg("training")
		fo, err := FirstOrderFor(ctx, tc, cfg.FOLR, 0.9, 0, nil)
		if err != nil {
			return rows, fmt.Errorf("%s first-order: %w", set, err)
		}
		r := NNRow{Set: set, Method: "first-order", Accuracy: fo.TestAccuracy, Seconds: fo.Seconds, Steps: fo.Steps, PaperAccuracy: PaperNN[set], Curve: fo.Curve}
		finish(&r)
		cfg.Log.Info().Str("set", set).Str("method", "first-order").Str("acc", fmtF(100*r.Accuracy, 2)).Msg("done")
		rows = append(rows, r)
	}
	return rows, nil
}

func finish(r *NNRow) {
	r.TimeToFinal = -1
	for _, p := range r.Curve {
		r.BestAccuracy = math.Max(r.BestAccuracy, p.TestAccuracy)
	}
	for _, p := range r.Curve {
		if p.TestAccuracy >= r.Accuracy-0.01 {
			r.TimeToFinal = p.Seconds
			break
		}
	}
}

// WriteNN writes dir/nn.csv and dir/nn.png (accuracy against time).
func WriteNN(dir string, rows []NNRow) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var recs [][]string
	for _, r := range rows {
		recs = append(recs, []string{r.Set, r.Method, fmtF(r.Accuracy, 4), fmtF(r.BestAccuracy, 4), fmtF(r.PaperAccuracy, 4),
			fmtF(r.Seconds, 1), strconv.FormatInt(r.Steps, 10), fmtF(r.TimeToFinal, 1)})
	}
	header := []string{"set", "method", "test_accuracy", "best_accuracy", "paper_accuracy", "seconds", "steps", "seconds_to_within_1pt"}
	if err := run.WriteCSV(filepath.Join(dir, "nn.csv"), header, recs); err != nil {
		return err
	}
	var sets []string
	seen := map[string]bool{}
	for _, r := range rows {
		if !seen[r.Set] {
			seen[r.Set] = true
			sets = append(sets, r.Set)
		}
	}
	plots := [][]*plot.Plot{{}}
	for _, set := range sets {
		p := plot.New()
		p.Title.Text = set + " (8 parties, MLP 98x128x1 + softmax 8x10)"
		p.X.Label.Text = "training time (s)"
		p.Y.Label.Text = "test accuracy (%)"
		p.Add(plotter.NewGrid())
		i := 0
		for _, r := range rows {
			if r.Set != set {
				continue
			}
			var xys plotter.XYs
			for _, pt := range r.Curve {
				if !math.IsNaN(pt.TestAccuracy) {
					xys = append(xys, plotter.XY{X: pt.Seconds, Y: 100 * pt.TestAccuracy})
				}
			}
			if len(xys) > 0 {
				l, err := plotter.NewLine(xys)
				if err != nil {
					return err
				}
				l.Color = plotutil.Color(i)
				l.Dashes = plotutil.Dashes(i)
				p.Add(l)
				p.Legend.Add(r.Method, l)
			}
			i++
		}
		if pa, ok := PaperNN[set]; ok {
			l, err := plotter.NewLine(plotter.XYs{{X: 0, Y: 100 * pa}, {X: p.X.Max, Y: 100 * pa}})
			if err == nil {
				l.Color = plotutil.Color(5)
				l.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
				p.Add(l)
				p.Legend.Add("paper (AsyREVEL)", l)
			}
		}
		p.Legend.Top, p.Legend.Left = false, false
		plots[0] = append(plots[0], p)
	}
	if len(sets) == 0 {
		return nil
	}
	return run.SavePNG(filepath.Join(dir, "nn.png"), plots, vg.Length(len(sets))*4.5*vg.Inch, 4*vg.Inch)
}
