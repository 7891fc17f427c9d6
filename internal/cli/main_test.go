package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// labelled is the --privacy of the tests of the labelled exchange (steps,
// replies, their audit, resume, outages): the paper's replies. The
// default's label-free profile sends no request, and the budget profile
// ends a run once its budget is spent, which a test that interrupts a
// run at a time of its choosing cannot have.
const labelled = "off"

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = execute(context.Background(), args, &o, &e)
	return code, o.String(), e.String()
}

// readSummary decodes out/summary.json into v and returns its bytes (for
// failure messages).
func readSummary(out string, v any) ([]byte, error) {
	raw, err := os.ReadFile(filepath.Join(out, "summary.json"))
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return raw, fmt.Errorf("summary.json: %w", err)
	}
	return raw, nil
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "Usage"},
		{[]string{"frobnicate"}, 2, "unknown command"},
		{[]string{"train"}, 2, "--data is required"},
		{[]string{"train", "--data", "synthetic", "--parties", "0"}, 2, "parties"},
		{[]string{"train", "--data", "synthetic", "--algo", "sgd"}, 2, "available"},
		{[]string{"train", "--data", "synthetic", "--bogus"}, 2, "bogus"},
		{[]string{"train", "--data", "synthetic:n=abc"}, 2, "synthetic"},
		{[]string{"train", "--data", "/nonexistent/file", "--duration", "1s"}, 1, "nonexistent"},
		{[]string{"party", "--data", "synthetic"}, 2, "--nats"},
		{[]string{"train", "--data", "synthetic", "--parties", "2", "--steps", "5", "--run", "r", "--resume"}, 2, "needs the run's keys"},
		{[]string{"data", "inspect"}, 2, "PATH"},
		{[]string{"experiment", "nope"}, 2, "unknown experiment"},
		{[]string{"train", "--data", "synthetic", "--algo", "tig", "--model", "external", "--model-cmd", "x"}, 2, "black box"},
		{[]string{"train", "--data", "synthetic", "--algo", "nonf", "--parties", "3"}, 2, "--parties 1"},
		{[]string{"train", "--data", "synthetic", "--algo", "synrevel-gau", "--window", "4"}, 2, "--window 1"},
		{[]string{"train", "--data", "synthetic", "--straggler", "2"}, 2, "PARTY:FACTOR"},
		{[]string{"experiment", "fig3", "--sets", "nope"}, 2, "available"},
		{[]string{"experiment", "fig4", "--qs", "0"}, 2, "positive"},
		{[]string{"experiment", "table4", "extra"}, 2, "unexpected argument"},
		{[]string{"help"}, 0, "asyrevel train"},
	}
	for _, tc := range cases {
		code, out, errOut := runCLI(t, tc.args...)
		if code != tc.code || !strings.Contains(out+errOut, tc.want) {
			t.Errorf("%v: exit %d, want %d; output %q does not mention %q", tc.args, code, tc.code, out+errOut, tc.want)
		}
	}
}

func TestTrainWritesOutputs(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	code, stdout, stderr := runCLI(t, "train", "--data", "synthetic:n=3000,d=16,test=500,noise=0.02", "--parties", "4",
		"--batch", "16", "--window", "2", "--epochs", "20", "--out", out, "--log", "warn")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "test accuracy") || !strings.Contains(stdout, filepath.Join(out, "curve.png")) {
		t.Fatalf("report lacks the accuracy or the plot: %s", stdout)
	}
	var s map[string]any
	if _, err := readSummary(out, &s); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"algo", "dataset", "parties", "steps", "wall_seconds", "train_loss", "test_accuracy",
		"messages_up", "messages_down", "bytes_up", "bytes_down", "max_staleness"} {
		if _, ok := s[k]; !ok {
			t.Errorf("summary.json lacks %q", k)
		}
	}
	csv, err := os.ReadFile(filepath.Join(out, "curve.csv"))
	if err != nil || !strings.HasPrefix(string(csv), "seconds,steps,train_loss,test_accuracy") {
		t.Fatalf("curve.csv: %v %q", err, csv)
	}
}

// TestSeparateProcesses runs a broker, an aggregator and three parties as
// separate processes of the real binary, talking over TCP loopback.
func TestSeparateProcesses(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("short")
	}
	bin := testBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	broker := exec.CommandContext(ctx, bin, "broker", "--store", t.TempDir(), "--port", "0")
	stdout, _ := broker.StdoutPipe()
	if err := broker.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { broker.Process.Signal(os.Interrupt); broker.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(line)
	if len(f) < 4 || !strings.HasPrefix(f[3], "nats://") {
		t.Fatalf("broker said %q", line)
	}
	url := f[3]
	common := []string{"--nats", url, "--run", "procs", "--privacy", "off", "--parties", "3", "--data", "synthetic:n=3000,d=12,test=500,noise=0.02",
		"--batch", "16", "--log", "warn", "--checkpoint-dir", t.TempDir()}
	var parties []*exec.Cmd
	for _, id := range []string{"1", "2", "3"} {
		p := exec.CommandContext(ctx, bin, append([]string{"party", "--id", id, "--window", "2"}, common...)...)
		p.Stderr = os.Stderr
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		parties = append(parties, p)
	}
	out := t.TempDir()
	agg := exec.CommandContext(ctx, bin, append([]string{"aggregator", "--epochs", "15", "--out", out}, common...)...)
	res, err := agg.CombinedOutput()
	if err != nil {
		t.Fatalf("aggregator: %v\n%s", err, res)
	}
	for _, p := range parties {
		if err := p.Wait(); err != nil {
			t.Errorf("party: %v", err)
		}
	}
	var s struct {
		Acc    float64 `json:"test_accuracy"`
		Steps  int64   `json:"steps"`
		Stream struct {
			Out   int64 `json:"out"`
			Reply int64 `json:"reply"`
		} `json:"stream"`
		Outputs int64 `json:"outputs"`
		Replies int64 `json:"replies"`
	}
	if _, err := readSummary(out, &s); err != nil {
		t.Fatalf("summary: %v\n%s", err, res)
	}
	t.Logf("%s", res)
	if s.Acc < 0.9 || s.Steps == 0 || s.Stream.Out != s.Outputs || s.Stream.Reply != s.Replies {
		t.Fatalf("separate processes: %+v", s)
	}
}
