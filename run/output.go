package run

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/asyrevel/asyrevel/aggregator"
	"github.com/asyrevel/asyrevel/internal/atomicfile"
)

func fmtF(v float64, prec int) string { return strconv.FormatFloat(v, 'f', prec, 64) }

// ErrNoSummary reports a summary.json that could not be written (a full
// disk, say): the run's last words must not point to it.
var ErrNoSummary = errors.New("summary.json was not written")

// WriteOutputs writes summary.json, curve.csv and curve.png into dir. Each
// file is written to a temporary name and renamed, so a crash never leaves a
// half-written file behind.
func WriteOutputs(dir string, s *Summary) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("output directory: %w", err)
	}
	js, err := json.MarshalIndent(jsonSafe(s), "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.WriteBytes(filepath.Join(dir, "summary.json"), outPerm, append(js, '\n')); err != nil {
		return fmt.Errorf("%w: %w", ErrNoSummary, err)
	}
	if err := writeCurveCSV(filepath.Join(dir, "curve.csv"), s.Curve); err != nil {
		return err
	}
	if s.Leakage != nil {
		// privacy.json: what each party's view revealed, the bound the
		// run holds and what the --privacy switch chose.
		js, err := json.MarshalIndent(struct {
			*aggregator.Leakage
			Bound   PrivacyBound   `json:"bound"`
			Privacy *PrivacyChoice `json:"privacy,omitempty"`
		}{s.Leakage, s.Bound(), s.Privacy}, "", "  ")
		if err != nil {
			return err
		}
		if err := atomicfile.WriteBytes(filepath.Join(dir, "privacy.json"), outPerm, append(js, '\n')); err != nil {
			return err
		}
	}
	title := fmt.Sprintf("%s on %s, %d parties", s.Algo, s.Dataset, s.Parties)
	return PlotCurve(filepath.Join(dir, "curve.png"), title, s.Curve)
}

// jsonSafe replaces NaN (no test set) by -1, which JSON can carry.
func jsonSafe(s *Summary) *Summary {
	c := *s
	for _, p := range []*float64{&c.TestAccuracy, &c.TestLoss, &c.TrainLoss} {
		if math.IsNaN(*p) || math.IsInf(*p, 0) {
			*p = -1
		}
	}
	return &c
}

// outPerm is the mode of a run's output files, less the umask (as
// os.Create).
const outPerm = 0o666

// WriteCSV writes a header and records to path atomically.
func WriteCSV(path string, header []string, records [][]string) error {
	return atomicfile.Write(path, outPerm, func(f io.Writer) error {
		w := csv.NewWriter(f)
		_ = w.Write(header)
		_ = w.WriteAll(records)
		return w.Error()
	})
}

// SavePNG renders plots laid out in rows x cols tiles of the given size
// into a PNG file.
func SavePNG(path string, plots [][]*plot.Plot, width, height vg.Length) error {
	img := vgimg.New(width, height)
	cols := 0
	for _, r := range plots {
		cols = max(cols, len(r))
	}
	t := draw.Tiles{Rows: len(plots), Cols: cols, PadX: vg.Millimeter * 4, PadY: vg.Millimeter, PadTop: vg.Millimeter * 2,
		PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align(plots, t, draw.New(img))
	for i, r := range plots {
		for j, p := range r {
			if p != nil { // an empty tile
				p.Draw(canvases[i][j])
			}
		}
	}
	return atomicfile.Write(path, outPerm, func(w io.Writer) error {
		_, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(w)
		return err
	})
}

func writeCurveCSV(path string, curve []aggregator.Point) error {
	num := func(v float64, p int) string {
		if math.IsNaN(v) {
			return ""
		}
		return fmtF(v, p)
	}
	var recs [][]string
	for i, p := range curve {
		rate := p.MsgsPerSec
		if i == 0 {
			// A rate since the previous evaluation: the first has none
			// (its count is the table's fill over a moment).
			rate = math.NaN()
		}
		recs = append(recs, []string{num(p.Seconds, 3), strconv.FormatInt(p.Steps, 10), num(p.TrainLoss, 6),
			num(p.TestAccuracy, 6), num(p.TestLoss, 6), num(rate, 0), strconv.FormatUint(uint64(p.MaxStaleness), 10),
			strconv.FormatUint(uint64(p.Round), 10), num(p.HeldOutLoss, 6), num(p.HeldOutAccuracy, 6), partyList(p.Stale, ";")})
	}
	// round and the held-out columns: the evaluation round (summary.json's
	// kept_model names one) and its loss and accuracy on the rows held out
	// of training (holdout.go), which choose the model kept.
	return WriteCSV(path, []string{"seconds", "steps", "train_loss", "test_accuracy", "test_loss", "msgs_per_s", "max_staleness",
		"round", "held_out_loss", "held_out_accuracy", "stale_parties"}, recs)
}

// partyList joins party ids with sep ("" for none).
func partyList(ps []int, sep string) string {
	s := make([]string, len(ps))
	for i, m := range ps {
		s[i] = strconv.Itoa(m)
	}
	return strings.Join(s, sep)
}

// PlotCurve draws test accuracy and training loss against training time,
// one above the other, into a PNG file.
func PlotCurve(path, title string, curve []aggregator.Point) error {
	acc, loss := make(plotter.XYs, 0, len(curve)), make(plotter.XYs, 0, len(curve))
	for _, p := range curve {
		if !math.IsNaN(p.TestAccuracy) {
			acc = append(acc, plotter.XY{X: p.Seconds, Y: 100 * p.TestAccuracy})
		}
		if !math.IsNaN(p.TrainLoss) {
			loss = append(loss, plotter.XY{X: p.Seconds, Y: p.TrainLoss})
		}
	}
	top := plot.New()
	top.Title.Text = title
	top.Y.Label.Text = "test accuracy (%)"
	bottom := plot.New()
	bottom.X.Label.Text = "training time (s)"
	bottom.Y.Label.Text = "train loss"
	for _, pl := range []struct {
		p   *plot.Plot
		xys plotter.XYs
		c   color.Color
	}{{top, acc, color.RGBA{R: 31, G: 119, B: 180, A: 255}}, {bottom, loss, color.RGBA{R: 214, G: 39, B: 40, A: 255}}} {
		pl.p.Add(plotter.NewGrid())
		if len(pl.xys) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(pl.xys)
		if err != nil {
			return err
		}
		line.Color, points.Color = pl.c, pl.c
		points.Shape = draw.CircleGlyph{}
		points.Radius = vg.Points(1.5)
		pl.p.Add(line, points)
	}
	return SavePNG(path, [][]*plot.Plot{{top}, {bottom}}, 7*vg.Inch, 6*vg.Inch)
}
