package report

import (
	"fmt"
	"image/color"
	"math"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// defaultVariant is the transport of `asyrevel train` without transport
// flags, as the throughput experiment names it.
const defaultVariant = "capture-tcp"

// measurementsBody introduces the measurements outside the paper's
// comparisons.
func measurementsBody(*gen) (string, error) {
	return "The pipeline, recovery, deployment and privacy measured outside the paper's comparisons, each from its CSV file. " +
		"Absolute figures move with the machine and its load (in each run's header); the ratios within a subsection come from one run.\n", nil
}

// throughputBody: steps a second of each transport variant against the
// memory bus of the same window and batch, the CPU and bytes of a step,
// and what the stream stored, from one throughput*.csv file.
func throughputBody(g *gen, name string) (string, error) {
	t, err := g.table(name, "variant", "window", "batch", "steps_per_s")
	if err != nil {
		return "", err
	}
	ints := func(col string) []int {
		var out []int
		for _, s := range t.distinct(col, nil) {
			if v, err := strconv.Atoi(s); err == nil {
				out = append(out, v)
			}
		}
		slices.Sort(out)
		return out
	}
	windows, batches := ints("window"), ints("batch")
	variants := t.distinct("variant", nil)
	var b strings.Builder
	stem := strings.TrimSuffix(name, ".csv")
	if img, err := throughputPlot(t, windows, variants); err != nil {
		return "", err
	} else if img != nil {
		g.files[stem+".png"] = img
		fmt.Fprintf(&b, "![steps a second against the batch](%s.png)\n\n", stem)
	}
	fmt.Fprintf(&b, "Data: `%s`. Steps a second of the whole pipeline (a9a, 8 parties: parties, aggregator and broker in one process) "+
		"and, in brackets, the ratio to the memory bus of the same window and batch in the same run; CPU microseconds a step (the process's, "+
		"every participant and the broker); the wire bytes of a training step alone (the difference with a shorter run of the same "+
		"configuration, per extra step; window 8 only).\n\n", name)
	cell := func(v string, w, batch int, fmtf func(i int) string) string {
		r := t.where("variant", v, "window", strconv.Itoa(w), "batch", strconv.Itoa(batch))
		if len(r) == 0 {
			return "-"
		}
		return fmtf(r[0])
	}
	for _, w := range windows {
		header := []string{"variant"}
		for _, bt := range batches {
			header = append(header, fmt.Sprintf("batch %d: steps/s (x memory)", bt))
		}
		header = append(header, "CPU µs a step, batch "+joinInts(batches, " / "), "step wire bytes, batch "+joinInts(batches, " / "))
		var tab [][]string
		for _, v := range variants {
			row := []string{v}
			if v == defaultVariant {
				row[0] = "**" + v + "** (the default)"
			}
			any := false
			for _, bt := range batches {
				c := cell(v, w, bt, func(i int) string {
					any = true
					return fmt.Sprintf("%s (%s)", thousands(t.num(i, "steps_per_s")), f(t.num(i, "ratio_to_memory"), 2))
				})
				row = append(row, c)
			}
			if !any {
				continue
			}
			var cpu, wire []string
			for _, bt := range batches {
				cpu = append(cpu, cell(v, w, bt, func(i int) string { return f(t.num(i, "cpu_us_per_step"), 1) }))
				wire = append(wire, cell(v, w, bt, func(i int) string { return f(t.num(i, "step_wire_bytes"), 0) }))
			}
			row = append(row, strings.Join(cpu, " / "), strings.Join(wire, " / "))
			tab = append(tab, row)
		}
		fmt.Fprintf(&b, "Window %d (requests in flight per party):\n\n", w)
		b.WriteString(mdTable(header, tab))
		b.WriteString("\n")
	}
	// What the streams stored.
	withStream, complete := 0, 0
	var short []string
	for i := range t.rows {
		if t.str(i, "messages_stored") == "" {
			continue
		}
		withStream++
		if t.integer(i, "lost") == 0 && t.integer(i, "dropped") == 0 {
			complete++
		} else {
			short = append(short, fmt.Sprintf("%s at window %s, batch %s (%d lost, %d dropped)", t.str(i, "variant"), t.str(i, "window"), t.str(i, "batch"),
				t.integer(i, "lost"), t.integer(i, "dropped")))
		}
	}
	if withStream > 0 {
		fmt.Fprintf(&b, "- The stream held every message sent in %d of the %d runs with a stream", complete, withStream)
		if len(short) > 0 {
			fmt.Fprintf(&b, "; not in %s", list(short))
		}
		b.WriteString(".\n")
	}
	// The default transport against the memory bus.
	var def []string
	for _, w := range windows {
		for _, bt := range batches {
			for _, i := range t.where("variant", defaultVariant, "window", strconv.Itoa(w), "batch", strconv.Itoa(bt)) {
				def = append(def, fmt.Sprintf("%s at window %d, batch %d", f(t.num(i, "ratio_to_memory"), 2), w, bt))
			}
		}
	}
	if len(def) > 0 {
		fmt.Fprintf(&b, "- The default transport (%s: JetStream over TCP loopback, the stream capturing every message) ran at %s of the memory bus's steps a second.\n",
			defaultVariant, list(def))
	}
	// The trust layer's cost: a variant against its -nosign twin.
	for _, v := range variants {
		off := nosign(v)
		if !slices.Contains(variants, off) {
			continue
		}
		var parts []string
		for _, w := range windows {
			for _, bt := range batches {
				on := t.where("variant", v, "window", strconv.Itoa(w), "batch", strconv.Itoa(bt))
				no := t.where("variant", off, "window", strconv.Itoa(w), "batch", strconv.Itoa(bt))
				if len(on) == 0 || len(no) == 0 || !(t.num(no[0], "steps_per_s") > 0) {
					continue
				}
				cost := 1 - t.num(on[0], "steps_per_s")/t.num(no[0], "steps_per_s")
				parts = append(parts, fmt.Sprintf("%s at window %d, batch %d (%s µs of CPU a step against %s)", signedPct(-cost), w, bt,
					f(t.num(on[0], "cpu_us_per_step"), 1), f(t.num(no[0], "cpu_us_per_step"), 1)))
			}
		}
		if len(parts) > 0 {
			fmt.Fprintf(&b, "- The trust layer (signatures and chains; %s against %s): steps a second %s.\n", v, off, list(parts))
		}
	}
	return b.String(), nil
}

// nosign is a variant's name with the trust layer off.
func nosign(v string) string {
	if v == "memory" {
		return "memory-nosign"
	}
	if i := strings.LastIndex(v, "-"); i > 0 {
		return v[:i] + "-nosign" + v[i:]
	}
	return v + "-nosign"
}

func joinInts(x []int, sep string) string {
	var s []string
	for _, v := range x {
		s = append(s, strconv.Itoa(v))
	}
	return strings.Join(s, sep)
}

// throughputPlot draws steps/s against batch size, one panel per window,
// one line per variant, on log scales, the legend in a panel of its own.
func throughputPlot(t *table, windows []int, variants []string) ([]byte, error) {
	if len(windows) == 0 {
		return nil, nil
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	xlo, xhi := math.Inf(1), math.Inf(-1)
	for i := range t.rows {
		if v := t.num(i, "steps_per_s"); v > 0 {
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
		if v := t.num(i, "batch"); v > 0 {
			xlo, xhi = math.Min(xlo, v/1.5), math.Max(xhi, v*1.5)
		}
	}
	plots := make([][]*plot.Plot, 1)
	lp := plot.New()
	lp.HideAxes()
	lp.Legend.Top, lp.Legend.Left = true, true
	lp.Legend.TextStyle.Color = color.Black
	for i, win := range windows {
		p := plot.New()
		p.Title.Text = fmt.Sprintf("window %d", win)
		p.X.Label.Text = "batch"
		p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
		p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
		if i == 0 {
			p.Y.Label.Text = "steps/s (a9a, 8 parties)"
		}
		p.Add(plotter.NewGrid())
		for j, v := range variants {
			var xys plotter.XYs
			for _, k := range t.where("variant", v, "window", strconv.Itoa(win)) {
				if s := t.num(k, "steps_per_s"); s > 0 {
					xys = append(xys, plotter.XY{X: t.num(k, "batch"), Y: s})
				}
			}
			if len(xys) == 0 {
				continue
			}
			l, pts, err := plotter.NewLinePoints(xys)
			if err != nil {
				return nil, err
			}
			c := plotutil.Color(j)
			l.Color, pts.Color = c, c
			l.Dashes = plotutil.Dashes(j)
			pts.Shape = plotutil.Shape(j)
			if v == defaultVariant {
				l.Width = vg.Points(2.5)
			}
			p.Add(l, pts)
			if i == 0 {
				lp.Legend.Add(v, l, pts)
			}
		}
		if hi > 0 {
			p.Y.Min, p.Y.Max = lo/2, hi*1.5
		}
		p.X.Min, p.X.Max = xlo, xhi
		plots[0] = append(plots[0], p)
	}
	plots[0] = append(plots[0], lp)
	return png(plots, vg.Length(len(windows)+1)*3.5*vg.Inch, 4.5*vg.Inch)
}
