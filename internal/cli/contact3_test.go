package cli

// Tests of issue 34, "first contact, round three": each fails on the code
// before the issue was addressed (3e1e742).

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/aggregator"
	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/run"
)

// asyrevel --version and asyrevel version say the release, the Go version
// and the platform.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}} {
		code, out, errOut := runCLI(t, args...)
		want := fmt.Sprintf("%s, %s/%s)", runtime.Version(), runtime.GOOS, runtime.GOARCH)
		if code != 0 || !strings.HasPrefix(out, "asyrevel ") || !strings.Contains(out, want) {
			t.Errorf("%v: exit %d, %q %q", args, code, out, errOut)
		}
	}
	old := version
	version = "v1.2.3"
	defer func() { version = old }()
	if _, out, _ := runCLI(t, "--version"); !strings.HasPrefix(out, "asyrevel v1.2.3 (") {
		t.Errorf("with the Makefile's -X main.version: %q", out)
	}
}

// train says how many parties it took when --parties is not given, and
// why: the default, or a split folder's own count.
func TestPartiesSaid(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	split := filepath.Join(dir, "split")
	writeTourCSV(t, filepath.Join(dir, "d.csv"))
	if code, _, errOut := runCLI(t, "data", "split", "--parties", "3", "--test-fraction", "0.2", "--scale", "standard", "--out", split, filepath.Join(dir, "d.csv")); code != 0 {
		t.Fatalf("data split: exit %d: %s", code, errOut)
	}
	for _, c := range []struct {
		data, want string
	}{
		{"synthetic:n=400,d=8,test=100", "8 parties (the default; --parties Q for another)"},
		{split, "3 parties (the split folder's manifest: it was split for them)"},
	} {
		code, _, errOut := runCLI(t, "train", "--data", c.data, "--steps", "20", "--no-privacy-report", "--privacy", "off")
		if code != 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("%s: exit %d, no %q in:\n%s", c.data, code, c.want, errOut)
		}
	}
	if _, _, errOut := runCLI(t, "train", "--data", "synthetic:n=400,d=8,test=100", "--parties", "2", "--steps", "20", "--privacy", "off"); strings.Contains(errOut, "parties (") {
		t.Errorf("--parties given: %s", errOut)
	}
}

// The end of a run has one line with the privacy bound and one with the
// attack measured and what it means; the settings the switch made are in
// summary.json and privacy.json, on the screen only with --verbose.
func TestPrivacyLinesOnce(t *testing.T) {
	t.Parallel()
	settings := "--embed-hidden" // one of the switch's settings
	for _, verbose := range [][]string{nil, {"--verbose"}, {"--verbose", "--log", "info"}} {
		out := t.TempDir()
		args := append([]string{"train", "--data", "synthetic:n=2000,d=16,test=400", "--parties", "3", "--epochs", "1", "--out", out}, verbose...)
		code, stdout, stderr := runCLI(t, args...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		if n := strings.Count(stdout+stderr, settings); n != min(len(verbose), 1) {
			t.Errorf("verbose %v: the switch's settings printed %d times:\n%s\n%s", verbose, n, stdout, stderr)
		}
		if strings.Count(stdout, "label privacy") != 1 || strings.Count(stdout, "leakage: ") != 1 ||
			!regexp.MustCompile(`label privacy \(--privacy auc=0.6, the default, label-free profile\): no message a party receives depends on a label`).MatchString(stdout) {
			t.Errorf("verbose %v: want one bound line and one measured line:\n%s", verbose, stdout)
		}
		var s struct {
			Privacy struct{ Chose []struct{ Flag string } }
		}
		if raw, err := readSummary(out, &s); err != nil || !slices.ContainsFunc(s.Privacy.Chose, func(c struct{ Flag string }) bool { return c.Flag == "embed-hidden" }) {
			t.Errorf("summary.json lacks the settings: %v %s", err, raw)
		}
	}
}

// The measured line says what an attack above the bound means: the
// party's own columns, which no label bound covers; within the bound it
// says so; without a bound it says what bounds it.
func TestLeakageLineMeaning(t *testing.T) {
	t.Parallel()
	defended := func(signAUC float64) *run.Summary {
		return &run.Summary{Algo: "asyrevel-gau", Dataset: "d", Parties: 3, Steps: 100, TestAccuracy: 0.9,
			Privacy: &run.PrivacyChoice{Switch: "auc=0.6", Default: true, Profile: "binary", Target: "every label's inference AUC at most 0.6",
				Chose: []run.Setting{{Flag: "max-perturb", Value: "0.001"}}},
			Defense: &aggregator.DefenseReport{Reply: "mean", Noise: 1, Accounting: &aggregator.Accounting{Delta: 1e-5, Epsilon: 1.38, AUCBound: 0.6, AUCBoundAll: 0.67}},
			Leakage: &aggregator.Leakage{Scored: true, Parties: []aggregator.PartyLeakage{
				{Party: 1, Covered: 455, SignAccuracy: 0.55, SignAUC: 0.55},
				{Party: 3, Covered: 455, SignAccuracy: 0.82, SignAUC: signAUC}}}}
	}
	open := defended(0.99)
	open.Privacy = &run.PrivacyChoice{Switch: "off", Profile: "off"}
	open.Defense = nil
	for _, c := range []struct {
		name string
		s    *run.Summary
		want []string
	}{
		{"above the bound", defended(0.918), []string{
			"label privacy (--privacy auc=0.6, the default, binary profile): no party infers any label above AUC 0.600",
			"party 3's sign attack matches 455 labels at 82.0% (AUC 0.918): above the bound because it reads party 3's own columns, which predict the label; no label bound covers them"}},
		{"within", defended(0.58), []string{"the strongest attack, party 3's sign attack", "within the bound"}},
		{"no bound", open, []string{"label privacy (--privacy off): no bound", "from the replies it received: --privacy auc=0.6 bounds that"}},
	} {
		var b bytes.Buffer
		report(&b, new(run.Defaults()), c.s, false)
		for _, w := range c.want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("%s: %q lacks %q", c.name, b.String(), w)
			}
		}
		if strings.Contains(b.String(), "max-perturb") {
			t.Errorf("%s: the settings without --verbose: %s", c.name, b.String())
		}
	}
}

// A paused run's summary says when its accuracy was measured, if the
// run went on after its last evaluation.
func TestPausedReportSaysWhen(t *testing.T) {
	t.Parallel()
	s := &run.Summary{Algo: "asyrevel-gau", Dataset: "a9a", Parties: 8, Steps: 669, TestAccuracy: 0.5003, Interrupted: "paused by its operator",
		Curve: []aggregator.Point{{Steps: 0, TestAccuracy: 0.5003}}}
	var b bytes.Buffer
	report(&b, new(run.Defaults()), s, false)
	if !strings.Contains(b.String(), "test accuracy 50.03% at its last evaluation, after 0 of the 669 steps") {
		t.Errorf("%s", b.String())
	}
}

// The resume command is the same command line with --resume and the
// run's id, quoted for the shell; an earlier --run or --resume is dropped.
func TestResumeCommand(t *testing.T) {
	t.Parallel()
	got := resumeCommand("train", []string{"--data", "my data.csv", "--run=old", "--out", "o", "--resume", "--label", "it's"}, "20261128-1")
	want := `asyrevel train --data 'my data.csv' --out o --label 'it'\''s' --resume --run 20261128-1`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	dir := t.TempDir()
	for i, run := range []string{"b-newest", "a-older", "c-oldest"} {
		must(t, os.MkdirAll(filepath.Join(dir, run), 0o755))
		f := filepath.Join(dir, run, "aggregator.ckpt")
		must(t, os.WriteFile(f, []byte("x"), 0o600))
		at := time.Now().Add(-time.Duration(i) * time.Hour)
		must(t, os.Chtimes(f, at, at))
	}
	if last, _, err := lastRun(dir); err != nil || last != "b-newest" {
		t.Errorf("lastRun: %q, %v", last, err)
	}
	if _, _, err := lastRun(t.TempDir()); err == nil {
		t.Error("lastRun of an empty folder: no error")
	}
}

// startCommand runs the binary with args and a reader of its stderr lines.
type startedCommand struct {
	cmd    *exec.Cmd
	lines  chan string
	stderr *syncBuffer
	stdout *syncBuffer
}

func startBinary(t *testing.T, dir string, args ...string) *startedCommand {
	t.Helper()
	c := &startedCommand{cmd: exec.Command(testBinary(t), args...), lines: make(chan string, 1000), stderr: new(syncBuffer), stdout: new(syncBuffer)}
	c.cmd.Dir = dir
	c.cmd.Stdout = c.stdout
	pr, pw := io.Pipe()
	c.cmd.Stderr = io.MultiWriter(c.stderr, pw)
	must(t, c.cmd.Start())
	t.Cleanup(func() { c.cmd.Process.Kill(); c.cmd.Wait() })
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			select {
			case c.lines <- sc.Text():
			default:
			}
		}
		io.Copy(io.Discard, pr)
	}()
	go func() { c.cmd.Wait(); pw.Close() }()
	return c
}

// waitLine waits for a stderr line holding want (a generous bound: a
// busy machine only delays it).
func (c *startedCommand) waitLine(t *testing.T, want string) {
	t.Helper()
	deadline := time.After(3 * time.Minute)
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				t.Fatalf("no line with %q; stderr:\n%s", want, c.stderr.String())
			}
			if strings.Contains(l, want) {
				return
			}
		case <-deadline:
			t.Fatalf("no line with %q after 3 minutes; stderr:\n%s", want, c.stderr.String())
		}
	}
}

// interruptAndWait sends SIGINT and waits for the process to end.
func (c *startedCommand) interruptAndWait(t *testing.T) {
	t.Helper()
	must(t, c.cmd.Process.Signal(syscall.SIGINT))
	done := make(chan struct{})
	go func() {
		for range c.lines {
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		t.Fatalf("still running 3 minutes after SIGINT; stderr:\n%s", c.stderr.String())
	}
}

// Ctrl-C on train prints the exact command that goes on, the run's id
// included; train --resume without --run goes on with the last run of its
// --out and says which.
func TestResumeWithoutArchaeology(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("short")
	}
	dir := t.TempDir()
	args := []string{"train", "--data", "synthetic:n=20000,d=16,test=1000", "--parties", "3", "--duration", "10m", "--out", "out", "--privacy", "off", "--no-privacy-report"}
	c := startBinary(t, dir, args...)
	c.waitLine(t, "INF progress")
	c.interruptAndWait(t)
	m := regexp.MustCompile(`go on with:\n  (\S+) (train .* --resume --run (\S+))\n`).FindStringSubmatch(c.stderr.String())
	if m == nil {
		t.Fatalf("no resume command after Ctrl-C:\n%s", c.stderr.String())
	}
	var s struct{ Run string }
	if raw, err := readSummary(filepath.Join(dir, "out"), &s); err != nil || s.Run != m[3] {
		t.Fatalf("the command names run %q, summary.json %v %s", m[3], err, raw)
	}
	want := strings.Join(append(slices.Clone(args), "--resume", "--run", m[3]), " ")
	if m[2] != want {
		t.Errorf("command %q, want %q", m[2], want)
	}
	// The same command without --run, shorter: it takes the last run.
	code, _, errOut := runCLI(t, "train", "--data", "synthetic:n=20000,d=16,test=1000", "--parties", "3", "--steps", "10",
		"--out", filepath.Join(dir, "out"), "--privacy", "off", "--no-privacy-report", "--resume")
	if code != 0 || !strings.Contains(errOut, "--resume without --run: going on with run "+m[3]+", the last one in") {
		t.Errorf("train --resume without --run: exit %d:\n%s", code, errOut)
	}
}

// serve and broker say what is true when Ctrl-C stops them: no run is
// written.
func TestStopWordsServeBroker(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("short")
	}
	dir := t.TempDir()
	b := startBinary(t, dir, "broker", "--store", filepath.Join(dir, "store"), "--port", fmt.Sprint(freePort(t)))
	for deadline := time.Now().Add(patience); !strings.Contains(b.stdout.String(), "interrupt to stop"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the broker did not start: %s%s", b.stdout.String(), b.stderr.String())
		}
	}
	b.interruptAndWait(t)
	if e := b.stderr.String(); strings.Contains(e, "what the run has so far") || !strings.Contains(e, "its store keeps every stream") {
		t.Errorf("broker on Ctrl-C: %s", e)
	}
	// serve: a run's models, served, then interrupted.
	out := filepath.Join(dir, "run")
	writeTourCSV(t, filepath.Join(dir, "d.csv"))
	if code, _, errOut := runCLI(t, "train", "--data", filepath.Join(dir, "d.csv"), "--parties", "2", "--steps", "30", "--scale", "standard", "--out", out, "--privacy", "off", "--no-privacy-report"); code != 0 {
		t.Fatalf("train: %s", errOut)
	}
	s := startBinary(t, dir, "serve", "--models", filepath.Join(out, "models"), "--data", filepath.Join(dir, "d.csv"), "--listen", "127.0.0.1:0", "--insecure-no-auth")
	s.waitLine(t, "serving")
	s.interruptAndWait(t)
	if e := s.stderr.String(); strings.Contains(e, "what the run has so far") || !strings.Contains(e, "answering the requests in flight, then closing the service; nothing is written") {
		t.Errorf("serve on Ctrl-C: %s", e)
	}
}

// One missing-value policy: data inspect, data split, train and align read
// the same file the same way, refuse it in the same words until --missing
// says what to do, and say what they did in the same words.
func TestMissingOnePolicy(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "m.csv")
	var b strings.Builder
	b.WriteString("id,label,x,y\n")
	for i := range 60 {
		x := fmt.Sprintf("%.2f", float64(i%7)-3)
		if i%10 == 4 {
			x = ""
		}
		y := fmt.Sprint(i % 3)
		if i == 33 {
			y = "NA"
		}
		fmt.Fprintf(&b, "C%02d,%d,%s,%s\n", i, i%2, x, y)
	}
	must(t, os.WriteFile(file, []byte(b.String()), 0o644))
	// The other organisation of the alignment: every key, no gaps.
	other := filepath.Join(dir, "o.csv")
	var o strings.Builder
	o.WriteString("id,z\n")
	for i := range 60 {
		fmt.Fprintf(&o, "c%02d,%d\n", i, i%5)
	}
	must(t, os.WriteFile(other, []byte(o.String()), 0o644))
	refused := `line 6, column 3 ("x"): an empty cell: say how to fill it: --missing zero (read as 0) or --missing drop (leave such rows out)`
	alignArgs := []string{"align", "--inputs", file + "," + other, "--key", "id", "--label", "label", "--progress", "0"}
	trainArgs := []string{"train", "--data", file, "--parties", "2", "--steps", "20", "--privacy", "off", "--no-privacy-report"}
	splitArgs := []string{"data", "split", "--parties", "2", "--out", filepath.Join(dir, "s"), file}
	for name, args := range map[string][]string{"align": append(slices.Clone(alignArgs), "--out", filepath.Join(dir, "a0")), "train": trainArgs, "split": splitArgs} {
		if code, _, errOut := runCLI(t, args...); code == 0 || !strings.Contains(errOut, refused) {
			t.Errorf("%s without --missing: exit %d, want %q in:\n%s", name, code, refused, errOut)
		}
	}
	code, out, errOut := runCLI(t, "data", "inspect", file)
	if code != 0 || !strings.Contains(out, "7 missing values in 7 rows: data split, train and align refuse the file until told what to do: --missing zero (read them as 0) or --missing drop (leave the 7 rows out)") {
		t.Errorf("inspect: exit %d: %s%s", code, out, errOut)
	}
	did := map[string]string{
		"zero": "7 missing values in 7 rows, read as 0 (--missing zero",
		"drop": "7 missing values in 7 rows, those 7 rows left out (--missing drop)",
	}
	for policy, words := range did {
		for name, args := range map[string][]string{
			"inspect": {"data", "inspect", "--missing", policy, file},
			"split":   append(slices.Clone(splitArgs[:len(splitArgs)-1]), "--missing", policy, file),
			"train":   append(slices.Clone(trainArgs), "--missing", policy),
			"align":   append(slices.Clone(alignArgs), "--missing", policy, "--out", filepath.Join(dir, "a-"+policy)),
		} {
			code, out, errOut := runCLI(t, args...)
			if code != 0 || !strings.Contains(out+errOut, words) {
				t.Errorf("%s --missing %s: exit %d, want %q in:\n%s%s", name, policy, code, words, out, errOut)
			}
		}
	}
	// align --missing drop leaves those rows out of the intersection.
	l, err := dataset.LoadLabels(filepath.Join(dir, "a-drop", "labels.train.gz"))
	if err != nil || len(l.IDs) != 53 {
		t.Errorf("align --missing drop: %v, %d rows, want 53", err, len(l.IDs))
	}
}

// align keeps the label holder's own feature columns as the last party's
// block by default (it runs that party for them); with
// --label-holder-party=false they are left out. The folder's layout, the
// party file's column and the keys as written follow.
func TestAlignLabelHolderBlock(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bank := filepath.Join(dir, "bank.csv")
	p1 := filepath.Join(dir, "p1.csv")
	var b, p strings.Builder
	b.WriteString("id,churned,balance\n")
	p.WriteString("id,visits\n")
	for i := range 40 {
		fmt.Fprintf(&b, "CUST-%03d,%d,%d\n", 39-i, i%2, 1000+i)
		fmt.Fprintf(&p, "cust-%03d,%d\n", i, i%6)
	}
	must(t, os.WriteFile(bank, []byte(b.String()), 0o644))
	must(t, os.WriteFile(p1, []byte(p.String()), 0o644))
	out := filepath.Join(dir, "a")
	code, stdout, errOut := runCLI(t, "align", "--inputs", bank+","+p1, "--key", "id", "--label", "churned", "--out", out, "--progress", "0")
	if code != 0 || !strings.Contains(errOut, "the label holder's feature column balance is party 2's block: the label holder runs party 2 for its own features") {
		t.Fatalf("exit %d:\n%s%s", code, stdout, errOut)
	}
	man, err := dataset.ReadManifest(out)
	if err != nil || man.Q != 2 || man.Features != 2 {
		t.Fatalf("manifest: %v %+v", err, man)
	}
	party, err := dataset.LoadPartyFile(filepath.Join(out, "party-2.train.gz"))
	if err != nil || !slices.Equal(party.Names, []string{"balance"}) || party.X.NRows != 40 {
		t.Fatalf("party 2: %v %+v", err, party)
	}
	for i, id := range party.IDs {
		// Its row of bank.csv: CUST-039 is the first.
		var n int
		fmt.Sscanf(id, "cust-%d", &n)
		if _, v := party.X.Row(i); len(v) != 1 || v[0] != float32(1000+39-n) {
			t.Errorf("party 2's %s: %v, want %d", id, v, 1000+39-n)
		}
	}
	keys := readCSVFile(t, filepath.Join(out, "keys.csv.gz"))
	if len(keys) != 41 || !slices.Equal(keys[0], []string{"id", "row", "key"}) {
		t.Fatalf("keys.csv.gz: %q", keys[:min(3, len(keys))])
	}
	for _, k := range keys[1:] {
		var n, row int
		fmt.Sscanf(k[0], "cust-%d", &n)
		fmt.Sscanf(k[1], "%d", &row)
		if k[2] != fmt.Sprintf("CUST-%03d", n) || row != 39-n {
			t.Errorf("keys.csv.gz: %q", k)
		}
	}
	code, _, errOut = runCLI(t, "align", "--inputs", bank+","+p1, "--key", "id", "--label", "churned", "--out", filepath.Join(dir, "b"), "--progress", "0", "--label-holder-party=false")
	if man, err := dataset.ReadManifest(filepath.Join(dir, "b")); code != 0 || err != nil || man.Q != 1 || !strings.Contains(errOut, "left out (--label-holder-party=false)") {
		t.Errorf("--label-holder-party=false: exit %d, %v, %+v: %s", code, err, man, errOut)
	}
}

// Models trained on an alignment score its folder as the organisations
// wrote their rows: predict on a folder without a test set reads its
// training set (it said "no test file for party 1"), predictions.csv
// lists the label holder's keys as written in its file's order with the
// true label; party --serve and predict --separate read align folders too.
func TestScoreAlignFolder(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeJourneyFiles(t, dir)
	in := func(names ...string) string {
		for i, n := range names {
			names[i] = filepath.Join(dir, n)
		}
		return strings.Join(names, ",")
	}
	aligned := filepath.Join(dir, "aligned")
	if code, _, errOut := runCLI(t, "align", "--inputs", in("bank.csv", "telecom.csv", "retail.csv"), "--key", "customer_id", "--label", "churned",
		"--categorical", "segment", "--missing", "zero", "--out", aligned, "--progress", "0"); code != 0 {
		t.Fatalf("align: %s", errOut)
	}
	out := filepath.Join(dir, "out")
	if code, _, errOut := runCLI(t, "train", "--data", aligned, "--scale", "standard", "--steps", "200", "--out", out, "--privacy", "off", "--no-privacy-report", "--log", "warn"); code != 0 {
		t.Fatalf("train: %s", errOut)
	}
	pred := filepath.Join(dir, "p.csv")
	code, stdout, errOut := runCLI(t, "predict", "--models", filepath.Join(out, "models"), "--data", aligned, "--out", pred, "--bus", "memory", "--timeout", "2m")
	if code != 0 || !strings.Contains(errOut, "scoring the train set of") || !strings.Contains(stdout, "1120 rows scored") {
		t.Fatalf("predict on an alignment without a test set: exit %d:\n%s%s", code, stdout, errOut)
	}
	recs := readCSVFile(t, pred)
	if !slices.Equal(recs[0], []string{"id", "label", "predicted", "p_0", "p_1"}) || len(recs) != 1121 {
		t.Fatalf("predictions: %q, %d lines", recs[0], len(recs))
	}
	bank := readCSVFile(t, filepath.Join(dir, "bank.csv"))
	next := 1
	for _, rec := range recs[1:] {
		for next < len(bank) && bank[next][0] != rec[0] {
			next++
		}
		if next == len(bank) {
			t.Fatalf("predictions: %q is not next in bank.csv's order (ids as written)", rec[0])
		}
		if rec[1] != bank[next][1] {
			t.Errorf("predictions: %s has label %s, bank.csv %s", rec[0], rec[1], bank[next][1])
		}
	}
	// New rows, one command: the same columns read by name.
	code, stdout, errOut = runCLI(t, "predict", "--models", filepath.Join(out, "models"), "--inputs", in("bank_new.csv", "telecom_new.csv", "retail_new.csv"),
		"--key", "customer_id", "--categorical", "segment", "--missing", "zero", "--out", filepath.Join(dir, "n.csv"), "--bus", "memory", "--timeout", "2m")
	if code != 0 || !strings.Contains(stdout, "140 of the label holder's 150 rows are held by every organisation; the label holder's own columns are party 3's") {
		t.Errorf("predict --inputs: exit %d:\n%s%s", code, stdout, errOut)
	}
	// Without --categorical, the categories are not known: refused.
	if code, _, errOut := runCLI(t, "predict", "--models", filepath.Join(out, "models"), "--inputs", in("bank_new.csv", "telecom_new.csv", "retail_new.csv"),
		"--key", "customer_id", "--missing", "zero", "--out", filepath.Join(dir, "x.csv"), "--bus", "memory"); code == 0 || !strings.Contains(errOut, "segment") {
		t.Errorf("predict --inputs without --categorical: exit %d: %s", code, errOut)
	}
	// Separate processes on the folder: party --serve and predict --separate.
	if testing.Short() {
		return
	}
	port := freePort(t)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bctx, bcancel := context.WithCancel(ctx)
	brokerDone := make(chan struct{})
	go func() {
		defer close(brokerDone)
		runCLICtx(bctx, "broker", "--store", filepath.Join(dir, "store"), "--port", fmt.Sprint(port))
	}()
	for deadline := time.Now().Add(patience); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the broker did not start")
		}
	}
	parties := make(chan struct{}, 3)
	pctx, pcancel := context.WithCancel(ctx)
	for m := 1; m <= 3; m++ {
		go func() {
			defer func() { parties <- struct{}{} }()
			runCLICtx(pctx, "party", "--serve", "--models", filepath.Join(out, "models"), "--id", fmt.Sprint(m), "--data", aligned, "--nats", url, "--log", "warn")
		}()
	}
	sep := filepath.Join(dir, "sep.csv")
	code, stdout, errOut = runCLICtx(ctx, "predict", "--separate", "--models", filepath.Join(out, "models"), "--data", aligned, "--nats", url, "--out", sep, "--wait", "2m")
	pcancel()
	for range 3 {
		<-parties
	}
	bcancel()
	<-brokerDone
	if code != 0 {
		t.Fatalf("predict --separate on the folder: exit %d:\n%s%s", code, stdout, errOut)
	}
	if a, b := readCSVFile(t, sep), recs; len(a) != len(b) || !slices.EqualFunc(a, b, func(x, y []string) bool { return x[0] == y[0] && x[1] == y[1] }) {
		t.Errorf("predict --separate: %d lines, %q...; in one process %d, %q...", len(a), a[:min(3, len(a))], len(b), b[:3])
	}
}
