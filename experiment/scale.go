package experiment

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/asyrevel/asyrevel/run"

	"github.com/rs/zerolog"
)

// ScaleRun is one configuration of the scale experiment: a synthetic set
// of Samples training samples and Features dense features split over
// Parties.
type ScaleRun struct {
	Parties, Samples, Features int
}

// DefaultScaleRuns: 8, 32 and 128 parties on the same data (memory per
// party), and 8 parties on 20,000 and on a million samples of the same
// width (memory per sample).
var DefaultScaleRuns = []ScaleRun{
	{8, 20_000, 512}, {32, 20_000, 512}, {128, 20_000, 512},
	{8, 20_000, 64}, {8, 1_000_000, 64},
}

// ScaleConfig configures the scale experiment. Each run is a process of
// its own (`Binary train ...`), so that its peak resident memory is its
// own.
type ScaleConfig struct {
	Binary    string // the asyrevel binary
	Runs      []ScaleRun
	Duration  time.Duration // training time per run
	Transport string        // --transport ("" = default)
	Seed      uint64
	Log       zerolog.Logger
}

// ScaleRow is one run's measurement.
type ScaleRow struct {
	ScaleRun
	Steps          int64
	StepsPerSec    float64
	TrainSeconds   float64
	WallSeconds    float64 // the whole process: data generation, setup, training, evaluations
	PeakRSS        int64   // bytes, the process's peak resident memory
	MessagesSent   int64
	MessagesStored int64
	TestAccuracy   float64
}

// Scale runs every configuration in a process of its own and reads its
// summary and peak resident memory.
func Scale(ctx context.Context, cfg ScaleConfig) ([]ScaleRow, error) {
	if cfg.Binary == "" {
		return nil, fmt.Errorf("%w: the scale experiment needs the asyrevel binary", run.ErrConfig)
	}
	var rows []ScaleRow
	for _, r := range cfg.Runs {
		dir, err := os.MkdirTemp("", "asyrevel-scale-")
		if err != nil {
			return rows, err
		}
		args := []string{"train", "--data", fmt.Sprintf("synthetic:n=%d,d=%d,test=%d", r.Samples, r.Features, max(r.Samples/10, 1000)),
			"--parties", strconv.Itoa(r.Parties), "--duration", cfg.Duration.String(), "--out", dir,
			"--eval-every", (cfg.Duration / 4).String(), "--seed", strconv.FormatUint(cfg.Seed, 10), "--log", "warn"}
		if cfg.Transport != "" {
			args = append(args, "--transport", cfg.Transport)
		}
		var stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, cfg.Binary, args...)
		cmd.Stderr = &stderr
		start := time.Now()
		err = cmd.Run()
		wall := time.Since(start)
		if err != nil {
			os.RemoveAll(dir)
			return rows, fmt.Errorf("%d parties, %d samples: %w\n%s", r.Parties, r.Samples, err, stderr.String())
		}
		var s run.Summary
		raw, err := os.ReadFile(filepath.Join(dir, "summary.json"))
		if err == nil {
			err = json.Unmarshal(raw, &s)
		}
		os.RemoveAll(dir)
		if err != nil {
			return rows, fmt.Errorf("%d parties, %d samples: summary: %w", r.Parties, r.Samples, err)
		}
		row := ScaleRow{ScaleRun: r, Steps: s.Steps, StepsPerSec: s.StepsPerSec, TrainSeconds: s.TrainSeconds,
			WallSeconds: wall.Seconds(), PeakRSS: peakRSS(cmd.ProcessState), MessagesSent: s.MessagesSent,
			MessagesStored: s.MessagesStored, TestAccuracy: s.TestAccuracy}
		cfg.Log.Info().Int("parties", r.Parties).Int("samples", r.Samples).Int("features", r.Features).
			Str("steps/s", fmtF(row.StepsPerSec, 0)).Str("peak RSS MB", fmtF(float64(row.PeakRSS)/(1<<20), 0)).
			Int64("sent", row.MessagesSent).Int64("stored", row.MessagesStored).Msg("scale")
		rows = append(rows, row)
	}
	return rows, nil
}

// ScaleSlopes derives the memory per party (least squares over the runs
// with the first run's samples and features) and per sample (the pair of
// runs with the same parties and features farthest apart in samples), in
// bytes; NaN where the runs do not allow it.
func ScaleSlopes(rows []ScaleRow) (perParty, perSample float64) {
	perParty, perSample = nanF, nanF
	if len(rows) == 0 {
		return
	}
	var xs, ys []float64
	for _, r := range rows {
		if r.Samples == rows[0].Samples && r.Features == rows[0].Features {
			xs, ys = append(xs, float64(r.Parties)), append(ys, float64(r.PeakRSS))
		}
	}
	if len(xs) >= 2 {
		perParty = slope(xs, ys)
	}
	best := 0
	for _, a := range rows {
		for _, b := range rows {
			if a.Parties == b.Parties && a.Features == b.Features && b.Samples-a.Samples > best {
				best = b.Samples - a.Samples
				perSample = float64(b.PeakRSS-a.PeakRSS) / float64(best)
			}
		}
	}
	return perParty, perSample
}

func slope(xs, ys []float64) float64 {
	var mx, my float64
	for i := range xs {
		mx += xs[i]
		my += ys[i]
	}
	mx /= float64(len(xs))
	my /= float64(len(ys))
	var sxy, sxx float64
	for i := range xs {
		sxy += (xs[i] - mx) * (ys[i] - my)
		sxx += (xs[i] - mx) * (xs[i] - mx)
	}
	if sxx == 0 {
		return nanF
	}
	return sxy / sxx
}

// WriteScale writes rows to dir/scale.csv.
func WriteScale(dir string, rows []ScaleRow) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var recs [][]string
	for _, r := range rows {
		recs = append(recs, []string{strconv.Itoa(r.Parties), strconv.Itoa(r.Samples), strconv.Itoa(r.Features),
			fmtF(r.StepsPerSec, 1), strconv.FormatInt(r.Steps, 10), fmtF(r.TrainSeconds, 2), fmtF(r.WallSeconds, 2),
			fmtF(float64(r.PeakRSS)/(1<<20), 1), strconv.FormatInt(r.MessagesSent, 10), strconv.FormatInt(r.MessagesStored, 10),
			fmtF(r.TestAccuracy, 4)})
	}
	if err := run.WriteCSV(filepath.Join(dir, "scale.csv"), []string{"parties", "samples", "features", "steps_per_s", "steps",
		"train_seconds", "wall_seconds", "peak_rss_mb", "messages_sent", "messages_stored", "test_accuracy"}, recs); err != nil {
		return err
	}
	return record(dir, "scale")
}
