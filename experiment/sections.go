package experiment

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// The markdown of each experiment's section of REPORT.md. The caller fills
// in the command, machine, timing and settings of the Section.

// Fig3Body is the results part of the fig3 section.
func Fig3Body(runs []Fig3Run, straggler float64) string {
	var b strings.Builder
	b.WriteString("![training loss against time](fig3.png)\n\n")
	b.WriteString("Data: `fig3.csv` (every evaluation: time, steps, training loss, test accuracy) and `fig3_runs.csv`.\n\n")
	var rows [][]string
	for _, r := range runs {
		rows = append(rows, []string{r.Set, r.Algo, strconv.FormatInt(r.Steps, 10), fmtF(r.StepsPerSec, 0), fmtF(r.FinalLoss, 4), pct(r.FinalAccuracy)})
	}
	b.WriteString(mdTable([]string{"set", "method", "steps", "steps/s", "final training loss", "final test accuracy"}, rows))
	// Loss reached by the asynchronous against the synchronous runs.
	b.WriteString("\n")
	for _, set := range setsOf(runs) {
		get := func(algo string) *Fig3Run {
			for i := range runs {
				if runs[i].Set == set && runs[i].Algo == algo {
					return &runs[i]
				}
			}
			return nil
		}
		a, s := get("asyrevel-gau"), get("synrevel-gau")
		if a != nil && s != nil && s.StepsPerSec > 0 {
			fmt.Fprintf(&b, "- %s: AsyREVEL-Gau made %.1fx the steps of SynREVEL-Gau in the same time (final loss %.4f against %.4f).\n",
				set, a.StepsPerSec/s.StepsPerSec, a.FinalLoss, s.FinalLoss)
		}
	}
	fmt.Fprintf(&b, "\nThe paper's Figure 3 draws the same curves (its data are not in this project's sources): its claim is that the "+
		"asynchronous algorithms reach a given loss sooner than the synchronous ones when a party straggles, and that the "+
		"zeroth-order algorithms stay within reach of TIG although they never see a gradient. Here every run has the same %gx "+
		"straggler (the last party, its steps slowed by a delay proportional to its measured compute); SynREVEL waits for it at "+
		"every round, AsyREVEL does not.\n", straggler)
	return b.String()
}

func setsOf[T interface{ setName() string }](xs []T) []string {
	var out []string
	for _, x := range xs {
		if !slices.Contains(out, x.setName()) {
			out = append(out, x.setName())
		}
	}
	return out
}

func (r Fig3Run) setName() string   { return r.Set }
func (r Table3Row) setName() string { return r.Set }
func (r Table4Row) setName() string { return r.Set }
func (r Fig4Row) setName() string   { return r.Set }

// Table3Body is the results part of the table3 section.
func Table3Body(rows []Table3Row) string {
	var b strings.Builder
	var tab [][]string
	for _, r := range rows {
		tab = append(tab, []string{r.Set, r.Method, strconv.Itoa(r.K), strconv.Itoa(r.UpBytes), strconv.Itoa(r.DownBytes),
			strconv.Itoa(r.UpBytes + r.DownBytes), fmtF(r.WireBytes, 0), fmtF(r.RoundMillis, 2), r.Carries})
	}
	b.WriteString(mdTable([]string{"set", "method", "k", "payload up (B)", "payload down (B)", "payload a round (B)",
		"on the broker a round (B)", "round trip (ms)", "what travels"}, tab))
	b.WriteString("\nData: `table3.csv`. Payload: the encoded request and reply of one round (a batch of samples); " +
		"on the broker: the bytes of every client connection to the embedded JetStream server per round (publish, stream " +
		"storage acknowledgement, delivery, consumer acknowledgement, headers and subjects), measured as the difference " +
		"between two runs that differ only in their number of steps; round trip: from a party's request to its reply, one " +
		"request in flight.\n\n")
	for _, set := range setsOf(rows) {
		var zo, delta, tig *Table3Row
		for i := range rows {
			r := &rows[i]
			if r.Set != set {
				continue
			}
			switch r.Method {
			case Table3Methods[0].Name:
				zo = r
			case Table3Methods[1].Name:
				delta = r
			case Table3Methods[2].Name:
				tig = r
			}
		}
		if zo == nil || tig == nil || delta == nil {
			continue
		}
		p := func(r *Table3Row) float64 { return float64(r.UpBytes + r.DownBytes) }
		fmt.Fprintf(&b, "- %s (k = %d): a zeroth-order round carries %.2fx the payload of a TIG round (%.2fx with --delta) "+
			"and %.2fx its bytes on the broker; its round trip takes %.2fx as long.\n", set, zo.K, p(zo)/p(tig), p(delta)/p(tig),
			zo.WireBytes/tig.WireBytes, zo.RoundMillis/tig.RoundMillis)
	}
	b.WriteString("\nWhere this disagrees with the paper: the paper presents the zeroth-order framework's communication as " +
		"inexpensive next to frameworks that transmit gradients. Per round, on this wire format, it is not cheaper than TIG: " +
		"per sample a zeroth-order request carries c and c_hat (2k floats) where TIG's carries c (k floats), and the reply " +
		"carries h and h_bar (2 floats, or 1 with --delta) where TIG's carries dF_0/dc (k floats). For k = 1 (logistic " +
		"regression, the paper's network) the zeroth-order round is the larger one; it becomes the smaller one only for " +
		"k > 3 (k > 2 with --delta). What the zeroth-order round never carries is a gradient (TIG's reply is one, and " +
		"it is what label-inference attacks on split learning use). The sample ids (4 bytes a sample) and framing are " +
		"the same for both. Counted in whole trainings, the zeroth-order algorithms also need more rounds than TIG to " +
		"reach the same loss (Figure 3).\n")
	return b.String()
}

// Table4Body is the results part of the table4 section: the accuracies
// beside the paper's, each federated method's gap to NonF with Welch's
// t-test over the trials, and a flag wherever an accuracy is at or below
// the test set's majority-class rate (a constant classifier's score, where
// a comparison says nothing).
func Table4Body(rows []Table4Row, trials []Table4Trial) string {
	var b strings.Builder
	var tab, gaps [][]string
	get := func(set, algo string) *Table4Row {
		for i := range rows {
			if rows[i].Set == set && rows[i].Algo == algo {
				return &rows[i]
			}
		}
		return nil
	}
	atMajority := func(acc, majority float64) bool { return !math.IsNaN(majority) && acc <= majority }
	var flags []string
	ms := func(r *Table4Row) string {
		if r == nil {
			return "-"
		}
		var out string
		switch {
		case math.IsNaN(r.Mean):
			out = "no run finished"
		case math.IsNaN(r.SD):
			out = fmt.Sprintf("%.2f (1 run)", 100*r.Mean)
		default:
			out = fmt.Sprintf("%.2f ± %.2f", 100*r.Mean, 100*r.SD)
		}
		if atMajority(r.Mean, r.Majority) {
			out += " ⚑"
			flags = append(flags, fmt.Sprintf("%s %s: %.2f%% is at or below the majority-class rate %.2f%%", r.Set, r.Algo, 100*r.Mean, 100*r.Majority))
		}
		if r.Failed > 0 {
			out += fmt.Sprintf(" (%d of %d failed: table4_trials.csv)", r.Failed, r.Trials)
		}
		return out
	}
	for _, set := range setsOf(rows) {
		g, u, n := get(set, "asyrevel-gau"), get(set, "asyrevel-uni"), get(set, "nonf")
		any := g
		if any == nil {
			any = n
		}
		majority := math.NaN()
		if any != nil {
			majority = any.Majority
		}
		paper := "-"
		if p, ok := PaperTable4[set]; ok {
			var parts []string
			for _, algo := range Table4Algos {
				v := p.For(algo)
				switch {
				case math.IsNaN(v):
					parts = append(parts, "-")
				case atMajority(v, majority):
					parts = append(parts, fmtF(100*v, 2)+" ⚑")
					who := algo
					if algo != "nonf" && v == p.AsyREVEL {
						who = "AsyREVEL"
					}
					if f := fmt.Sprintf("%s, the paper's %s: %.2f%% is at or below the majority-class rate %.2f%%", set, who, 100*v, 100*majority); !slices.Contains(flags, f) {
						flags = append(flags, f)
					}
				default:
					parts = append(parts, fmtF(100*v, 2))
				}
			}
			paper = strings.Join(parts, " / ")
			if !math.IsNaN(p.AsyREVEL) {
				paper += " (one AsyREVEL figure, variant not given)"
			}
		}
		central := "-"
		if any != nil && !math.IsNaN(any.Central) {
			central = fmtF(100*any.Central, 2)
		}
		maj := "-"
		if !math.IsNaN(majority) {
			maj = fmtF(100*majority, 2)
		}
		runs := "-"
		if any != nil {
			runs = fmt.Sprintf("%d x %s", any.Trials, fmtDuration(any.Duration))
			if any.MaxSteps > 0 {
				runs = fmt.Sprintf("%d x %d steps", any.Trials, any.MaxSteps)
				if n != nil && n != any && n.MaxSteps != any.MaxSteps {
					runs += fmt.Sprintf(" (NonF %d x %d)", n.Trials, n.MaxSteps)
				}
			}
		}
		tab = append(tab, []string{set, ms(g), ms(u), ms(n), paper, central, maj, runs})
		if n == nil {
			continue
		}
		base := accuracies(trials, set, "nonf")
		for _, r := range []*Table4Row{g, u} {
			if r == nil {
				continue
			}
			w := WelchTest(accuracies(trials, set, r.Algo), base)
			verdict := "-"
			switch {
			case math.IsNaN(w.Diff):
				verdict = "no comparison: a method has no finished run"
			case math.IsNaN(w.P):
				verdict = "no test: fewer than 2 runs"
			case w.P < 0.05 && w.Diff < 0:
				verdict = "below NonF, significant at 5%"
			case w.P < 0.05:
				verdict = "above NonF, significant at 5%"
			default:
				verdict = "not significant at 5%"
			}
			if atMajority(n.Mean, n.Majority) {
				verdict += "; NonF is at or below the majority rate ⚑: the gap says nothing"
			}
			paperGap := "-"
			if pr, pn := paperFigure(set, r.Algo), paperFigure(set, "nonf"); !math.IsNaN(pr) && !math.IsNaN(pn) {
				paperGap = fmt.Sprintf("%+.2f", 100*(pr-pn))
			}
			vsPaper := "-"
			if pr := paperFigure(set, r.Algo); !math.IsNaN(pr) && !math.IsNaN(r.Mean) {
				vsPaper = fmt.Sprintf("%+.2f", 100*(r.Mean-pr))
			}
			dash := func(v float64, prec int) string {
				if math.IsNaN(v) {
					return "-"
				}
				return fmtF(v, prec)
			}
			gaps = append(gaps, []string{set, r.Algo, fmtGap(100 * w.Diff), dash(w.T, 2), dash(w.DF, 1), fmtP(w.P), verdict, paperGap, vsPaper})
		}
	}
	b.WriteString(mdTable([]string{"set", "AsyREVEL-Gau (%)", "AsyREVEL-Uni (%)", "NonF (%)", "paper: Gau / Uni / NonF (%)",
		"centralised L-BFGS (%)", "majority class (%)", "trials"}, tab))
	b.WriteString("\nMean ± standard deviation of the test accuracy over the trials (seeds 1, 2, ...); data: `table4.csv`, " +
		"every run in `table4_trials.csv`. NonF runs AsyREVEL-Gau with all features at one party (q = 1, the same pipeline; " +
		"bounded by steps, every method gets the same number: q parties perturbing d/q parameters for T/q steps each and one party perturbing d for T converge alike); " +
		"the centralised reference is L-BFGS on the same regularised logistic objective (`asyrevel experiment central`). " +
		"The paper's figures: its Table 4 for UCI credit card (D1), GiveMeSomeCredit (D2) and a9a (D4), in the order Gau / Uni / NonF; " +
		"for w8a, MNIST and Fashion-MNIST the one AsyREVEL figure this project's sources quote. " +
		"⚑: at or below the test set's majority-class rate (what predicting the commonest class everywhere scores).\n\n")
	b.WriteString("Each federated method against NonF over the trials, Welch's unequal-variance t-test (two-sided; `experiment.WelchTest`), " +
		"beside the paper's own gap and our distance from the paper's figure:\n\n")
	b.WriteString(mdTable([]string{"set", "method", "gap to NonF (points)", "Welch t", "df", "p", "verdict", "paper's gap (points)", "ours - paper (points)"}, gaps))
	if len(flags) > 0 {
		b.WriteString("\nAt or below the majority-class rate:\n\n")
		for _, f := range flags {
			fmt.Fprintf(&b, "- %s\n", f)
		}
	}
	return b.String()
}

// fmtGap is a gap in points with its sign ("-" if unknown).
func fmtGap(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%+.2f", v)
}

// fmtP is a p-value: 3 significant digits, "< 1e-6" below.
func fmtP(p float64) string {
	switch {
	case math.IsNaN(p):
		return "-"
	case p < 1e-6:
		return "< 1e-6"
	}
	return strconv.FormatFloat(p, 'g', 3, 64)
}

// Fig4Body is the results part of the fig4 section: the measured costs,
// the asynchronous against the synchronous time to target at the same q
// over the seeds, the speed-ups against q = 1 with the q = 1 noise, and the
// checks against the real pipeline.
func Fig4Body(rows []Fig4Row, checks []Fig4Check, costs []Fig4Cost, cfg Fig4Config) string {
	var b strings.Builder
	b.WriteString("![speed-up against the number of parties, and the synchronous over the asynchronous time](fig4.png)\n\n")
	ms := func(v float64) string { return fmtF(1e3*v, 3) }
	if len(costs) > 0 {
		clock := "CPU time of the measuring thread"
		if !costs[0].CPU {
			clock = "wall time (no per-thread CPU time on this system)"
		}
		fmt.Fprintf(&b, "Costs measured on this machine by the experiment before it simulates (`fig4_costs.csv`; compute: %s, "+
			"median of %d rounds; latency: half a round trip through an embedded JetStream broker over TCP loopback, median and "+
			"10th..90th percentile of %d):\n\n", clock, costRounds, latencyTrips)
		var ct [][]string
		for _, c := range costs {
			lo, hi, nlo, nhi := math.Inf(1), 0.0, math.Inf(1), 0.0
			for _, p := range c.Party {
				lo, hi = math.Min(lo, p.Step.Median), math.Max(hi, p.Step.Median)
				nlo, nhi = math.Min(nlo, p.NNZ), math.Max(nhi, p.NNZ)
			}
			straggler := "-"
			if c.Q > 1 && cfg.StragglerFactor > 1 {
				straggler = ms(c.SlowestParty() * cfg.StragglerFactor)
			}
			ct = append(ct, []string{c.Set, strconv.Itoa(c.Q), strconv.Itoa(c.Batch), fmtF(nlo, 1) + ".." + fmtF(nhi, 1),
				ms(lo) + ".." + ms(hi), straggler, ms(c.Agg.Median), fmt.Sprintf("%s (%s..%s)", ms(c.Latency.Median), ms(c.Latency.Lo), ms(c.Latency.Hi))})
		}
		b.WriteString(mdTable([]string{"set", "q", "batch", "non-zeros a row of a block", "party step (ms), fastest..slowest party",
			"straggler's step (ms): the factor times the slowest party's", "aggregator per reply (ms)", "message one way (ms)"}, ct))
		b.WriteString("\n")
	}
	span := func(x []float64, prec int) string {
		if len(x) == 0 {
			return "-"
		}
		slices.Sort(x)
		if len(x) == 1 {
			return fmtF(x[0], prec)
		}
		return fmt.Sprintf("%s [%s..%s]", fmtF(median(x), prec), fmtF(x[0], prec), fmtF(x[len(x)-1], prec))
	}
	var head, sp [][]string
	for _, set := range fig4Sets(rows) {
		for _, q := range fig4Qs(rows, set) {
			cell := func(mode string) string {
				t, _ := timesOf(rows, set, q, mode)
				runs := 0
				for _, r := range rows {
					if r.Set == set && r.Q == q && r.Mode == mode {
						runs++
					}
				}
				return fmt.Sprintf("%s (%d of %d)", span(t, 1), len(t), runs)
			}
			head = append(head, []string{set, strconv.Itoa(q), cell("async"), cell("sync"), span(pairedRatios(rows, set, q), 2)})
			spd := func(mode string) string {
				var x []float64
				for _, r := range rows {
					if r.Set == set && r.Q == q && r.Mode == mode && !math.IsNaN(r.Speedup) {
						x = append(x, r.Speedup)
					}
				}
				return span(x, 2)
			}
			sp = append(sp, []string{set, strconv.Itoa(q), spd("async"), spd("sync")})
		}
	}
	fmt.Fprintf(&b, "The headline: asynchronous against synchronous at the same q, the straggler %gx (q > 1); virtual seconds to the target, "+
		"median [fastest..slowest] over the seeds (runs that reached it of runs), and the synchronous time over the asynchronous "+
		"one seed by seed:\n\n", cfg.StragglerFactor)
	b.WriteString(mdTable([]string{"set", "q", "AsyREVEL-Gau (virtual s)", "SynREVEL-Gau (virtual s)", "T(sync)/T(async)"}, head))
	b.WriteString("\nSpeed-up against the fewest parties, each run's time over the median time at q = 1 of its mode, median [lowest..highest] over the seeds:\n\n")
	b.WriteString(mdTable([]string{"set", "q", "AsyREVEL-Gau speed-up", "SynREVEL-Gau speed-up"}, sp))
	b.WriteString("\nData: `fig4.csv` (every run, with its seed and the objective it ended at), `fig4_costs.csv`, `fig4_check.csv`.\n\n")
	b.WriteString("**Not validated.** These are simulated times from the costs above. `asyrevel experiment validate` runs real processes " +
		"under CPU quotas at the same settings and compares: on this machine no q came within 15% in both modes, and with these " +
		"costs the simulation ran 1.8 to 5.9 times as many requests a second as the real runs (the section \"validate\" below and " +
		"docs/kernel.md). Read the ratios between modes, not the seconds; the measured wall-clock comparison over a real network is " +
		"the section \"wan\".\n\n")
	for _, set := range fig4Sets(rows) {
		qs := fig4Qs(rows, set)
		if len(qs) == 0 {
			continue
		}
		// With the fewest parties, q = 1, there is no straggler and nothing
		// to wait for: the two modes are the same algorithm, and their
		// times differ only by their random draws.
		a, aok := timesOf(rows, set, qs[0], "async")
		s, sok := timesOf(rows, set, qs[0], "sync")
		all := append(append([]float64(nil), a...), s...)
		if qs[0] == 1 && aok && sok && len(all) > 1 {
			slices.Sort(all)
			fmt.Fprintf(&b, "- %s, the noise at q = 1: the two modes are the same algorithm there (one party, no straggler); their %d runs "+
				"reached the target between %s and %s virtual s, a factor of %.2f from the random draws alone. A speed-up is a ratio "+
				"to this time: one run's is uncertain by up to that factor, the medians' by less.\n",
				set, len(all), fmtF(all[0], 0), fmtF(all[len(all)-1], 0), all[len(all)-1]/all[0])
		}
	}
	if len(checks) > 0 {
		b.WriteString("\nThe simulation against the real pipeline (embedded JetStream over TCP loopback, the parties' real compute only, " +
			"one request in flight; the simulation at the costs measured for it), to a looser target:\n\n")
		var ct [][]string
		for _, c := range checks {
			real := fmtF(c.RealSeconds, 2)
			if !c.RealReached {
				real = "> " + real
			}
			sim := fmtF(c.SimSeconds, 2)
			if !c.SimReached {
				sim = "> " + sim
			}
			per := func(sec float64, steps int64) string {
				if steps == 0 {
					return "-"
				}
				return fmtF(1e3*float64(c.Q)*sec/float64(steps), 2)
			}
			ct = append(ct, []string{c.Set, strconv.Itoa(c.Q), c.Mode, fmtF(c.Target, 5), real, sim, strconv.FormatInt(c.RealSteps, 10),
				strconv.FormatInt(c.SimSteps, 10), per(c.RealSeconds, c.RealSteps), per(c.SimSeconds, c.SimSteps)})
		}
		b.WriteString(mdTable([]string{"set", "q", "mode", "target objective", "real pipeline (s)", "simulation (s)", "real steps",
			"simulated steps", "real ms a party step", "simulated ms a party step"}, ct))
		b.WriteString("\n")
		for _, c := range checks {
			if c.RealReached && c.SimReached && c.SimSteps > 0 && c.SimSeconds > 0 {
				fmt.Fprintf(&b, "- %s, q = %d, %s: the real pipeline took %.2fx the simulated steps and %.2fx the simulated time to the target.\n",
					c.Set, c.Q, c.Mode, float64(c.RealSteps)/float64(c.SimSteps), c.RealSeconds/c.SimSeconds)
			} else {
				missed := "either"
				if c.RealReached {
					missed = "the simulation"
				} else if c.SimReached {
					missed = "the real pipeline"
				}
				fmt.Fprintf(&b, "- %s, q = %d, %s: the target was not reached by %s within the check's budget, so there is no ratio.\n",
					c.Set, c.Q, c.Mode, missed)
			}
		}
		b.WriteString("\nThe real pipeline runs q parties, the aggregator and the broker on this machine's 2 shared cores, where the " +
			"simulation gives each party a processor: the ratio measures how far this host is from q machines, not the simulation's " +
			"error on q machines (which needs processes with a processor each; not done here).\n")
	}
	fmt.Fprintf(&b, "\nMethod. This machine has 2 cores, shared: q parties cannot each have a processor, and a real run with "+
		"16 parties measures the host, not the algorithm. The sweep therefore runs in virtual time (`experiment.Simulate`): "+
		"the parties' and the aggregator's steps are computed for real by the same code as the runtimes (package `zoo/kernel`; "+
		"`TestKernelSimulatorMatchesRuntime` checks bit for bit that the simulator and the runtimes compute the same parameters for the same order of "+
		"arrivals), and ordered by when they would happen on q machines: each party's step takes its measured cost on its own "+
		"block (which depends on the batch and the block's non-zeros, not only on its width), the aggregator answers requests "+
		"one at a time in the order they arrive, each taking its measured cost, and a message takes the measured one-way time. "+
		"The last party is a straggler whose steps take %gx the slowest party's cost (its own block may be the cheapest: "+
		"on a9a the last columns have 0.06 non-zeros a row at q = 4). AsyREVEL: each party keeps one request in flight and "+
		"steps whenever its reply arrives. SynREVEL: a round waits for every party's request on the shared batch, so it lasts "+
		"as long as the straggler's step. The target is f - f* <= %g with f* from the centralised L-BFGS solver on the same "+
		"regularised objective, for the network (no f*) a training loss of %g. The paper's Figure 4 plots speed-ups (its data "+
		"are not in this project's sources): its claim is near-linear asynchronous speed-up, above the synchronous one when a "+
		"party straggles.\n", cfg.StragglerFactor, cfg.Suboptimality, cfg.NetworkLoss)
	return b.String()
}
