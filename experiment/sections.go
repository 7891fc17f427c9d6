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

// Fig4Body is the results part of the fig4 section.
// modeRows returns the asynchronous and the synchronous row of set at q
// (nil where there is none).
func modeRows(rows []Fig4Row, set string, q int) (async, sync *Fig4Row) {
	for i := range rows {
		if r := &rows[i]; r.Set == set && r.Q == q {
			if r.Mode == "async" {
				async = r
			} else {
				sync = r
			}
		}
	}
	return async, sync
}

func Fig4Body(rows []Fig4Row, checks []Fig4Check, cfg Fig4Config) string {
	var b strings.Builder
	b.WriteString("![speed-up against the number of parties](fig4.png)\n\n")
	var tab [][]string
	for _, r := range rows {
		secs := fmtF(r.Seconds, 2)
		if !r.Reached {
			secs = "> " + secs
		}
		sp := "-"
		if !math.IsNaN(r.Speedup) {
			sp = fmtF(r.Speedup, 2)
		}
		tab = append(tab, []string{r.Set, strconv.Itoa(r.Q), r.Mode, strconv.Itoa(r.Params), fmtF(1e3*r.StepCost, 3), secs,
			strconv.FormatInt(r.Steps, 10), fmt.Sprintf("%d..%d", r.MinSteps, r.MaxSteps), sp})
	}
	b.WriteString(mdTable([]string{"set", "q", "mode", "parameters a party", "simulated step (ms)", "time to target (virtual s)",
		"answered requests", "updates a party", "speed-up"}, tab))
	b.WriteString("\nData: `fig4.csv` (raw figures, with the objective each run ended at) and `fig4_check.csv`.\n\n")
	for _, set := range setsOf(rows) {
		// With one party there is no straggler and nothing to wait for:
		// the two modes are the same algorithm, and their times differ
		// only by their random draws.
		a1, s1 := modeRows(rows, set, 1)
		if a1 != nil && s1 != nil && a1.Reached && s1.Reached && a1.Seconds > 0 && s1.Seconds > 0 {
			fmt.Fprintf(&b, "- %s, q = 1: the two modes are the same algorithm there (one party, no straggler), and they reach the target "+
				"at %s and %s virtual s: a %.2fx difference from their random draws alone, so a single run's speed-up is uncertain by about "+
				"that factor; the times of the two modes at the same q are the steadier comparison.\n",
				set, fmtF(a1.Seconds, 0), fmtF(s1.Seconds, 0), max(a1.Seconds, s1.Seconds)/min(a1.Seconds, s1.Seconds))
		}
		a8, s8 := modeRows(rows, set, 8)
		if a8 != nil && s8 != nil && !math.IsNaN(a8.Speedup) && !math.IsNaN(s8.Speedup) {
			fmt.Fprintf(&b, "- %s, q = 8: asynchronous speed-up %.2f, synchronous %.2f; with the straggler the asynchronous run "+
				"reaches the target %.2fx sooner than the synchronous one.\n", set, a8.Speedup, s8.Speedup, s8.Seconds/a8.Seconds)
		}
	}
	if len(checks) > 0 {
		b.WriteString("\nThe model against the real pipeline (embedded JetStream over TCP loopback, each step sleeping the same " +
			"simulated compute on top of its real compute, one request in flight), to a looser target:\n\n")
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
		b.WriteString("\nA real party step costs its simulated compute plus a round trip through the broker, which on this machine's 2 " +
			"shared cores (the broker, the aggregator and q parties on them) is longer than the simulation's message time, and " +
			"the real steps' random draws differ from the simulation's: the real pipeline here measures the host, the simulation " +
			"the algorithm on q machines.\n")
	}
	fmt.Fprintf(&b, "\nMethod. This machine has 2 cores, shared: q parties cannot each have a processor, and a real run with "+
		"16 parties measures the host, not the algorithm. The sweep therefore runs in virtual time (`experiment.Simulate`): "+
		"the parties' and the aggregator's steps are computed for real, exactly as the runtimes compute them (fresh outputs "+
		"stored before h, the same estimators and step sizes), and ordered by when they would happen on q machines: a party's "+
		"step takes %v times its model's number of parameters (the cost of a zeroth-order step, a direction draw and two "+
		"forward passes, grows with the model), a message takes %v each way, and the aggregator answers requests one at a "+
		"time in the order they arrive. The last party is a straggler whose steps take %gx as long. AsyREVEL: each party "+
		"keeps one request in flight and steps whenever its reply arrives. SynREVEL: a round waits for every party's request "+
		"on the shared batch, so it lasts as long as the straggler's step. The target is f - f* <= %g with f* from the "+
		"centralised L-BFGS solver on the same regularised objective, for the network (no f*) a training loss of %g; "+
		"speed-up is the time with the fewest parties over the time with q. The number of parameters per party falls as 1/q, "+
		"so a party's step gets cheaper as well as the steps being spread over more machines: that is why the speed-up can "+
		"exceed q. The paper's Figure 4 plots the same speed-ups (its data are not in this project's sources): its claim is "+
		"near-linear asynchronous speed-up, above the synchronous one when a party straggles.\n",
		cfg.AlphaText(), cfg.Latency, cfg.StragglerFactor, cfg.Suboptimality, cfg.NetworkLoss)
	return b.String()
}

// AlphaText lists the simulated compute per parameter by set.
func (c Fig4Config) AlphaText() string {
	var parts []string
	for _, s := range c.Sets {
		parts = append(parts, fmt.Sprintf("%v (%s)", c.Alpha[s.Name], s.Name))
	}
	return strings.Join(parts, ", ")
}
