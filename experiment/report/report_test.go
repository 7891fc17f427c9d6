package report

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// folder writes files (name -> contents) into a temporary results folder.
func folder(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// reportOf generates dir's report and returns REPORT.md.
func reportOf(t *testing.T, dir string) string {
	t.Helper()
	files, err := Generate(dir)
	if err != nil {
		t.Fatal(err)
	}
	return string(files[ReportFile])
}

func contains(t *testing.T, text string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Errorf("missing %q in\n%s", w, text)
		}
	}
}

func lacks(t *testing.T, text string, bad ...string) {
	t.Helper()
	for _, w := range bad {
		if strings.Contains(text, w) {
			t.Errorf("%q should not be in\n%s", w, text)
		}
	}
}

// A folder without results has a report that says so; a section appears
// with its CSV file, whatever other experiments are missing.
func TestGenerateFollowsTheFiles(t *testing.T) {
	text := reportOf(t, t.TempDir())
	contains(t, text, "holds no results")
	lacks(t, text, "## Figure 3", "## Measurements")
	text = reportOf(t, folder(t, map[string]string{"adversary.csv": "category,sent,refused_by_broker,rejected_by_receiver,accepted\njunk,10,0,10,0\nforged,5,0,4,1\n"}))
	contains(t, text, "## Measurements", "### Adversary", "15 in all, 0 refused by the broker (its permissions), 14 rejected", "**1 accepted** (forged)",
		"No record of this run in runs.csv")
	lacks(t, text, "## Figure 3", "none accepted")
}

// A CSV file without a column its section needs is said in the section,
// the other sections are written, and the error names the file.
func TestUnreadableCSV(t *testing.T) {
	dir := folder(t, map[string]string{
		"table3.csv":    "set,method\na9a,TIG\n",
		"adversary.csv": "category,sent,refused_by_broker,rejected_by_receiver,accepted\njunk,10,0,10,0\n",
	})
	files, err := Generate(dir)
	if !errors.Is(err, ErrUnreadable) || !strings.Contains(err.Error(), "table3.csv has no column k") {
		t.Fatalf("error %v", err)
	}
	contains(t, string(files[ReportFile]), "**Not reported**: unreadable results: table3.csv has no column k", "none accepted")
	out := filepath.Join(t.TempDir(), "sub", "R.md")
	wrote, err := Write(Options{Results: dir, Out: out})
	if !errors.Is(err, ErrUnreadable) || len(wrote) != 1 || wrote[0] != out {
		t.Fatalf("Write: %v %v", wrote, err)
	}
	if _, err := Write(Options{Results: filepath.Join(dir, "none")}); err == nil {
		t.Error("no results folder: no error")
	}
}

// Record keeps one row an experiment, the later run in place of the
// earlier, and the section's header is the run's.
func TestRecord(t *testing.T) {
	dir := t.TempDir()
	start := time.Date(2026, 11, 28, 1, 2, 0, 0, time.UTC)
	for _, r := range []Run{
		{Experiment: "adversary", Commands: []string{"asyrevel experiment adversary"}},
		{Experiment: "table3", Commands: []string{"asyrevel experiment table3"}},
		{Experiment: "adversary", Commands: []string{"asyrevel experiment adversary --quick"}, Started: start, Seconds: 75,
			Machine: "a machine", Load: "3.50", Settings: []string{"a, b", "c"}},
	} {
		if err := Record(dir, r); err != nil {
			t.Fatal(err)
		}
	}
	runs, err := ReadRuns(dir)
	if err != nil || len(runs) != 2 {
		t.Fatalf("%v %v", runs, err)
	}
	a := runs["adversary"]
	if !a.Started.Equal(start) || a.Seconds != 75 || a.Load != "3.50" || len(a.Settings) != 2 || a.Commands[0] != "asyrevel experiment adversary --quick" {
		t.Errorf("%+v", a)
	}
	if err := os.WriteFile(filepath.Join(dir, "adversary.csv"), []byte("category,sent,refused_by_broker,rejected_by_receiver,accepted\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	contains(t, reportOf(t, dir), "    asyrevel experiment adversary --quick\n\nRun 2026-11-28 01:02 UTC, 1 min 15 s, on a machine, load average 3.50 at the start.\n\nSettings:\n- a, b\n- c\n")
	if err := Record(dir, Run{}); err == nil {
		t.Error("a run without a name recorded")
	}
}

func TestIntervals(t *testing.T) {
	// The mean of 1..5: 3, sd sqrt(2.5), t(0.975, 4) = 2.776445.
	m, lo, hi := meanCI([]float64{1, 2, 3, 4, 5})
	if h := 2.776445 * math.Sqrt(2.5/5); m != 3 || math.Abs(lo-(3-h)) > 1e-5 || math.Abs(hi-(3+h)) > 1e-5 {
		t.Errorf("meanCI %v [%v, %v]", m, lo, hi)
	}
	if _, lo, _ := meanCI([]float64{1}); !math.IsNaN(lo) {
		t.Error("an interval from one value")
	}
	// Times that differ by a constant factor: the ratio is that factor,
	// without spread.
	a, b := []float64{2, 4, 8}, []float64{1, 2, 4}
	if r, lo, hi := geoRatioCI(a, b); math.Abs(r-2) > 1e-12 || math.IsNaN(lo) || !(lo < 2 && hi > 2) {
		t.Errorf("ratio %v [%v, %v]", r, lo, hi)
	}
	if g, lo, hi := geoCI([]float64{2, 2, 2}); g != 2 || lo != 2 || hi != 2 {
		t.Errorf("geoCI of equal values %v [%v, %v]", g, lo, hi)
	}
	if r, lo, _ := geoRatioCI([]float64{5}, []float64{1}); r != 5 || !math.IsNaN(lo) {
		t.Errorf("one run each: %v, interval from %v", r, lo)
	}
}

const fig4Header = "set,parties,mode,seed,reached,virtual_seconds,speedup\n"

// Figure 4's verdicts come from the seeds' spread: a ratio whose interval
// holds 1 is not called a speed-up, and the noise at q = 1 is measured.
func TestFig4Verdicts(t *testing.T) {
	csv := fig4Header +
		// q = 1: the two modes are one algorithm; a wide spread.
		"a9a,1,async,1,true,20,1\na9a,1,async,2,true,120,1\na9a,1,async,3,true,50,1\n" +
		"a9a,1,sync,1,true,30,1\na9a,1,sync,2,true,90,1\na9a,1,sync,3,true,45,1\n" +
		// q = 4: async about 10x faster than at q = 1, sync 2x slower than async, seed by seed.
		"a9a,4,async,1,true,4.0,1\na9a,4,async,2,true,5.0,1\na9a,4,async,3,true,4.5,1\n" +
		"a9a,4,sync,1,true,8.1,1\na9a,4,sync,2,true,9.9,1\na9a,4,sync,3,true,9.0,1\n"
	text := reportOf(t, folder(t, map[string]string{"fig4.csv": csv}))
	contains(t, text,
		"their 6 runs reached the target between 20.0 and 120.0 virtual s, a factor of 6.00 from the random draws alone",
		"| a9a | 4 |", "asynchronous faster |",
		"**Not validated here.**")
	lacks(t, text, "1.8 to 5.9", "NaN")
	// The q = 1 row: the seeds do not separate the modes.
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "| a9a | 1 |") && !strings.Contains(l, "not separated by 3 seeds") {
			t.Errorf("q = 1 row: %s", l)
		}
	}
	// A run that missed the target: no interval, no speed-up.
	csv += "a9a,16,async,1,false,1000,NaN\na9a,16,async,2,true,3,1\na9a,16,sync,1,true,9,1\na9a,16,sync,2,true,9,1\n"
	text = reportOf(t, folder(t, map[string]string{"fig4.csv": csv}))
	contains(t, text, "| a9a | 16 | 3.0 (1 of 2) |", "- (a run did not reach the target)")
}

// The validation paragraph states what validate.csv measured, not a fixed
// verdict (it said "no q came within 15% ... 1.8 to 5.9 times" whatever
// validate measured).
func TestFig4Validation(t *testing.T) {
	files := map[string]string{
		"fig4.csv":     fig4Header + "a9a,1,async,1,true,20,1\na9a,1,sync,1,true,30,1\n",
		"validate.csv": "set,parties,mode,real_steps,real_seconds,sim_steps,error\na9a,1,async,900,10,1000,-0.10\na9a,1,sync,950,10,1000,-0.05\na9a,2,async,500,10,1000,-0.5\na9a,2,sync,500,10,1000,0.02\n",
	}
	text := reportOf(t, folder(t, files))
	contains(t, text, "**Validated at q = 1 only.**", "the simulation ran 0.98 to 2.00 times as many requests a second", "Validated range: q = 1")
	lacks(t, text, "1.8 to 5.9", "no q came within")
	// Figure 4 simulates with the cost model's costs: their error is the
	// one the figure's paragraph gives.
	files["validate.csv"] = "set,parties,mode,real_steps,real_seconds,sim_steps,error,error_cost_model\na9a,1,async,500,10,1000,-0.5,-0.8\na9a,1,sync,500,10,1000,0.1,-0.5\n"
	contains(t, reportOf(t, folder(t, files)), "**Not validated.**", "at no q were both modes within 15%", "Validated range: none",
		"with the cost model's costs, which Figure 4 uses, the simulation ran 2.00 to 5.00 times as many requests a second")
}

// The checks' paragraph states the measured ratios.
func TestFig4Checks(t *testing.T) {
	text := reportOf(t, folder(t, map[string]string{
		"fig4.csv": fig4Header + "a9a,4,async,1,true,20,1\n",
		"fig4_check.csv": "set,parties,mode,target_objective,real_reached,real_seconds,real_steps,sim_reached,sim_seconds,sim_steps\n" +
			"a9a,4,async,0.33,true,88.17,90615,true,56.77,70230\na9a,4,sync,0.33,false,120,92520,false,120.93,111456\n",
	}))
	contains(t, text, "a9a, q = 4, async: the real pipeline took 1.29x the simulated steps and 1.55x the simulated time",
		"a9a, q = 4, sync: the target was not reached by either")
}

// A failed run is reported, not compared.
func TestTable4FailedRuns(t *testing.T) {
	text := reportOf(t, folder(t, map[string]string{
		"table4.csv":        "set,algo,trials,mean_accuracy,sd,central_lbfgs,majority_rate,failed\nmnist,asyrevel-gau,1,0.89,NaN,NaN,0.11,0\nmnist,nonf,1,NaN,NaN,NaN,0.11,1\n",
		"table4_trials.csv": "set,algo,seed,test_accuracy,failed\nmnist,asyrevel-gau,1,0.89,\nmnist,nonf,1,NaN,diverged\n",
	}))
	contains(t, text, "no run finished (1 of 1 failed", "no comparison: a method has no finished run")
}

// A measured AUC above its run's bound is flagged, with what its interval
// over the seeds allows one to say.
func TestPrivacyOverBound(t *testing.T) {
	head := "setting,attacker,attack,auc,test_accuracy,accuracy_drop_pp,epsilon,dataset,auc_sd,auc_bound,samples_covered,seeds,max_class_auc\n"
	dir := folder(t, map[string]string{"privacy.csv": head +
		"paper,passive,sign,1.0000,0.848,0,inf,a9a,0,1.000,4000,3,1.0\n" +
		"rr,passive,loss,0.8840,0.845,0.3,2,a9a,0.0020,0.881,4000,3,0.884\n" +
		"dp,passive,sign,0.7000,0.84,0.5,1,a9a,0.0010,0.600,4000,3,0.70\n" +
		"dp,passive,model,0.8500,0.84,0.5,1,a9a,0.0010,0.600,4000,3,0.85\n" +
		"one,active,sign,0.6500,0.84,0.5,1,a9a,,0.600,900,1,0.65\n"})
	files, err := Generate(dir)
	if err != nil {
		t.Fatal(err)
	}
	p := string(files[PrivacyFile])
	contains(t, p, "⚑ a9a, `rr`, passive attacker, `loss`: AUC 0.884 [0.879..0.889] above the bound 0.881 over 3 seeds; the interval over the seeds reaches the bound",
		"⚑ a9a, `dp`, passive attacker, `sign`: AUC 0.700 [0.698..0.702] above the bound 0.600 over 3 seeds; **the interval over the seeds lies above the bound**",
		"⚑ a9a, `one`, active attacker, `sign`: AUC 0.650 above the bound 0.600 over 1 seeds; no interval over the seeds (one seed)",
		"sign 1.000 [1.000..1.000]")
	lacks(t, p, "`model`")
	contains(t, string(files[ReportFile]), "Measured AUCs above the bound their run claims: 3")
}

// A worst class above its bound in privacy.csv: flagged in the table and
// listed with its Hanley-McNeil interval, Bonferroni's over the 10
// classes, when the CSV holds the class counts (the interval of the mean
// over the seeds): the bound fails when its lower end is above the bound,
// within noise otherwise; with a bound on its lower end from the covered
// samples alone when it does not (one seed); and not flagged at or below
// the bound.
func TestPrivacyWorstClassFlag(t *testing.T) {
	head := "setting,attacker,attack,auc,test_accuracy,accuracy_drop_pp,epsilon,dataset,auc_sd,auc_bound,samples_covered,seeds,max_class_auc,class_positives\n"
	for _, tc := range []struct {
		name, row string
		want, not []string
	}{
		{"above, counts, one seed, the lower end above", "auc0.6,active,derivative,0.5100,0.78,1,1,mnist,,0.597,5000,1,0.6500,500",
			[]string{"| n/a / 0.650 ⚑ / n/a |", "worst class's AUC 0.650", "- ⚑ **THE BOUND FAILS**: mnist, `auc0.6`",
				"99.5% (Bonferroni: 95% over the 10 classes) interval [0.611..0.689] (Hanley-McNeil, 500 positives, 4500 negatives): even its lower end is above the bound: **the bound fails**"},
			nil},
		{"above, counts, two seeds: the mean's interval", "auc0.6,active,derivative,0.5100,0.78,1,1,mnist,0.01,0.597,281,2,0.6503,28",
			[]string{"| n/a / 0.650 ⚑ / n/a |", "99.5% (Bonferroni: 95% over the 10 classes) interval [0.534..0.767] (Hanley-McNeil, 28 positives, 253 negatives): its lower end is not above the bound: within noise"},
			[]string{"): even its lower end", "THE BOUND FAILS"}},
		{"above, no counts, one seed", "auc0.6,active,derivative,0.5100,0.78,1,1,mnist,,0.597,281,1,0.6503,",
			[]string{"| n/a / 0.650 ⚑ / n/a |", "privacy.csv holds no class counts for this row, so the interval is not known; but whatever the split of the 281 samples " +
				"into the class and the others, the 99.5% (Bonferroni: 95% over the 10 classes) interval's lower end is at most 0.559 (Hanley-McNeil at the narrowest split), not above the bound: within noise"},
			[]string{"): even its lower end", "THE BOUND FAILS"}},
		// The label-free reference above the bound too: the excess is the
		// party's own features, which a bound on what it receives does not
		// cover; flagged, and not as a failed bound.
		{"above, counts, the shuffled reference above too", "auc0.6,passive,derivative,0.5100,0.74,1,1,fashion-mnist-8ep,0.0091,0.598,53900,2,0.6294,5387\n" +
			"auc0.6,passive,shuffled,0.5021,0.74,1,1,fashion-mnist-8ep,0.0061,0.598,53900,2,0.6190,5381",
			[]string{"- ⚑ above the bound beyond noise, as is the label-free reference: fashion-mnist-8ep, `auc0.6`, passive attacker, `derivative`",
				"interval [0.621..0.638] (Hanley-McNeil, 5387 positives, 48513 negatives): even its lower end is above the bound: above it beyond noise; " +
					"the label-free reference (the derivative attack on the replies shuffled among the requests, which reads no label) reaches 0.619 " +
					"on its worst class, above the bound too"},
			[]string{"`shuffled`: ", "THE BOUND FAILS"}},
		// The same attack without the reference above the bound: a failed
		// bound, loudly.
		{"above, counts, the shuffled reference below: the bound fails", "auc0.6,passive,derivative,0.5100,0.74,1,1,fashion-mnist-8ep,0.0091,0.598,53900,2,0.6294,5387\n" +
			"auc0.6,passive,shuffled,0.5021,0.74,1,1,fashion-mnist-8ep,0.0061,0.598,53900,2,0.5500,5381",
			[]string{"- ⚑ **THE BOUND FAILS**: fashion-mnist-8ep, `auc0.6`, passive attacker, `derivative`"}, nil},
		{"at the bound", "auc0.6,active,derivative,0.5100,0.78,1,1,mnist,,0.597,281,1,0.5970,28",
			[]string{"| n/a / 0.597 / n/a |", "None: every measured AUC"}, []string{"0.597 ⚑", "- ⚑"}},
		{"binary, one seed, counts: the table's interval", "dp,active,regression,0.5500,0.84,0.5,1,a9a,,0.600,900,1,0.5500,200",
			[]string{"| 0.550 [0.504..0.596] (900) |"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files, err := Generate(folder(t, map[string]string{"privacy.csv": head + tc.row + "\n"}))
			if err != nil {
				t.Fatal(err)
			}
			p := string(files[PrivacyFile])
			contains(t, p, tc.want...)
			lacks(t, p, tc.not...)
		})
	}
}

// The WAN section reads wan.csv's columns: a column it does not know
// (another window) splits the configurations, so that each algorithm is
// compared with its like.
func TestWANColumns(t *testing.T) {
	csv := "parties,window,algo,seed,seconds_to_target,steps,accuracy\n" +
		"4,1,asyrevel-gau,1,10,100,0.84\n4,1,asyrevel-gau,2,12,100,0.84\n4,1,synrevel-gau,1,20,100,0.84\n4,1,synrevel-gau,2,24,100,0.84\n" +
		"4,8,asyrevel-gau,1,2,100,0.84\n4,8,asyrevel-gau,2,3,100,0.84\n4,8,synrevel-gau,1,NaN,100,0.83\n4,8,synrevel-gau,2,40,100,0.84\n"
	text := reportOf(t, folder(t, map[string]string{"wan.csv": csv}))
	contains(t, text, "| parties | window | algo | seed | seconds_to_target | steps | accuracy |",
		"the rows that agree on `parties` and `window`",
		"| parties 4, window 1 | synrevel-gau | 2 of 2 | 22.00 | 2.00",
		"| parties 4, window 8 | synrevel-gau | 1 of 2 | not reached | no ratio: a run did not reach the target |",
		"| 4 | 8 | synrevel-gau | 1 | not reached |")
}

// The trust layer's cost is read from a variant against its -nosign twin
// of the same run.
func TestThroughputTrustCost(t *testing.T) {
	csv := "variant,window,batch,steps_per_s,ratio_to_memory,cpu_us_per_step,step_wire_bytes,messages_sent,messages_stored,lost,dropped\n" +
		"memory,8,1,1000,1,1,,10,10,0,0\ncapture-tcp,8,1,400,0.4,3,270,10,10,0,0\ncapture-nosign-tcp,8,1,500,0.5,2,268,10,9,1,0\n"
	text := reportOf(t, folder(t, map[string]string{"throughput-x.csv": csv}))
	contains(t, text, "### Throughput (`throughput-x.csv`)", "capture-tcp against capture-nosign-tcp): steps a second -20% at window 8, batch 1",
		"The stream held every message sent in 2 of the 3 runs with a stream; not in capture-nosign-tcp at window 8, batch 1 (1 lost, 0 dropped)",
		"ran at 0.40 at window 8, batch 1")
}
