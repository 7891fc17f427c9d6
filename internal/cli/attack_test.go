package cli

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The curious aggregator's feature inference reads a label-free run's log
// (the default privacy): its parties send their codes and no request, and
// the attack reads the codes; a label attack says that there is nothing
// to read instead of failing obscurely.
func TestAttackFeatureLabelFreeCLI(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	data := "synthetic:n=1200,d=12,test=200,noise=0.02"
	code, stdout, stderr := runCLI(t, "train", "--data", data, "--parties", "3", "--epochs", "5", "--run", "lf",
		"--out", out, "--log", "warn")
	if code != 0 {
		t.Fatalf("train: exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "label-free") {
		t.Fatalf("the default privacy did not choose the label-free profile: %s", stdout)
	}
	store, at := filepath.Join(out, "stream"), t.TempDir()
	code, stdout, stderr = runCLI(t, "attack", "feature", "--store", store, "--run", "lf", "--as", "0", "--target", "2",
		"--aux", "50", "--truth", data, "--out", at)
	if code != 0 || !strings.Contains(stdout, "R squared") {
		t.Errorf("feature on a label-free log: exit %d: %s %s", code, stdout, stderr)
	}
	code, _, stderr = runCLI(t, "attack", "regression", "--store", store, "--run", "lf", "--as", "2", "--truth", data, "--out", at)
	if code == 0 || !strings.Contains(stderr, "sent no requests") {
		t.Errorf("a label attack on a label-free log: exit %d: %s", code, stderr)
	}
}

// TrainConfig is asyrevel train's parser for the lab's goal rows: the
// flags as the command reads them, a usage error as the command's.
func TestLabTrainConfig(t *testing.T) {
	t.Parallel()
	c, err := TrainConfig([]string{"--data", "synthetic:n=100", "--parties", "3", "--duration", "20s", "--privacy", "off"})
	if err != nil || c.Parties != 3 || c.Duration != 20*time.Second || c.Privacy != "off" {
		t.Errorf("parties %d, duration %v, privacy %q: %v", c.Parties, c.Duration, c.Privacy, err)
	}
	for _, bad := range [][]string{{"--data", "synthetic:n=100", "--patience", "-1"}, {"--no-such-flag"}} {
		if _, err := TrainConfig(bad); !errors.Is(err, ErrUsage) {
			t.Errorf("%v: %v, want a usage error", bad, err)
		}
	}
}
