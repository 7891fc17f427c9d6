package cli

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// writeTumours writes a CSV like the Wisconsin breast-cancer set that issue
// 24's newcomer brought: n rows, 30 unscaled columns (means and spreads of
// the real set's: from about 0.004 to 880), a 0/1 label (37% ones) that no
// line separates perfectly.
func writeTumours(t *testing.T, dir string, n int) string {
	return writeTumoursNoise(t, dir, n, 1.6)
}

// writeTumoursNoise is writeTumours with another spread of each column
// around its class's mean (in its standard deviations).
func writeTumoursNoise(t *testing.T, dir string, n int, noise float64) string {
	t.Helper()
	cols := [][2]float64{{14.1, 3.5}, {19.3, 4.3}, {92, 24}, {655, 352}, {0.096, 0.014}, {0.104, 0.053}, {0.089, 0.080}, {0.049, 0.039}, {0.181, 0.027}, {0.063, 0.007},
		{0.405, 0.277}, {1.217, 0.552}, {2.87, 2.02}, {40.3, 45.5}, {0.0070, 0.0030}, {0.0255, 0.0179}, {0.0319, 0.0302}, {0.0118, 0.0062}, {0.0205, 0.0083}, {0.0038, 0.0026},
		{16.3, 4.8}, {25.7, 6.1}, {107, 33.6}, {881, 569}, {0.132, 0.023}, {0.254, 0.157}, {0.272, 0.209}, {0.115, 0.066}, {0.290, 0.062}, {0.084, 0.018}}
	sep := []float64{1.4, 0.7, 1.4, 1.3, 0.6, 1.0, 1.2, 1.4, 0.5, 0, 0.9, 0, 0.9, 0.9, -0.1, 0.4, 0.3, 0.6, 0, 0.1, 1.5, 0.8, 1.5, 1.4, 0.7, 1.0, 1.1, 1.5, 0.7, 0.5}
	rng := rand.New(rand.NewPCG(455, 24))
	var b strings.Builder
	for j := range cols {
		fmt.Fprintf(&b, "f%02d,", j)
	}
	b.WriteString("label\n")
	for range n {
		y := 0
		if rng.Float64() < 0.37 {
			y = 1
		}
		z := rng.NormFloat64()
		for j, c := range cols {
			v := (float64(y)-0.37)*sep[j] + 0.5*z + noise*rng.NormFloat64()
			fmt.Fprintf(&b, "%.5g,", max(c[0]+c[1]*v, 0))
		}
		fmt.Fprintf(&b, "%d\n", y)
	}
	path := filepath.Join(dir, "tumours.csv")
	must(t, os.WriteFile(path, []byte(b.String()), 0o644))
	return path
}

// stopSummary is what the tests of this file read from summary.json.
type stopSummary struct {
	StoppedBy  string  `json:"stopped_by"`
	Steps      int64   `json:"steps"`
	Train      float64 `json:"train_seconds"`
	StoreBytes int64   `json:"store_bytes"`
	Accuracy   float64 `json:"test_accuracy"`
	Samples    int     `json:"train_samples"`
	Tests      int     `json:"test_samples"`
	EarlyStop  *struct {
		Watched string  `json:"watched"`
		HeldOut int     `json:"held_out_rows"`
		Best    float64 `json:"best_loss"`
		Fired   bool    `json:"stopped_the_run"`
	} `json:"early_stop"`
}

// Issue 24: a run given no length stops when the held-out loss stops
// improving, in seconds and with a store to match on a small set (455
// rows: it used to refuse to start, and 20 s wrote a 1 GB store).
func TestRunStopsWhenDone(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := writeTumours(t, dir, 455)
	out := filepath.Join(dir, "out")
	start := time.Now()
	code, stdout, errOut := runCLI(t, "train", "--data", data, "--parties", "4", "--scale", "standard", "--log", "error", "--no-privacy-report", "--out", out, "--privacy", labelled)
	took := time.Since(start)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var s stopSummary
	if _, err := readSummary(out, &s); err != nil {
		t.Fatal(err)
	}
	t.Logf("%v in all, %.2f s of training, %d steps, store %.1f MB, held-out accuracy %.3f", took, s.Train, s.Steps, float64(s.StoreBytes)/1e6, s.Accuracy)
	if s.StoppedBy != "patience" || s.EarlyStop == nil || !s.EarlyStop.Fired {
		t.Fatalf("stopped_by %q, early_stop %+v: want the patience rule to end the run", s.StoppedBy, s.EarlyStop)
	}
	if e := s.EarlyStop; e.Watched != "held-out" || e.HeldOut != 46 || s.Tests != 46 || s.Samples != 409 {
		t.Errorf("watched %q with %d rows held out, %d train and %d test rows: want 46 of the 455 rows held out", e.Watched, e.HeldOut, s.Samples, s.Tests)
	}
	if s.StoreBytes <= 0 || s.StoreBytes > 50<<20 {
		t.Errorf("store %d bytes, want under 50 MiB", s.StoreBytes)
	}
	if s.Accuracy < 0.7 {
		t.Errorf("held-out accuracy %.3f: the run stopped before it learnt", s.Accuracy)
	}
	for _, w := range []string{"held-out accuracy", "stopped: the held-out loss stopped improving", "--patience"} {
		if !strings.Contains(stdout, w) {
			t.Errorf("the report does not say %q:\n%s", w, stdout)
		}
	}
}

// With a length, the run stops at the first limit reached, and
// summary.json says which.
func TestStoppedByFirstLimit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := writeTumours(t, dir, 455)
	for _, c := range []struct {
		name  string
		flags []string
		want  string
	}{
		{"epochs", []string{"--epochs", "3", "--steps", "100000", "--duration", "1m"}, "epochs"},
		{"steps", []string{"--epochs", "1000", "--steps", "150", "--duration", "1m"}, "steps"},
		{"duration", []string{"--epochs", "1e6", "--duration", "400ms"}, "duration"},
		{"patience with a length", []string{"--epochs", "1e6", "--duration", "10m", "--patience", "5"}, "patience"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			args := append([]string{"train", "--data", data, "--parties", "4", "--scale", "standard", "--log", "error", "--no-privacy-report", "--out", out, "--privacy", labelled}, c.flags...)
			if code, _, errOut := runCLI(t, args...); code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			var s stopSummary
			if _, err := readSummary(out, &s); err != nil {
				t.Fatal(err)
			}
			if s.StoppedBy != c.want {
				t.Errorf("stopped_by %q after %d steps, %.2f s; want %q", s.StoppedBy, s.Steps, s.Train, c.want)
			}
			if c.want != "patience" && s.EarlyStop != nil {
				t.Errorf("early stopping on with a length and no --patience: %+v", s.EarlyStop)
			}
		})
	}
}

// Issue 24: on raw columns of very different scales, the warnings advised
// --lr/10 again and again (90.35%, then 91.23%), where --scale standard was
// the fix (97.37%). The advice now names --scale standard, and following
// it makes the run learn; the old advice does not.
func TestScaleAdviceWorks(t *testing.T) {
	t.Parallel()
	data := writeTumoursNoise(t, t.TempDir(), 455, 0.8)
	train := func(extra ...string) (loss float64, warnings []string) {
		t.Helper()
		out := filepath.Join(t.TempDir(), "out")
		// --holdout: evaluations once an epoch, so that the raw run stops
		// as stuck, with its summary, before its outputs pass the bound
		// the aggregator accepts (a party's error, no summary: 1 run in
		// 10 without).
		args := append([]string{"train", "--data", data, "--parties", "4", "--steps", "4000", "--holdout", "0.1", "--log", "error", "--no-privacy-report", "--out", out, "--privacy", labelled}, extra...)
		code, _, errOut := runCLI(t, args...)
		var s struct {
			Loss      float64  `json:"train_loss"`
			Warnings  []string `json:"warnings"`
			StoppedBy string   `json:"stopped_by"`
		}
		if _, err := readSummary(out, &s); err != nil {
			// Raw columns can also diverge before the stuck watch sees
			// three evaluations: a party stops at once with an error
			// that names the fix, and there is no summary to read.
			if len(extra) == 0 && code == 1 && strings.Contains(errOut, "outputs diverged") && strings.Contains(errOut, "--scale standard") {
				t.Logf("raw columns diverged at once (the error names --scale standard): %s", errOut)
				return math.NaN(), nil
			}
			t.Fatalf("%v: exit %d: %v: %s", extra, code, err, errOut)
		}
		// A run whose loss stays far above its start stops, exit 1
		// (stuck.go): its summary says so and its advice stands.
		if code != 0 && !(code == 1 && s.StoppedBy == "stuck" && strings.Contains(errOut, "the run does not learn")) {
			t.Fatalf("%v: exit %d: %s", extra, code, errOut)
		}
		return s.Loss, s.Warnings
	}
	raw, warnings := train()
	for try := 1; try < 5 && warnings == nil && math.IsNaN(raw); try++ {
		raw, warnings = train()
	}
	var advice string
	for _, w := range warnings {
		if strings.Contains(w, "training loss grows") {
			advice = w
		}
	}
	if advice == "" {
		t.Fatalf("raw columns, loss %.4g: no warning that the loss grows: %q", raw, warnings)
	}
	if strings.Contains(advice, "try 0.01") || !strings.Contains(advice, "give --scale standard") {
		t.Errorf("the advice on raw columns: %s", advice)
	}
	flag := regexp.MustCompile(`give (--scale) (\w+)`).FindStringSubmatch(advice)
	if flag == nil {
		t.Fatalf("no flag to give in: %s", advice)
	}
	scaled, warnings := train(flag[1], flag[2])
	lowerLR, _ := train("--lr", "0.01")
	t.Logf("train loss: raw %.4g, --lr 0.01 %.4g, %s %s %.4f", raw, lowerLR, flag[1], flag[2], scaled)
	// 0.65 is the loss of predicting the class shares (37% ones).
	if !(scaled < 0.5) {
		t.Errorf("%s %s: train loss %.4f, want the model to learn (< 0.5; the class shares give 0.65)", flag[1], flag[2], scaled)
	}
	if !(lowerLR > 0.65) {
		t.Logf("--lr 0.01 learnt too (loss %.4f): the comparison no longer shows why scaling is advised", lowerLR)
	}
	for _, w := range warnings {
		if strings.Contains(w, "grows") || strings.Contains(w, "learnt nothing") {
			t.Errorf("%s %s still warns: %s", flag[1], flag[2], w)
		}
	}
}

// Issue 24: data inspect read a split's party-1.train.gz as LIBSVM (32,561
// classes: its sample ids), and train --data SPLIT without --parties took 8
// and failed. A split's files are read as what they are, and its manifest
// gives the party count.
func TestSplitFolderUnderstood(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	csv := writeCSV(t, dir, 200)
	split := filepath.Join(dir, "split")
	if code, _, errOut := runCLI(t, "data", "split", "--parties", "3", "--test-fraction", "0.2", "--scale", "standard", "--label", "Outcome", "--out", split, csv); code != 0 {
		t.Fatalf("data split: exit %d: %s", code, errOut)
	}
	for _, c := range []struct {
		path string
		want []string
	}{
		{split, []string{"format:    split", "samples:   160", "classes:   2"}},
		{filepath.Join(split, "party-1.train.gz"), []string{"format:    split party file (gzip)", "samples:   160", "classes:   0", "party 1 of 3", "labels.train.gz"}},
		{filepath.Join(split, "party-3.test.gz"), []string{"format:    split party file (gzip)", "samples:   40", "party 3 of 3"}},
		{filepath.Join(split, "labels.train.gz"), []string{"format:    split labels file (gzip)", "samples:   160", "classes:   2"}},
	} {
		code, stdout, errOut := runCLI(t, "data", "inspect", c.path)
		if code != 0 {
			t.Errorf("data inspect %s: exit %d: %s", c.path, code, errOut)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(stdout, w) {
				t.Errorf("data inspect %s does not say %q:\n%s", c.path, w, stdout)
			}
		}
		if strings.Contains(stdout, "libsvm") || strings.Contains(stdout, "more classes") {
			t.Errorf("data inspect %s reads it as LIBSVM:\n%s", c.path, stdout)
		}
	}
	code, _, errOut := runCLI(t, "train", "--data", filepath.Join(split, "party-1.train.gz"), "--steps", "10", "--log", "error")
	if code == 0 || !strings.Contains(errOut, "give the folder, "+split) {
		t.Errorf("train on one file of the split: exit %d: %s", code, errOut)
	}
	out := filepath.Join(dir, "out")
	code, _, errOut = runCLI(t, "train", "--data", split, "--steps", "60", "--log", "error", "--no-privacy-report", "--out", out)
	if code != 0 {
		t.Fatalf("train --data SPLIT without --parties: exit %d: %s", code, errOut)
	}
	var s struct {
		Parties int `json:"parties"`
		Tests   int `json:"test_samples"`
	}
	if _, err := readSummary(out, &s); err != nil {
		t.Fatal(err)
	}
	if s.Parties != 3 || s.Tests != 40 {
		t.Errorf("%d parties, %d test rows: want the split's 3 and 40", s.Parties, s.Tests)
	}
	code, _, errOut = runCLI(t, "train", "--data", split, "--parties", "4", "--steps", "60", "--log", "error")
	if code == 0 || !strings.Contains(errOut, "split for 3 parties") {
		t.Errorf("--parties 4 on a split for 3: exit %d: %s", code, errOut)
	}
}

// Separate processes given no length stop when done too: the aggregator's
// early stopping ends the run and the parties with it. Without a test set
// and without --holdout, the aggregator holds rows out as train does and
// its call tells the parties (heldwire_test.go), and the held-out loss is
// watched.
func TestSeparateProcessesStopWhenDone(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := writeTumours(t, dir, 455)
	url := startBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	common := []string{"--nats", url, "--run", "stopsbyitself", "--parties", "3", "--data", data, "--log", "error", "--privacy", labelled}
	var parties []<-chan result
	for _, id := range []string{"1", "2", "3"} {
		parties = append(parties, goCLI(ctx, append([]string{"party", "--id", id, "--scale", "standard"}, common...)...))
	}
	out := filepath.Join(dir, "out")
	code, stdout, errOut := runCLICtx(ctx, append([]string{"aggregator", "--out", out, "--no-privacy-report"}, common...)...)
	if code != 0 {
		t.Fatalf("aggregator: exit %d: %s", code, errOut)
	}
	for m, p := range parties {
		if r := <-p; r.code != 0 {
			t.Errorf("party %d: exit %d: %s", m+1, r.code, r.errOut)
		} else if !strings.Contains(r.out, "stopped: the held-out loss stopped improving (--patience 5)") {
			t.Errorf("party %d does not say why the run stopped: %s", m+1, r.out)
		}
	}
	var s stopSummary
	if _, err := readSummary(out, &s); err != nil {
		t.Fatal(err)
	}
	if s.StoppedBy != "patience" || s.EarlyStop == nil || s.EarlyStop.Watched != "held-out" || s.Samples != 409 {
		t.Errorf("stopped_by %q, early_stop %+v, %d training rows: want patience on the held-out loss of 46 of the 455 rows\n%s", s.StoppedBy, s.EarlyStop, s.Samples, stdout)
	}
	if !strings.Contains(stdout, "stopped: the held-out loss stopped improving") {
		t.Errorf("the report:\n%s", stdout)
	}
}

func TestStopFlagsChecked(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--patience", "-1"}, "--patience -1 turns early stopping off: say how long to train"},
		{[]string{"--tolerance", "2"}, "--tolerance 2 not in [0, 1)"},
		{[]string{"--holdout", "1"}, "--holdout 1: want a share of the training rows below 1"},
	} {
		code, _, errOut := runCLI(t, append([]string{"train", "--data", "synthetic", "--parties", "2"}, c.args...)...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d: %s; want 2 and %q", c.args, code, errOut, c.want)
		}
	}
}

// Issue 34: a raw 3-class CSV under the budget profile (its replies are
// clipped, so the outputs never blow up to an error) sat at a training
// loss of 43 (1.1 at the start) for the whole --duration 5m after one
// warning. Such a run stops, exit 1, naming the likely cause, and its
// summary says stuck.
func TestStuckRunExits(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "raw.csv")
	r := rand.New(rand.NewPCG(3, 4))
	scales := []float64{13, 2, 2.4, 19, 100, 2.3, 2, 0.36, 1.6, 5, 1, 2.6, 750}
	var b strings.Builder
	b.WriteString("label,f0,f1,f2,f3,f4,f5,f6,f7,f8,f9,f10,f11,f12\n")
	for range 178 {
		c := r.IntN(3)
		fmt.Fprintf(&b, "%d", c)
		for _, s := range scales {
			fmt.Fprintf(&b, ",%.3f", s*(1+0.15*float64(c))+r.NormFloat64()*0.1*s)
		}
		b.WriteString("\n")
	}
	must(t, os.WriteFile(path, []byte(b.String()), 0o644))
	out := filepath.Join(dir, "out")
	// No length: the old code ran until its budget was spent, exit 0.
	code, stdout, errOut := runCLI(t, "train", "--data", path, "--parties", "4", "--privacy", "auc=0.6,profile=budget",
		"--log", "error", "--no-privacy-report", "--out", out)
	if code != 1 || !strings.Contains(errOut, "the run does not learn") || !strings.Contains(errOut, "--scale standard") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var s struct {
		StoppedBy string `json:"stopped_by"`
		Steps     int64  `json:"steps"`
		Stuck     string `json:"stuck"`
	}
	if _, err := readSummary(out, &s); err != nil {
		t.Fatal(err)
	}
	if s.StoppedBy != "stuck" || !strings.Contains(s.Stuck, "--scale standard") {
		t.Errorf("stopped_by %q after %d steps, stuck %q", s.StoppedBy, s.Steps, s.Stuck)
	}
	if !strings.Contains(stdout, "stopped: the run does not learn") {
		t.Errorf("the report does not say why it stopped:\n%s", stdout)
	}
}
