package report

import (
	"fmt"
	"math"
	"strings"
)

// The small tables' ceilings (privacy-ceiling.csv): centralised reference
// models on the goal rows' splits, measured against issue 31's goal for
// breast cancer and wine.

const (
	ceilingFile    = "privacy-ceiling.csv"
	ceilingCommand = "asyrevel experiment privacy --goal --ceiling"
)

// CeilingTitle is the ceilings' section heading (docs/privacy.md links to
// it as REPORT.md#small-tables-centralised-ceilings).
const CeilingTitle = "Small tables: centralised ceilings"

// ceilingKindText says what a kind of row is.
var ceilingKindText = map[string]string{
	"undefended": "all columns, true labels",
	"rr":         "all columns, randomised response at the bound",
	"rr-stack":   "randomised response; each party's 1 value, head on the true labels",
	"pca1":       "each party's PCA to 1 dimension (no labels), head on the true labels",
	"pca3":       "each party's PCA to 3 dimensions (no labels), head on the true labels",
}

func ceilingBody(g *gen) (string, error) {
	t, err := g.table(ceilingFile, "set", "seed", "kind", "draw", "values_per_party", "in_form", "classes", "labels", "auc_bound", "epsilon", "keep",
		"test_accuracy", "command")
	if err != nil {
		return "", err
	}
	// The goal rows' measured means, if that file is there.
	gt, err := g.table(goalFile, "set", "length", "privacy", "test_accuracy")
	if err != nil {
		return "", err
	}
	measured := func(set, priv string) []float64 {
		if gt == nil {
			return nil
		}
		return gt.nums(gt.where("set", set, "length", "none", "privacy", priv), "test_accuracy")
	}
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("How far a model can go on the small tables under the goal's constraints, whatever the protocol: centralised reference models, ")
	p("with no broker and no run, on exactly the splits of the goal rows above (the same `asyrevel data split` command and seeds, in the ")
	p("`split` column of `%s`). Each is softmax regression (logistic on breast cancer) with an intercept, the mean cross-entropy plus ", ceilingFile)
	p("L2 of 1/n on the weights (scikit-learn's C = 1), minimised by gonum's L-BFGS. *undefended*: all columns, the true labels (no bound). ")
	p("*rr*: the training labels passed once through randomised response at the bound (binary: eps = ln(0.6/0.4), 40%% of the labels changed; ")
	p("multiclass: the eps whose best one-vs-rest attack on the randomised label has AUC 0.6, derived in experiment/privacy_ceiling.go; ")
	p("an attacker who also knows the sample's features has only the pairwise bound e^eps/(1+e^eps), *pairwise* in the table, above 0.6, ")
	p("so these rows are generous to randomised response), ")
	p("the same solver, one model a draw. *rr-stack*: each party's one value of the *rr* model (its share of the logit; with more ")
	p("classes the first principal component of its share of the class scores), and a head ")
	p("refitted on the true labels over the parties' values (the label holder's own model, which costs no budget). *pca1*, *pca3*: each ")
	p("party's PCA to 1 or 3 dimensions fitted on its own training rows without labels (nothing label-dependent reaches a party: bound 0.5), ")
	p("and a head on the true labels. *Values a party sends*: what the model needs of a party's columns a sample (a linear model over all ")
	p("columns: one score a class but one); DESIGN.md's form for these runs (`--k 1`) is one value a party a sample. Test accuracy in %%: ")
	p("the mean [lowest..highest] over the seeds, and for the randomised-response rows over the seeds and draws. The goal's columns apply ")
	p("issue 31's floors to every model (every seed, every draw) and its 1.5 points to the mean against `--privacy off`'s mean in `%s`.\n\n", goalFile)

	type verdictRow struct {
		set, kind     string
		inForm, bound bool
		meets         bool
		known         bool
	}
	var verdicts []verdictRow
	var tab [][]string
	for _, set := range t.distinct("set", nil) {
		off := measured(set, "off")
		floor, hasFloor := goalMinAcc[[2]string{set, "none"}]
		gap, hasGap := goalMaxGap[set]
		for _, kind := range t.distinct("kind", func(i int) bool { return t.str(i, "set") == set }) {
			rows := t.where("set", set, "kind", kind)
			accs := t.nums(rows, "test_accuracy")
			if len(accs) == 0 {
				continue
			}
			i := rows[0]
			lo, hi := extent(accs)
			m := mean(accs)
			bound := t.num(i, "auc_bound")
			boundText := "none"
			if !math.IsNaN(bound) {
				boundText = f(bound, 3)
			}
			if e := t.num(i, "epsilon"); !math.IsNaN(e) {
				boundText += fmt.Sprintf(" (eps %s, keep %s", f(e, 3), f(t.num(i, "keep"), 3))
				if t.integer(i, "classes") > 2 {
					// The pairwise eps-DP bound, which also holds for an
					// attacker who knows the sample's features.
					boundText += fmt.Sprintf("; pairwise %s", f(1/(1+math.Exp(-e)), 3))
				}
				boundText += ")"
			}
			inForm := t.boolean(i, "in_form")
			form := "yes"
			if !inForm {
				form = "**no**"
			}
			floorText, gapText, goalText := "-", "-", "-"
			v := verdictRow{set: set, kind: kind, inForm: inForm, bound: !math.IsNaN(bound) && bound <= 0.6}
			if hasFloor {
				floorText = yesNo(lo >= floor)
			}
			if hasGap && len(off) > 0 {
				gapText = fmt.Sprintf("%s (%+.2f)", yesNo(mean(off)-m <= gap+1e-9), 100*(m-mean(off)))
			}
			switch {
			case math.IsNaN(bound):
				goalText = "- (reference, no bound)"
			case hasFloor && hasGap && len(off) > 0:
				v.known = true
				v.meets = lo >= floor && mean(off)-m <= gap+1e-9
				goalText = verdictText(v.meets)
			}
			verdicts = append(verdicts, v)
			text := ceilingKindText[kind]
			if text == "" {
				text = kind
			}
			tab = append(tab, []string{set, "*" + kind + "*: " + text, t.str(i, "values_per_party"), form, boundText, fmt.Sprint(len(accs)),
				fmt.Sprintf("%s [%s..%s]", f(100*m, 2), f(100*lo, 2), f(100*hi, 2)), floorText, gapText, goalText})
		}
	}
	b.WriteString(mdTable([]string{"set", "row", "values a party sends", "in the form", "AUC bound", "models", "test accuracy %",
		"at least the floor on every model", "within 1.5 points of `off` (points)", "goal"}, tab))
	b.WriteString("\n")

	// The goal and the measured runs beside the rows.
	for _, set := range t.distinct("set", nil) {
		floor, ok := goalMinAcc[[2]string{set, "none"}]
		if !ok {
			continue
		}
		p("- %s: the goal is at least %s%% on every seed and within %s points of `--privacy off` in the mean; ", set, f(100*floor, 2),
			f(100*goalMaxGap[set], 1))
		d, o := measured(set, "default"), measured(set, "off")
		if len(d) == 0 && len(o) == 0 {
			p("the goal rows (`%s`) have no run of it yet.\n", goalFile)
			continue
		}
		p("the goal rows measured the default privacy at %s and `--privacy off` at %s (%s).\n", spreadRange(d), spreadRange(o), goalFile)
	}

	// Which rows meet the goal.
	var within, outside []string
	unknown := false
	for _, v := range verdicts {
		if !v.known {
			unknown = unknown || v.bound
			continue
		}
		if !v.bound || !v.meets {
			continue
		}
		name := v.set + " *" + v.kind + "*"
		if v.inForm {
			within = append(within, name)
		} else {
			outside = append(outside, name)
		}
	}
	p("\n")
	switch {
	case len(within) == 0 && len(outside) == 0:
		p("No row within the bound meets the goal.")
	case len(within) == 0:
		p("Within the bound, the rows that meet the goal are %s, and each is **outside the form**: none of the rows that keep to one value a "+
			"party a sample meets it.", list(outside))
	default:
		p("Within the bound, the rows that meet the goal are %s (in the form)", list(within))
		if len(outside) > 0 {
			p(" and %s (outside the form)", list(outside))
		}
		p(".")
	}
	if unknown {
		p(" Some rows cannot be judged: the goal rows have no `--privacy off` run of their set.")
	}
	// A measured default above an in-form row says these rows are no
	// upper bound for every protocol in the form.
	var below []string
	for _, set := range t.distinct("set", nil) {
		d := measured(set, "default")
		if len(d) == 0 {
			continue
		}
		for _, kind := range t.distinct("kind", func(i int) bool { return t.str(i, "set") == set }) {
			rows := t.where("set", set, "kind", kind)
			if len(rows) == 0 || !t.boolean(rows[0], "in_form") || math.IsNaN(t.num(rows[0], "auc_bound")) {
				continue
			}
			if m := mean(t.nums(rows, "test_accuracy")); mean(d) > m {
				below = append(below, fmt.Sprintf("%s *%s* (%s%% against %s%%)", set, kind, f(100*m, 2), f(100*mean(d), 2)))
			}
		}
	}
	if len(below) > 0 {
		p(" The default privacy's measured mean is above %s: these rows are linear references, not bounds on every model a "+
			"protocol in the form could learn.", list(below))
	}
	p("\n")
	return b.String(), nil
}

func yesNo(ok bool) string {
	if ok {
		return "yes"
	}
	return "no"
}

func verdictText(ok bool) string {
	if ok {
		return "met"
	}
	return "**not met**"
}

// spreadRange is "94.74% mean [92.98..96.49] over 5 runs", "-" for none.
func spreadRange(x []float64) string {
	switch len(x) {
	case 0:
		return "-"
	case 1:
		return f(100*x[0], 2) + "% (1 run)"
	}
	lo, hi := extent(x)
	return fmt.Sprintf("%s%% mean [%s..%s] over %d runs", f(100*mean(x), 2), f(100*lo, 2), f(100*hi, 2), len(x))
}
