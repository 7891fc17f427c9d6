package run

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/aggregator"
	"github.com/asyrevel/asyrevel/experiment/streamaudit"
	"github.com/asyrevel/asyrevel/party"
	"github.com/asyrevel/asyrevel/replay"
)

// TestResumeAppliesEachUpdateOnce interrupts a run, puts back an
// aggregator checkpoint (as if it had died right after it, so that
// everything it answered since must be applied again from the stream),
// resumes the run and checks from the stream's sequence numbers that
// every request was answered at most once, none is lost, and that the
// replies computed again are bit-identical to the recorded ones. The
// trust layer is on: the resumed participants go on with their chains,
// so no receiver rejects anything, and a checkpoint file with one byte
// changed is refused.
//
// From the first checkpoint, which holds no stream position (no count
// of the stream was taken before it), the resume reads the whole
// stream; from the first that holds one it reads the requests and
// replies from the checkpoint's floor (Recovery.ReadFrom), fewer
// messages, and must find the same. Which checkpoint is the first with a
// floor depends on the machine's speed: a checkpoint's floor is its
// oldest outbox message's, unknown for the messages published before the
// first count, and the outbox (256 messages) holds such ones for as long
// as fewer have been published since; at load 20 that was past the third
// checkpoint (issue 34). So the checkpoints are chosen by what they
// hold, not by rank.
func TestResumeAppliesEachUpdateOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	for _, tc := range []struct {
		name  string
		floor bool // put back checkpoints that hold a stream position
	}{{"first", false}, {"floored", true}} {
		t.Run(tc.name, func(t *testing.T) { testResumeOnce(t, tc.floor) })
	}
}

// keptFile keeps a copy of a checkpoint file: the first version of it
// the test wants, taken in the run's checkpoint hook while the file holds
// it (Hooks.onAggCheckpoint, onPartyCheckpoint).
type keptFile struct {
	once sync.Once
	done chan struct{} // closed once b (or err) is set
	b    []byte
	err  error
}

func newKeptFile() *keptFile { return &keptFile{done: make(chan struct{})} }

// take keeps the file at path, unless a version was kept already.
func (k *keptFile) take(path string) {
	k.once.Do(func() {
		k.b, k.err = os.ReadFile(path)
		close(k.done)
	})
}

// kept reports whether a version was kept.
func (k *keptFile) kept() bool {
	select {
	case <-k.done:
		return true
	default:
		return false
	}
}

// file is the version kept (an error if none was).
func (k *keptFile) file() ([]byte, error) {
	select {
	case <-k.done:
		return k.b, k.err
	default:
		return nil, errors.New("no checkpoint of the kind wanted was saved")
	}
}

// aggFloored and partyFloored say whether a resume from the checkpoint
// reads from its floor: the aggregator its requests and replies (and,
// trust layer, hellos and evaluations), a party the replies to it, its
// requests and its evaluation outputs (resumeParty).
func aggFloored(c *aggregator.Checkpoint) bool { return c.StreamFloor > 1 }

func partyFloored(c *party.Checkpoint) bool {
	return c.StreamFloor > 1 && c.FloorEvalKnown && len(c.Outbox) > 0
}

// interruptOnPoints interrupts the run (cancel) at the second evaluation
// after ready reports true (onPoint is the run's Hooks.OnPoint): a whole
// evaluation period of training comes after the checkpoints a test puts
// back however fast or slow the machine is. A fixed 600 ms let a quiet
// machine finish the run's 20,000 steps before the interrupt came (make
// test: "first part: <nil>").
func interruptOnPoints(ready func() bool, cancel context.CancelCauseFunc) func(aggregator.Point) {
	points := 0
	return func(pt aggregator.Point) {
		if !ready() {
			return
		}
		if points++; points == 2 {
			cancel(errors.New("interrupt signal received"))
		}
	}
}

func testResumeOnce(t *testing.T, floor bool) {
	out := t.TempDir()
	cfg := New(func(c *Config) {
		c.Synthetic = small()
		c.Parties = 4
		c.Algo = "asyrevel-gau"
		c.Batch = 16
		c.Window = 2
		// A length in steps: the accuracy floor must not depend on how
		// busy the machine is, and the interrupt must come first.
		c.MaxSteps = 20000
		c.Seed = 1
		c.Out = out
		c.Run = "resume"
		c.EvalEvery = 200 * time.Millisecond
		c.CheckpointDir = filepath.Join(out, "ck")
		// Oftener than the evaluations: a checkpoint with a floor comes
		// well before the 20,000 steps end the run on a quiet machine.
		c.CheckpointEvery = 100 * time.Millisecond
	})
	path := CheckpointPath(cfg.CheckpointDir, cfg.Run, 0)
	// Party 2 as if killed -9 after a checkpoint of the same kind too:
	// it computes again what it sent since, and its chains must follow
	// the stream.
	path2 := CheckpointPath(cfg.CheckpointDir, cfg.Run, 2)
	aggCk, ck2 := newKeptFile(), newKeptFile()
	var (
		floorMu sync.Mutex
		floors  []evalFloor // party 2's checkpoints' floors
	)
	record := func(m int, c *party.Checkpoint) {
		if m == 2 && c.FloorEvalKnown {
			floorMu.Lock()
			floors = append(floors, evalFloor{c.StreamFloor, c.FloorEvalSeq})
			floorMu.Unlock()
		}
	}
	keep2 := func(m int, c *party.Checkpoint) {
		record(m, c)
		if m == 2 && partyFloored(c) == floor {
			ck2.take(path2)
		}
	}
	keepAgg := func(c *aggregator.Checkpoint) {
		if aggFloored(c) == floor {
			aggCk.take(path)
		}
	}
	// Interrupted once both are kept, at the second evaluation after.
	ctx, cancel := context.WithCancelCause(context.Background())
	onPoint := interruptOnPoints(func() bool { return aggCk.kept() && ck2.kept() }, cancel)
	s1, err := Train(ctx, cfg, Hooks{Log: testLog(t), onPartyCheckpoint: keep2, onAggCheckpoint: keepAgg, OnPoint: onPoint})
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("first part: %v", err)
	}
	floorMu.Lock()
	checked := checkEvalFloors(t, s1.Store, cfg.Run, 2, floors)
	floorMu.Unlock()
	old, err := aggCk.file()
	if err != nil {
		t.Fatalf("the aggregator's checkpoint (floor %v): %v", floor, err)
	}
	// An altered checkpoint (one byte of the aggregator's state) is
	// refused before anything starts.
	bad := bytes.Clone(old)
	bad[len(bad)/2] ^= 1
	if err := os.WriteFile(path, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.Resume = true
	if _, err := Train(context.Background(), cfg, Hooks{}); !errors.Is(err, ErrCheckpointSeal) {
		t.Fatalf("resumed from an altered checkpoint: %v", err)
	}
	if err := os.WriteFile(path, old, 0o644); err != nil {
		t.Fatal(err)
	}
	if old2, err := ck2.file(); err != nil || os.WriteFile(path2, old2, 0o644) != nil {
		t.Fatalf("no checkpoint of party 2 to put back (floor %v): %v", floor, err)
	}
	// The resumed party's checkpoints must hold as well: it computes
	// again chunks the stream holds below its new floors.
	floors = floors[:0]
	s2, err := Train(context.Background(), cfg, Hooks{Log: testLog(t), onPartyCheckpoint: record})
	if err != nil {
		t.Fatalf("resumed: %v", err)
	}
	floorMu.Lock()
	if checked += checkEvalFloors(t, s2.Store, cfg.Run, 2, floors); checked == 0 {
		t.Error("no checkpoint of party 2 had evaluation chunks below its floor: nothing was checked")
	}
	floorMu.Unlock()
	r := s2.Resumed
	if r == nil {
		t.Fatal("the summary of the resumed run has no recovery report")
	}
	t.Logf("first part %d steps; resumed from step %d: %d applied again (%d mismatched, %d missing), %d skipped, %d messages read in %.3fs; %d steps, accuracy %.4f",
		s1.Steps, r.FromSteps, r.Reapplied, r.Mismatched, r.Missing, r.Skipped, r.Read, r.LogSeconds, s2.Steps, s2.TestAccuracy)
	if r.Reapplied == 0 || r.Mismatched != 0 || r.Missing != 0 || r.Duplicated != 0 || r.Resent != 0 || r.Unrecovered != 0 {
		t.Errorf("recovery: %+v", r)
	}
	t.Logf("read from stream sequence %d (%q)", r.ReadFrom, r.FromStart)
	if floor != (r.ReadFrom > 1) || floor != (r.OthersFrom > 1) {
		t.Errorf("checkpoint with floor %v: recovery read from %d, hellos and evaluations from %d (%q)", floor, r.ReadFrom, r.OthersFrom, r.FromStart)
	}
	// Party 2 put back a checkpoint of the same kind: its replies are
	// read from that checkpoint's floor if it has one.
	if len(s2.PartyRepliesFrom) != cfg.Parties || floor != (s2.PartyRepliesFrom[1] > 1) {
		t.Errorf("checkpoint with floor %v: party 2 read its replies from %v", floor, s2.PartyRepliesFrom)
	}
	// And its evaluation outputs; none of them taken for lost (the
	// broker did not crash: a chunk counted lost is a wrong floor).
	if len(s2.PartyEvalsFrom) != cfg.Parties || floor != (s2.PartyEvalsFrom[1] > 1) || s2.PartyEvalChunksLost != 0 {
		t.Errorf("checkpoint with floor %v: party 2 read its evaluations from %v, %d chunks lost", floor, s2.PartyEvalsFrom, s2.PartyEvalChunksLost)
	}
	if s2.Steps <= s1.Steps || s2.TestAccuracy < 0.9 {
		t.Errorf("resumed run: %d steps after %d, accuracy %.4f", s2.Steps, s1.Steps, s2.TestAccuracy)
	}
	for r, n := range s2.Rejected {
		if strings.HasPrefix(r, "trust-") {
			t.Errorf("the resumed run's receivers rejected %d messages as %s: %v", n, r, s2.Rejected)
		}
	}
	au, err := streamaudit.Store(context.Background(), storeIn(out), cfg.Run, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stream: %v", au)
	if !au.OK() || au.Answered != s2.Steps || au.Unanswered > int64(cfg.Parties*cfg.Window)+s2.LateOutputs {
		t.Errorf("stream audit: %v; summary: %d steps, %d late", au, s2.Steps, s2.LateOutputs)
	}
}

// With the trust layer on, Train's Resume needs the first part's keys:
// without --out or a keys folder they were temporary, and it fails at
// once (before loading data or starting a broker) and says why.
func TestResumeNeedsKeys(t *testing.T) {
	c := New(func(c *Config) {
		c.Synthetic = small()
		c.Parties = 2
		c.Algo = "asyrevel-gau"
		c.Duration = time.Second
		c.Run = "rt"
		c.Resume = true
		c.CheckpointDir = t.TempDir()
		c.NATS = "nats://127.0.0.1:1"
	})
	_, err := Train(context.Background(), c, Hooks{Log: testLog(t)})
	if !errors.Is(err, ErrResumeTrust) || !strings.Contains(err.Error(), "keys") {
		t.Errorf("train --resume without kept keys: %v, want ErrResumeTrust", err)
	}
	c.Out = t.TempDir() // no keys there either: a clear error, not a new key pair
	if _, err := Train(context.Background(), c, Hooks{}); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "resuming needs the run's keys") {
		t.Errorf("train --resume with an empty --out: %v", err)
	}
}

// evalFloor is a party checkpoint's StreamFloor and FloorEvalSeq.
type evalFloor struct{ stream, evalSeq uint64 }

// checkEvalFloors checks what a resume from each of party m's
// checkpoints assumes when it reads the party's evaluation chunks from
// the checkpoint's floor: every chunk numbered after FloorEvalSeq lies
// above StreamFloor, and the chunks up to FloorEvalSeq are in the stream.
// It returns how many checkpoints had chunks below their floor.
func checkEvalFloors(t *testing.T, store, run string, m int, floors []evalFloor) int {
	t.Helper()
	l, err := replay.Open(context.Background(), replay.Source{Store: store, Run: run})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	at := map[uint64]uint64{} // chunk sequence number -> stream sequence
	err = l.Each(context.Background(), replay.ReadOptions{}, func(r *replay.Record) error {
		if e := r.Eval(); e != nil && r.Sender == m {
			at[e.Seq] = r.Seq
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, f := range floors {
		for seq, s := range at {
			if seq > f.evalSeq && s <= f.stream {
				t.Errorf("chunk %d (stream %d) after the floor's chunk %d lies at or below the floor %d", seq, s, f.evalSeq, f.stream)
			}
		}
		for seq := uint64(1); seq <= f.evalSeq; seq++ {
			if _, ok := at[seq]; !ok {
				t.Errorf("chunk %d, up to the floor's %d, is not in the stream", seq, f.evalSeq)
			}
		}
		if f.evalSeq > 0 {
			checked++
		}
	}
	t.Logf("party %d: %d checkpoints' evaluation floors checked against %d chunks (%d with chunks below)", m, len(floors), len(at), checked)
	return checked
}
