package experiment

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// privacyReport writes the REPORT section of the privacy experiment from
// its summary: tables, the paper's wire format against TIG, and the
// defenses that meet the target (attack AUC at most 0.6 for the passive
// and the active attacker, at most 1 point of test accuracy lost), or the
// best trade-off.
func privacyReport(sum []PrivacySummary, cmdline string) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	pct := func(v float64) string {
		if math.IsNaN(v) {
			return "n/a"
		}
		return fmt.Sprintf("%.2f", 100*v)
	}
	f := func(v float64, prec int) string {
		switch {
		case math.IsNaN(v):
			return "n/a"
		case math.IsInf(v, 1):
			return "inf"
		}
		return fmt.Sprintf("%.*f", prec, v)
	}
	best := headline(sum)
	find := func(set, setting, who, attack string) (PrivacySummary, bool) {
		for _, s := range sum {
			if s.Set == set && s.Setting == setting && s.Attacker == who && s.Attack == attack {
				return s, true
			}
		}
		return PrivacySummary{}, false
	}
	var sets, settings []string
	for _, s := range sum {
		if !slices.Contains(sets, s.Set) {
			sets = append(sets, s.Set)
		}
	}

	p("## Privacy: what a run's traffic reveals, and what the defenses cost\n\n")
	p("Produced by `%s` (results/privacy.csv, results/privacy.png). Every run trains over the embedded\n", cmdline)
	p("JetStream broker; the attacks read the run's log afterwards through `replay`, each from what its\n")
	p("attacker legitimately saw (party 3's requests, the replies to them and the control messages);\n")
	p("only the scorer reads the labels. The *passive* attacker is an honest party that analyses its own\n")
	p("view; the *active* one is party 3 shaping its requests: it perturbs a single sample per request\n")
	p("(c_hat = c for the others, its perturbation pushed to 0.05, beyond the clip), so that even a\n")
	p("batch-mean reply isolates that sample. Test accuracy and AUC are means over the seeds (sd in the\n")
	p("CSV); the accuracy drop is against the undefended `paper` setting of the same set; epsilon is the\n")
	p("worst label's in one party's view at delta = 1e-5 (`epsilon_all_parties` in the CSV: every party\n")
	p("colluding); the AUC bound is the largest AUC any single party can reach against any one label.\n\n")
	if strings.Contains(cmdline, "--quick") {
		p("**A quick run** (one seed, 2 epochs on a9a, 1 on MNIST, noise calibrated for the full run): it\n")
		p("checks the pipeline; its accuracy costs are those of an unconverged training. The full run\n")
		p("(`asyrevel experiment privacy`) gives the figures to quote.\n\n")
	}

	for _, set := range sets {
		settings = settingsOf(sum, set)
		p("### %s\n\n", set)
		multi := false
		for _, s := range sum {
			if s.Set == set && s.MaxClassAUC != s.AUC && !math.IsNaN(s.MaxClassAUC) {
				multi = true
			}
		}
		if multi {
			p("AUCs are macro one-vs-rest; *worst class* is the largest one-vs-rest AUC over the classes (the\n")
			p("strongest attack of each attacker), then that of the passive derivative attack on the replies\n")
			p("shuffled among the requests: what the party's own c_hat - c (functions of its features) give the\n")
			p("attack without any label, the reference a label bound does not cover (as the own model's AUC on a9a).\n\n")
			p("| setting | test acc. %% | drop (pp) | epsilon (party) | AUC bound | passive: strongest attack, AUC | active: strongest attack, AUC (labels probed) | worst class: passive / active / shuffled | DCS |\n")
		} else {
			p("| setting | test acc. %% | drop (pp) | epsilon (party) | AUC bound | passive: strongest attack, AUC | active: AUC (labels probed) | own model's AUC | DCS |\n")
		}
		p("|---|---|---|---|---|---|---|---|---|\n")
		for _, st := range settings {
			pa, okp := best[[3]string{set, st, "passive"}]
			ac, oka := best[[3]string{set, st, "active"}]
			mo, okm := find(set, st, "passive", "model")
			row := func(ok bool, s PrivacySummary, withName bool) string {
				if !ok {
					return "n/a"
				}
				if withName {
					return fmt.Sprintf("%s %s", s.Attack, f(s.AUC, 3))
				}
				if multi {
					return fmt.Sprintf("%s (%d)", s.Attack, s.Covered)
				}
				return fmt.Sprintf("%s (%d)", f(s.AUC, 3), s.Covered)
			}
			ref := pa
			if !okp {
				ref = ac
			}
			model := "n/a"
			if okm {
				model = f(mo.AUC, 3)
			}
			if multi {
				cls := func(ok bool, s PrivacySummary) string {
					if !ok {
						return "n/a"
					}
					return f(s.MaxClassAUC, 3)
				}
				sh, oks := find(set, st, "passive", "shuffled")
				model = cls(okp, worstClass(sum, set, st, "passive")) + " / " + cls(oka, worstClass(sum, set, st, "active")) + " / " + cls(oks, sh)
				if oka {
					ac.Attack = ac.Attack + " " + f(ac.AUC, 3)
				}
			}
			acc := pct(ref.TestAccuracy)
			if ref.Seeds > 1 {
				acc += " ± " + f(100*ref.TestSD, 2)
			}
			p("| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", st, acc, f(ref.DropPP, 2), f(ref.Epsilon, 2), f(ref.AUCBound, 3),
				row(okp, pa, true), row(oka, ac, false), model, f(pa.DCS, 3))
		}
		p("\n")
	}

	// The paper's wire format against TIG.
	p("### The paper's wire format against TIG\n\n")
	for _, set := range sets {
		pa, ok := best[[3]string{set, "paper", "passive"}]
		if !ok {
			continue
		}
		if pa.AUC >= 0.99 {
			p("- %s: with the paper's replies (h and h_bar per sample) a single curious party infers the label of every\n", set)
			p("  sample it touches: %s AUC %s, accuracy %s%% on %d samples.", pa.Attack, f(pa.AUC, 4), pct(pa.AttackAccuracy), pa.Covered)
		} else {
			p("- %s: with the paper's replies a single curious party's best attack reaches %s AUC %s (accuracy %s%%, on %d samples):\n", set, pa.Attack, f(pa.AUC, 4), pct(pa.AttackAccuracy), pa.Covered)
			p("  with one output per party and a multiclass head, each sample's loss derivative arrives as a single number.")
		}
		if lo, ok := find(set, "paper", "passive", "loss"); ok {
			p(" Inverting the loss gives the same (AUC %s) and the margin with it.", f(lo.AUC, 4))
		}
		p("\n")
		if t, ok := best[[3]string{set, "tig", "passive"}]; ok {
			p("  TIG (split learning, `--algo tig`, test accuracy %s%%): the gradient dF0/dc a party receives gives %s AUC %s\n",
				pct(t.TestAccuracy), t.Attack, f(t.AUC, 4))
			var each []string
			for _, a := range []string{"tig-sign", "tig-norm", "tig-direction"} {
				if x, ok := find(set, "tig", "passive", a); ok {
					each = append(each, fmt.Sprintf("%s %s", a, f(x.AUC, 4)))
				}
			}
			p("  (passive: %s", strings.Join(each, ", "))
			if a, ok := best[[3]string{set, "tig", "active"}]; ok {
				p("; active, batches of one: %s %s", a.Attack, f(a.AUC, 4))
			}
			p("). ")
			if t.AUC >= 0.99 && pa.AUC >= 0.99 {
				p("Both wire formats give the labels away: the function values of the paper leak them as surely as TIG's gradients.")
			} else {
				p("The paper's wire format: %s AUC %s against TIG's %s.", pa.Attack, f(pa.AUC, 4), f(t.AUC, 4))
			}
			p("\n")
		}
	}
	p("\n")

	// The target.
	p("### A defense with label-inference AUC at most 0.6 against both attackers, at most 1 point of accuracy (2 on the networks)\n\n")
	for _, set := range sets {
		type cand struct {
			line string
			drop float64
		}
		var meet, curve, bounded []cand
		for _, st := range settingsOf(sum, set) {
			pa, okp := best[[3]string{set, st, "passive"}]
			ac, oka := best[[3]string{set, st, "active"}]
			if !okp || !oka {
				continue
			}
			line := fmt.Sprintf("`%s`: passive %s, active %s, drop %s pp (test accuracy sd %s over %d seeds), epsilon %s, AUC bound %s",
				st, f(pa.AUC, 3), f(ac.AUC, 3), f(pa.DropPP, 2), f(100*pa.TestSD, 2), pa.Seeds, f(pa.Epsilon, 2), f(pa.AUCBound, 3))
			pw, aw, limit := pa.AUC, ac.AUC, 1.0
			if w := worstClass(sum, set, st, "passive"); w.MaxClassAUC != w.AUC && !math.IsInf(w.MaxClassAUC, -1) {
				// Multiclass: every class's one-vs-rest AUC.
				pw, aw, limit = w.MaxClassAUC, worstClass(sum, set, st, "active").MaxClassAUC, 2
				line += fmt.Sprintf(", worst class passive %s, active %s", f(pw, 3), f(aw, 3))
				if sh, ok := find(set, st, "passive", "shuffled"); ok {
					line += fmt.Sprintf(" (the same attack on shuffled replies, no label: %s)", f(sh.MaxClassAUC, 3))
				}
			}
			if pa.AUCBound <= 0.6 {
				bounded = append(bounded, cand{line, pa.DropPP})
			}
			if pw <= 0.6 && aw <= 0.6 {
				curve = append(curve, cand{line, pa.DropPP})
				if pa.DropPP <= limit {
					meet = append(meet, cand{line, pa.DropPP})
				}
			}
		}
		byDrop := func(a, b cand) int {
			switch {
			case a.drop < b.drop:
				return -1
			case a.drop > b.drop:
				return 1
			}
			return 0
		}
		slices.SortFunc(meet, byDrop)
		slices.SortFunc(curve, byDrop)
		p("- %s: ", set)
		if len(meet) > 0 {
			p("measured AUC at most 0.6 for both attackers within the accuracy target:\n")
			for _, m := range meet {
				p("  - %s\n", m.line)
			}
		} else if len(curve) > 0 {
			p("no setting keeps both measured AUCs at most 0.6 within the accuracy target; those under 0.6, by cost:\n")
			for _, m := range curve {
				p("  - %s\n", m.line)
			}
		} else if len(bounded) > 0 {
			p("no setting brings every measured AUC to 0.6 or below; those whose AUC bound is at most 0.6, by cost:\n")
			slices.SortFunc(bounded, byDrop)
			for _, m := range bounded {
				p("  - %s\n", m.line)
			}
		} else {
			p("no setting brings both measured AUCs to 0.6 or below.\n")
		}
	}
	p("\n")
	p("Reading the numbers:\n\n")
	p("- **A party's own model is a label predictor.** `own model's AUC` scores each training sample by the\n")
	p("  attacker's own output c_m on its last pass: the head sums the outputs, so a trained party holds a\n")
	p("  classifier of the labels from its own features. Its AUC is what the party learns legitimately from\n")
	p("  the task (generalisation from every label), and no label defense removes it without removing the\n")
	p("  training. The traffic attacks are measured by how far above chance they go; the defenses take them\n")
	p("  below this reference.\n")
	p("- **Measured against guaranteed.** The measured AUC is over the population of training samples; the\n")
	p("  AUC bound is a guarantee per label: no attacker in one party's position, passive or active, can\n")
	p("  tell y_i = 0 from y_i = 1 with an AUC above it, whatever it does. Settings without a budget (dp-z*)\n")
	p("  keep the measured AUC low but their bound grows with every visit; `dp-auc0.6` caps every label's\n")
	p("  privacy loss in each party's view (visits beyond the budget contribute nothing), so the bound holds\n")
	p("  against any strategy, including probing one sample many times. The budget is a per-label filter on\n")
	p("  zCDP, valid under adaptive composition (Feldman and Zrnic 2021); epsilon and the bound use the exact\n")
	p("  Gaussian curve, which under a filter rests on Gaussian-DP filters (Smith and Thakurta 2022); the\n")
	p("  classic zCDP conversion, valid regardless, is `epsilon_zcdp` in each run's summary.json.\n")
	p("- **Batch means alone do not stop the active attacker**: perturbing a single sample per request\n")
	p("  isolates it in the mean (`mean-b*` active rows); a minimum batch size and aggregator-drawn batches do\n")
	p("  not change that, since the party computes c_hat itself. Only the noise does.\n")
	p("- **Randomised response** protects against every attacker and all parties colluding (pure label DP),\n")
	p("  but trains on flipped labels: its cost is the largest at a given AUC.\n")
	p("- **DCS** is VFLAIR's defense capability score (beta = 0.5, AP* = 0, MP* = the undefended accuracy)\n")
	p("  with AP the passive attack's accuracy, as VFLAIR computes it for label inference; the CSV's\n")
	p("  `dcs_auc` uses the attack's advantage 2|AUC - 0.5| as AP, which does not credit an attack for\n")
	p("  guessing the majority class.\n")
	return b.String()
}

// worstClass is the row of (set, setting, attacker) with the largest
// one-vs-rest AUC of a class (the model reference aside).
func worstClass(sum []PrivacySummary, set, setting, who string) PrivacySummary {
	var w PrivacySummary
	w.MaxClassAUC = math.Inf(-1)
	for _, s := range sum {
		if s.Set == set && s.Setting == setting && s.Attacker == who && s.Attack != "model" && s.Attack != "shuffled" && !math.IsNaN(s.MaxClassAUC) && s.MaxClassAUC > w.MaxClassAUC {
			w = s
		}
	}
	return w
}

// settingsOf lists the settings of set in the order of sum.
func settingsOf(sum []PrivacySummary, set string) []string {
	var out []string
	for _, s := range sum {
		if s.Set == set && !slices.Contains(out, s.Setting) {
			out = append(out, s.Setting)
		}
	}
	return out
}
