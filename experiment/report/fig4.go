package report

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// fig4Modes are Figure 4's modes and their algorithms.
var fig4Modes = []struct{ mode, algo string }{{"async", "AsyREVEL-Gau"}, {"sync", "SynREVEL-Gau"}}

// fig4Data is fig4.csv read as times to the target.
type fig4Data struct{ t *table }

func (d fig4Data) sets() []string { return d.t.distinct("set", nil) }

func (d fig4Data) qs(set string) []int {
	var qs []int
	for _, s := range d.t.distinct("parties", func(i int) bool { return d.t.str(i, "set") == set }) {
		if q, err := strconv.Atoi(s); err == nil {
			qs = append(qs, q)
		}
	}
	slices.Sort(qs)
	return qs
}

// times are the virtual seconds to the target of the runs of set, q and
// mode that reached it, and the number of runs.
func (d fig4Data) times(set string, q int, mode string) (t []float64, runs int) {
	for _, i := range d.t.where("set", set, "parties", strconv.Itoa(q), "mode", mode) {
		runs++
		if d.t.boolean(i, "reached") {
			t = append(t, d.t.num(i, "virtual_seconds"))
		}
	}
	return t, runs
}

// paired are T(sync)/T(async) of the seeds at set and q where both modes
// reached the target.
func (d fig4Data) paired(set string, q int) []float64 {
	var out []float64
	qs := strconv.Itoa(q)
	for _, a := range d.t.where("set", set, "parties", qs, "mode", "async") {
		if !d.t.boolean(a, "reached") || !(d.t.num(a, "virtual_seconds") > 0) {
			continue
		}
		for _, s := range d.t.where("set", set, "parties", qs, "mode", "sync", "seed", d.t.str(a, "seed")) {
			if d.t.boolean(s, "reached") {
				out = append(out, d.t.num(s, "virtual_seconds")/d.t.num(a, "virtual_seconds"))
			}
		}
	}
	return out
}

// speedup is T(q0)/T(q) of mode on set, the ratio of the geometric means
// and its interval; ok only if every run at both q reached the target.
func (d fig4Data) speedup(set string, q0, q int, mode string) (r, lo, hi float64, ok bool) {
	a, na := d.times(set, q0, mode)
	b, nb := d.times(set, q, mode)
	if len(a) == 0 || len(b) == 0 || len(a) < na || len(b) < nb {
		return math.NaN(), math.NaN(), math.NaN(), false
	}
	r, lo, hi = geoRatioCI(a, b)
	return r, lo, hi, true
}

// separated says what an interval of a ratio allows one to conclude
// against 1.
func separated(lo, hi float64, above, below, neither string) string {
	switch {
	case math.IsNaN(lo) || math.IsNaN(hi):
		return "no interval (fewer than 2 runs)"
	case lo > 1:
		return above
	case hi < 1:
		return below
	}
	return neither
}

// fig4Body: the measured costs, the synchronous over the asynchronous time
// at the same q, the speed-ups against the fewest parties, each as the
// geometric mean over the seeds with its 95% interval and what the
// interval allows one to say, the noise at the fewest parties, and the
// simulation's validation from validate.csv.
func fig4Body(g *gen) (string, error) {
	t, err := g.table("fig4.csv", "set", "parties", "mode", "seed", "reached", "virtual_seconds")
	if err != nil {
		return "", err
	}
	costs, err := g.table("fig4_costs.csv", "set", "parties", "what", "median_ms", "lo_ms", "hi_ms")
	if err != nil {
		return "", err
	}
	checks, err := g.table("fig4_check.csv", "set", "parties", "mode", "target_objective", "real_reached", "real_seconds", "real_steps", "sim_reached", "sim_seconds", "sim_steps")
	if err != nil {
		return "", err
	}
	d := fig4Data{t}
	var b strings.Builder
	if img, err := fig4Plot(d); err != nil {
		return "", err
	} else if img != nil {
		g.files["fig4.png"] = img
		b.WriteString("![speed-up against the number of parties, and the synchronous over the asynchronous time](fig4.png)\n\n")
	}
	b.WriteString("Data: `fig4.csv` (every simulated run, with its seed, whether it reached the target and the objective it ended at), " +
		"`fig4_costs.csv` (the costs the simulation runs with), `fig4_check.csv` (the simulation against the real pipeline).\n\n")
	if costs != nil && len(costs.rows) > 0 {
		fig4Costs(&b, costs)
	}

	// The headline: the two modes at the same q, seed by seed.
	var head, sp [][]string
	var notes, summary []string
	for _, set := range d.sets() {
		qs := d.qs(set)
		// What the seeds allow: the q (> the fewest) at which the modes are
		// separated, and per mode those whose speed-up is told from none and
		// those below linear.
		var separatedAt []string
		faster, below := map[string][]string{}, map[string][]string{}
		seeds := 0
		for _, q := range qs {
			cell := func(mode string) string {
				x, n := d.times(set, q, mode)
				if len(x) == 0 {
					return fmt.Sprintf("none reached (0 of %d)", n)
				}
				gm, lo, hi := geoCI(x)
				return fmt.Sprintf("%s (%d of %d)", interval(gm, lo, hi, 1), len(x), n)
			}
			ratio, verdict := "-", "no seed where both reached the target"
			if rs := d.paired(set, q); len(rs) > 0 {
				gm, lo, hi := geoCI(rs)
				ratio = interval(gm, lo, hi, 2)
				verdict = separated(lo, hi, "asynchronous faster", "synchronous faster", fmt.Sprintf("not separated by %d seeds", len(rs)))
				if q == 1 {
					verdict += " (q = 1: one algorithm, see below)"
				} else if lo > 1 || hi < 1 {
					separatedAt = append(separatedAt, strconv.Itoa(q))
				}
				seeds = max(seeds, len(rs))
			}
			head = append(head, []string{set, strconv.Itoa(q), cell("async"), cell("sync"), ratio, verdict})
			if len(qs) < 2 || q == qs[0] {
				continue
			}
			row := []string{set, strconv.Itoa(q)}
			for _, m := range fig4Modes {
				r, lo, hi, ok := d.speedup(set, qs[0], q, m.mode)
				if !ok {
					row = append(row, "- (a run did not reach the target)")
					continue
				}
				ideal := float64(q) / float64(qs[0])
				v := separated(lo, hi, "faster than at q = "+strconv.Itoa(qs[0]), "slower than at q = "+strconv.Itoa(qs[0]), "not told from none")
				if lo > 1 {
					faster[m.mode] = append(faster[m.mode], strconv.Itoa(q))
				}
				switch {
				case math.IsNaN(lo):
				case hi < ideal:
					below[m.mode] = append(below[m.mode], strconv.Itoa(q))
					v += ", below linear"
				case lo > ideal:
					v += ", above linear"
				default:
					v += ", linear within the interval"
				}
				row = append(row, interval(r, lo, hi, 2)+": "+v)
			}
			sp = append(sp, row)
		}
		if len(qs) > 1 {
			at := func(x []string) string {
				if len(x) == 0 {
					return "at no q"
				}
				return "at q = " + list(x)
			}
			line := fmt.Sprintf("- %s, what %s allow: the two modes are separated (the interval of T(sync)/T(async) excludes 1) %s", set,
				plural(seeds, "seed"), at(separatedAt))
			for _, m := range fig4Modes {
				line += fmt.Sprintf("; %s's speed-up is told from none %s and below linear %s", m.algo, at(faster[m.mode]), at(below[m.mode]))
			}
			summary = append(summary, line+". The intervals narrow as one over the square root of the seeds: `--seeds` buys them.")
		}
		// With the fewest parties the modes differ only by their random
		// draws when q = 1 (one party, nothing to wait for).
		if len(qs) > 0 && qs[0] == 1 {
			a, _ := d.times(set, 1, "async")
			s, _ := d.times(set, 1, "sync")
			all := append(slices.Clone(a), s...)
			if len(all) > 1 {
				lo, hi := extent(all)
				note := fmt.Sprintf("- %s, the noise at q = 1: the two modes are one algorithm there (one party, no straggler); their %d runs reached the target "+
					"between %s and %s virtual s, a factor of %s from the random draws alone.", set, len(all), f(lo, 1), f(hi, 1), f(hi/lo, 2))
				if gm, l, h := geoCI(a); !math.IsNaN(l) {
					note += fmt.Sprintf(" AsyREVEL-Gau's %d runs put its mean time at q = 1 within a factor of %s either way (95%%), and every speed-up above "+
						"is a ratio to that time: a speed-up whose interval holds 1 is not told from none, and one whose interval holds q is not told from linear.",
						len(a), f(h/gm, 2))
				}
				notes = append(notes, note)
			}
		}
	}
	b.WriteString("Asynchronous against synchronous at the same q (the straggler of the settings when q > 1): virtual seconds to the target, the geometric " +
		"mean over the seeds and its 95% interval [low..high] (Student's t on the logarithms; runs that reached the target of runs), " +
		"and the synchronous time over the asynchronous one, seed by seed, the same way:\n\n")
	b.WriteString(mdTable([]string{"set", "q", "AsyREVEL-Gau (virtual s)", "SynREVEL-Gau (virtual s)", "T(sync)/T(async)", "what the interval says"}, head))
	if len(sp) > 0 {
		b.WriteString("\nSpeed-up against the fewest parties, T(fewest)/T(q) of each mode: the ratio of the geometric means over the seeds and its 95% interval " +
			"(Welch's t on the logarithms: the runs at the two q are independent), against 1 (no speed-up) and against linear (q over the fewest):\n\n")
		b.WriteString(mdTable([]string{"set", "q", "AsyREVEL-Gau speed-up", "SynREVEL-Gau speed-up"}, sp))
	}
	if len(notes)+len(summary) > 0 {
		b.WriteString("\n" + strings.Join(append(notes, summary...), "\n") + "\n")
	}
	b.WriteString("\n" + g.validationVerdict() + "\n")

	if checks != nil && len(checks.rows) > 0 {
		fig4Checks(&b, checks)
	}
	b.WriteString("\nMethod. A machine with fewer cores than parties cannot give each party a processor, and a real run with many parties there measures " +
		"the host, not the algorithm. The sweep therefore runs in virtual time (`sim.Simulate`): the parties' and the aggregator's steps are " +
		"computed for real by the same code as the runtimes (package `zoo/kernel`; `TestKernelSimulatorMatchesRuntime` checks bit for bit that " +
		"the simulator and the runtimes compute the same parameters for the same order of arrivals), and ordered by when they would happen on " +
		"q machines: each party's step takes its measured cost on its own block (which depends on the batch and the block's non-zeros, not " +
		"only on its width), the aggregator answers requests one at a time in the order they arrive, each taking its measured cost, and a " +
		"message takes the measured one-way time. The last party is a straggler whose steps take the settings' factor times the slowest " +
		"party's cost (its own block may be the cheapest: see the non-zeros above). AsyREVEL: each party keeps one request in flight and " +
		"steps whenever its reply arrives. SynREVEL: a round waits for every party's request on the shared batch, so it lasts as long as " +
		"the straggler's step. The target is in the settings: f - f* with f* from the centralised L-BFGS solver on the same regularised " +
		"objective, or a training loss for the network (no f* there). The speed-ups here are computed from `virtual_seconds`, not read from " +
		"the CSV's `speedup` column. The paper's Figure 4 plots speed-ups (its data are not in this project's sources): its claim is " +
		"near-linear asynchronous speed-up, above the synchronous one when a party straggles.\n")
	return b.String(), nil
}

// fig4Costs writes the table of the costs the simulation ran with.
func fig4Costs(b *strings.Builder, c *table) {
	ms := func(v float64) string { return f(v, 3) }
	clock := "CPU time of the measuring thread"
	if c.has("clock") && c.str(0, "clock") == "wall" {
		clock = "wall time (no per-thread CPU time on the system)"
	}
	fmt.Fprintf(b, "Costs measured by the experiment before it simulates (`fig4_costs.csv`; compute: %s, the median of its rounds; "+
		"latency: half a round trip through an embedded JetStream broker over TCP loopback, the median and 10th..90th percentile). "+
		"A step's CPU time depends on the machine's load too (caches and cores shared with other jobs): read the costs, and the "+
		"simulated seconds they give, with the load in the header.\n\n", clock)
	var tab [][]string
	type key struct{ set, q string }
	var keys []key
	for i := range c.rows {
		k := key{c.str(i, "set"), c.str(i, "parties")}
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		parties := c.where("set", k.set, "parties", k.q, "what", "party")
		steps := c.nums(parties, "median_ms")
		nnz := c.nums(parties, "nnz_per_row")
		slo, shi := extent(steps)
		nlo, nhi := extent(nnz)
		agg, lat := "-", "-"
		if r := c.where("set", k.set, "parties", k.q, "what", "aggregator"); len(r) > 0 {
			agg = ms(c.num(r[0], "median_ms"))
		}
		if r := c.where("set", k.set, "parties", k.q, "what", "latency"); len(r) > 0 {
			lat = fmt.Sprintf("%s (%s..%s)", ms(c.num(r[0], "median_ms")), ms(c.num(r[0], "lo_ms")), ms(c.num(r[0], "hi_ms")))
		}
		last := "-"
		if len(parties) > 1 {
			last = f(c.num(parties[len(parties)-1], "nnz_per_row"), 2)
		}
		batch := "-"
		if len(parties) > 0 {
			batch = c.str(parties[0], "batch")
		}
		tab = append(tab, []string{k.set, k.q, batch, f(nlo, 2) + ".." + f(nhi, 2), last, ms(slo) + ".." + ms(shi), agg, lat})
	}
	b.WriteString(mdTable([]string{"set", "q", "batch", "non-zeros a row of a block, sparsest..densest", "the last party's (the straggler's block)",
		"party step (ms), fastest..slowest party", "aggregator per reply (ms)", "message one way (ms)"}, tab))
	b.WriteString("\n")
}

// fig4Checks writes the simulation against the real pipeline.
func fig4Checks(b *strings.Builder, c *table) {
	b.WriteString("\nThe simulation against the real pipeline (embedded JetStream over TCP loopback, the parties' real compute only, one request " +
		"in flight; the simulation at the costs measured for it), to a looser target:\n\n")
	var tab [][]string
	for i := range c.rows {
		real, sim := f(c.num(i, "real_seconds"), 2), f(c.num(i, "sim_seconds"), 2)
		if !c.boolean(i, "real_reached") {
			real = "> " + real
		}
		if !c.boolean(i, "sim_reached") {
			sim = "> " + sim
		}
		tab = append(tab, []string{c.str(i, "set"), c.str(i, "parties"), c.str(i, "mode"), f(c.num(i, "target_objective"), 5), real, sim,
			f(c.num(i, "real_steps"), 0), f(c.num(i, "sim_steps"), 0)})
	}
	b.WriteString(mdTable([]string{"set", "q", "mode", "target objective", "real pipeline (s)", "simulation (s)", "real steps", "simulated steps"}, tab))
	b.WriteString("\n")
	for i := range c.rows {
		set, q, mode := c.str(i, "set"), c.str(i, "parties"), c.str(i, "mode")
		rr, sr := c.boolean(i, "real_reached"), c.boolean(i, "sim_reached")
		if rr && sr && c.num(i, "sim_steps") > 0 && c.num(i, "sim_seconds") > 0 {
			fmt.Fprintf(b, "- %s, q = %s, %s: the real pipeline took %s the simulated steps and %s the simulated time to the target.\n",
				set, q, mode, times(c.num(i, "real_steps")/c.num(i, "sim_steps")), times(c.num(i, "real_seconds")/c.num(i, "sim_seconds")))
			continue
		}
		missed := "either"
		if rr {
			missed = "the simulation"
		} else if sr {
			missed = "the real pipeline"
		}
		fmt.Fprintf(b, "- %s, q = %s, %s: the target was not reached by %s within the check's budget, so there is no ratio.\n", set, q, mode, missed)
	}
	b.WriteString("\nThe real pipeline runs q parties, the aggregator and the broker on the machine's cores, where the simulation gives each " +
		"party a processor: the ratio measures how far this host is from q machines, not the simulation's error on q machines.\n")
}

// validationVerdict says what validate.csv found of the simulation's
// times, or that it is not in the folder.
func (g *gen) validationVerdict() string {
	v, err := g.table("validate.csv", "parties", "mode", "error")
	if err != nil || v == nil || len(v.rows) == 0 {
		return "**Not validated here.** These are simulated times from the costs above; this folder holds no `validate.csv` " +
			"(`asyrevel experiment validate`, real processes under CPU quotas) to check them against. Read the ratios between modes, not the seconds."
	}
	qs, ok := validatedQs(v)
	// Figure 4 simulates with the cost model's costs: its error is the one
	// that bears on the figure (the calibrated costs' decides the range).
	col, costs := "error_cost_model", "the cost model's costs, which Figure 4 uses,"
	if !v.has(col) {
		col, costs = "error", "the calibrated costs"
	}
	var rates []float64
	for i := range v.rows {
		if e := v.num(i, col); !math.IsNaN(e) && e > -1 {
			rates = append(rates, 1/(1+e))
		}
	}
	lo, hi := extent(rates)
	var b strings.Builder
	if len(ok) == 0 {
		fmt.Fprintf(&b, "**Not validated.** These are simulated times from the costs above. `asyrevel experiment validate` ran real processes "+
			"under CPU quotas (the section below, `validate.csv`) at q = %s: at no q were both modes within %.0f%% of the real run with the calibrated costs", list(qs), 100*validTolerance)
	} else {
		fmt.Fprintf(&b, "**Validated at q = %s only.** `asyrevel experiment validate` (the section below, `validate.csv`) ran real processes under CPU quotas "+
			"at q = %s: both modes were within %.0f%% of the real run at q = %s, and not elsewhere", list(ok), list(qs), 100*validTolerance, list(ok))
	}
	if len(rates) > 0 {
		fmt.Fprintf(&b, "; with %s the simulation ran %s to %s times as many requests a second as the real runs", costs, f(lo, 2), f(hi, 2))
	}
	b.WriteString(". Read the ratios between modes, not the seconds; a measured wall-clock comparison over a real network is the section \"" +
		"A real network\" when this folder holds `wan.csv`.")
	return b.String()
}

// validTolerance is the error within which a q counts as validated (both
// modes).
const validTolerance = 0.15

// validatedQs are the q of validate.csv, and those at which every row's
// error is within validTolerance.
func validatedQs(v *table) (all, ok []string) {
	bad := map[string]bool{}
	for i := range v.rows {
		q := v.str(i, "parties")
		if !slices.Contains(all, q) {
			all = append(all, q)
		}
		if !(math.Abs(v.num(i, "error")) <= validTolerance) {
			bad[q] = true
		}
	}
	for _, q := range all {
		if !bad[q] {
			ok = append(ok, q)
		}
	}
	return all, ok
}

// fig4Plot draws, per set, the speed-up against q and the synchronous over
// the asynchronous time at the same q: geometric means over the seeds,
// bars their 95% intervals.
func fig4Plot(d fig4Data) ([]byte, error) {
	var panels []*plot.Plot
	for _, set := range d.sets() {
		qs := d.qs(set)
		if len(qs) == 0 {
			continue
		}
		sp := plot.New()
		sp.Title.Text = fmt.Sprintf("%s: speed-up T(%d)/T(q)", set, qs[0])
		sp.X.Label.Text = "parties q"
		sp.Y.Label.Text = "speed-up (geometric mean, 95% interval)"
		sp.X.Scale, sp.Y.Scale = plot.LogScale{}, plot.LogScale{}
		sp.X.Tick.Marker, sp.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
		sp.Add(plotter.NewGrid())
		qmax := float64(qs[len(qs)-1]) / float64(qs[0])
		ylo, yhi, drawn := 1.0, 1.0, 0
		for i, m := range fig4Modes {
			var pts errPoints
			for _, q := range qs {
				r, lo, hi, ok := d.speedup(set, qs[0], q, m.mode)
				if q == qs[0] {
					r, lo, hi, ok = 1, 1, 1, true
				}
				if !ok || !(r > 0) {
					continue
				}
				if math.IsNaN(lo) {
					lo, hi = r, r
				}
				pts.XYs = append(pts.XYs, plotter.XY{X: float64(q), Y: r})
				pts.YErrors = append(pts.YErrors, struct{ Low, High float64 }{r - lo, hi - r})
				ylo, yhi = math.Min(ylo, lo), math.Max(yhi, hi)
			}
			if len(pts.XYs) < 2 {
				continue
			}
			drawn++
			l, lp, err := plotter.NewLinePoints(pts.XYs)
			if err != nil {
				return nil, err
			}
			l.Color, lp.Color = plotutil.Color(i), plotutil.Color(i)
			lp.Shape = plotutil.Shape(i)
			eb, err := plotter.NewYErrorBars(pts)
			if err != nil {
				return nil, err
			}
			eb.Color = plotutil.Color(i)
			sp.Add(l, lp, eb)
			sp.Legend.Add(fmt.Sprintf("%s (%s)", m.algo, m.mode), l, lp)
		}
		ideal, _ := plotter.NewLine(plotter.XYs{{X: float64(qs[0]), Y: 1}, {X: float64(qs[len(qs)-1]), Y: qmax}})
		ideal.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
		sp.Add(ideal)
		sp.Legend.Add("linear", ideal)
		sp.Legend.Top, sp.Legend.Left = true, true
		sp.Y.Min, sp.Y.Max = math.Min(0.5, ylo/1.5), math.Max(yhi, qmax)*1.5
		sp.X.Min, sp.X.Max = 0.8*float64(qs[0]), math.Max(float64(qs[len(qs)-1]), 2)*1.25
		if drawn == 0 {
			sp.Title.Text = set + " (no speed-up: a run did not reach the target)"
		}

		rp := plot.New()
		rp.Title.Text = set + ": T(sync)/T(async), same q and seed"
		rp.X.Label.Text = "parties q"
		rp.Y.Label.Text = "ratio (geometric mean, 95% interval)"
		rp.X.Scale, rp.Y.Scale = plot.LogScale{}, plot.LogScale{}
		rp.X.Tick.Marker, rp.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
		rp.Add(plotter.NewGrid())
		var pts errPoints
		ylo, yhi = 1, 1
		for _, q := range qs {
			rs := d.paired(set, q)
			if len(rs) == 0 {
				continue
			}
			gm, lo, hi := geoCI(rs)
			if math.IsNaN(lo) {
				lo, hi = gm, gm
			}
			pts.XYs = append(pts.XYs, plotter.XY{X: float64(q), Y: gm})
			pts.YErrors = append(pts.YErrors, struct{ Low, High float64 }{gm - lo, hi - gm})
			ylo, yhi = math.Min(ylo, lo), math.Max(yhi, hi)
		}
		one, _ := plotter.NewLine(plotter.XYs{{X: 0.8 * float64(qs[0]), Y: 1}, {X: 1.25 * math.Max(2, float64(qs[len(qs)-1])), Y: 1}})
		one.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
		rp.Add(one)
		if len(pts.XYs) > 0 {
			l, lp, err := plotter.NewLinePoints(pts.XYs)
			if err != nil {
				return nil, err
			}
			eb, err := plotter.NewYErrorBars(pts)
			if err != nil {
				return nil, err
			}
			rp.Add(l, lp, eb)
		} else {
			rp.Title.Text = set + " (no pair of runs reached the target)"
		}
		rp.Y.Min, rp.Y.Max = math.Min(0.8, ylo/1.2), math.Max(1.25, yhi*1.2)
		rp.X.Min, rp.X.Max = 0.8*float64(qs[0]), math.Max(float64(qs[len(qs)-1]), 2)*1.25
		panels = append(panels, sp, rp)
	}
	if len(panels) == 0 {
		return nil, nil
	}
	return png([][]*plot.Plot{panels}, vg.Length(len(panels))*4*vg.Inch, 3.6*vg.Inch)
}
