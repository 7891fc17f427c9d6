package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// "asyrevel experiment report" writes, from the committed CSV files, the
// committed REPORT.md byte for byte; a CSV file it cannot read is named and
// makes it exit 1 after writing the rest.
func TestExperimentReport(t *testing.T) {
	t.Parallel()
	_, file, _, _ := runtime.Caller(0)
	results := filepath.Join(filepath.Dir(file), "..", "..", "results")
	out := filepath.Join(t.TempDir(), "REPORT.md")
	code, stdout, stderr := runCLI(t, "experiment", "report", "--results", results, "--out", out)
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, stdout, stderr)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(results, "REPORT.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("results/REPORT.md is not what `asyrevel experiment report` writes from results/*.csv: run it and commit the result")
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(out), "REPORT-privacy.md")); err != nil {
		t.Errorf("the privacy report is not beside --out: %v", err)
	}

	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "table3.csv"), []byte("set,method\na9a,TIG\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = runCLI(t, "experiment", "report", "--results", bad)
	if code != 1 || !strings.Contains(stderr, "table3.csv has no column") || !strings.Contains(stdout, "REPORT.md") {
		t.Errorf("an unreadable CSV: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, _, stderr := runCLI(t, "experiment", "report", "--nope"); code != 2 {
		t.Errorf("an unknown flag: exit %d %s", code, stderr)
	}
}

// Experiments write under out/experiments unless told otherwise: run from
// a clone, none touches the committed results/ (table4 --from-trials, which
// runs nothing, shows where an experiment reads and writes by default).
func TestExperimentsDefaultOut(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := runCLI(t, "experiment", "table4", "--from-trials")
	if code != 2 || !strings.Contains(stdout+stderr, "no table4.csv in out/experiments") {
		t.Errorf("exit %d: %s%s", code, stdout, stderr)
	}
}
