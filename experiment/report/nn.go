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

// nnBody: the paper's network, zeroth-order through the pipeline and
// first-order, against the paper's accuracy, from nn.csv (and the curves
// of nn_curve.csv when the folder has them).
func nnBody(g *gen) (string, error) {
	t, err := g.table("nn.csv", "set", "method", "test_accuracy", "seconds", "steps")
	if err != nil {
		return "", err
	}
	curve, err := g.table("nn_curve.csv", "set", "method", "seconds", "test_accuracy")
	if err != nil {
		return "", err
	}
	var b strings.Builder
	if curve != nil {
		img, err := nnPlot(curve)
		if err != nil {
			return "", err
		}
		if img != nil {
			g.files["nn.png"] = img
			b.WriteString("![test accuracy against time](nn.png)\n\n")
		}
	}
	var tab [][]string
	for i := range t.rows {
		tab = append(tab, []string{t.str(i, "set"), t.str(i, "method"), pct(t.num(i, "test_accuracy")), pct(t.num(i, "best_accuracy")),
			pct(t.num(i, "paper_accuracy")), f(t.num(i, "seconds"), 0), thousands(t.num(i, "steps")), f(t.num(i, "seconds_to_within_1pt"), 0)})
	}
	b.WriteString(mdTable([]string{"set", "method", "test accuracy", "best during the run", "paper (AsyREVEL)", "training (s)", "steps",
		"s to within 1 point of the final accuracy"}, tab))
	b.WriteString("\nData: `nn.csv`")
	if curve != nil {
		b.WriteString(", the curves in `nn_curve.csv`")
	}
	b.WriteString(". The paper's network: 8 parties, a local MLP (d_m x 128 x 1) each, a softmax head (8 x 10); the zeroth-order runs go " +
		"through the pipeline for the settings' training time; first-order is the same vertically split network trained by back-propagation " +
		"(SGD) in one process.\n\n")
	for i := range t.rows {
		acc, paper := t.num(i, "test_accuracy"), t.num(i, "paper_accuracy")
		if math.IsNaN(acc) || math.IsNaN(paper) || t.str(i, "method") == "first-order" {
			continue
		}
		word := "above"
		if acc < paper {
			word = "short of"
		}
		fmt.Fprintf(&b, "- %s, %s: %s points %s the paper's %s.\n", t.str(i, "set"), t.str(i, "method"), f(math.Abs(100*(acc-paper)), 2), word, pct(paper))
	}
	t4, err := g.table("table4.csv", "set", "algo", "trials", "mean_accuracy")
	if err != nil {
		return "", err
	}
	for _, set := range t.distinct("set", nil) {
		if t4 == nil {
			break
		}
		var parts []string
		for _, i := range t4.where("set", set) {
			parts = append(parts, fmt.Sprintf("%s %s (%s)", t4.str(i, "algo"), pct(t4.num(i, "mean_accuracy")), plural(int(t4.integer(i, "trials")), "run")))
		}
		if len(parts) > 0 {
			fmt.Fprintf(&b, "- %s in Table 4 (`table4.csv`: its own runs, settings and training time, in its section): %s.\n", set, list(parts))
		}
	}
	for _, set := range t.distinct("set", nil) {
		fo := t.where("set", set, "method", "first-order")
		if len(fo) == 0 {
			continue
		}
		best, bi := math.Inf(-1), -1
		for _, i := range t.where("set", set) {
			if t.str(i, "method") != "first-order" && t.num(i, "test_accuracy") > best {
				best, bi = t.num(i, "test_accuracy"), i
			}
		}
		if bi < 0 {
			continue
		}
		fmt.Fprintf(&b, "- %s: first-order training reached %s in %s s, the best zeroth-order run (%s) %s in %s s.\n", set,
			pct(t.num(fo[0], "test_accuracy")), f(t.num(fo[0], "seconds"), 0), t.str(bi, "method"), pct(best), f(t.num(bi, "seconds"), 0))
	}
	return b.String(), nil
}

// nnPlot draws test accuracy against time, one panel per set.
func nnPlot(c *table) ([]byte, error) {
	sets := c.distinct("set", nil)
	row := []*plot.Plot{}
	for _, set := range sets {
		p := plot.New()
		p.Title.Text = set
		p.X.Label.Text = "training time (s)"
		p.Y.Label.Text = "test accuracy (%)"
		p.Add(plotter.NewGrid())
		xmax := 0.0
		for j, m := range c.distinct("method", func(i int) bool { return c.str(i, "set") == set }) {
			var xys plotter.XYs
			for _, i := range c.where("set", set, "method", m) {
				if v := c.num(i, "test_accuracy"); !math.IsNaN(v) {
					xys = append(xys, plotter.XY{X: c.num(i, "seconds"), Y: 100 * v})
					xmax = math.Max(xmax, c.num(i, "seconds"))
				}
			}
			if len(xys) == 0 {
				continue
			}
			l, err := plotter.NewLine(xys)
			if err != nil {
				return nil, err
			}
			l.Color, l.Dashes = plotutil.Color(j), plotutil.Dashes(j)
			p.Add(l)
			p.Legend.Add(m, l)
		}
		if pa, ok := PaperNN[set]; ok && xmax > 0 {
			l, err := plotter.NewLine(plotter.XYs{{X: 0, Y: 100 * pa}, {X: xmax, Y: 100 * pa}})
			if err == nil {
				l.Color = plotutil.Color(5)
				l.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
				p.Add(l)
				p.Legend.Add("paper (AsyREVEL)", l)
			}
		}
		p.Legend.Top, p.Legend.Left = false, false
		row = append(row, p)
	}
	if len(row) == 0 {
		return nil, nil
	}
	return png([][]*plot.Plot{row}, vg.Length(len(row))*4.5*vg.Inch, 4*vg.Inch)
}
