package report

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// t4row is a row of table4.csv.
type t4row struct {
	set, algo         string
	trials, failed    int
	mean, sd          float64
	central, majority float64
	seconds           float64
	maxSteps          int64
}

// table4Body: the accuracies beside the paper's, each federated method's
// gap to NonF with Welch's t-test over the trials, and a flag wherever an
// accuracy is at or below the test set's majority-class rate (a constant
// classifier's score, where a comparison says nothing).
func table4Body(g *gen) (string, error) {
	t, err := g.table("table4.csv", "set", "algo", "trials", "mean_accuracy", "sd", "central_lbfgs", "majority_rate")
	if err != nil {
		return "", err
	}
	tt, err := g.table("table4_trials.csv", "set", "algo", "test_accuracy")
	if err != nil {
		return "", err
	}
	var rows []t4row
	for i := range t.rows {
		rows = append(rows, t4row{set: t.str(i, "set"), algo: t.str(i, "algo"), trials: int(t.integer(i, "trials")), failed: int(t.integer(i, "failed")),
			mean: t.num(i, "mean_accuracy"), sd: t.num(i, "sd"), central: t.num(i, "central_lbfgs"), majority: t.num(i, "majority_rate"),
			seconds: t.num(i, "seconds_per_trial"), maxSteps: t.integer(i, "max_steps")})
	}
	accuracies := func(set, algo string) []float64 {
		if tt == nil {
			return nil
		}
		var out []float64
		for _, i := range tt.where("set", set, "algo", algo) {
			if v := tt.num(i, "test_accuracy"); !math.IsNaN(v) && tt.str(i, "failed") == "" {
				out = append(out, v)
			}
		}
		return out
	}
	get := func(set, algo string) *t4row {
		for i := range rows {
			if rows[i].set == set && rows[i].algo == algo {
				return &rows[i]
			}
		}
		return nil
	}
	atMajority := func(acc, majority float64) bool { return !math.IsNaN(majority) && acc <= majority }
	var flags []string
	ms := func(r *t4row) string {
		if r == nil {
			return "-"
		}
		var out string
		switch {
		case math.IsNaN(r.mean):
			out = "no run finished"
		case math.IsNaN(r.sd):
			out = fmt.Sprintf("%.2f (1 run)", 100*r.mean)
		default:
			out = fmt.Sprintf("%.2f ± %.2f", 100*r.mean, 100*r.sd)
		}
		if atMajority(r.mean, r.majority) {
			out += " ⚑"
			flags = append(flags, fmt.Sprintf("%s %s: %.2f%% is at or below the majority-class rate %.2f%%", r.set, r.algo, 100*r.mean, 100*r.majority))
		}
		if r.failed > 0 {
			out += fmt.Sprintf(" (%d of %d failed: table4_trials.csv)", r.failed, r.trials)
		}
		return out
	}
	var tab, gaps [][]string
	var sets []string
	for _, r := range rows {
		if !slices.Contains(sets, r.set) {
			sets = append(sets, r.set)
		}
	}
	for _, set := range sets {
		gau, uni, n := get(set, "asyrevel-gau"), get(set, "asyrevel-uni"), get(set, "nonf")
		any := gau
		if any == nil {
			any = n
		}
		majority := math.NaN()
		if any != nil {
			majority = any.majority
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
					parts = append(parts, f(100*v, 2)+" ⚑")
					who := algo
					if algo != "nonf" && v == p.AsyREVEL {
						who = "AsyREVEL"
					}
					if fl := fmt.Sprintf("%s, the paper's %s: %.2f%% is at or below the majority-class rate %.2f%%", set, who, 100*v, 100*majority); !slices.Contains(flags, fl) {
						flags = append(flags, fl)
					}
				default:
					parts = append(parts, f(100*v, 2))
				}
			}
			paper = strings.Join(parts, " / ")
			if !math.IsNaN(p.AsyREVEL) {
				paper += " (one AsyREVEL figure, variant not given)"
			}
		}
		central := "-"
		if any != nil && !math.IsNaN(any.central) {
			central = f(100*any.central, 2)
		}
		runs := "-"
		if any != nil {
			runs = fmt.Sprintf("%d x %s", any.trials, fmtDuration(time.Duration(any.seconds*float64(time.Second))))
			if any.maxSteps > 0 {
				runs = fmt.Sprintf("%d x %d steps", any.trials, any.maxSteps)
				if n != nil && n != any && n.maxSteps != any.maxSteps {
					runs += fmt.Sprintf(" (NonF %d x %d)", n.trials, n.maxSteps)
				}
			}
		}
		tab = append(tab, []string{set, ms(gau), ms(uni), ms(n), paper, central, f(100*majority, 2), runs})
		if n == nil {
			continue
		}
		base := accuracies(set, "nonf")
		for _, r := range []*t4row{gau, uni} {
			if r == nil {
				continue
			}
			w := WelchTest(accuracies(set, r.algo), base)
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
			if atMajority(n.mean, n.majority) {
				verdict += "; NonF is at or below the majority rate ⚑: the gap says nothing"
			}
			paperGap := "-"
			if pr, pn := PaperFigure(set, r.algo), PaperFigure(set, "nonf"); !math.IsNaN(pr) && !math.IsNaN(pn) {
				paperGap = fmt.Sprintf("%+.2f", 100*(pr-pn))
			}
			vsPaper := "-"
			if pr := PaperFigure(set, r.algo); !math.IsNaN(pr) && !math.IsNaN(r.mean) {
				vsPaper = fmt.Sprintf("%+.2f", 100*(r.mean-pr))
			}
			gap := "-"
			if !math.IsNaN(w.Diff) {
				gap = fmt.Sprintf("%+.2f", 100*w.Diff)
			}
			gaps = append(gaps, []string{set, r.algo, gap, f(w.T, 2), f(w.DF, 1), fmtP(w.P), verdict, paperGap, vsPaper})
		}
	}
	var b strings.Builder
	b.WriteString(mdTable([]string{"set", "AsyREVEL-Gau (%)", "AsyREVEL-Uni (%)", "NonF (%)", "paper: Gau / Uni / NonF (%)",
		"centralised L-BFGS (%)", "majority class (%)", "trials"}, tab))
	b.WriteString("\nMean ± standard deviation of the test accuracy over the trials (seeds 1, 2, ...); data: `table4.csv`, " +
		"every run in `table4_trials.csv`. NonF runs AsyREVEL-Gau with all features at one party (q = 1, the same pipeline; " +
		"where the runs are bounded by steps, as the trials column says, every method gets the same number); " +
		"the centralised reference is L-BFGS on the same regularised logistic objective (`asyrevel experiment central`). " +
		"The paper's figures: its Table 4 for UCI credit card (D1), GiveMeSomeCredit (D2) and a9a (D4), in the order Gau / Uni / NonF; " +
		"for w8a, MNIST and Fashion-MNIST the one AsyREVEL figure this project's sources quote. " +
		"⚑: at or below the test set's majority-class rate (what predicting the commonest class everywhere scores).\n\n")
	b.WriteString("Each federated method against NonF over the trials, Welch's unequal-variance t-test (two-sided), " +
		"beside the paper's own gap and our distance from the paper's figure:\n\n")
	b.WriteString(mdTable([]string{"set", "method", "gap to NonF (points)", "Welch t", "df", "p", "verdict", "paper's gap (points)", "ours - paper (points)"}, gaps))
	if len(flags) > 0 {
		b.WriteString("\nAt or below the majority-class rate:\n\n")
		for _, fl := range flags {
			fmt.Fprintf(&b, "- %s\n", fl)
		}
	}
	return b.String(), nil
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
