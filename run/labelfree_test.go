package run

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/replay"
	"github.com/asyrevel/asyrevel/schemas"
)

// partyView is every message of a run's log that a party sends or
// receives, by subject, in stream order, as payload bytes; the
// checkpoints' seals are left out (they hash the log with the time), and
// the join's call nonce (fresh at every start, whatever the labels) is
// blanked.
func partyView(t *testing.T, store, run string) map[string][][]byte {
	t.Helper()
	ctx := context.Background()
	l, err := replay.Open(ctx, replay.Source{Store: store, Run: run})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	view := map[string][][]byte{}
	err = l.Each(ctx, replay.ReadOptions{}, func(r *replay.Record) error {
		if r.Err != nil {
			return fmt.Errorf("record %d on %s: %w", r.Seq, r.Subject, r.Err)
		}
		if r.Receipt {
			return nil // a party's countersignature of a seal
		}
		if c := r.Control(); c != nil && c.Op == schemas.CtlSeal {
			return nil
		}
		data := bytes.Clone(r.Data)
		subject := r.Subject
		if c := r.Control(); c != nil && c.Op == schemas.CtlCall {
			// The calls go out in the order the hellos came, which the
			// scheduler decides: kept as a set.
			x := *c
			x.Reason, x.Seq = "", 0
			data = encode(t, &x)
			subject = "calls"
		}
		if h := r.Hello(); h != nil && h.Call != "" && h.Call != schemas.CallAsked {
			x := *h
			x.Call = "called"
			data = encode(t, &x)
		}
		view[subject] = append(view[subject], data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(view["calls"], bytes.Compare)
	return view
}

// In a label-free run no message that reaches a party depends on a label:
// the same run with its training labels shuffled sends the parties the
// very same bytes, on every subject, while the aggregator's head (which
// reads the labels) comes out different. A label-dependent message sent
// to a party (a reply, a stop whose time or words follow the labels)
// fails this test.
func TestLabelFreeViewIgnoresLabels(t *testing.T) {
	skipComputeUnderRace(t)
	base := func(out string) Config {
		return New(func(c *Config) {
			c.Synthetic = &dataset.SyntheticConfig{Samples: 3000, TestSamples: 600, Features: 24, Classes: 3, Noise: 0.05, Seed: 7}
			c.Parties = 3
			c.Privacy = DefaultPrivacy
			c.PrivacyDefault = true
			c.Seed = 5
			c.Run = "lfview"
			c.Out = out
		})
	}
	run := func(shuffle bool) (*Summary, map[string][][]byte) {
		out := t.TempDir()
		cfg := base(out)
		if err := cfg.Prepare(); err != nil {
			t.Fatal(err)
		}
		data, err := LoadData(&cfg, RoleAll)
		if err != nil {
			t.Fatal(err)
		}
		if shuffle {
			y := slices.Clone(data.TrainY)
			rand.New(rand.NewPCG(1, 2)).Shuffle(len(y), func(i, j int) { y[i], y[j] = y[j], y[i] })
			if slices.Equal(y, data.TrainY) {
				t.Fatal("the shuffle left the labels as they were")
			}
			data.TrainY = y
		}
		s, err := Train(context.Background(), cfg, Hooks{Log: testLog(t), Loaded: data})
		if err != nil {
			t.Fatal(err)
		}
		if s.Privacy == nil || s.Privacy.Profile != "label-free" || s.LabelFree == nil {
			t.Fatalf("the default privacy did not choose the label-free profile: %+v", s.Privacy)
		}
		return s, partyView(t, filepath.Join(out, "stream"), "lfview")
	}
	s1, v1 := run(false)
	s2, v2 := run(true)
	if s1.TestAccuracy < s2.TestAccuracy+0.1 {
		t.Errorf("test accuracy %.3f with the labels, %.3f shuffled: the head should learn from the labels, and not from shuffled ones", s1.TestAccuracy, s2.TestAccuracy)
	}
	if len(v1) == 0 {
		t.Fatal("the log holds nothing a party saw")
	}
	for subj, msgs := range v1 {
		other := v2[subj]
		if len(other) != len(msgs) {
			t.Errorf("%s: %d messages, %d with the labels shuffled", subj, len(msgs), len(other))
			continue
		}
		for i := range msgs {
			if !bytes.Equal(msgs[i], other[i]) {
				t.Errorf("%s: message %d differs when the labels are shuffled", subj, i)
			}
		}
	}
	for subj := range v2 {
		if _, ok := v1[subj]; !ok {
			t.Errorf("%s: only the run with shuffled labels has it", subj)
		}
	}
	// And the bound the run states is chance, for one party and for all.
	if b := s1.Bound(); b.AUC != 0.5 || b.AUCAll != 0.5 {
		t.Errorf("bound %+v, want AUC 0.5 for one party and all", b)
	}
}

// A budget-profile run whose per-label budget is spent stops by itself,
// with stopped_by naming the budget, instead of idling to its length on
// exact zeros (its parties' models could not move any more).
func TestSpentBudgetStopsTheRun(t *testing.T) {
	s, err := Train(context.Background(), New(func(c *Config) {
		c.Synthetic = &dataset.SyntheticConfig{Samples: 2000, TestSamples: 400, Features: 16, Classes: 2, Noise: 0.02, Seed: 3}
		c.Parties = 2
		c.Privacy = "auc=0.6,profile=budget"
		c.Duration = 2 * time.Minute // only against a hang: the budget ends it in 219 steps
		c.Seed = 2
	}), Hooks{Log: testLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	if s.StoppedBy != "budget" {
		t.Fatalf("stopped by %q after %.1f s (%d steps), want the budget", s.StoppedBy, s.TrainSeconds, s.Steps)
	}
	if b := s.Bound(); b.AUC > 0.6 || b.AUC <= 0.5 {
		t.Errorf("bound %+v after the budget was spent", b)
	}
	if !strings.Contains(s.StopWords(), "privacy budget is spent") {
		t.Errorf("stop words %q", s.StopWords())
	}
	t.Logf("%d steps, %.1f s, accuracy %.3f, bound %.3f", s.Steps, s.TrainSeconds, s.TestAccuracy, s.Bound().AUC)
}

func encode(t *testing.T, m schemas.Message) []byte {
	t.Helper()
	b, err := schemas.NewCodec().Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Clone(b)
}

// TestLabelFreeEpochsBoundTheFit: --epochs N ends a label-free run after N
// passes of the label holder's head over its rows (it used to be ignored:
// the README tour's --epochs 1 fitted to convergence).
func TestLabelFreeEpochsBoundTheFit(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	s, err := Train(context.Background(), New(func(c *Config) {
		c.Synthetic = &dataset.SyntheticConfig{Samples: 3000, TestSamples: 600, Features: 24, Classes: 3, Noise: 0.05, Seed: 7}
		c.Parties = 3
		c.Privacy = DefaultPrivacy
		c.PrivacyDefault = true
		c.Epochs = 2
		c.Seed = 5
		c.Run = "lfepochs"
		c.Out = t.TempDir()
	}), Hooks{Log: testLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	if s.LabelFree == nil || s.LabelFree.Epochs != 2 || s.StoppedBy != "epochs" {
		t.Fatalf("label-free run with --epochs 2: fit %+v, stopped by %q", s.LabelFree, s.StoppedBy)
	}
}
