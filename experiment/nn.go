package experiment

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/asyrevel/asyrevel/experiment/report"
	"github.com/asyrevel/asyrevel/experiment/sim"

	"github.com/asyrevel/asyrevel/run"

	"github.com/rs/zerolog"
)

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
	Curve         []sim.RefPoint
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
			c.EvalEvery = cfg.EvalEvery
		})
		if err := base.Prepare(); err != nil {
			return rows, err
		}
		data, err := run.LoadData(&base, run.RoleAll)
		if err != nil {
			return rows, fmt.Errorf("%s: %w", set, err)
		}
		for _, algo := range []string{"asyrevel-gau", "asyrevel-uni"} {
			tc := base
			tc.Algo, tc.Duration = algo, cfg.Duration
			cfg.Log.Info().Str("set", set).Str("method", algo).Dur("duration", cfg.Duration).Msg("training")
			s, err := run.Train(ctx, tc, run.Hooks{Loaded: data})
			if err != nil {
				return rows, fmt.Errorf("%s %s: %w", set, algo, err)
			}
			r := NNRow{Set: set, Method: algo, Accuracy: s.TestAccuracy, Seconds: s.TrainSeconds, Steps: s.Steps, PaperAccuracy: report.PaperNN[set]}
			for _, p := range s.Curve {
				r.Curve = append(r.Curve, sim.RefPoint{Seconds: p.Seconds, Steps: p.Steps, TestAccuracy: p.TestAccuracy, TrainLoss: p.TrainLoss})
			}
			finish(&r)
			cfg.Log.Info().Str("set", set).Str("method", algo).Str("acc", fmtF(100*r.Accuracy, 2)).Msg("done")
			rows = append(rows, r)
		}
		tc := base
		tc.Epochs = cfg.FOEpochs
		cfg.Log.Info().Str("set", set).Str("method", "first-order").Msg("training")
		fo, err := sim.FirstOrderFor(ctx, tc, data, cfg.FOLR, 0.9, 0, nil)
		if err != nil {
			return rows, fmt.Errorf("%s first-order: %w", set, err)
		}
		r := NNRow{Set: set, Method: "first-order", Accuracy: fo.TestAccuracy, Seconds: fo.Seconds, Steps: fo.Steps, PaperAccuracy: report.PaperNN[set], Curve: fo.Curve}
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

// WriteNN writes dir/nn.csv (a row a run) and dir/nn_curve.csv (every
// evaluation of every run: set, method, seconds, steps, test accuracy),
// records the run and writes the report again (which plots nn.png).
func WriteNN(dir string, rows []NNRow) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var recs, curve [][]string
	for _, r := range rows {
		recs = append(recs, []string{r.Set, r.Method, fmtF(r.Accuracy, 4), fmtF(r.BestAccuracy, 4), fmtF(r.PaperAccuracy, 4),
			fmtF(r.Seconds, 1), strconv.FormatInt(r.Steps, 10), fmtF(r.TimeToFinal, 1)})
		for _, p := range r.Curve {
			curve = append(curve, []string{r.Set, r.Method, fmtF(p.Seconds, 2), strconv.FormatInt(p.Steps, 10), fmtF(p.TestAccuracy, 4)})
		}
	}
	header := []string{"set", "method", "test_accuracy", "best_accuracy", "paper_accuracy", "seconds", "steps", "seconds_to_within_1pt"}
	if err := run.WriteCSV(filepath.Join(dir, "nn.csv"), header, recs); err != nil {
		return err
	}
	if err := run.WriteCSV(filepath.Join(dir, "nn_curve.csv"), []string{"set", "method", "seconds", "steps", "test_accuracy"}, curve); err != nil {
		return err
	}
	return record(dir, "nn")
}
