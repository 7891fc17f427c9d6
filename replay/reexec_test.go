package replay_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/aggregator"
	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/replay"
	"github.com/asyrevel/asyrevel/run"
	"github.com/asyrevel/asyrevel/schemas"
)

// reexecConfig rebuilds the run's aggregator configuration from its
// settings, as `asyrevel replay --reexecute` does.
func reexecConfig(t *testing.T, s *run.Summary, key string) run.Config {
	t.Helper()
	cfg := run.Defaults()
	st := s.Settings
	st.Apply(&cfg)
	cfg.Run, cfg.MaxSteps = s.Run, 1
	if key != "" {
		cfg.Defense.Key = key
	}
	return cfg
}

// aggregatorConfig is the aggregator's configuration of cfg, with its
// labels loaded, as re-execution builds it.
func aggregatorConfig(t *testing.T, cfg run.Config) aggregator.Config {
	t.Helper()
	data, err := run.LoadData(&cfg, run.RoleAggregator)
	if err != nil {
		t.Fatal(err)
	}
	ac, err := run.AggregatorConfig(&cfg, data, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ac
}

func reexecute(t *testing.T, l *replay.Log, cfg run.Config) *replay.ReexecReport {
	t.Helper()
	rep, err := replay.Reexecute(context.Background(), l, aggregator.NewReexecutor(aggregatorConfig(t, cfg)), nil)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// Re-execution of a real run over JetStream reproduces every reply bit for
// bit, with noised batch means (the noise comes from the secret key); a
// wrong key, or a reply that the aggregator did not compute, is caught
// and the first difference named.
func TestReexecute(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	// A broker of the test's, not train's embedded one: train seals the
	// stream of the run it ends on its own broker, and the forged reply
	// below must reach the stream.
	ext, err := broker.StartServer(context.Background(), broker.ServerConfig{Dir: store})
	if err != nil {
		t.Fatal(err)
	}
	s, err := run.Train(context.Background(), run.New(func(c *run.Config) {
		c.Synthetic = synth()
		c.Parties = 3
		c.Batch = 8
		c.Window = 2
		c.MaxSteps = 300
		c.Seed = 11
		c.Run = "reexec"
		c.NATS = ext.URL()
		c.EvalEvery = 50 * time.Millisecond
		c.Defense = run.DefenseConfig{Reply: "mean", MinBatch: 8, Clip: 0.01, NoiseMultiplier: 1, DrawBatches: true}
	}), run.Hooks{})
	ext.Shutdown()
	if err != nil {
		t.Fatal(err)
	}
	if s.Defense == nil || s.Settings.Defense.Key == "" {
		t.Fatalf("the summary records no defense or key: %+v", s.Settings.Defense)
	}
	l, err := replay.Open(context.Background(), replay.Source{Store: store, Run: "reexec"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	rep := reexecute(t, l, reexecConfig(t, s, ""))
	if !rep.OK() || rep.Matched != int(s.Replies) {
		t.Fatalf("re-execution: %+v (first: %v)", rep, rep.First)
	}
	other := strings.Repeat("ab", 32)
	rep = reexecute(t, l, reexecConfig(t, s, other))
	if rep.OK() || rep.First == nil {
		t.Fatalf("a wrong key went unnoticed: %+v", rep)
	}
	t.Logf("wrong key: %v", rep.First)
	l.Close()

	// A reply the aggregator never computed, slipped into the log.
	srv, err := broker.StartServer(context.Background(), broker.ServerConfig{Dir: store, NoListen: true})
	if err != nil {
		t.Fatal(err)
	}
	bus, err := broker.ConnectJetStream(context.Background(), broker.JetStreamConfig{Server: srv, InProcess: true, Run: "reexec", NoCreate: true})
	if err != nil {
		t.Fatal(err)
	}
	data, _ := schemas.NewCodec().Marshal(&schemas.Reply{Header: schemas.Header{Version: schemas.Version, Party: 2, Seq: 1 << 40},
		ReqSeq: 1 << 40, Delta: []float64{0.5}, Mean: true})
	if err := bus.Publish(context.Background(), &broker.Message{Subject: schemas.Subject("reexec", schemas.KindReply, 2), Data: data}); err != nil {
		t.Fatal(err)
	}
	bus.Close()
	srv.Shutdown()
	l2, err := replay.Open(context.Background(), replay.Source{Store: store, Run: "reexec"})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	// The forged reply counts as a recorded reply: the fresh aggregator
	// stops one step later than the run and gives no reply for it.
	rep = reexecute(t, l2, reexecConfig(t, s, ""))
	if rep.OK() || rep.Missing != 1 || rep.First == nil || rep.First.Party != 2 {
		t.Fatalf("a forged reply went unnoticed: %+v (first %v)", rep, rep.First)
	}
}

// The stream may store requests of different parties in another order
// than the aggregator applied them (a default run delivers through core
// subscriptions while the stream captures in parallel): re-execution
// applies each request where the reply naming it stands, so it is exact on
// any such order. The same log read in stream order (what re-execution did
// before replies named their cause) is not: the permutation is one that
// matters.
func TestReexecuteAppliedOrder(t *testing.T) {
	ctx := context.Background()
	store := filepath.Join(t.TempDir(), "store")
	s, err := run.Train(ctx, run.New(func(c *run.Config) {
		c.Synthetic = synth()
		c.Parties = 3
		c.Batch = 8
		c.Window = 2
		c.MaxSteps = 400
		c.Seed = 3
		c.Run = "order"
		c.StoreDir = store
		c.EvalEvery = 50 * time.Millisecond
	}), run.Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := replay.Open(ctx, replay.Source{Store: store, Run: "order"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var recs []*replay.Record
	if err := l.Each(ctx, replay.ReadOptions{}, func(r *replay.Record) error {
		recs = append(recs, r.Clone())
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Swap every pair of adjacent requests of two different parties: each
	// party's own order and every reply's place stay.
	swapped := slices.Clone(recs)
	n := 0
	for i := 0; i+1 < len(swapped); i++ {
		a, b := swapped[i], swapped[i+1]
		if a.Kind == schemas.KindOutput && b.Kind == schemas.KindOutput && a.Party != b.Party {
			swapped[i], swapped[i+1] = b, a
			n++
			i++
		}
	}
	if n < 10 {
		t.Fatalf("only %d pairs of adjacent requests to swap", n)
	}
	ac := aggregatorConfig(t, reexecConfig(t, s, ""))
	reexec := func(recs []*replay.Record) *replay.ReexecReport {
		replies := 0
		for _, r := range recs {
			if r.Kind == schemas.KindReply {
				replies++
			}
		}
		rep, err := replay.ReexecuteRecords(ctx, "order", replies, func(f func(*replay.Record) error) error {
			for _, r := range recs {
				if err := f(r); err != nil {
					return err
				}
			}
			return nil
		}, aggregator.NewReexecutor(ac), nil)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	for name, rs := range map[string][]*replay.Record{"as stored": recs, fmt.Sprintf("%d pairs swapped", n): swapped} {
		if rep := reexec(rs); !rep.OK() || rep.Matched != int(s.Replies) {
			t.Errorf("%s: %+v (first: %v)", name, rep, rep.First)
		}
	}
	// Without the causes, the swapped log is applied in stream order.
	legacy := make([]*replay.Record, len(swapped))
	for i, r := range swapped {
		legacy[i] = r
		if r.Kind == schemas.KindReply {
			c := r.Clone()
			c.Reply().Cause = nil
			legacy[i] = c
		}
	}
	if rep := reexec(legacy); rep.OK() {
		t.Errorf("stream order reproduced a log whose requests were applied in another order: %+v", rep)
	}
}

// A run interrupted and resumed (with the default defense, whose noise
// comes from the aggregator's secret key) is reproduced exactly: the
// resumed part goes on with the first part's key, which the summary
// records.
func TestReexecuteResumedRun(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	out := t.TempDir()
	cfg := run.New(func(c *run.Config) {
		c.Synthetic = synth()
		c.Parties = 3
		c.Batch = 8
		c.Window = 2
		c.Seed = 4
		c.Run = "resumed"
		c.Out = out
		c.EvalEvery = 100 * time.Millisecond
		c.Privacy = run.DefaultPrivacy + ",profile=budget"
		// At the profile's step size (1) the defended run's loss can
		// leave its start far behind, and a stuck run stops. The profile
		// sets lr unless the run named it (Explicit), as --lr would.
		c.LR = 0.1
		c.Explicit = map[string]bool{"lr": true}
		// The run's length: the budget lasts past the interruption, and
		// neither part ends by it. The interrupt and the resumed part's
		// stop come from the run's own events below, not from a
		// --duration that a busy machine spends before the first
		// checkpoint (or a fast one before the interrupt).
		c.Epochs = 10000
		c.CheckpointDir = filepath.Join(out, "ck")
		c.CheckpointEvery = 200 * time.Millisecond
	})
	// Interrupted at the second evaluation after every participant's
	// first checkpoint, so that a resume from them has training after
	// them to reproduce however slow or fast the machine is.
	saved := func() bool {
		for m := 0; m <= cfg.Parties; m++ {
			if _, err := os.Stat(run.CheckpointPath(cfg.CheckpointDir, cfg.Run, m)); err != nil {
				return false
			}
		}
		return true
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	after := 0
	interrupt := func(aggregator.Point) {
		if after < 2 && saved() {
			if after++; after == 2 {
				cancel(errors.New("interrupt signal received"))
			}
		}
	}
	if _, err := run.Train(ctx, cfg, run.Hooks{OnPoint: interrupt}); !errors.Is(err, run.ErrInterrupted) {
		t.Fatalf("first part: %v", err)
	}
	cfg.Resume = true
	// The resumed part stops at its second evaluation.
	evals := 0
	s, err := run.Train(context.Background(), cfg, run.Hooks{StopWhen: func() bool { evals++; return evals >= 2 }})
	if err != nil {
		t.Fatalf("resumed: %v", err)
	}
	if s.Resumed == nil {
		t.Fatal("not resumed")
	}
	if !strings.HasPrefix(s.LR, "0.1/") && s.LR != "0.1" {
		t.Errorf("the run's step size is %s, not the 0.1 the test gave it", s.LR)
	}
	l, err := replay.Open(context.Background(), replay.Source{Store: filepath.Join(out, "stream"), Run: "resumed"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	rep := reexecute(t, l, reexecConfig(t, s, ""))
	if !rep.OK() {
		t.Fatalf("re-execution of a resumed run: %+v (first: %v)", rep, rep.First)
	}
}
