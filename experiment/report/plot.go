package report

import (
	"bytes"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// png renders plots laid out in rows x cols tiles of the given size (a nil
// plot leaves its tile empty).
func png(plots [][]*plot.Plot, width, height vg.Length) ([]byte, error) {
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
			if p != nil {
				p.Draw(canvases[i][j])
			}
		}
	}
	var b bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(&b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// errPoints are points with vertical error bars.
type errPoints struct {
	plotter.XYs
	plotter.YErrors
}
