package run

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/aggregator"
	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/party"
)

// TestResumeAggregatorBatches resumes defended runs whose batches the
// aggregator draws (--aggregator-batches, clipped noised batch means
// under a per-label budget): the binary profile's replies, and the
// softmax head's bounded profile (--privacy auc=0.6: first-order head
// with its label part released --head-refresh times an epoch). The
// aggregator and party 2 are put back to their first checkpoints, as if
// killed -9 right after them, and the run resumed: it must train on, no
// request may be refused as not the aggregator's draw, every reply
// computed again from the stream must be the recorded one (the defense's
// noise and the head's released label part are in the checkpoint), and
// the accounting must hold the budget (a label's budget is never
// undercharged: the resumed run's worst rho is at least the first
// part's).
func TestResumeAggregatorBatches(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	for _, tc := range []struct {
		name   string
		minAcc float64 // the softmax profile is tuned for the MLP on MNIST, not this linear model (chance 0.25)
		set    func(c *Config)
	}{
		// Both on 40000 rows: the runs stop once the budget is spent (a
		// few thousand steps on 4000 rows, under the 1.2 s before the
		// interrupt on a fast machine); ten times the rows keep it far.
		{"binary", 0.7, func(c *Config) {
			c.Synthetic = &dataset.SyntheticConfig{Samples: 40000, TestSamples: 1000, Features: 24, Classes: 2, Noise: 0.02, Seed: 3}
			c.NoBias = true
			c.Defense = DefenseConfig{Reply: "mean", MinBatch: 32, MaxPerturb: c.Mu, NoiseMultiplier: 12, DPAUC: 0.6, DrawBatches: true}
		}},
		// 0.45 to 0.51 after its 8000 steps: 0.35 tells learning from
		// chance (0.25).
		{"softmax profile", 0.35, func(c *Config) {
			c.Synthetic = &dataset.SyntheticConfig{Samples: 40000, TestSamples: 1000, Features: 24, Classes: 4, Noise: 0.02, Seed: 3}
			c.Privacy = "auc=0.6,profile=budget"
			c.Batch = 128
			c.Explicit = map[string]bool{"batch": true}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := t.TempDir()
			cfg := New(func(c *Config) {
				c.Parties = 4
				c.Algo = "asyrevel-gau"
				c.Batch = 32
				c.Window = 2
				// A length in steps, not seconds: the accuracy floors
				// below must not depend on how busy the machine is.
				c.Duration = 0
				c.MaxSteps = 8000
				c.Seed = 1
				c.Out = out
				c.Run = "resume-draws"
				c.EvalEvery = 200 * time.Millisecond
				c.CheckpointDir = filepath.Join(out, "ck")
				c.CheckpointEvery = 300 * time.Millisecond
				tc.set(c)
			})
			resumeDefended(t, cfg, tc.minAcc)
		})
	}
}

func resumeDefended(t *testing.T, cfg Config, minAcc float64) {
	t.Helper()
	// The first checkpoints of the aggregator and party 2 are kept as
	// they are saved (the run's hooks), and the run is interrupted at the
	// second evaluation after both: events, not times, which a busy host
	// moves.
	aggCk, ck2 := newKeptFile(), newKeptFile()
	keep2 := func(m int, _ *party.Checkpoint) {
		if m == 2 {
			ck2.take(CheckpointPath(cfg.CheckpointDir, cfg.Run, 2))
		}
	}
	keepAgg := func(*aggregator.Checkpoint) { aggCk.take(CheckpointPath(cfg.CheckpointDir, cfg.Run, 0)) }
	ctx, cancel := context.WithCancelCause(context.Background())
	onPoint := interruptOnPoints(func() bool { return aggCk.kept() && ck2.kept() }, cancel)
	s1, err := Train(ctx, cfg, Hooks{Log: testLog(t), onPartyCheckpoint: keep2, onAggCheckpoint: keepAgg, OnPoint: onPoint})
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("first part: %v", err)
	}
	if s1.Defense == nil || !s1.Defense.DrawBatches || s1.Defense.Accounting == nil || s1.Defense.Budget <= 0 {
		t.Fatalf("first part's defense: %+v", s1.Defense)
	}
	for who, k := range map[int]*keptFile{0: aggCk, 2: ck2} {
		b, err := k.file()
		if err != nil {
			t.Fatalf("participant %d: %v", who, err)
		}
		if err := os.WriteFile(CheckpointPath(cfg.CheckpointDir, cfg.Run, who), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg.Resume = true
	s2, err := Train(context.Background(), cfg, Hooks{Log: testLog(t)})
	if err != nil {
		t.Fatalf("resumed: %v", err)
	}
	d, r := s2.Defense, s2.Resumed
	if d == nil || d.Accounting == nil || r == nil {
		t.Fatalf("resumed run: defense %+v, recovery %+v", d, r)
	}
	a, a1 := d.Accounting, s1.Defense.Accounting
	t.Logf("first part %d steps (rho %.4g); resumed from step %d: %d applied again (%d mismatched); %d steps, accuracy %.4f; undrawn %d, masked %d, head releases %d, rejected %v, late evaluation chunks %d; max rho %.4g (budget %.4g), AUC bound %.4f, max visits %d",
		s1.Steps, a1.MaxRho, r.FromSteps, r.Reapplied, r.Mismatched, s2.Steps, s2.TestAccuracy, d.UndrawnBatches, d.Masked, d.HeadRefreshes, s2.Rejected, s2.LateEvals, a.MaxRho, d.Budget, a.AUCBound, a.MaxVisits)
	if d.UndrawnBatches != 0 {
		t.Errorf("the aggregator refused %d requests as not its draws after the resume", d.UndrawnBatches)
	}
	for k, n := range s2.Rejected {
		if !strings.Contains(k, "eval") {
			t.Errorf("rejected %d messages as %s", n, k)
		}
	}
	if r.Reapplied == 0 || r.Mismatched != 0 || r.Missing != 0 || r.Duplicated != 0 {
		t.Errorf("recovery: %+v", r)
	}
	if s2.Steps <= s1.Steps {
		t.Errorf("the resumed run did not train on: %d steps after %d", s2.Steps, s1.Steps)
	}
	if a.MaxRho > d.Budget*(1+1e-9) || a.AUCBound > 0.6+1e-9 || a.MaxRho < a1.MaxRho {
		t.Errorf("accounting: rho %g of %g (first part %g), AUC bound %g", a.MaxRho, d.Budget, a1.MaxRho, a.AUCBound)
	}
	if b := s2.Bound(); b.AUC > 0.6+1e-9 {
		t.Errorf("privacy.json bound %+v", b)
	}
	if s2.TestAccuracy < minAcc {
		t.Errorf("accuracy %.4f", s2.TestAccuracy)
	}
}
