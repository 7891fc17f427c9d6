package report

import (
	"fmt"
	"image/color"
	"math"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// psum is a row of privacy.csv: one (set, setting, attacker, attack)
// averaged over the seeds.
type psum struct {
	set, setting, attacker, attack string
	auc, aucSD, maxClassAUC        float64
	attackAccuracy                 float64
	testAccuracy, testSD           float64
	dropPP                         float64
	epsilon, aucBound              float64
	covered, seeds                 int
	dcs                            float64
	positives                      int // class_positives: the worst class's covered samples (0: unknown)
}

// aucCI is the row's AUC interval over its seeds (Student's t on the
// seeds' AUCs; none from a single seed).
func (s psum) aucCI() (lo, hi float64) {
	lo, hi = meanSDCI(s.auc, s.aucSD, s.seeds)
	return math.Max(lo, 0), math.Min(hi, 1)
}

// aucText is "0.553 [0.541..0.565]": the interval over the seeds, or
// from one seed of a binary set the Hanley-McNeil interval where the CSV
// holds the class counts; the AUC alone otherwise.
func (s psum) aucText() string {
	lo, hi := s.aucCI()
	if math.IsNaN(lo) && s.seeds <= 1 && s.maxClassAUC == s.auc {
		if c := s.check(); c.known() {
			lo, hi = c.lo, c.hi
		}
	}
	return interval(s.auc, lo, hi, 3)
}

func readPrivacy(g *gen) ([]psum, error) {
	t, err := g.table("privacy.csv", "setting", "attacker", "attack", "auc", "test_accuracy", "accuracy_drop_pp", "epsilon", "dataset")
	if err != nil {
		return nil, err
	}
	var out []psum
	for i := range t.rows {
		s := psum{set: t.str(i, "dataset"), setting: t.str(i, "setting"), attacker: t.str(i, "attacker"), attack: t.str(i, "attack"),
			auc: t.num(i, "auc"), aucSD: t.num(i, "auc_sd"), maxClassAUC: t.num(i, "max_class_auc"), attackAccuracy: t.num(i, "attack_accuracy"),
			testAccuracy: t.num(i, "test_accuracy"), testSD: t.num(i, "test_accuracy_sd"), dropPP: t.num(i, "accuracy_drop_pp"),
			epsilon: t.num(i, "epsilon"), aucBound: t.num(i, "auc_bound"), covered: int(t.integer(i, "samples_covered")),
			seeds: int(t.integer(i, "seeds")), dcs: t.num(i, "dcs"), positives: int(t.integer(i, "class_positives"))}
		if math.IsNaN(s.maxClassAUC) {
			s.maxClassAUC = s.auc
		}
		out = append(out, s)
	}
	return out, nil
}

// check is the row's worst-class AUC (binary: its AUC) against its
// bound, with the Hanley-McNeil interval of the mean over the seeds when
// privacy.csv holds the class counts (the first seed's, as
// samples_covered).
func (s psum) check() aucCheck {
	auc := s.maxClassAUC
	if math.IsNaN(auc) || s.auc > auc {
		auc = s.auc
	}
	return newMeanAUCCheck(auc, s.aucBound, s.positives, s.covered-s.positives, max(s.seeds, 1), comparisons(s.set, s.maxClassAUC > s.auc))
}

// reference is an attack that no label bound covers: the party's own
// model, and the derivative attack on shuffled replies.
func (s psum) reference() bool { return s.attack == "model" || s.attack == "shuffled" }

// headline picks, per (set, setting, attacker), the strongest label attack
// (the references aside).
func headline(sum []psum) map[[3]string]psum {
	best := map[[3]string]psum{}
	for _, s := range sum {
		if s.reference() || math.IsNaN(s.auc) {
			continue
		}
		k := [3]string{s.set, s.setting, s.attacker}
		if b, ok := best[k]; !ok || s.auc > b.auc {
			best[k] = s
		}
	}
	return best
}

// overBound are the rows whose measured AUC, or worst class's, is above
// the AUC bound the run claims (the references aside).
func overBound(sum []psum) []psum {
	var out []psum
	for _, s := range sum {
		if s.reference() || math.IsNaN(s.aucBound) || s.aucBound >= 1 {
			continue
		}
		if s.auc > s.aucBound || s.maxClassAUC > s.aucBound {
			out = append(out, s)
		}
	}
	return out
}

func settingsOf(sum []psum, set string) []string {
	var out []string
	for _, s := range sum {
		if s.set == set && !slices.Contains(out, s.setting) {
			out = append(out, s.setting)
		}
	}
	return out
}

func setsOf(sum []psum) []string {
	var out []string
	for _, s := range sum {
		if !slices.Contains(out, s.set) {
			out = append(out, s.set)
		}
	}
	return out
}

// worstClass is the row of (set, setting, attacker) with the largest
// one-vs-rest AUC of a class (the references aside).
func worstClass(sum []psum, set, setting, who string) psum {
	var w psum
	w.maxClassAUC = math.Inf(-1)
	for _, s := range sum {
		if s.set == set && s.setting == setting && s.attacker == who && !s.reference() && !math.IsNaN(s.maxClassAUC) && s.maxClassAUC > w.maxClassAUC {
			w = s
		}
	}
	return w
}

// privacySummaryBody writes REPORT-privacy.md and privacy.png, and returns
// REPORT.md's summary of them.
func privacySummaryBody(g *gen) (string, error) {
	sum, err := readPrivacy(g)
	if err != nil {
		return "", err
	}
	cmd := "asyrevel experiment privacy"
	if r, ok := g.runs["privacy"]; ok && len(r.Commands) > 0 {
		cmd = strings.Join(r.Commands, "; ")
	}
	img, err := privacyPlot(sum)
	if err != nil {
		return "", err
	}
	if img != nil {
		g.files["privacy.png"] = img
	}
	text := privacyReport(sum, cmd, img != nil)
	nets, err := g.table("privacy-networks.csv", "run", "data", "seed", "flags", "test_accuracy_pct", "auc_bound")
	if err != nil {
		return "", err
	}
	if nets != nil {
		text += networksAppendix(nets)
	}
	g.files[PrivacyFile] = []byte(text)
	best := headline(sum)
	var b strings.Builder
	b.WriteString("The tables, the attacks and the defenses are in [REPORT-privacy.md](REPORT-privacy.md) (data `privacy.csv`). From them:\n\n")
	for _, set := range setsOf(sum) {
		pa, ok := best[[3]string{set, "paper", "passive"}]
		if !ok {
			continue
		}
		fmt.Fprintf(&b, "- %s, the paper's replies: one curious party's strongest attack, %s, reaches AUC %s", set, pa.attack, pa.aucText())
		if t, ok := best[[3]string{set, "tig", "passive"}]; ok {
			fmt.Fprintf(&b, "; under TIG's gradients %s reaches %s", t.attack, t.aucText())
		}
		b.WriteString(".\n")
	}
	over := overBound(sum)
	fails, noise, ref := 0, 0, 0
	for _, s := range over {
		switch c := s.check(); {
		case c.fails() && referenceAbove(sum, s):
			ref++
		case c.fails():
			fails++
		case c.noise():
			noise++
		}
	}
	fmt.Fprintf(&b, "- Measured AUCs above the bound their run claims: %d (listed in REPORT-privacy.md with their intervals)", len(over))
	if len(over) > 0 {
		fmt.Fprintf(&b, ": %d within noise, %d without the class counts to tell", noise, len(over)-fails-noise-ref)
		if ref > 0 {
			fmt.Fprintf(&b, ", %d above it beyond noise where the label-free reference (the attack on shuffled replies, which reads no label) "+
				"is above it too: the party's own features, which a bound on what it receives does not cover", ref)
		}
		if fails > 0 {
			fmt.Fprintf(&b, ", and **%d where the bound fails** (even the lower end of the interval, Bonferroni's over the classes, above it)", fails)
		}
	}
	b.WriteString(".\n")
	return b.String(), nil
}

// privacyReport is REPORT-privacy.md: per set, each setting's accuracy,
// privacy budget and strongest attacks with their intervals; the paper's
// wire format against TIG; the settings that meet the target; and every
// measured AUC above its bound.
func privacyReport(sum []psum, cmdline string, plotted bool) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	pc := func(v float64) string {
		if math.IsNaN(v) {
			return "n/a"
		}
		return f(100*v, 2)
	}
	ff := func(v float64, prec int) string {
		if math.IsNaN(v) {
			return "n/a"
		}
		return f(v, prec)
	}
	best := headline(sum)
	find := func(set, setting, who, attack string) (psum, bool) {
		for _, s := range sum {
			if s.set == set && s.setting == setting && s.attacker == who && s.attack == attack {
				return s, true
			}
		}
		return psum{}, false
	}
	sets := setsOf(sum)

	p("# Privacy: what a run's traffic reveals, and what the defenses cost\n\n")
	p("<!-- Generated by \"asyrevel experiment report\" from privacy.csv. Do not edit. -->\n\n")
	p("Produced by `%s` (privacy.csv", cmdline)
	if plotted {
		p(", privacy.png")
	}
	p("). Every run trains over the embedded\n")
	p("JetStream broker; the attacks read the run's log afterwards through `replay`, each from what its\n")
	p("attacker legitimately saw (the attacking party's requests, the replies to them and the control\n")
	p("messages); only the scorer reads the labels. The *passive* attacker is an honest party that analyses\n")
	p("its own view; the *active* one shapes its requests: it perturbs a single sample per request\n")
	p("(c_hat = c for the others), so that even a batch-mean reply isolates that sample. Test accuracy and\n")
	p("AUC are means over the seeds; the accuracy drop is against the undefended `paper` setting of the\n")
	p("same set; epsilon is the worst label's in one party's view at delta = 1e-5 (`epsilon_all_parties`\n")
	p("in the CSV: every party colluding); the AUC bound is the largest AUC any single party can reach\n")
	p("against any one label. **Intervals**: [low..high] after an AUC is its 95%% interval over the seeds,\n")
	p("Student's t with seeds - 1 degrees of freedom on the seeds' AUCs (`auc` and `auc_sd`); it covers the\n")
	p("spread between runs, whose sampled batches and probed samples differ, not the sampling error within\n")
	counted := slices.ContainsFunc(sum, func(s psum) bool { return s.positives > 0 })
	if counted {
		p("one run's AUC, which the list of AUCs above their bound gives (Hanley-McNeil, from the class counts\n")
		p("`class_positives` and `samples_covered`). A single seed's binary AUC has its Hanley-McNeil interval.\n")
	} else {
		p("one run's AUC (a Hanley-McNeil interval needs each run's class counts, which this privacy.csv, written\n")
		p("before its `class_positives` column, does not hold). A single seed gives no interval.\n")
	}
	p("⚑ marks an AUC above the bound its run claims (a worst class's too). A worst class's AUC is the largest\n")
	p("of C classes' (10 on MNIST and Fashion-MNIST): its Hanley-McNeil interval is Bonferroni's, at level\n")
	p("1 - 0.05/C for each class (99.5%% for 10), so that all C hold together at 95%%. An AUC above the bound\n")
	p("whose interval reaches down to the bound is *within noise*; one whose interval lies wholly above it\n")
	p("means **the bound fails**, unless the label-free reference (the same attack on the replies shuffled among\n")
	p("the requests, which reads no label) is above the bound too: a bound is on what a party receives, and\n")
	p("then the party's own features give the excess (docs/privacy.md, \"What a bound covers\").\n\n")
	if strings.Contains(cmdline, "--quick") {
		p("**A quick run** (fewer seeds and epochs): it checks the pipeline; its accuracy costs are those of\n")
		p("an unconverged training.\n\n")
	}
	if plotted {
		p("![the strongest label attack of each attacker against the defense's test accuracy](privacy.png)\n\n")
	}
	flag := func(s psum) string {
		if !s.reference() && s.aucBound < 1 && s.auc > s.aucBound {
			return " ⚑"
		}
		return ""
	}
	for _, set := range sets {
		p("## %s\n\n", set)
		multi := false
		for _, s := range sum {
			if s.set == set && s.maxClassAUC != s.auc && !math.IsNaN(s.maxClassAUC) {
				multi = true
			}
		}
		if multi {
			p("AUCs are macro one-vs-rest; *worst class* is the largest one-vs-rest AUC over the classes (the\n")
			p("strongest attack of each attacker), then that of the passive derivative attack on the replies\n")
			p("shuffled among the requests: what the party's own c_hat - c (functions of its features) give the\n")
			p("attack without any label, a reference no label bound covers.\n\n")
			p("| setting | test acc. %% | drop (pp) | epsilon (party) | AUC bound | passive: strongest attack, AUC | active: strongest attack, AUC (labels probed) | worst class: passive / active / shuffled | DCS |\n")
		} else {
			p("| setting | test acc. %% | drop (pp) | epsilon (party) | AUC bound | passive: strongest attack, AUC | active: AUC (labels probed) | own model's AUC | DCS |\n")
		}
		p("|---|---|---|---|---|---|---|---|---|\n")
		for _, st := range settingsOf(sum, set) {
			pa, okp := best[[3]string{set, st, "passive"}]
			ac, oka := best[[3]string{set, st, "active"}]
			mo, okm := find(set, st, "passive", "model")
			ref := pa
			if !okp {
				ref = ac
			}
			passive, active := "n/a", "n/a"
			if okp {
				passive = pa.attack + " " + pa.aucText() + flag(pa)
			}
			if oka {
				active = fmt.Sprintf("%s (%d)", ac.aucText()+flag(ac), ac.covered)
				if multi {
					active = fmt.Sprintf("%s %s (%d)", ac.attack, ac.aucText()+flag(ac), ac.covered)
				}
			}
			last := "n/a"
			if okm {
				last = ff(mo.auc, 3)
			}
			if multi {
				cls := func(ok bool, s psum) string {
					if !ok || math.IsInf(s.maxClassAUC, -1) {
						return "n/a"
					}
					if !s.reference() && s.check().above() {
						return ff(s.maxClassAUC, 3) + " ⚑"
					}
					return ff(s.maxClassAUC, 3)
				}
				sh, oks := find(set, st, "passive", "shuffled")
				last = cls(okp, worstClass(sum, set, st, "passive")) + " / " + cls(oka, worstClass(sum, set, st, "active")) + " / " + cls(oks, sh)
			}
			acc := pc(ref.testAccuracy)
			if ref.seeds > 1 {
				acc += " ± " + ff(100*ref.testSD, 2)
			}
			p("| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", st, acc, ff(ref.dropPP, 2), ff(ref.epsilon, 2), ff(ref.aucBound, 3),
				passive, active, last, ff(pa.dcs, 3))
		}
		p("\n")
	}

	// Measured above the bound.
	p("## Measured AUCs above their bound\n\n")
	if over := overBound(sum); len(over) == 0 {
		p("None: every measured AUC (and every class's, on the multiclass sets) is at or below the bound its run claims.\n\n")
	} else {
		p("The bound is a guarantee per label; the measured AUC is over the samples a run covered, averaged over its seeds.\n")
		p("An AUC above the bound whose interval reaches down to the bound is within the runs' spread; one whose\n")
		p("interval lies wholly above it contradicts the bound.\n\n")
		for _, s := range over {
			lo, _ := s.aucCI()
			verdict := "no interval over the seeds (one seed)"
			switch {
			case !math.IsNaN(lo) && lo > s.aucBound:
				verdict = "**the interval over the seeds lies above the bound**"
			case !math.IsNaN(lo):
				verdict = "the interval over the seeds reaches the bound: within the spread between runs"
			}
			what := fmt.Sprintf("AUC %s", s.aucText())
			if s.auc <= s.aucBound {
				what = fmt.Sprintf("worst class's AUC %s (the CSV holds its mean over the seeds only; macro AUC %s)", ff(s.maxClassAUC, 3), s.aucText())
				verdict = "one class above the bound"
			}
			hm, failed := s.check().verdict("privacy.csv")
			mark := "⚑"
			switch {
			case failed && referenceAbove(sum, s):
				mark = "⚑ above the bound beyond noise, as is the label-free reference:"
				hm = strings.Replace(hm, "**the bound fails**", "above it beyond noise", 1)
			case failed:
				mark = "⚑ **THE BOUND FAILS**:"
			}
			// The same attack on the replies shuffled among the requests
			// reads no label: above the bound too, it says how much of the
			// worst class the party's own features give.
			if sh, ok := find(s.set, s.setting, "passive", "shuffled"); ok && sh.maxClassAUC > s.aucBound {
				hm += fmt.Sprintf("; the label-free reference (the derivative attack on the replies shuffled among the requests, which "+
					"reads no label) reaches %s on its worst class, above the bound too: the party's own features tell that much, which a "+
					"label bound does not cover", ff(sh.maxClassAUC, 3))
			}
			p("- %s %s, `%s`, %s attacker, `%s`: %s above the bound %s over %d seeds; %s; %s.\n", mark, s.set, s.setting, s.attacker, s.attack, what,
				ff(s.aucBound, 3), s.seeds, verdict, hm)
		}
		p("\n")
	}

	// The paper's wire format against TIG.
	p("## The paper's wire format against TIG\n\n")
	for _, set := range sets {
		pa, ok := best[[3]string{set, "paper", "passive"}]
		if !ok {
			continue
		}
		p("- %s: with the paper's replies (h and h_bar per sample) a single curious party's strongest attack is %s: AUC %s, accuracy %s%% on %d samples.",
			set, pa.attack, pa.aucText(), pc(pa.attackAccuracy), pa.covered)
		if lo, ok := find(set, "paper", "passive", "loss"); ok {
			p(" Inverting the loss gives AUC %s.", lo.aucText())
		}
		p("\n")
		if t, ok := best[[3]string{set, "tig", "passive"}]; ok {
			var each []string
			for _, a := range []string{"tig-sign", "tig-norm", "tig-direction"} {
				if x, ok := find(set, "tig", "passive", a); ok {
					each = append(each, fmt.Sprintf("%s %s", a, x.aucText()))
				}
			}
			p("  TIG (split learning, `--algo tig`, test accuracy %s%%): the gradient dF0/dc a party receives gives %s AUC %s (passive: %s",
				pc(t.testAccuracy), t.attack, t.aucText(), strings.Join(each, ", "))
			if a, ok := best[[3]string{set, "tig", "active"}]; ok {
				p("; active, batches of one: %s %s", a.attack, a.aucText())
			}
			p(").\n")
		}
	}
	p("\n")

	// The target.
	p("## A defense with label-inference AUC at most 0.6 against both attackers, at most 1 point of accuracy (2 on the networks)\n\n")
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
				st, pa.aucText(), ac.aucText(), ff(pa.dropPP, 2), ff(100*pa.testSD, 2), pa.seeds, ff(pa.epsilon, 2), ff(pa.aucBound, 3))
			pw, aw, limit := pa.auc, ac.auc, 1.0
			if w := worstClass(sum, set, st, "passive"); w.maxClassAUC != w.auc && !math.IsInf(w.maxClassAUC, -1) {
				pw, aw, limit = w.maxClassAUC, worstClass(sum, set, st, "active").maxClassAUC, 2
				line += fmt.Sprintf(", worst class passive %s, active %s", ff(pw, 3), ff(aw, 3))
				if sh, ok := find(set, st, "passive", "shuffled"); ok {
					line += fmt.Sprintf(" (the same attack on shuffled replies, no label: %s)", ff(sh.maxClassAUC, 3))
				}
			}
			if pa.aucBound <= 0.6 {
				bounded = append(bounded, cand{line, pa.dropPP})
			}
			if pw <= 0.6 && aw <= 0.6 {
				curve = append(curve, cand{line, pa.dropPP})
				if pa.dropPP <= limit {
					meet = append(meet, cand{line, pa.dropPP})
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
		slices.SortStableFunc(meet, byDrop)
		slices.SortStableFunc(curve, byDrop)
		slices.SortStableFunc(bounded, byDrop)
		p("- %s: ", set)
		var lines []cand
		switch {
		case len(meet) > 0:
			p("measured AUC at most 0.6 for both attackers within the accuracy target:\n")
			lines = meet
		case len(curve) > 0:
			p("no setting keeps both measured AUCs at most 0.6 within the accuracy target; those under 0.6, by cost:\n")
			lines = curve
		case len(bounded) > 0:
			p("no setting brings every measured AUC to 0.6 or below; those whose AUC bound is at most 0.6, by cost:\n")
			lines = bounded
		default:
			p("no setting brings both measured AUCs to 0.6 or below.\n")
		}
		for _, m := range lines {
			p("  - %s\n", m.line)
		}
	}
	p("\n")
	p("## Reading the numbers\n\n")
	p("- **A party's own model is a label predictor.** `own model's AUC` scores each training sample by the\n")
	p("  attacker's own output c_m on its last pass: the head sums the outputs, so a trained party holds a\n")
	p("  classifier of the labels from its own features. Its AUC is what the party learns legitimately from\n")
	p("  the task, and no label defense removes it without removing the training. The traffic attacks are\n")
	p("  read against chance (0.5) and against this reference.\n")
	p("- **Measured against guaranteed.** The measured AUC is over the population of training samples; the\n")
	p("  AUC bound is a guarantee per label: no attacker in one party's position, passive or active, can\n")
	p("  tell y_i = 0 from y_i = 1 with an AUC above it, whatever it does. Settings without a budget (dp-z*)\n")
	p("  keep the measured AUC low but their bound grows with every visit; a per-label budget (`dp-auc*`) caps\n")
	p("  every label's privacy loss in each party's view (visits beyond the budget contribute nothing), so the\n")
	p("  bound holds against any strategy, including probing one sample many times. The budget is a\n")
	p("  per-label filter on zCDP, valid under adaptive composition (Feldman and Zrnic 2021); epsilon and the\n")
	p("  bound use the exact Gaussian curve, which under a filter rests on Gaussian-DP filters (Smith and\n")
	p("  Thakurta 2022).\n")
	var means []string
	for _, set := range sets {
		for _, st := range settingsOf(sum, set) {
			if ac, ok := best[[3]string{set, st, "active"}]; ok && strings.HasPrefix(st, "mean-") {
				means = append(means, fmt.Sprintf("%s `%s` %s", set, st, ac.aucText()))
			}
		}
	}
	if len(means) > 0 {
		p("- **Batch means against the active attacker**, who perturbs a single sample per request and so\n")
		p("  isolates it in the mean: its AUC under batch-mean replies alone is %s.\n", strings.Join(means, ", "))
	}
	p("- **Randomised response** protects against every attacker and all parties colluding (pure label DP),\n")
	p("  but trains on flipped labels.\n")
	p("- **DCS** is VFLAIR's defense capability score (beta = 0.5, AP* = 0, MP* = the undefended accuracy)\n")
	p("  with AP the passive attack's accuracy, as VFLAIR computes it for label inference; the CSV's\n")
	p("  `dcs_auc` uses the attack's advantage 2|AUC - 0.5| as AP.\n")
	return b.String()
}

// privacyPlot draws, per set, the strongest label attack of each attacker
// against each setting's test accuracy.
func privacyPlot(sum []psum) ([]byte, error) {
	best := headline(sum)
	var row []*plot.Plot
	blue, red := color.RGBA{R: 31, G: 119, B: 180, A: 255}, color.RGBA{R: 214, G: 39, B: 40, A: 255}
	for _, set := range setsOf(sum) {
		p := plot.New()
		p.Title.Text = set + ": the strongest label attack of each attacker, against the defense's test accuracy"
		p.Title.TextStyle.Font.Size = vg.Points(10)
		p.X.Label.Text = "label-inference ROC AUC (0.5: chance)"
		p.Y.Label.Text = "test accuracy with honest parties (%)"
		p.Add(plotter.NewGrid())
		var pas, act plotter.XYs
		var labels []string
		ymin, ymax := 100.0, 0.0
		for _, st := range settingsOf(sum, set) {
			pa, okp := best[[3]string{set, st, "passive"}]
			ac, oka := best[[3]string{set, st, "active"}]
			if !okp || math.IsNaN(pa.testAccuracy) {
				continue
			}
			y := 100 * pa.testAccuracy
			ymin, ymax = min(ymin, y), max(ymax, y)
			pas = append(pas, plotter.XY{X: pa.auc, Y: y})
			labels = append(labels, st)
			if oka {
				act = append(act, plotter.XY{X: ac.auc, Y: y})
				seg, err := plotter.NewLine(plotter.XYs{{X: pa.auc, Y: y}, {X: ac.auc, Y: y}})
				if err != nil {
					return nil, err
				}
				seg.Color = color.Gray{Y: 170}
				p.Add(seg)
			}
		}
		for i, xy := range []plotter.XYs{pas, act} {
			if len(xy) == 0 {
				continue
			}
			sc, err := plotter.NewScatter(xy)
			if err != nil {
				return nil, err
			}
			sc.Color = []color.Color{blue, red}[i]
			sc.Shape = []draw.GlyphDrawer{draw.CircleGlyph{}, draw.TriangleGlyph{}}[i]
			sc.Radius = vg.Points(3.5)
			p.Add(sc)
			p.Legend.Add([]string{"passive attacker (party 3)", "active attacker (party 3)"}[i], sc)
		}
		if len(pas) > 0 {
			lb, err := plotter.NewLabels(plotter.XYLabels{XYs: pas, Labels: labels})
			if err != nil {
				return nil, err
			}
			for j := range lb.TextStyle {
				lb.TextStyle[j].Font.Size = vg.Points(7)
			}
			lb.Offset = vg.Point{X: vg.Points(-4), Y: vg.Points(4)}
			p.Add(lb)
		}
		bound, _ := plotter.NewLine(plotter.XYs{{X: 0.6, Y: ymin - 1}, {X: 0.6, Y: ymax + 1}})
		bound.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		bound.Color = color.Gray{Y: 120}
		p.Add(bound)
		p.Legend.Add("AUC 0.6", bound)
		p.Legend.Top, p.Legend.Left = false, false
		p.X.Min, p.X.Max = 0.45, 1.03
		if ymax >= ymin {
			p.Y.Min, p.Y.Max = ymin-0.5, ymax+0.5
		}
		row = append(row, p)
	}
	if len(row) == 0 {
		return nil, nil
	}
	return png([][]*plot.Plot{row}, vg.Length(len(row))*6.5*vg.Inch, 5*vg.Inch)
}

// networksAppendix renders privacy-networks.csv: the runs of a search by
// hand over the networks' privacy settings.
func networksAppendix(t *table) string {
	var b strings.Builder
	b.WriteString("\n## Appendix: a search by hand over the networks' settings (`privacy-networks.csv`)\n\n")
	b.WriteString("Each row is one `asyrevel train --data DATA --parties 8 --model mlp` run with the flags given, its test accuracy, AUC bound and " +
		"epsilon read from its summary.json and privacy.json into the CSV by hand: no experiment command writes this file, and its rows " +
		"are as the runs left them. A run whose accuracy is not a number did not finish (the CSV says why).\n\n")
	for _, data := range t.distinct("data", nil) {
		best := map[bool]int{true: -1, false: -1}
		for _, i := range t.where("data", data) {
			acc := t.num(i, "test_accuracy_pct")
			if math.IsNaN(acc) {
				continue
			}
			bounded := t.num(i, "auc_bound") <= 0.6
			if j := best[bounded]; j < 0 || acc > t.num(j, "test_accuracy_pct") {
				best[bounded] = i
			}
		}
		for _, bounded := range []bool{false, true} {
			i := best[bounded]
			if i < 0 {
				continue
			}
			what := "without an AUC bound of 0.6 or less"
			if bounded {
				what = "with an AUC bound of 0.6 or less"
			}
			fmt.Fprintf(&b, "- %s, the most accurate run %s: `%s` (seed %s, `%s`), %s%%.\n", data, what, t.str(i, "run"), t.str(i, "seed"),
				t.str(i, "flags"), f(t.num(i, "test_accuracy_pct"), 2))
		}
	}
	b.WriteString("\n")
	var tab [][]string
	for i := range t.rows {
		acc := t.str(i, "test_accuracy_pct")
		if v := t.num(i, "test_accuracy_pct"); !math.IsNaN(v) {
			acc = f(v, 2)
		}
		tab = append(tab, []string{t.str(i, "run"), t.str(i, "data"), t.str(i, "seed"), "`" + t.str(i, "flags") + "`", acc,
			f(t.num(i, "auc_bound"), 4), f(t.num(i, "epsilon"), 3)})
	}
	b.WriteString(mdTable([]string{"run", "data", "seed", "flags", "test accuracy %", "AUC bound", "epsilon"}, tab))
	return b.String()
}

// referenceAbove reports whether the label-free reference of s's set and
// setting (the passive derivative attack on the replies shuffled among the
// requests, which reads no label) has its worst class above s's bound: the
// party's own features then reach past the bound with no label at all.
func referenceAbove(sum []psum, s psum) bool {
	for _, r := range sum {
		if r.set == s.set && r.setting == s.setting && r.attacker == "passive" && r.attack == "shuffled" {
			return r.maxClassAUC > s.aucBound
		}
	}
	return false
}
