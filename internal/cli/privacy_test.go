package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// train, then replay, re-execute and attack the run from its store, as a
// user would.
func TestReplayAttackCLI(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	data := "synthetic:n=1500,d=16,test=300,noise=0.02"
	code, stdout, stderr := runCLI(t, "train", "--data", data, "--parties", "3", "--batch", "8", "--window", "2",
		"--steps", "400", "--run", "cli", "--out", out, "--log", "warn", "--privacy", "off")
	if code != 0 {
		t.Fatalf("train: exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "leakage: ") || !strings.Contains(stdout, "privacy.json") {
		t.Errorf("train does not report the leakage: %s", stdout)
	}
	var leak struct {
		Scored  bool
		Parties []struct {
			SignAUC float64 `json:"sign_auc"`
		}
	}
	raw, _ := os.ReadFile(filepath.Join(out, "privacy.json"))
	if err := json.Unmarshal(raw, &leak); err != nil || !leak.Scored || len(leak.Parties) != 3 || leak.Parties[0].SignAUC < 0.999 {
		t.Fatalf("privacy.json: %v %s", err, raw)
	}
	store := filepath.Join(out, "stream")

	tr := t.TempDir()
	code, stdout, stderr = runCLI(t, "replay", "--store", store, "--run", "cli", "--out", tr)
	if code != 0 || !strings.Contains(stdout, "party-2.csv") {
		t.Fatalf("replay: exit %d: %s %s", code, stdout, stderr)
	}
	if _, err := os.Stat(filepath.Join(tr, "summary.json")); err != nil {
		t.Error(err)
	}

	code, stdout, stderr = runCLI(t, "replay", "--store", store, "--run", "cli", "--reexecute", "--summary", filepath.Join(out, "summary.json"))
	if code != 0 || !strings.Contains(stdout, "every reply in the log") {
		t.Fatalf("reexecute: exit %d: %s %s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "defense: reply ") {
		t.Errorf("reexecute does not name the replies it recomputes: %s", stderr)
	}
	// The summary of a train --out folder is enough: the run and the
	// store beside it.
	code, stdout, stderr = runCLI(t, "replay", "--reexecute", "--summary", filepath.Join(out, "summary.json"))
	if code != 0 || !strings.Contains(stdout, "every reply in the log") {
		t.Fatalf("reexecute with the summary alone: exit %d: %s %s", code, stdout, stderr)
	}
	code, _, stderr = runCLI(t, "replay", "--store", store, "--run", "cli", "--reexecute")
	if code != 2 || !strings.Contains(stderr, "--summary") || !strings.Contains(stderr, "--data") {
		t.Errorf("reexecute without settings: exit %d, %s", code, stderr)
	}

	at := t.TempDir()
	code, stdout, stderr = runCLI(t, "attack", "sign", "--store", store, "--run", "cli", "--as", "2", "--truth", data, "--out", at)
	if code != 0 || !strings.Contains(stdout, "AUC 1.0000") {
		t.Fatalf("attack sign: exit %d: %s %s", code, stdout, stderr)
	}
	for _, f := range []string{"attack.json", "attack.png", "inference.csv"} {
		if st, err := os.Stat(filepath.Join(at, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	code, stdout, stderr = runCLI(t, "attack", "regression", "--store", store, "--run", "cli", "--as", "1,3", "--truth", data, "--out", at)
	if code != 0 || !strings.Contains(stdout, "by parties 1,3") {
		t.Errorf("colluding parties: exit %d: %s %s", code, stdout, stderr)
	}
	code, stdout, _ = runCLI(t, "attack", "loss", "--store", store, "--run", "cli", "--as", "1", "--truth", data, "--out", at)
	if code != 0 || !strings.Contains(stdout, "other parties' outputs: correlation") {
		t.Errorf("attack loss: exit %d: %s", code, stdout)
	}
	code, _, stderr = runCLI(t, "attack", "tig-sign", "--store", store, "--run", "cli", "--as", "1", "--out", at)
	if code == 0 || !strings.Contains(stderr, "carry no gradients") {
		t.Errorf("tig-sign on zeroth-order traffic: exit %d: %s", code, stderr)
	}
	code, stdout, stderr = runCLI(t, "attack", "feature", "--store", store, "--run", "cli", "--as", "0", "--target", "2",
		"--aux", "50", "--truth", data, "--out", at)
	if code != 0 || !strings.Contains(stdout, "R squared") {
		t.Errorf("feature: exit %d: %s %s", code, stdout, stderr)
	}
}

// The gradient attacks on a TIG run's log: the sign of dF0/dc gives every
// label it touches; direction scoring with known labels too; the zeroth-
// order attacks refuse the gradients.
func TestTIGAttackCLI(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	data := "synthetic:n=800,d=12,test=200,noise=0.02"
	// 3,000 steps: with 300, a party whose start the loaded machine
	// delayed by a tenth of a second could be left without a reply (CI
	// failed so: "run tigcli: no replies" for party 2).
	code, _, stderr := runCLI(t, "train", "--data", data, "--parties", "3", "--algo", "tig", "--batch", "8",
		"--steps", "3000", "--run", "tigcli", "--out", out, "--log", "warn")
	if code != 0 {
		t.Fatalf("train --algo tig: exit %d: %s", code, stderr)
	}
	store, at := filepath.Join(out, "stream"), t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"tig-sign"}, "AUC 1.0000"},
		{[]string{"tig-direction", "--aux", "20"}, "AUC 1.0000"},
		{[]string{"tig-norm"}, "AUC "},
	} {
		args := append([]string{"attack"}, c.args...)
		args = append(args, "--store", store, "--run", "tigcli", "--as", "2", "--truth", data, "--out", at)
		code, stdout, stderr := runCLI(t, args...)
		if code != 0 || !strings.Contains(stdout, c.want) || !strings.Contains(stdout, "on grad replies") {
			t.Errorf("attack %v: exit %d: %s %s", c.args, code, stdout, stderr)
		}
	}
	code, _, stderr = runCLI(t, "attack", "sign", "--store", store, "--run", "tigcli", "--as", "2", "--truth", data, "--out", at)
	if code == 0 || !strings.Contains(stderr, "tig-sign") {
		t.Errorf("zeroth-order sign attack on TIG traffic: exit %d: %s", code, stderr)
	}
}

func TestDefenseFlags(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	code, stdout, stderr := runCLI(t, "train", "--data", "synthetic:n=1500,d=16,test=300", "--parties", "3", "--batch", "16",
		"--steps", "300", "--reply", "mean", "--min-batch", "16", "--clip", "0.01", "--noise-multiplier", "2",
		"--dp-auc", "0.7", "--aggregator-batches", "--adversary", "2:active", "--out", out, "--log", "error")
	if code != 0 || !regexp.MustCompile(`label privacy.*: no party infers any label above AUC 0\.\d+ .*epsilon`).MatchString(stdout) {
		t.Fatalf("exit %d: %s %s", code, stdout, stderr)
	}
	var s struct {
		Defense  map[string]any
		Settings struct{ Defense map[string]any }
	}
	if raw, err := readSummary(out, &s); err != nil || s.Defense["reply"] != "mean" || s.Settings.Defense["key"] == nil {
		t.Fatalf("summary: %v %s", err, raw)
	}
	for _, bad := range [][]string{
		{"--clip", "0.1", "--noise", "0.1"},                   // losses cannot be noised
		{"--reply", "mean", "--noise", "0.1"},                 // noise needs a clip
		{"--reply", "bogus"},                                  // unknown mode
		{"--reply", "mean", "--dp-auc", "0.4", "--clip", "1"}, // AUC below chance
		{"--adversary", "x:active"},                           // bad spec
	} {
		args := append([]string{"train", "--data", "synthetic:n=500,d=8,test=100", "--parties", "2", "--steps", "10", "--log", "error", "--privacy", "off"}, bad...)
		if code, _, stderr := runCLI(t, args...); code == 0 {
			t.Errorf("%v: exit 0 (%s)", bad, stderr)
		}
	}
}

// A default train (no --privacy) is defended: its privacy.json states an
// AUC bound of at most 0.6, and the attack suite's attacks, passive and
// active, stay under it on the run's own log.
//
// On a9a (the shared data, skipped without it): on a synthetic set a
// party's own features predict the labels so well that the regression
// attack's AUC over the samples it probed measures them too (0.61 once
// against a bound of 0.587), which no label bound covers.
func TestDefaultPrivacyHoldsBound(t *testing.T) {
	t.Parallel()
	dir := "/work/shared/data/a9a"
	if d := os.Getenv("ASYREVEL_DATA"); d != "" {
		dir = filepath.Join(d, "a9a")
	}
	data := filepath.Join(dir, "a9a.gz")
	if _, err := os.Stat(data); err != nil {
		t.Skipf("no a9a: %v", err)
	}
	auc := regexp.MustCompile(`AUC (\d\.\d+)`)
	// The bound is on the best test's AUC for any one label. What one
	// run's attack reaches varies far more than the 32,561 samples
	// suggest: with batch means, the noise is shared by a batch's samples,
	// so the independent draws are the ~130 batches of an epoch. Eighteen
	// single runs of the active attack gave 0.455 to 0.632 (sd about
	// 0.05), and part of what it reaches comes from the party's own
	// features, which no label bound covers (the passive attack sits at
	// 0.58 to 0.60 run after run). So each mode runs over six seeds (a run
	// takes about half a second) and their mean is held to the bound with
	// a slack of 0.04, about twice the sd of a six-run mean; no single run
	// may pass it by more than 0.15. An undefended run reaches 1.0.
	for _, active := range []bool{false, true} {
		// The two modes side by side (each run mostly waits on its broker).
		t.Run(map[bool]string{false: "passive", true: "active"}[active], func(t *testing.T) {
			t.Parallel()
			var aucs []float64
			bound := 0.0
			for seed := 1; seed <= 6; seed++ {
				out := t.TempDir()
				args := []string{"train", "--data", data, "--parties", "8", "--epochs", "1", "--run", "dflt", "--out", out, "--log", "warn", "--seed", strconv.Itoa(seed),
					"--privacy", "auc=0.6,profile=budget"}
				if active {
					args = append(args, "--adversary", "3:active")
				}
				code, stdout, stderr := runCLI(t, args...)
				if code != 0 || !strings.Contains(stdout, "label privacy (--privacy auc=0.6,profile=budget, binary profile)") {
					t.Fatalf("train: exit %d: %s %s", code, stdout, stderr)
				}
				var pj struct {
					Bound struct {
						AUC float64 `json:"auc"`
					}
					Privacy struct{ Switch, Profile string }
				}
				raw, _ := os.ReadFile(filepath.Join(out, "privacy.json"))
				if err := json.Unmarshal(raw, &pj); err != nil || pj.Bound.AUC <= 0.5 || pj.Bound.AUC > 0.6 || pj.Privacy.Switch != "auc=0.6,profile=budget" {
					t.Fatalf("privacy.json: %v %s", err, raw)
				}
				bound = pj.Bound.AUC
				store := filepath.Join(out, "stream")
				// sign and loss refuse batch means: the regression attack.
				code, stdout, stderr = runCLI(t, "attack", "regression", "--store", store, "--run", "dflt", "--as", "3", "--truth", data, "--out", t.TempDir())
				m := auc.FindStringSubmatch(stdout)
				if code != 0 || m == nil {
					t.Fatalf("attack regression: exit %d: %s %s", code, stdout, stderr)
				}
				got, _ := strconv.ParseFloat(m[1], 64)
				aucs = append(aucs, got)
				if got > bound+0.15 {
					t.Errorf("active %v, seed %d: the regression attack reaches AUC %.4f, far above the bound %.4f", active, seed, got, bound)
				}
			}
			mean := 0.0
			for _, a := range aucs {
				mean += a / float64(len(aucs))
			}
			t.Logf("active %v, regression: AUC %.4f over seeds 1-6 (%.4f), bound %.4f", active, mean, aucs, bound)
			if mean > bound+0.04 {
				t.Errorf("active %v: the regression attack reaches AUC %.4f on average over 6 seeds, above the bound %.4f", active, mean, bound)
			}
		})
	}
}

// A default train on a softmax head (a multiclass set) is label-free, like
// an explicit --privacy auc=0.6: its privacy.json states an AUC bound of
// 0.5 (no message to a party depends on a label); the budget profile,
// asked for, states a bound of at most 0.6; --privacy off states none
// (bound 1).
func TestDefaultPrivacySoftmax(t *testing.T) {
	t.Parallel()
	data := "synthetic:n=3000,d=16,test=500,classes=4,noise=0.02"
	for _, c := range []struct {
		args    []string
		profile string
		bound   [2]float64 // the bound's range, (lo, hi]
	}{
		{nil, "label-free", [2]float64{0.49, 0.5}},
		{[]string{"--privacy", "auc=0.6,profile=budget"}, "multiclass", [2]float64{0.5, 0.6}},
		{[]string{"--privacy", "off"}, "off", [2]float64{0.99, 1}},
	} {
		out := t.TempDir()
		args := append([]string{"train", "--data", data, "--parties", "3", "--steps", "600", "--run", "dsoft", "--out", out, "--log", "warn"}, c.args...)
		code, stdout, stderr := runCLI(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s %s", c.args, code, stdout, stderr)
		}
		var pj struct {
			Bound struct {
				AUC float64 `json:"auc"`
			}
			Privacy struct {
				Switch, Profile string
				Default         bool
			}
		}
		raw, _ := os.ReadFile(filepath.Join(out, "privacy.json"))
		if err := json.Unmarshal(raw, &pj); err != nil || pj.Privacy.Profile != c.profile {
			t.Fatalf("%v: privacy.json: %v %s", c.args, err, raw)
		}
		if pj.Bound.AUC <= c.bound[0] || pj.Bound.AUC > c.bound[1] {
			t.Errorf("%v: bound %g, want it in (%g, %g]", c.args, pj.Bound.AUC, c.bound[0], c.bound[1])
		}
		if c.args == nil && (!pj.Privacy.Default || pj.Privacy.Switch != "auc=0.6" || !strings.Contains(stdout, "label privacy (--privacy auc=0.6, the default, label-free profile): no message")) {
			t.Errorf("default: choice %+v; %s", pj.Privacy, stdout)
		}
		t.Logf("%v: bound %g, %s", c.args, pj.Bound.AUC, pj.Privacy.Profile)
	}
}
