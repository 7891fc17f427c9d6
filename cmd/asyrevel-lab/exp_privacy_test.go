package main

import (
	"encoding/csv"
	"errors"
	"maps"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// experiment privacy --goal --quick end to end: real runs over the
// embedded broker (a small table split as a user splits one, a binary set
// with asyrevel-gau and nonf, a 10-class set with the paper's network),
// each with the default privacy and --privacy off and an active attacker's
// run beside it; the CSV files and the report's section from them.
func TestExperimentPrivacyGoalQuick(t *testing.T) {
	labLong(t)
	out := t.TempDir()
	code, stdout, stderr := runCLI(t, "experiment", "privacy", "--goal", "--quick", "--out", out, "--log", "warn")
	if code != 0 {
		t.Fatalf("exit %d: %s %s", code, stdout, stderr)
	}
	rows := readCSVFile(t, filepath.Join(out, "privacy-goal.csv"))
	if len(rows) != 10 {
		t.Fatalf("%d goal rows, want 10: %v", len(rows), rows)
	}
	for _, r := range rows {
		name := r["set"] + " " + r["algo"] + " " + r["privacy"] + " seed " + r["seed"]
		if r["error"] != "" || r["test_accuracy"] == "" {
			t.Errorf("%s failed: %s", name, r["error"])
			continue
		}
		switch r["privacy"] {
		case "default":
			// The label-free profile: no request, no reply; the attacks say
			// so instead of failing, and the bound is chance.
			if r["profile"] != "label-free" || r["auc_bound"] != "0.5000" || r["passive_attack"] != "none" || r["active_attack"] != "none" ||
				!strings.Contains(r["passive_note"], "received 0 replies") || r["stopped_by"] == "" {
				t.Errorf("%s: %v", name, r)
			}
		case "off":
			// The paper's wire format: every label readable by the passive
			// party (binary), far above chance on the multiclass set.
			min := 0.99
			if r["set"] == "syn-multi" {
				min = 0.7
			}
			if r["profile"] != "off" || r["auc_bound"] != "1.0000" || num(t, r["passive_auc"]) < min || num(t, r["active_auc"]) < min {
				t.Errorf("%s: %v", name, r)
			}
		}
		if !strings.HasPrefix(r["command"], "asyrevel ") || r["load_start"] == "" {
			t.Errorf("%s: command %q, load %q", name, r["command"], r["load_start"])
		}
	}
	feats := readCSVFile(t, filepath.Join(out, "privacy-goal-feature.csv"))
	kinds := map[string]int{}
	for _, r := range feats {
		kinds[r["privacy"]+"/"+r["attack"]]++
		if r["r2"] == "" {
			t.Errorf("feature row without R squared: %v", r)
		}
	}
	if kinds["default/feature"] != 2 || kinds["default/code-mean"] != 2 || kinds["off/feature"] != 2 {
		t.Errorf("feature rows: %v", kinds)
	}
	rep, err := os.ReadFile(filepath.Join(out, "REPORT.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Defended runs that learn", "### Against the goal", "every defended run's bound at most 0.6", "syn-table | until it stops",
		"none: no reply to read", "### The curious aggregator's feature inference"} {
		if !strings.Contains(string(rep), want) {
			t.Errorf("the report lacks %q", want)
		}
	}
}

// readCSVFile reads a CSV file with a header into maps by column.
func readCSVFile(t *testing.T, path string) []map[string]string {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	recs, err := csv.NewReader(fh).ReadAll()
	if err != nil || len(recs) == 0 {
		t.Fatalf("%s: %v", path, err)
	}
	var out []map[string]string
	for _, r := range recs[1:] {
		m := map[string]string{}
		for j, h := range recs[0] {
			m[h] = r[j]
		}
		out = append(out, m)
	}
	return out
}

func num(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Errorf("%q is not a number", s)
		return math.NaN()
	}
	return v
}

// experiment privacy --goal --ceiling on wine, one seed: the CSV's rows
// (one of each kind, a row a draw for randomised response) and the
// report's section. Skipped without scikit-learn's CSV files.
func TestExperimentPrivacyCeiling(t *testing.T) {
	dir := os.Getenv("ASYREVEL_SKLEARN_DATA")
	if dir == "" {
		dir = "/usr/lib/python3/dist-packages/sklearn/datasets/data"
	}
	if _, err := os.Stat(filepath.Join(dir, "wine_data.csv")); err != nil {
		t.Skipf("no scikit-learn wine_data.csv (set ASYREVEL_SKLEARN_DATA to its folder): %v", err)
	}
	out := t.TempDir()
	code, stdout, stderr := runCLI(t, "experiment", "privacy", "--goal", "--ceiling", "--sets", "wine", "--seeds", "1", "--draws", "2",
		"--sklearn-data", dir, "--out", out, "--log", "warn")
	if code != 0 {
		t.Fatalf("exit %d: %s %s", code, stdout, stderr)
	}
	kinds := map[string]int{}
	for _, r := range readCSVFile(t, filepath.Join(out, "privacy-ceiling.csv")) {
		kinds[r["kind"]]++
		if r["set"] != "wine" || r["seed"] != "1" || r["command"] != "asyrevel experiment privacy --ceiling --draws 2 --goal --seeds 1 --sets wine" ||
			!strings.HasSuffix(r["split"], "--seed 1 wine_data.csv") {
			t.Errorf("row %v", r)
		}
	}
	if want := map[string]int{"undefended": 1, "rr": 2, "rr-stack": 2, "pca1": 1, "pca3": 1}; !maps.Equal(kinds, want) {
		t.Errorf("kinds %v, want %v", kinds, want)
	}
	report, err := os.ReadFile(filepath.Join(out, "REPORT.md"))
	if err != nil || !strings.Contains(string(report), "### Small tables: centralised ceilings") {
		t.Errorf("REPORT.md (%v) has no ceilings section", err)
	}
}

// --privacies names the goal rows' privacies: budget is the budget rows'
// switch (which --budget adds), an unknown name a usage error, none all.
func TestGoalPrivacies(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want []string
		err  bool
	}{
		{nil, nil, false},
		{[]string{"budget"}, []string{"auc=0.6,profile=budget"}, false},
		{[]string{"default", "off"}, []string{"default", "off"}, false},
		{[]string{"budget", "epsilon"}, nil, true},
	} {
		got, err := goalPrivacies(tc.in)
		if (err != nil) != tc.err || (err != nil && !errors.Is(err, errUsage)) {
			t.Errorf("%v: error %v, want one: %v (a usage error)", tc.in, err, tc.err)
			continue
		}
		if len(got) != len(tc.want) {
			t.Errorf("%v: %v, want %v", tc.in, got, tc.want)
		}
		for _, w := range tc.want {
			if !got[w] {
				t.Errorf("%v: %v lacks %q", tc.in, got, w)
			}
		}
	}
}
