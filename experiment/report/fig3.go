package report

import (
	"fmt"
	"math"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// fig3Body: the runs' steps and final loss, and per set the time each
// method took to the highest final loss among them (so that every run
// reaches it), from fig3_runs.csv and the curves of fig3.csv.
func fig3Body(g *gen) (string, error) {
	runs, err := g.table("fig3_runs.csv", "set", "algo", "steps", "steps_per_second", "final_train_loss", "final_test_accuracy")
	if err != nil {
		return "", err
	}
	curves, err := g.table("fig3.csv", "set", "algo", "seconds", "steps", "train_loss")
	if err != nil {
		return "", err
	}
	var b strings.Builder
	if curves != nil {
		img, err := fig3Plot(runs, curves)
		if err != nil {
			return "", err
		}
		if img != nil {
			g.files["fig3.png"] = img
			b.WriteString("![training loss against time](fig3.png)\n\n")
		}
	}
	b.WriteString("Data: `fig3_runs.csv` (each run) and `fig3.csv` (every evaluation: time, steps, training loss, test accuracy).\n\n")
	var tab [][]string
	for i := range runs.rows {
		tab = append(tab, []string{runs.str(i, "set"), runs.str(i, "algo"), thousands(runs.num(i, "steps")), thousands(runs.num(i, "steps_per_second")),
			f(runs.num(i, "final_train_loss"), 4), pct(runs.num(i, "final_test_accuracy"))})
	}
	b.WriteString(mdTable([]string{"set", "method", "steps", "steps/s", "final training loss", "final test accuracy"}, tab))
	b.WriteString("\n")
	for _, set := range runs.distinct("set", nil) {
		one := func(algo string) int {
			if r := runs.where("set", set, "algo", algo); len(r) > 0 {
				return r[0]
			}
			return -1
		}
		if a, s := one("asyrevel-gau"), one("synrevel-gau"); a >= 0 && s >= 0 && runs.num(s, "steps_per_second") > 0 {
			fmt.Fprintf(&b, "- %s: AsyREVEL-Gau made %s the steps a second of SynREVEL-Gau (final training loss %s against %s).\n", set,
				times(runs.num(a, "steps_per_second")/runs.num(s, "steps_per_second")), f(runs.num(a, "final_train_loss"), 4), f(runs.num(s, "final_train_loss"), 4))
		}
		if curves == nil {
			continue
		}
		// The highest final loss of the set's runs: every run got there.
		level := math.Inf(-1)
		algos := runs.distinct("algo", func(i int) bool { return runs.str(i, "set") == set })
		for _, i := range runs.where("set", set) {
			if v := runs.num(i, "final_train_loss"); !math.IsNaN(v) {
				level = math.Max(level, v)
			}
		}
		if math.IsInf(level, -1) {
			continue
		}
		var parts, best []string
		bestT := math.Inf(1)
		for _, algo := range algos {
			t, steps := math.NaN(), math.NaN()
			for _, i := range curves.where("set", set, "algo", algo) {
				if v := curves.num(i, "train_loss"); !math.IsNaN(v) && v <= level {
					t, steps = curves.num(i, "seconds"), curves.num(i, "steps")
					break
				}
			}
			if math.IsNaN(t) {
				parts = append(parts, algo+" not at an evaluation")
				continue
			}
			parts = append(parts, fmt.Sprintf("%s %s s (%s steps)", algo, f(t, 1), thousands(steps)))
			switch {
			case f(t, 1) == f(bestT, 1):
				best = append(best, algo)
			case t < bestT:
				best, bestT = []string{algo}, t
			}
		}
		first := "first: " + list(best)
		if len(best) > 1 {
			first = "a tie at " + f(bestT, 1) + " s between " + list(best)
		}
		fmt.Fprintf(&b, "- %s, time to a training loss of %s (the highest final loss of the set's runs, so that every run reaches it; the first evaluation at or below it): %s; %s.\n",
			set, f(level, 4), strings.Join(parts, ", "), first)
	}
	b.WriteString("\nOne run per method and set (the seed is in the settings): the run-to-run spread is not measured here, so a difference of a few " +
		"percent between two methods says nothing. The paper's Figure 3 draws the same curves (its data are not in this project's sources): " +
		"its claim is that the asynchronous algorithms reach a given loss sooner than the synchronous ones when a party straggles, and that " +
		"the zeroth-order algorithms stay within reach of TIG although they never see a gradient. Every run here has the straggler of the " +
		"settings (the last party, its steps slowed by a delay proportional to its measured compute); SynREVEL waits for it at every round, " +
		"AsyREVEL does not.\n")
	return b.String(), nil
}

// fig3Plot draws training loss against time, one panel per set.
func fig3Plot(runs, curves *table) ([]byte, error) {
	sets := runs.distinct("set", nil)
	var grid [][]*plot.Plot
	for i, set := range sets {
		p := plot.New()
		p.Title.Text = set
		p.X.Label.Text = "training time (s)"
		p.Y.Label.Text = "training loss"
		p.Add(plotter.NewGrid())
		lo, hi := math.Inf(1), math.Inf(-1)
		for j, algo := range runs.distinct("algo", func(i int) bool { return runs.str(i, "set") == set }) {
			var xys plotter.XYs
			for _, k := range curves.where("set", set, "algo", algo) {
				if v := curves.num(k, "train_loss"); !math.IsNaN(v) {
					xys = append(xys, plotter.XY{X: curves.num(k, "seconds"), Y: v})
				}
			}
			if len(xys) < 2 {
				continue
			}
			// The y range: from the lowest loss to the loss after the
			// first tenth of the slowest curve, so that the ends show.
			for _, xy := range xys[1:] {
				lo = math.Min(lo, xy.Y)
			}
			hi = math.Max(hi, xys[min(len(xys)-1, max(1, len(xys)/10))].Y)
			l, err := plotter.NewLine(xys)
			if err != nil {
				return nil, err
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
		return nil, nil
	}
	for len(grid[len(grid)-1]) < min(3, len(sets)) {
		grid[len(grid)-1] = append(grid[len(grid)-1], nil)
	}
	return png(grid, vg.Length(min(3, len(sets)))*4.2*vg.Inch, vg.Length(len(grid))*3.4*vg.Inch)
}
