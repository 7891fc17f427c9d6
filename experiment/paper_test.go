package experiment

import (
	"context"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/experiment/report"
)

// tinySet writes the small synthetic problem as LIBSVM files and returns a
// Set that reads them.
func tinySet(t *testing.T) (Set, Locate) {
	t.Helper()
	tr, te, err := dataset.Synthetic(*small())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, d := range map[string]*dataset.Dataset{"tiny.svm": tr, "tiny.t.svm": te} {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := dataset.WriteLIBSVM(f, d); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	return Set{Name: "tiny", Train: "tiny.svm", Test: "tiny.t.svm"}, func(rel string) (string, error) { return filepath.Join(dir, rel), nil }
}

// WriteSection records each run in runs.csv, the later run of a section
// in place of the earlier, and writes the report again from the CSV files
// (a section appears with its CSV file, with the command of its run).
func TestReportSections(t *testing.T) {
	dir := t.TempDir()
	for _, s := range []Section{
		{Name: "fig4", Command: "asyrevel experiment fig4"},
		{Name: "table3", Command: "asyrevel experiment table3"},
		{Name: "fig4", Command: "asyrevel experiment fig4 --quick", Settings: []string{"q = 1, 16"}},
	} {
		if err := WriteSection(dir, s); err != nil {
			t.Fatal(err)
		}
	}
	runs, err := report.ReadRuns(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 || runs["fig4"].Commands[0] != "asyrevel experiment fig4 --quick" || runs["fig4"].Settings[0] != "q = 1, 16" || runs["fig4"].Machine == "" {
		t.Fatalf("runs.csv: %+v", runs)
	}
	if err := WriteTable3(dir, []Table3Row{{Set: "a9a", Method: "TIG", K: 1, Batch: 64, UpBytes: 10, DownBytes: 20, WireBytes: 50, RoundMillis: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := WriteSection(dir, Section{Name: "table3", Command: "asyrevel experiment table3 --quick"}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, ReportFile))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	if !strings.Contains(text, "## Table 3") || !strings.Contains(text, "    asyrevel experiment table3 --quick\n") || strings.Contains(text, "## Figure 4") {
		t.Fatalf("the report does not follow the CSV files and runs.csv:\n%s", text)
	}
}

// fig3Steps bounds each of TestPaperExperiments' fig3 runs.
const fig3Steps = 600

// The paper experiments run end to end on a small set and write their
// files: fig3 and table3 over the embedded JetStream broker, table4 with
// its statistics, fig4's simulation.
func TestPaperExperiments(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	set, locate := tinySet(t)
	ctx, dir := context.Background(), t.TempDir()
	pts, runs, err := Fig3(ctx, Fig3Config{Sets: []Set{set}, Locate: locate, Algos: []string{"asyrevel-gau", "synrevel-gau", "tig"},
		Parties: 4, StragglerFactor: 1.6, Steps: fig3Steps, Duration: time.Minute, Batch: 16, Window: 1, Seed: 1, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 3 || len(pts) < 6 {
		t.Fatalf("fig3: %d runs, %d points", len(runs), len(pts))
	}
	// Every run learns: its final loss is below its first evaluation's.
	// Bounded by steps, not 0.7 s, which a loaded machine spent on a
	// few steps; the minute only bounds a hang.
	for _, r := range runs {
		first := math.NaN()
		for _, p := range pts {
			if p.Algo == r.Algo {
				first = p.TrainLoss
				break
			}
		}
		t.Logf("fig3 %s: %d steps, loss %.4f to %.4f", r.Algo, r.Steps, first, r.FinalLoss)
		if r.Steps < fig3Steps || !(r.FinalLoss < first-0.02) {
			t.Errorf("fig3 %s: first loss %.4f, %+v", r.Algo, first, r)
		}
	}
	if err := WriteFig3(dir, pts, runs); err != nil {
		t.Fatal(err)
	}
	rows, err := Table3(ctx, Table3Config{Sets: []Set{set}, Locate: locate, Parties: 4, Batch: 16, Steps: 1200, Steps0: 400, Seed: 1, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		// Per sample: c and c_hat, or c: 4 each (float32, c_hat as a
		// difference); h and h_bar, or delta: 4 each; dF_0/dc: 8. The 16
		// ids packed, each in the bits of the training set's largest id.
		// Framing, and the reply's cause digest (18 bytes).
		idBytes := (16*bits.Len(uint(small().Samples-1)) + 7) / 8
		want := idBytes + map[string]int{Table3Methods[0].Name: 16 * 16, Table3Methods[1].Name: 16 * 12, Table3Methods[2].Name: 16 * 12}[r.Method]
		if p := r.UpBytes + r.DownBytes; p < want || p > want+64 {
			t.Errorf("table3 %s: %d payload bytes a round, want %d and framing", r.Method, p, want)
		}
		if r.WireBytes < float64(r.UpBytes+r.DownBytes) || r.RoundMillis <= 0 {
			t.Errorf("table3 %s: %.0f bytes on the broker, %.3f ms a round", r.Method, r.WireBytes, r.RoundMillis)
		}
	}
	if err := WriteTable3(dir, rows); err != nil {
		t.Fatal(err)
	}
	// Bounded by steps, not 0.7 s: at load 30 (make test beside other
	// work) a trial made 234 steps in 0.7 s and its mean fell to 0.812.
	// The minute only bounds a hang.
	t4, trials, err := Table4(ctx, Table4Config{Sets: []Set{set}, Locate: locate, Parties: 4, Trials: 2, Steps: 1500, Duration: time.Minute, Seed: 1, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if len(t4) != 3 || len(trials) != 6 {
		t.Fatalf("table4: %d rows, %d trials", len(t4), len(trials))
	}
	for _, r := range t4 {
		if !(r.Mean > 0.85) || math.IsNaN(r.SD) || !(r.Central > 0.9) || !(r.Majority >= 0.5) {
			t.Errorf("table4 %s: %+v", r.Algo, r)
		}
	}
	if err := WriteTable4(dir, t4, trials); err != nil {
		t.Fatal(err)
	}
	// CheckBudget bounds a hang, not speed: the real run stops once it
	// reaches the target, and at load 6-10 (make test) 20 s did not
	// reach it (12,426 steps against the simulation's 13,031).
	f4, checks, costs, err := Fig4(ctx, Fig4Config{Sets: []Set{set}, Locate: locate, Qs: []int{1, 4}, Suboptimality: 0.02, StragglerFactor: 1.6,
		Batch: map[string]int{"tiny": 64}, Budget: 100 * time.Second, MaxSteps: 200000, Seed: 1, Seeds: 2,
		CheckQs: []int{4}, CheckFactor: 2, CheckBudget: 3 * time.Minute, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range f4 {
		if !r.Reached {
			t.Errorf("fig4 %d %s: target not reached: %+v", r.Q, r.Mode, r)
		}
	}
	for _, c := range checks {
		t.Logf("fig4 check %s: real %.2f s (%d steps), simulated %.2f s (%d steps)", c.Mode, c.RealSeconds, c.RealSteps, c.SimSeconds, c.SimSteps)
		if !c.RealReached || !c.SimReached {
			t.Errorf("fig4 check %+v", c)
		}
	}
	if len(costs) != 2 || len(costs[1].Party) != 4 || !(costs[1].Agg.Median > 0) || !(costs[1].Latency.Median > 0) || !(costs[0].Party[0].Step.Median > 0) {
		t.Errorf("fig4 costs not measured: %+v", costs)
	}
	if len(f4) != 2*2*2 {
		t.Errorf("fig4: %d runs, want 2 q x 2 modes x 2 seeds", len(f4))
	}
	if err := WriteFig4(dir, f4, checks, costs); err != nil {
		t.Fatal(err)
	}
	if err := writeReport(dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"fig3.csv", "fig3_runs.csv", "fig3.png", "table3.csv", "table4.csv", "table4_trials.csv", "fig4.csv", "fig4_check.csv",
		"fig4_costs.csv", "fig4.png", ReportFile} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	body, _ := os.ReadFile(filepath.Join(dir, ReportFile))
	for _, bad := range []string{"NaN", "%!", "Not reported"} {
		if strings.Contains(string(body), bad) {
			t.Errorf("the report has %q:\n%s", bad, body)
		}
	}
	for _, want := range []string{"## Figure 3", "## Table 3", "## Table 4", "## Figure 4"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("the report has no %q:\n%s", want, body)
		}
	}
}

// table4.csv read back, and a run on some sets merged into an earlier one
// on others; the report's command of a section read back.
func TestTable4Merge(t *testing.T) {
	dir := t.TempDir()
	old := []Table4Row{{Set: "a9a", Algo: "nonf", Trials: 5, Mean: 0.85, SD: 0.001, Duration: 10 * time.Second, Central: 0.85, Majority: 0.76, Paper: math.NaN()},
		{Set: "mnist", Algo: "nonf", Trials: 1, Mean: 0.7, SD: math.NaN(), Duration: time.Minute}}
	oldTrials := []Table4Trial{{Set: "a9a", Algo: "nonf", Seed: 1, Accuracy: 0.85, Steps: 10}, {Set: "mnist", Algo: "nonf", Seed: 1, Accuracy: 0.7}}
	if err := WriteTable4(dir, old, oldTrials); err != nil {
		t.Fatal(err)
	}
	rows, trials, err := ReadTable4(dir)
	if err != nil || len(rows) != 2 || rows[0].Trials != 5 || rows[0].Duration != 10*time.Second || math.Abs(rows[0].Mean-0.85) > 1e-9 || len(trials) != 2 {
		t.Fatalf("read back: %+v %+v %v", rows, trials, err)
	}
	fresh := []Table4Row{{Set: "mnist", Algo: "nonf", Trials: 1, Mean: 0.9}}
	mr, mt, kept := MergeTable4(rows, trials, fresh, []Table4Trial{{Set: "mnist", Algo: "nonf", Seed: 1, Accuracy: 0.9}})
	if len(mr) != 2 || mr[0].Set != "a9a" || mr[1].Mean != 0.9 || len(mt) != 2 || mt[1].Accuracy != 0.9 || len(kept) != 1 || kept[0] != "a9a" {
		t.Errorf("merged: %+v %+v %v", mr, mt, kept)
	}
	if err := WriteSection(dir, Section{Name: "table4", Command: "asyrevel experiment table4 --sets a9a"}); err != nil {
		t.Fatal(err)
	}
	if c := sectionRun(dir, "table4").Commands; len(c) != 1 || c[0] != "asyrevel experiment table4 --sets a9a" {
		t.Errorf("section commands %q", c)
	}
	if rows, _, err := ReadTable4(t.TempDir()); rows != nil || err != nil {
		t.Errorf("no files: %v %v", rows, err)
	}
}

// Bounded by steps, every method gets the same number, and the table's
// trials column gives each set's bound.
func TestTable4Steps(t *testing.T) {
	if testing.Short() {
		t.Skip("short: table 4 on the real broker")
	}
	set, locate := tinySet(t)
	rows, trials, err := Table4(context.Background(), Table4Config{Sets: []Set{set}, Locate: locate, Parties: 4, Trials: 1,
		Duration: time.Minute, Steps: 300, Seed: 1, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if len(trials) != 3 {
		t.Fatalf("%d trials", len(trials))
	}
	for _, tr := range trials {
		if tr.Steps != 300 {
			t.Errorf("%s trial: %d steps, want 300", tr.Algo, tr.Steps)
		}
	}
	for _, r := range rows {
		if r.MaxSteps != 300 {
			t.Errorf("%s row: bound %d, want 300", r.Algo, r.MaxSteps)
		}
	}
	dir := t.TempDir()
	if err := WriteTable4(dir, rows, trials); err != nil {
		t.Fatal(err)
	}
	if err := writeReport(dir); err != nil {
		t.Fatal(err)
	}
	if body, _ := os.ReadFile(filepath.Join(dir, ReportFile)); !strings.Contains(string(body), "| 1 x 300 steps |") {
		t.Errorf("the trials column does not give the bound:\n%s", body)
	}
}

// Table 4 rebuilt from its runs: the statistics come from the trials, the
// paper's figures sit beside every method, a significant gap is called so
// (w8a: 0.23 points with standard deviations of 0.02 and 0.01), a small one
// is not, and an accuracy at or below the majority-class rate is flagged
// (GiveMeSomeCredit's NonF).
func TestTable4FromTrials(t *testing.T) {
	var trials []Table4Trial
	add := func(set, algo string, accs ...float64) {
		for i, a := range accs {
			trials = append(trials, Table4Trial{Set: set, Algo: algo, Seed: uint64(i + 1), Accuracy: a, Steps: 100})
		}
	}
	add("w8a", "asyrevel-gau", 0.9793, 0.9795, 0.9797, 0.9794, 0.9796)
	add("w8a", "asyrevel-uni", 0.9790, 0.9799, 0.9795, 0.9792, 0.9798)
	add("w8a", "nonf", 0.9817, 0.9818, 0.9819, 0.9818, 0.9817)
	add("give-me-some-credit", "asyrevel-gau", 0.9340, 0.9345, 0.9342)
	add("give-me-some-credit", "asyrevel-uni", 0.9320, 0.9345, 0.9330)
	add("give-me-some-credit", "nonf", 0.9330, 0.9310, 0.9325)
	trials = append(trials, Table4Trial{Set: "give-me-some-credit", Algo: "nonf", Seed: 4, Accuracy: math.NaN(), Failed: "diverged"})
	var rows []Table4Row
	for _, set := range []string{"w8a", "give-me-some-credit"} {
		maj := map[string]float64{"w8a": 0.9696, "give-me-some-credit": 0.9336}[set]
		for _, algo := range report.Table4Algos {
			// Stale statistics: the rebuild must replace them.
			rows = append(rows, Table4Row{Set: set, Algo: algo, Trials: 99, Mean: 0.5, SD: 0.1, Majority: maj, Central: 0.98, MaxSteps: 100, Paper: math.NaN()})
		}
	}
	rows = Table4FromTrials(rows, trials)
	g := rows[0]
	if g.Trials != 5 || math.Abs(g.Mean-0.9795) > 1e-9 || g.Min != 0.9793 || g.Max != 0.9797 || g.Paper != 0.8985 {
		t.Errorf("w8a gau rebuilt: %+v", g)
	}
	if n := rows[5]; n.Trials != 4 || n.Failed != 1 || math.IsNaN(n.Mean) || !math.IsNaN(n.Paper-0.9350) && n.Paper != 0.9350 {
		t.Errorf("gmsc nonf rebuilt: %+v", n)
	}
	dir := t.TempDir()
	if err := WriteTable4(dir, rows, trials); err != nil {
		t.Fatal(err)
	}
	if err := writeReport(dir); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, ReportFile))
	body := string(b)
	for _, want := range []string{
		"| w8a | asyrevel-gau | -0.23 |",
		"w8a, the paper's AsyREVEL: 89.85% is at or below",
		"below NonF, significant at 5%",
		"93.50 / 93.48 / 93.50",
		"89.85 ⚑ / 89.85 ⚑ / - (one AsyREVEL figure, variant not given)",
		"give-me-some-credit nonf: 93.22% is at or below the majority-class rate 93.36%",
		"NonF is at or below the majority rate ⚑: the gap says nothing",
		"not significant at 5%",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("missing %q", want)
		}
	}
	if strings.Contains(body, "NaN") || strings.Contains(body, "%!") {
		t.Errorf("formatting error in\n%s", body)
	}
}
