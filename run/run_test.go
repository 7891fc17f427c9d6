package run

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/aggregator"
	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/schemas"
)

// small is a synthetic problem that a linear model learns to about 95%.
func small() *dataset.SyntheticConfig {
	return &dataset.SyntheticConfig{Samples: 4000, TestSamples: 1000, Features: 24, Classes: 2, Noise: 0.02, Seed: 3}
}

func testLog(t *testing.T) zerolog.Logger {
	if testing.Verbose() {
		return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)
	}
	return zerolog.Nop()
}

// checkCounts compares the summary with what the stream holds.
func checkCounts(t *testing.T, s *Summary) {
	t.Helper()
	if s.Stream == nil {
		t.Fatal("no stream counts")
	}
	if int64(s.Stream.Outputs) != s.Outputs+s.rejectedOut() {
		t.Errorf("stream holds %d PartyOutputs, aggregator consumed %d (+%d rejected)", s.Stream.Outputs, s.Outputs, s.rejectedOut())
	}
	if int64(s.Stream.Replies) != s.Replies || s.Replies != s.Steps {
		t.Errorf("stream holds %d Replies, summary says %d replies for %d steps", s.Stream.Replies, s.Replies, s.Steps)
	}
	total := int64(s.Stream.Hello + s.Stream.Outputs + s.Stream.Evals)
	if total != s.MessagesUp {
		t.Errorf("stream holds %d messages from parties, summary says %d up", total, s.MessagesUp)
	}
	if down := int64(s.Stream.Replies + s.Stream.Control); down != s.MessagesDown {
		t.Errorf("stream holds %d messages to parties, summary says %d down", down, s.MessagesDown)
	}
}

func (s *Summary) rejectedOut() int64 { return s.rejectedOutputs }

func TestTrainOverEmbeddedJetStream(t *testing.T) {
	skipComputeUnderRace(t)
	out := t.TempDir()
	s, err := Train(context.Background(), New(func(c *Config) {
		c.Synthetic = small()
		c.Parties = 4
		c.Algo = "asyrevel-gau"
		c.Batch = 16
		c.Window = 2
		c.Epochs = 30
		c.Seed = 1
		c.Out = out
		c.EvalEvery = 200 * time.Millisecond
	}), Hooks{Log: testLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("accuracy %.4f, %d steps in %.2fs (%.0f steps/s), max staleness %d", s.TestAccuracy, s.Steps, s.TrainSeconds, s.StepsPerSec, s.MaxStaleness)
	if s.Bus != "jetstream-tcp" {
		t.Errorf("bus %q, want the embedded JetStream over TCP", s.Bus)
	}
	if s.TestAccuracy < 0.90 {
		t.Errorf("test accuracy %.4f, want at least 0.90", s.TestAccuracy)
	}
	if len(s.Rejected) != 0 {
		t.Errorf("rejections in a clean run: %v", s.Rejected)
	}
	checkCounts(t, s)
	for _, f := range []string{"summary.json", "curve.csv", "curve.png"} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// A run through a 3-node embedded cluster (stream R3, participants spread
// over the nodes) learns as well, its stream holds every message, and the
// wire is counted.
func TestTrainOverCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster in -short mode")
	}
	s, err := Train(context.Background(), New(func(c *Config) {
		c.Synthetic = small()
		c.Parties = 3
		c.Algo = "asyrevel-gau"
		c.Batch = 16
		c.Window = 2
		c.Epochs = 30
		c.Seed = 3
		c.Cluster = 3
		c.EvalEvery = 200 * time.Millisecond
	}), Hooks{Log: testLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	if s.Bus != "jetstream-cluster" {
		t.Errorf("bus %q", s.Bus)
	}
	if s.TestAccuracy < 0.90 {
		t.Errorf("test accuracy %.4f, want at least 0.90", s.TestAccuracy)
	}
	// Every payload crosses a client connection at least twice (published,
	// delivered).
	if s.WireBytes < 2*(s.BytesUp+s.BytesDown) {
		t.Errorf("wire bytes %d, payload %d up + %d down", s.WireBytes, s.BytesUp, s.BytesDown)
	}
	checkCounts(t, s)
}

func TestClusterConfigErrors(t *testing.T) {
	for _, c := range []Config{New(func(c *Config) {
		c.Cluster = 3
		c.Bus = "memory"
	}), New(func(c *Config) {
		c.Cluster = 3
		c.NATS = "nats://x"
	}), New(func(c *Config) {
		c.Cluster = 3
		c.InProcess = true
	}), New(func(c *Config) {
		c.Cluster = -1
	})} {
		c.Synthetic = small()
		if _, err := Train(context.Background(), c, Hooks{Log: testLog(t)}); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v, want ErrConfig", c, err)
		}
	}
}

func TestUniformDirectionsTrain(t *testing.T) {
	if testing.Short() {
		t.Skip("short: a whole run to an accuracy")
	}
	s, err := Train(context.Background(), New(func(c *Config) {
		c.Synthetic = small()
		c.Parties = 3
		c.Algo = "asyrevel-uni"
		c.Batch = 16
		c.Window = 1
		c.Epochs = 30
		c.Seed = 2
		c.Bus = "memory"
	}), Hooks{Log: testLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	if s.TestAccuracy < 0.90 {
		t.Errorf("test accuracy %.4f, want at least 0.90", s.TestAccuracy)
	}
	checkCounts(t, s)
}

// TestBadMessagesAreRejected has a rogue client publish, on party 2's
// subject in the middle of a run, a malformed message, one with wrong
// dimensions, one with NaN, a forged party id and a replayed sequence:
// each is rejected and counted, and the run finishes and learns. Without
// the trust layer the runtime's checks reject them; with it (the
// default) the chain does first: the sequence numbers jump (a gap, no
// signature to resynchronise on) or repeat (a replay).
func TestBadMessagesAreRejected(t *testing.T) {
	if testing.Short() {
		t.Skip("short: a whole run for each kind of bad message")
	}
	for _, tc := range []struct {
		name string
		off  bool
		want map[string]int64
	}{
		{"trust off", true, map[string]int64{"decode": 1, "shape": 1, "nonfinite": 1, "party": 1, "replay": 1}},
		{"trust on", false, map[string]int64{"decode": 1, "trust-gap": 3, "trust-replay": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) { testBadMessages(t, tc.off, tc.want) })
	}
}

func testBadMessages(t *testing.T, off bool, want map[string]int64) {
	ctx := context.Background()
	srv, err := broker.StartServer(ctx, broker.ServerConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	const run = "rogue"
	rogue, err := broker.ConnectJetStream(ctx, broker.JetStreamConfig{URL: srv.URL(), Run: run, Name: "rogue"})
	if err != nil {
		t.Fatal(err)
	}
	defer rogue.Close()

	c := schemas.NewCodec()
	msg := func(party uint16, seq uint64, ids []uint32, cs, chat []float64) []byte {
		b, err := c.Marshal(&schemas.PartyOutput{Header: schemas.Header{Version: schemas.Version, Party: party, Seq: seq}, IDs: ids, C: cs, CHat: chat})
		if err != nil {
			t.Fatal(err)
		}
		return append([]byte(nil), b...)
	}
	bad := map[string][]byte{
		"decode":    []byte("\x96\x01\x02garbage"),
		"shape":     msg(2, 1<<40, []uint32{1, 2}, []float64{0.1}, []float64{0.1, 0.2}),
		"nonfinite": msg(2, 1<<40, []uint32{1}, []float64{math.NaN()}, []float64{0.1}),
		"party":     msg(3, 1<<40, []uint32{1}, []float64{0.1}, []float64{0.1}),
		"replay":    msg(2, 1, []uint32{1}, []float64{0.1}, []float64{0.1}),
	}
	injected := make(chan error, 1)
	first := true
	onPoint := func(aggregator.Point) {
		if !first {
			return
		}
		first = false
		go func() {
			for _, data := range bad {
				if err := rogue.Publish(ctx, &broker.Message{Subject: schemas.Subject(run, schemas.KindOutput, 2), Data: data}); err != nil {
					injected <- err
					return
				}
			}
			injected <- rogue.Flush(ctx)
		}()
	}
	s, err := Train(ctx, New(func(c *Config) {
		c.Synthetic = small()
		c.Parties = 4
		c.Algo = "asyrevel-gau"
		c.Batch = 16
		c.Window = 2
		c.Epochs = 30
		c.Seed = 1
		c.NATS = srv.URL()
		c.Run = run
		c.EvalEvery = 100 * time.Millisecond
		c.Trust = TrustConfig{Off: off}
	}), Hooks{Log: testLog(t), OnPoint: onPoint})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-injected; err != nil {
		t.Fatal(err)
	}
	for reason, n := range want {
		if s.Rejected["aggregator:"+reason] != n {
			t.Errorf("%s: rejected %v, want %d", reason, s.Rejected, n)
		}
	}
	if s.TestAccuracy < 0.90 {
		t.Errorf("test accuracy %.4f after rejections, want at least 0.90", s.TestAccuracy)
	}
	checkCounts(t, s)
}

// A zero regularisation weight is a value, not "unset"; Defaults gives
// DefaultLambda; a negative or non-finite weight is refused.
func TestLambdaDefaults(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	for _, tc := range []struct {
		set    bool
		lambda float64
		want   float64
		err    bool
	}{
		{false, 0, DefaultLambda, false},
		{true, 0, 0, false},
		{true, 0.5, 0.5, false},
		{true, -1e-4, 0, true},
		{true, nan, 0, true},
		{true, inf, 0, true},
	} {
		c := New(func(c *Config) {
			c.Synthetic = &dataset.SyntheticConfig{Samples: 10, Features: 4, Classes: 2}
			if tc.set {
				c.Lambda = tc.lambda
			}
		})
		err := c.Prepare()
		switch {
		case tc.err && !errors.Is(err, ErrConfig):
			t.Errorf("lambda %v: error %v, want ErrConfig", tc.lambda, err)
		case !tc.err && err != nil:
			t.Errorf("lambda %v: %v", tc.lambda, err)
		case !tc.err && c.Lambda != tc.want:
			t.Errorf("lambda %v: %v after Prepare, want %v", tc.lambda, c.Lambda, tc.want)
		}
	}
}

// Zero values are values: Prepare keeps a zero tolerance, refuses a zero
// smoothing or hidden layer instead of replacing it, and Validate changes
// nothing.
func TestZeroIsNotUnset(t *testing.T) {
	synth := &dataset.SyntheticConfig{Samples: 10, Features: 4, Classes: 2}
	for _, tc := range []struct {
		name string
		set  func(c *Config)
		err  bool
		ok   func(c *Config) bool
	}{
		{"tolerance 0", func(c *Config) { c.Tolerance = 0; c.Patience = 2 }, false, func(c *Config) bool { return c.Tolerance == 0 }},
		{"mu 0", func(c *Config) { c.Mu = 0 }, true, nil},
		{"hidden 0", func(c *Config) { c.Hidden = 0 }, true, nil},
		{"defaults", func(c *Config) {}, false, func(c *Config) bool {
			d := Defaults()
			return c.Mu == d.Mu && c.Hidden == d.Hidden && c.Tolerance == DefaultTolerance && c.Reg == "nonconvex"
		}},
	} {
		c := New(func(c *Config) { c.Synthetic = synth; tc.set(c) })
		err := c.Prepare()
		switch {
		case tc.err && !errors.Is(err, ErrConfig):
			t.Errorf("%s: error %v, want ErrConfig", tc.name, err)
		case !tc.err && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.ok != nil && !tc.ok(&c):
			t.Errorf("%s: %+v after Prepare", tc.name, c.Training)
		}
		if err == nil {
			before := c
			if err := c.Validate(); err != nil || !reflect.DeepEqual(before, c) {
				t.Errorf("%s: Validate changed the configuration or failed (%v)", tc.name, err)
			}
		}
	}
}

// skipComputeUnderRace skips a compute-bound test in make test's race
// pass (-race -short), which would take minutes on it; the whole suite's
// pass runs it without the detector, and the race pass keeps the tests
// whose goroutines, not arithmetic, are the point.
func skipComputeUnderRace(t *testing.T) {
	t.Helper()
	if raceEnabled && testing.Short() {
		t.Skip("compute-bound: run by the whole suite's pass, not the race pass")
	}
}
