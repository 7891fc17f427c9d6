package report

import (
	"fmt"
	"strings"
	"testing"
)

// ceilingCSV is a privacy-ceiling.csv of the given rows: set, kind, draw,
// values a party, bound and accuracy.
func ceilingCSV(rows ...[6]string) string {
	var b strings.Builder
	b.WriteString("set,seed,kind,draw,parties,classes,train_rows,test_rows,values_per_party,in_form,labels,auc_bound,epsilon,keep,flipped,test_accuracy,l2,split,command\n")
	for i, r := range rows {
		classes, eps, keep := "2", "", ""
		if r[0] == "wine" {
			classes = "3"
		}
		if strings.HasPrefix(r[1], "rr") {
			eps, keep = "0.5321", "0.4598"
		}
		fmt.Fprintf(&b, "%s,%d,%s,%s,3,%s,100,30,%s,%v,true,%s,%s,%s,0,%s,0.01,asyrevel data split --out SPLIT x.csv,asyrevel experiment privacy --ceiling --goal\n",
			r[0], i%2+1, r[1], r[2], classes, r[3], r[3] == "1", r[4], eps, keep, r[5])
	}
	return b.String()
}

// The ceilings' section: mean [min..max] a kind over its seeds and draws,
// the goal's floor on every model and the gap to off's measured mean,
// the goal rows' default and off beside them, and a sentence naming the
// rows within the bound that meet the goal and whether they keep the form.
func TestCeilingSection(t *testing.T) {
	goal := goalCSV(
		goalRow("breast-cancer", "none", "default", "1", "0.9400"), goalRow("breast-cancer", "none", "default", "2", "0.9500"),
		goalRow("breast-cancer", "none", "off", "1", "0.9700"), goalRow("breast-cancer", "none", "off", "2", "0.9800"),
	)
	text := reportOf(t, folder(t, map[string]string{"privacy-goal.csv": goal, "privacy-ceiling.csv": ceilingCSV(
		[6]string{"breast-cancer", "undefended", "0", "1", "", "0.9800"},
		[6]string{"breast-cancer", "undefended", "0", "1", "", "0.9700"},
		[6]string{"breast-cancer", "rr", "1", "1", "0.6", "0.7000"},
		[6]string{"breast-cancer", "rr", "2", "1", "0.6", "0.9600"},
		[6]string{"breast-cancer", "pca1", "0", "1", "0.5", "0.9600"},
		[6]string{"breast-cancer", "pca1", "0", "1", "0.5", "0.9400"},
		[6]string{"breast-cancer", "pca3", "0", "3", "0.5", "0.9700"},
		[6]string{"breast-cancer", "pca3", "0", "3", "0.5", "0.9500"},
	)}))
	contains(t, text, "### Small tables: centralised ceilings",
		"| breast-cancer | *undefended*: all columns, true labels | 1 | yes | none | 2 | 97.50 [97.00..98.00] | yes | yes (+0.00) | - (reference, no bound) |",
		"| breast-cancer | *rr*: all columns, randomised response at the bound | 1 | yes | 0.600 (eps 0.532, keep 0.460) | 2 | 83.00 [70.00..96.00] | no | no (-14.50) | **not met** |",
		// 94.00 is below the floor; the mean is 2.5 points below off's.
		"| breast-cancer | *pca1*: each party's PCA to 1 dimension (no labels), head on the true labels | 1 | yes | 0.500 | 2 | 95.00 [94.00..96.00] | no | no (-2.50) | **not met** |",
		// The floor itself and 1.5 points below off meet the goal.
		"| breast-cancer | *pca3*: each party's PCA to 3 dimensions (no labels), head on the true labels | 3 | **no** | 0.500 | 2 | 96.00 [95.00..97.00] | yes | yes (-1.50) | met |",
		"the goal rows measured the default privacy at 94.50% mean [94.00..95.00] over 2 runs and `--privacy off` at 97.50% mean [97.00..98.00] over 2 runs",
		"Within the bound, the rows that meet the goal are breast-cancer *pca3*, and each is **outside the form**",
		"The default privacy's measured mean is above breast-cancer *rr* (83.00% against 94.50%): these rows are linear references")
	lacks(t, text, "Not reported", "## Measurements")

	// An in-form row that meets the goal is said to; without the goal
	// rows' off the gap cannot be judged.
	text = reportOf(t, folder(t, map[string]string{"privacy-goal.csv": goal, "privacy-ceiling.csv": ceilingCSV(
		[6]string{"breast-cancer", "pca1", "0", "1", "0.5", "0.9700"},
		[6]string{"wine", "pca1", "0", "1", "0.5", "0.9700"},
	)}))
	contains(t, text, "Within the bound, the rows that meet the goal are breast-cancer *pca1* (in the form).",
		"- wine: the goal is at least 90.00% on every seed and within 1.5 points of `--privacy off` in the mean; the goal rows (`privacy-goal.csv`) have no run of it yet.",
		"Some rows cannot be judged")
	lacks(t, text, "outside the form**")
}
