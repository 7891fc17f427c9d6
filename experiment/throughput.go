package experiment

import (
	"context"
	"fmt"
	"image/color"
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

// Buses that the throughput experiment compares.
var Buses = []string{"memory", "jetstream-inprocess", "jetstream-tcp", "jetstream-cluster"}

// ThroughputConfig configures the throughput experiment.
type ThroughputConfig struct {
	Data     *run.Data // split over Parties
	Parties  int
	Buses    []string
	Windows  []int
	Batches  []int
	Duration time.Duration // training time per configuration
	Seed     uint64
	Log      zerolog.Logger
}

// ThroughputRow is one configuration's measurement.
type ThroughputRow struct {
	Bus              string
	Window, Batch    int
	Steps            int64
	Seconds          float64
	StepsPerSec      float64
	BytesPerStep     float64 // payload bytes of a step's PartyOutput and Reply
	WireBytesPerStep float64 // all bytes on the clients' broker connections during the run (initial pass and evaluations included) per step; NaN for memory
}

// Throughput measures steps per second and bytes per step of the whole
// pipeline (parties, aggregator, broker) for every bus, window and batch
// size, each for cfg.Duration of training time.
func Throughput(ctx context.Context, cfg ThroughputConfig) ([]ThroughputRow, error) {
	var rows []ThroughputRow
	for _, bus := range cfg.Buses {
		for _, w := range cfg.Windows {
			for _, b := range cfg.Batches {
				tc := run.Config{
					Loaded: cfg.Data, Parties: cfg.Parties, Algo: "asyrevel-gau", Batch: b, Window: w,
					Duration: cfg.Duration, EvalEvery: 10 * cfg.Duration, Seed: cfg.Seed, Log: zerolog.Nop(),
				}
				setBus(&tc, bus)
				s, err := run.Train(ctx, tc)
				if err != nil {
					return rows, fmt.Errorf("%s window %d batch %d: %w", bus, w, b, err)
				}
				r := ThroughputRow{Bus: bus, Window: w, Batch: b, Steps: s.Steps, Seconds: s.TrainSeconds,
					StepsPerSec: s.StepsPerSec, WireBytesPerStep: nanF}
				if s.Steps > 0 {
					r.BytesPerStep = float64(s.StepBytes) / float64(s.Steps)
					if s.WireBytes > 0 {
						r.WireBytesPerStep = float64(s.WireBytes) / float64(s.Steps)
					}
				}
				cfg.Log.Info().Str("bus", bus).Int("window", w).Int("batch", b).Str("steps/s", fmtF(r.StepsPerSec, 0)).
					Str("bytes/step", fmtF(r.BytesPerStep, 0)).Msg("throughput")
				rows = append(rows, r)
			}
		}
	}
	return rows, nil
}

// setBus points a training configuration at one of Buses.
func setBus(tc *run.Config, bus string) {
	switch bus {
	case "memory":
		tc.Bus = "memory"
	case "jetstream-inprocess":
		tc.InProcess = true
	case "jetstream-cluster":
		tc.Cluster = 3
	}
}

// WriteThroughput writes rows to dir/throughput.csv and plots them in
// dir/throughput.png.
func WriteThroughput(dir string, rows []ThroughputRow) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var recs [][]string
	for _, r := range rows {
		wire := ""
		if !math.IsNaN(r.WireBytesPerStep) {
			wire = fmtF(r.WireBytesPerStep, 1)
		}
		recs = append(recs, []string{r.Bus, strconv.Itoa(r.Window), strconv.Itoa(r.Batch), fmtF(r.StepsPerSec, 1),
			fmtF(r.BytesPerStep, 1), wire, strconv.FormatInt(r.Steps, 10), fmtF(r.Seconds, 3)})
	}
	header := []string{"bus", "window", "batch", "steps_per_s", "bytes_per_step", "wire_bytes_per_step", "steps", "seconds"}
	if err := run.WriteCSV(filepath.Join(dir, "throughput.csv"), header, recs); err != nil {
		return err
	}
	return plotThroughput(filepath.Join(dir, "throughput.png"), rows)
}

// plotThroughput draws steps/s against batch size, one panel per window,
// one line per bus, on log scales.
func plotThroughput(path string, rows []ThroughputRow) error {
	var windows []int
	var buses []string
	seenW, seenB := map[int]bool{}, map[string]bool{}
	for _, r := range rows {
		if !seenW[r.Window] {
			seenW[r.Window] = true
			windows = append(windows, r.Window)
		}
		if !seenB[r.Bus] {
			seenB[r.Bus] = true
			buses = append(buses, r.Bus)
		}
	}
	if len(windows) == 0 {
		return nil
	}
	// One y range for all panels, so that they compare at a glance.
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, r := range rows {
		if r.StepsPerSec > 0 {
			lo, hi = math.Min(lo, r.StepsPerSec), math.Max(hi, r.StepsPerSec)
		}
	}
	plots := make([][]*plot.Plot, 1)
	for i, win := range windows {
		p := plot.New()
		p.Title.Text = fmt.Sprintf("window %d", win)
		p.X.Label.Text = "batch"
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
		if i == 0 {
			p.Y.Label.Text = "steps/s (a9a, 8 parties)"
		}
		p.Add(plotter.NewGrid())
		for j, bus := range buses {
			var xys plotter.XYs
			for _, r := range rows {
				if r.Window == win && r.Bus == bus && r.StepsPerSec > 0 {
					xys = append(xys, plotter.XY{X: float64(r.Batch), Y: r.StepsPerSec})
				}
			}
			if len(xys) == 0 {
				continue
			}
			l, pts, err := plotter.NewLinePoints(xys)
			if err != nil {
				return err
			}
			c := plotutil.Color(j)
			l.Color, pts.Color = c, c
			l.Dashes = plotutil.Dashes(j)
			pts.Shape = plotutil.Shape(j)
			p.Add(l, pts)
			if i == 0 {
				p.Legend.Add(bus, l, pts)
			}
		}
		if hi > 0 {
			p.Y.Min, p.Y.Max = lo/4, hi*1.3
		}
		// Bottom left: below the lines, as small batches are the fastest.
		p.Legend.Left = true
		p.Legend.TextStyle.Color = color.Black
		plots[0] = append(plots[0], p)
	}
	return run.SavePNG(path, plots, vg.Length(len(windows))*3.5*vg.Inch, 4*vg.Inch)
}
