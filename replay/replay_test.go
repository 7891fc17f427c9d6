package replay_test

import (
	"context"
	"crypto/sha256"
	"encoding/csv"
	"errors"
	"fmt"
	"github.com/asyrevel/asyrevel/internal/memwatch"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/replay"
	"github.com/asyrevel/asyrevel/run"
	"github.com/asyrevel/asyrevel/schemas"
)

// A short real run over the embedded JetStream broker, shared by the
// tests: its store folder and summary.
var (
	runOnce sync.Once
	runDir  string
	runSum  *run.Summary
	runErr  error
)

const testRun = "replaytest"

func TestMain(m *testing.M) {
	memwatch.Start() // a runaway fails at once with its stacks
	code := m.Run()
	if runDir != "" {
		os.RemoveAll(runDir)
	}
	os.Exit(code)
}

func synth() *dataset.SyntheticConfig {
	return &dataset.SyntheticConfig{Samples: 1500, TestSamples: 300, Features: 16, Classes: 2, Noise: 0.02, Seed: 5}
}

func trainedRun(t testing.TB) (store string, s *run.Summary) {
	t.Helper()
	runOnce.Do(func() {
		runDir, runErr = os.MkdirTemp("", "asyrevel-replay-test-")
		if runErr != nil {
			return
		}
		runSum, runErr = run.Train(context.Background(), run.New(func(c *run.Config) {
			c.Synthetic = synth()
			c.Parties = 3
			c.Batch = 8
			c.Window = 2
			c.MaxSteps = 600
			c.Seed = 7
			c.Run = testRun
			c.StoreDir = filepath.Join(runDir, "store")
			c.Out = filepath.Join(runDir, "out")
			c.EvalEvery = 100 * time.Millisecond
		}), run.Hooks{})
	})
	if runErr != nil {
		t.Fatal(runErr)
	}
	return filepath.Join(runDir, "store"), runSum
}

func open(t testing.TB, store string) *replay.Log {
	t.Helper()
	l, err := replay.Open(context.Background(), replay.Source{Store: store, Run: testRun})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestReadWholeRun(t *testing.T) {
	store, sum := trainedRun(t)
	l := open(t, store)
	info := l.Info()
	total := sum.Stream.Hello + sum.Stream.Outputs + sum.Stream.Replies + sum.Stream.Evals + sum.Stream.Control + sum.Stream.Receipts
	if info.Messages != total || !info.DenyDelete || !info.DenyPurge {
		t.Fatalf("stream info %+v, want %d messages and deny delete/purge", info, total)
	}
	byKind := map[schemas.Kind]uint64{}
	subjectSeq := map[string]uint64{} // each subject is numbered 1, 2, ...
	var last, receipts uint64
	err := l.Each(context.Background(), replay.ReadOptions{}, func(r *replay.Record) error {
		if r.Err != nil {
			return fmt.Errorf("record %d: %w", r.Seq, r.Err)
		}
		if r.Seq != last+1 {
			return fmt.Errorf("sequence %d after %d", r.Seq, last)
		}
		last = r.Seq
		if r.Receipt {
			receipts++
			return nil
		}
		if err := r.Msg.Validate(schemas.Limits{Party: r.Party}); err != nil {
			return fmt.Errorf("record %d: %w", r.Seq, err)
		}
		if s := r.Msg.Head().Seq; s != subjectSeq[r.Subject]+1 {
			return fmt.Errorf("record %d: %s seq %d after %d", r.Seq, r.Subject, s, subjectSeq[r.Subject])
		} else {
			subjectSeq[r.Subject] = s
		}
		if r.Time.Before(info.First) || r.Time.After(info.Last) {
			return fmt.Errorf("record %d at %v outside %v..%v", r.Seq, r.Time, info.First, info.Last)
		}
		byKind[r.Kind]++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[schemas.Kind]uint64{schemas.KindHello: sum.Stream.Hello, schemas.KindOutput: sum.Stream.Outputs,
		schemas.KindReply: sum.Stream.Replies, schemas.KindEval: sum.Stream.Evals, schemas.KindControl: sum.Stream.Control}
	for k, n := range want {
		if byKind[k] != n {
			t.Errorf("%s: read %d, stream holds %d", k, byKind[k], n)
		}
	}
	if receipts != sum.Stream.Receipts || receipts == 0 {
		t.Errorf("read %d receipts, the stream holds %d", receipts, sum.Stream.Receipts)
	}
	if last != info.LastSeq {
		t.Errorf("read up to %d, stream ends at %d", last, info.LastSeq)
	}
}

func TestReadOptions(t *testing.T) {
	store, sum := trainedRun(t)
	l := open(t, store)
	ctx := context.Background()
	count := func(opts replay.ReadOptions, check func(*replay.Record) error) uint64 {
		t.Helper()
		var n uint64
		if err := l.Each(ctx, opts, func(r *replay.Record) error {
			n++
			if check != nil {
				return check(r)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// One party's view: its own subjects and control only.
	n := count(replay.ReadOptions{Party: 2}, func(r *replay.Record) error {
		if r.Kind != schemas.KindControl && r.Party != 2 {
			return fmt.Errorf("party 2's view holds %s", r.Subject)
		}
		return nil
	})
	if n == 0 || n >= l.Info().Messages {
		t.Errorf("party 2's view holds %d of %d messages", n, l.Info().Messages)
	}
	// Kinds.
	if n := count(replay.ReadOptions{Kinds: []schemas.Kind{schemas.KindReply}}, nil); n != sum.Stream.Replies {
		t.Errorf("%d replies read, %d stored", n, sum.Stream.Replies)
	}
	// From a sequence.
	from := l.Info().LastSeq - 10
	if n := count(replay.ReadOptions{From: from}, func(r *replay.Record) error {
		if r.Seq < from {
			return fmt.Errorf("seq %d before %d", r.Seq, from)
		}
		return nil
	}); n != 11 {
		t.Errorf("from %d: %d records, want 11", from, n)
	}
	if n := count(replay.ReadOptions{From: l.Info().LastSeq + 5}, nil); n != 0 {
		t.Errorf("beyond the end: %d records", n)
	}
	// Since a time: nothing after the last message.
	if n := count(replay.ReadOptions{Since: l.Info().Last.Add(time.Second)}, nil); n != 0 {
		t.Errorf("after the last message: %d records", n)
	}
	if n := count(replay.ReadOptions{Since: l.Info().First}, nil); n != l.Info().Messages {
		t.Errorf("since the first message: %d of %d", n, l.Info().Messages)
	}
	if _, err := l.Read(ctx, replay.ReadOptions{From: 3, Since: time.Now()}); !errors.Is(err, replay.ErrSource) {
		t.Errorf("from and since: %v", err)
	}
}

func TestTranscripts(t *testing.T) {
	store, sum := trainedRun(t)
	l := open(t, store)
	dir := t.TempDir()
	s, err := replay.WriteTranscripts(context.Background(), l, replay.ReadOptions{}, replay.TranscriptOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Parties) != 3 || s.Records != l.Info().Messages || len(s.Undecodable) != 0 {
		t.Fatalf("summary: %d parties, %d records of %d, undecodable %v", len(s.Parties), s.Records, l.Info().Messages, s.Undecodable)
	}
	var req, rep int64
	for _, p := range s.Parties {
		req += p.Requests
		rep += p.Replies
		if p.ReplyFormat != "h,h_bar" {
			t.Errorf("party %d: reply format %q", p.Party, p.ReplyFormat)
		}
		f, err := os.Open(filepath.Join(dir, fmt.Sprintf("party-%d.csv", p.Party)))
		if err != nil {
			t.Fatal(err)
		}
		rows, err := csv.NewReader(f).ReadAll()
		f.Close()
		if err != nil {
			t.Fatalf("party %d transcript: %v", p.Party, err)
		}
		kinds := map[string]int64{}
		for _, r := range rows[1:] {
			kinds[r[2]]++
			if r[2] == "reply" && (len(strings.Fields(r[6])) != 8 || !strings.HasPrefix(r[7], "h=")) {
				t.Fatalf("party %d reply row without its 8 sample ids or losses: %v", p.Party, r)
			}
		}
		if kinds["out"] != p.Requests || kinds["reply"] != p.Replies || kinds["ctl"] != int64(sum.Stream.Control) {
			t.Errorf("party %d transcript rows %v, summary %+v", p.Party, kinds, p)
		}
	}
	if req != int64(sum.Stream.Outputs) || rep != int64(sum.Stream.Replies) {
		t.Errorf("requests %d replies %d, stream %d %d", req, rep, sum.Stream.Outputs, sum.Stream.Replies)
	}
}

func hashTree(t *testing.T, dir string) map[string][32]byte {
	t.Helper()
	m := map[string][32]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		m[p] = sha256.Sum256(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Reading a stopped store leaves every file of it as it was.
func TestStoreUnchanged(t *testing.T) {
	store, _ := trainedRun(t)
	before := hashTree(t, store)
	l := open(t, store)
	if err := l.Each(context.Background(), replay.ReadOptions{}, func(*replay.Record) error { return nil }); err != nil {
		t.Fatal(err)
	}
	l.Close()
	after := hashTree(t, store)
	if len(after) != len(before) {
		t.Errorf("%d files before, %d after", len(before), len(after))
	}
	for p, h := range before {
		if after[p] != h {
			t.Errorf("%s changed", p)
		}
	}
}

// A store that a live broker holds is refused, not opened a second time.
func TestStoreInUse(t *testing.T) {
	dir := t.TempDir()
	srv, err := broker.StartServer(context.Background(), broker.ServerConfig{Dir: dir, NoListen: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	_, err = replay.Open(context.Background(), replay.Source{Store: dir, Run: "x"})
	if !errors.Is(err, replay.ErrStoreInUse) {
		t.Fatalf("got %v, want ErrStoreInUse", err)
	}
	if !strings.Contains(err.Error(), "--nats") {
		t.Errorf("the error does not say what to do: %v", err)
	}
	// And a reader holds off a new server on the store.
	store, _ := trainedRun(t)
	l := open(t, store)
	if _, err := broker.StartServer(context.Background(), broker.ServerConfig{Dir: store, NoListen: true}); !errors.Is(err, broker.ErrStoreInUse) {
		t.Errorf("a server started on a store being read: %v", err)
	}
	l.Close()
}

func TestOpenErrors(t *testing.T) {
	store, _ := trainedRun(t)
	ctx := context.Background()
	_, err := replay.Open(ctx, replay.Source{Store: store, Run: "nosuchrun"})
	if !errors.Is(err, replay.ErrNoRun) || !strings.Contains(err.Error(), testRun) {
		t.Errorf("unknown run: %v (want ErrNoRun naming %s)", err, testRun)
	}
	if _, err := replay.Open(ctx, replay.Source{Store: t.TempDir(), Run: "x"}); !errors.Is(err, replay.ErrSource) {
		t.Errorf("not a store: %v", err)
	}
	if _, err := replay.Open(ctx, replay.Source{Run: "x"}); !errors.Is(err, replay.ErrSource) {
		t.Errorf("no source: %v", err)
	}
	if _, err := replay.Open(ctx, replay.Source{Store: store, Run: "bad run"}); !errors.Is(err, replay.ErrSource) {
		t.Errorf("bad run id: %v", err)
	}
}

// A live server is read over its URL, and a message that is not a valid
// protocol message is delivered with its error, not dropped or fatal.
func TestLiveServerAndHostileMessage(t *testing.T) {
	ctx := context.Background()
	srv, err := broker.StartServer(ctx, broker.ServerConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	bus, err := broker.ConnectJetStream(ctx, broker.JetStreamConfig{Server: srv, Run: "live"})
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	c := schemas.NewCodec()
	good, _ := c.Marshal(&schemas.PartyOutput{Header: schemas.Header{Version: schemas.Version, Party: 1, Seq: 1},
		IDs: []uint32{4}, C: []float64{0.5}, CHat: []float64{0.6}})
	for _, m := range []broker.Message{
		{Subject: schemas.Subject("live", schemas.KindOutput, 1), Data: good},
		{Subject: schemas.Subject("live", schemas.KindOutput, 2), Data: []byte{0xc1, 0xff}},
		{Subject: "asyrevel.live.bogus.1", Data: good, Header: map[string]string{"Asy-Sig": "abc"}},
	} {
		if err := bus.Publish(ctx, &m); err != nil {
			t.Fatal(err)
		}
	}
	if err := bus.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := replay.Open(ctx, replay.Source{URL: srv.URL(), Run: "live"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	r, err := l.Read(ctx, replay.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var recs []*replay.Record
	for {
		rec, err := r.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec.Clone())
	}
	if len(recs) != 3 {
		t.Fatalf("%d records, want 3", len(recs))
	}
	// c_hat travels as a float32 difference from c.
	if o := recs[0].Output(); o == nil || o.IDs[0] != 4 || math.Abs(o.CHat[0]-0.6) > 1e-7 || recs[0].Sender != 1 {
		t.Errorf("first record %+v", recs[0])
	}
	if !errors.Is(recs[1].Err, schemas.ErrDecode) || recs[1].Msg != nil {
		t.Errorf("undecodable payload: err %v msg %v", recs[1].Err, recs[1].Msg)
	}
	if !errors.Is(recs[2].Err, schemas.ErrSubject) || recs[2].Header.Get("Asy-Sig") != "abc" {
		t.Errorf("bad subject: err %v headers %v", recs[2].Err, recs[2].Header)
	}
}
