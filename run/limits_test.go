package run

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/schemas"
)

// A run whose stream nears --max-store stops within seconds with an
// error that says so (broker.ErrStreamFull: without checkpoints it cannot
// pause, TestFullStreamGoesOnWithRoom), and the stream holds no more than
// the bound: the log is bounded and never shortened.
func TestMaxStoreStopsTheRun(t *testing.T) {
	if testing.Short() {
		t.Skip("short: a whole run into a full stream")
	}
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	const limit = 2 << 20
	_, err := Train(context.Background(), New(func(c *Config) {
		c.Synthetic = small()
		c.Parties = 3
		c.Batch = 16
		c.Window = 2
		c.Duration = 10 * time.Minute // ends by the full stream long before
		c.Seed = 1
		c.StoreDir = store
		c.Run = "full"
		c.MaxStore = limit
		c.EvalEvery = 200 * time.Millisecond
	}), Hooks{Log: testLog(t)})
	if !errors.Is(err, broker.ErrStreamFull) {
		t.Fatalf("a full stream: %v, want ErrStreamFull", err)
	}
	if !strings.Contains(err.Error(), "--max-store") {
		t.Errorf("the error does not name the flag: %v", err)
	}
	st, err := OpenStore(store)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range st.Runs {
		if r.Run == "full" && r.Bytes > limit+int64(MaxMessage(new(New(func(c *Config) {
			c.Parties = 3
			c.Batch = 16
		})))) {
			t.Errorf("the stream holds %d bytes, past its bound of %d", r.Bytes, limit)
		}
	}
}

// The stream refuses a message larger than the run's largest (a junk
// flood), and so does the embedded broker: a run at batch 64 takes tens of
// KiB (it took 1 MiB, and stored 20 junk messages of 1,046,576 bytes).
func TestMaxMessageRefused(t *testing.T) {
	ctx := context.Background()
	cfg := new(New(func(c *Config) {
		c.Parties = 4
		c.Batch = 64
	}))
	max := MaxMessage(cfg)
	if max < 16<<10 || max >= 1<<20 {
		t.Fatalf("MaxMessage %d", max)
	}
	srv, err := broker.StartServer(ctx, broker.ServerConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	b, err := broker.ConnectJetStream(ctx, broker.JetStreamConfig{Server: srv, Run: "big", MaxMsgSize: max, Design: broker.DesignOrdered})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	subj := schemas.Subject("big", schemas.KindOutput, 1)
	if err := b.Publish(ctx, &broker.Message{Subject: subj, Data: make([]byte, 1000)}); err != nil {
		t.Fatal(err)
	}
	_ = b.Publish(ctx, &broker.Message{Subject: subj, Data: make([]byte, max+1)})
	_ = b.Flush(ctx)
	n, err := b.Count(ctx, subj)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("the stream holds %d messages, want only the small one", n)
	}
}

// A party that trains but never answers evaluations holds up each
// evaluation briefly, not for --party-timeout every round: the run keeps
// its evaluations, and the curve, the progress and the summary say whose
// outputs were the last ones it sent.
func TestEvaluationsGoOnWithoutASilentParty(t *testing.T) {
	out := t.TempDir()
	// The run stops at its fourth evaluation, not after a duration that a
	// busy machine spends on setup. With --party-timeout (a minute) for
	// each round, four rounds would take three minutes: the context ends
	// the run before.
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	evals := 0
	s, err := Train(ctx, New(func(c *Config) {
		c.Synthetic = small()
		c.Parties = 3
		c.Batch = 16
		c.Window = 2
		c.Seed = 1
		c.Out = out
		c.EvalSilent = 2
		c.PartyTimeout = time.Minute
		c.EvalEvery = 200 * time.Millisecond
	}), Hooks{Log: testLog(t), StopWhen: func() bool { evals++; return evals >= 4 }})
	if err != nil {
		t.Fatalf("%v (%d evaluations before it)", err, evals)
	}
	if len(s.Curve) < 4 {
		t.Errorf("%d evaluations, want 4", len(s.Curve))
	}
	if s.StaleEvals[2] == 0 || len(s.StaleEvals) != 1 {
		t.Errorf("stale evaluations %v, want party 2's", s.StaleEvals)
	}
	if fmt.Sprint(s.FinalStale) != "[2]" {
		t.Errorf("final evaluation's stale parties %v, want [2]", s.FinalStale)
	}
	if len(s.Departed) != 0 {
		t.Errorf("a party that trains counted as departed: %v", s.Departed)
	}
	csv, err := os.ReadFile(filepath.Join(out, "curve.csv"))
	if err != nil || !strings.Contains(string(csv), "stale_parties") || !strings.Contains(string(csv), ",2\n") {
		t.Errorf("curve.csv does not mark party 2: %v\n%s", err, csv)
	}
}

// A party that trains but never answers evaluations holds up the first
// evaluation only a few rounds' worth too, not --party-timeout (a minute
// here): the run gets its evaluations from the start and ends on time.
// Before, the first round waited the whole --party-timeout, the run got no
// evaluation in between and outlasted its duration by it.
func TestFirstEvaluationWaitsBriefly(t *testing.T) {
	// The run stops at its third evaluation. A first round that waited
	// the whole --party-timeout (five minutes here) would outlast the
	// context, which ends the run with fewer.
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	evals := 0
	s, err := Train(ctx, New(func(c *Config) {
		c.Synthetic = small()
		c.Parties = 3
		c.Batch = 16
		c.Window = 2
		c.Seed = 1
		c.EvalSilent = 3
		c.PartyTimeout = 5 * time.Minute
		c.EvalEvery = 200 * time.Millisecond
	}), Hooks{Log: testLog(t), StopWhen: func() bool { evals++; return evals >= 3 }})
	if err != nil {
		t.Fatalf("%v (%d evaluations before it)", err, evals)
	}
	if len(s.Curve) < 3 {
		t.Errorf("%d evaluations, want 3", len(s.Curve))
	}
	if len(s.Curve) > 0 && fmt.Sprint(s.Curve[0].Stale) != "[3]" {
		t.Errorf("the first evaluation's stale parties %v, want [3]", s.Curve[0].Stale)
	}
	if len(s.Departed) != 0 {
		t.Errorf("a party that trains counted as departed: %v", s.Departed)
	}
}
