package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// The key acceptance test of saved models: train on a9a, then predict its
// test set with the saved models through the broker: the accuracy is the
// run's test_accuracy to the last digit, and predictions.csv has one row
// per test row, in order.
func TestTrainThenPredictA9A(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	data := filepath.Join(filepath.Dir(file), "..", "..", "..", "shared", "data", "a9a")
	if _, err := os.Stat(filepath.Join(data, "a9a.gz")); err != nil {
		t.Skipf("a9a not available (%v): the shared data set beside the repository is needed", err)
	}
	out := t.TempDir()
	code, stdout, stderr := runCLI(t, "train", "--data", filepath.Join(data, "a9a.gz"), "--test", filepath.Join(data, "a9a.t.gz"),
		"--parties", "8", "--steps", "3000", "--out", out, "--log", "warn")
	if code != 0 {
		t.Fatalf("train: exit %d\n%s\n%s", code, stdout, stderr)
	}
	var sum struct {
		TestAccuracy float64 `json:"test_accuracy"`
		TestLoss     float64 `json:"test_loss"`
	}
	if raw, err := readSummary(out, &sum); err != nil {
		t.Fatalf("%v\n%s", err, raw)
	}
	pred := filepath.Join(out, "predictions.csv")
	code, stdout, stderr = runCLI(t, "predict", "--models", filepath.Join(out, "models"), "--data", filepath.Join(data, "a9a.t.gz"), "--out", pred, "--log", "warn")
	if code != 0 {
		t.Fatalf("predict: exit %d\n%s\n%s", code, stdout, stderr)
	}
	var m struct {
		Rows     int     `json:"rows"`
		Accuracy float64 `json:"accuracy"`
		LogLoss  float64 `json:"log_loss"`
		AUC      float64 `json:"auc"`
		Signed   bool    `json:"signed"`
	}
	raw, err := os.ReadFile(filepath.Join(out, "predictions.metrics.json"))
	if err == nil {
		err = json.Unmarshal(raw, &m)
	}
	if err != nil {
		t.Fatal(err)
	}
	if m.Accuracy != sum.TestAccuracy {
		t.Errorf("predict's accuracy %v, the run's test_accuracy %v: they must be equal", m.Accuracy, sum.TestAccuracy)
	}
	if d := m.LogLoss - sum.TestLoss; d > 1e-12 || d < -1e-12 {
		t.Errorf("predict's log loss %v, the run's test_loss %v", m.LogLoss, sum.TestLoss)
	}
	if m.Rows != 16281 || !m.Signed || m.AUC < 0.8 {
		t.Errorf("metrics %s: want 16281 rows, signed, a useful AUC", raw)
	}
	csv, err := os.ReadFile(pred)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(csv)), "\n")
	if len(lines) != 16282 || lines[0] != "id,label,p_-1,p_1" || !strings.HasPrefix(lines[1], "0,") || !strings.HasPrefix(lines[16281], "16280,") {
		t.Errorf("predictions.csv: %d lines, header %q, first %q, last %q", len(lines), lines[0], lines[1], lines[len(lines)-1])
	}
	if !strings.Contains(stdout, "accuracy ") {
		t.Errorf("predict prints no accuracy:\n%s", stdout)
	}
	// Another run's model among them is refused with a clear error.
	other := t.TempDir()
	code, _, stderr = runCLI(t, "train", "--data", filepath.Join(data, "a9a.t.gz"), "--parties", "8", "--steps", "100", "--out", other, "--log", "warn")
	if code != 0 {
		t.Fatalf("second train: %s", stderr)
	}
	mixed := t.TempDir()
	for _, name := range []string{"aggregator.model", "party-1.model", "party-2.model", "party-3.model", "party-4.model", "party-5.model", "party-6.model", "party-7.model"} {
		copyFile(t, filepath.Join(out, "models", name), filepath.Join(mixed, name))
	}
	copyFile(t, filepath.Join(other, "models", "party-8.model"), filepath.Join(mixed, "party-8.model"))
	code, _, stderr = runCLI(t, "predict", "--models", mixed, "--data", filepath.Join(data, "a9a.t.gz"), "--out", filepath.Join(mixed, "p.csv"))
	if code != 1 || !strings.Contains(stderr, "party-8.model is from run") {
		t.Errorf("a model of another run: exit %d, %s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(mixed, "p.csv")); err == nil {
		t.Error("predictions written despite the refusal")
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
