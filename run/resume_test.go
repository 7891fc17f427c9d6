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
	"github.com/asyrevel/asyrevel/party"
	"github.com/asyrevel/asyrevel/replay"
)

// TestResumeAppliesEachUpdateOnce interrupts a run, puts back the
// aggregator's first checkpoint (as if it had died right after it, so
// that everything it answered since must be applied again from the
// stream), resumes the run and checks from the stream's sequence numbers
// that every request was answered at most once, none is lost, and that
// the replies computed again are bit-identical to the recorded ones. The
// trust layer is on: the resumed participants go on with their chains,
// so no receiver rejects anything, and a checkpoint file with one byte
// changed is refused.
//
// From the first checkpoint the resume reads the whole stream (the
// checkpoint holds no floor yet); from the third it reads the requests
// and replies from the checkpoint's floor (Recovery.ReadFrom), fewer
// messages, and must find the same.
func TestResumeAppliesEachUpdateOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	for _, tc := range []struct {
		name string
		nth  int // which of the aggregator's checkpoints is put back
	}{{"first", 1}, {"third", 3}} {
		t.Run(tc.name, func(t *testing.T) { testResumeOnce(t, tc.nth) })
	}
}

// watchCheckpoint sends the nth version of the checkpoint file at path as
// it is written (polled every 5 ms for up to 2 minutes; closed without one).
func watchCheckpoint(path string, nth int) <-chan []byte {
	ch := make(chan []byte, 1)
	go func() {
		defer close(ch)
		var last []byte
		seen := 0
		// Polled until a generous deadline, not a count of polls: under
		// load a run's setup alone can outlast two seconds.
		for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); {
			if b, err := os.ReadFile(path); err == nil && !bytes.Equal(b, last) {
				if last, seen = b, seen+1; seen == nth {
					ch <- b
					return
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return ch
}

// interruptAfter passes on the checkpoint ck sends and interrupts the run
// (cancel) 600 ms after it: an interrupt at a fixed time could come
// before the checkpoint a test puts back when the machine is busy.
func interruptAfter(ck <-chan []byte, cancel context.CancelCauseFunc) <-chan []byte {
	out := make(chan []byte, 1)
	go func() {
		if b, ok := <-ck; ok {
			out <- b
		}
		close(out)
		time.Sleep(600 * time.Millisecond)
		cancel(errors.New("interrupt signal received"))
	}()
	return out
}

// interruptOnPoints passes on the checkpoint ck sends and interrupts the
// run (cancel) at the second evaluation after it (onPoint is the run's
// Hooks.OnPoint): a whole evaluation period of training comes after the
// checkpoint however fast or slow the machine is. interruptAfter's fixed
// 600 ms let a quiet machine finish the run's 20,000 steps before the
// interrupt came (make test: "first part: <nil>").
func interruptOnPoints(ck <-chan []byte, cancel context.CancelCauseFunc) (<-chan []byte, func(aggregator.Point)) {
	out := make(chan []byte, 1)
	seen := make(chan struct{})
	go func() {
		if b, ok := <-ck; ok {
			out <- b
		}
		close(out)
		close(seen)
	}()
	points := 0
	return out, func(pt aggregator.Point) {
		select {
		case <-seen:
		default:
			return
		}
		if points++; points == 2 {
			cancel(errors.New("interrupt signal received"))
		}
	}
}

func testResumeOnce(t *testing.T, nth int) {
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
		// Oftener than the evaluations: the third comes well before
		// the 20,000 steps end the run on a quiet machine.
		c.CheckpointEvery = 100 * time.Millisecond
	})
	path := CheckpointPath(cfg.CheckpointDir, cfg.Run, 0)
	aggCk := watchCheckpoint(path, nth)
	// Party 2 as if killed -9 after its checkpoint of the same rank too:
	// it computes again what it sent since, and its chains must follow
	// the stream.
	path2 := CheckpointPath(cfg.CheckpointDir, cfg.Run, 2)
	first2 := watchCheckpoint(path2, nth)
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
	ctx, cancel := context.WithCancelCause(context.Background())
	first, onPoint := interruptOnPoints(aggCk, cancel)
	s1, err := Train(ctx, cfg, Hooks{Log: testLog(t), onPartyCheckpoint: record, OnPoint: onPoint})
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("first part: %v", err)
	}
	floorMu.Lock()
	checked := checkEvalFloors(t, s1.Store, cfg.Run, 2, floors)
	floorMu.Unlock()
	old, ok := <-first
	if !ok {
		t.Fatal("no aggregator checkpoint was written")
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
	if old2, ok := <-first2; !ok || os.WriteFile(path2, old2, 0o644) != nil {
		t.Fatal("no checkpoint of party 2 to put back")
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
	if floor := nth > 1; floor != (r.ReadFrom > 1) || floor != (r.OthersFrom > 1) {
		t.Errorf("checkpoint %d: recovery read from %d, hellos and evaluations from %d (%q)", nth, r.ReadFrom, r.OthersFrom, r.FromStart)
	}
	// Party 2 put back its checkpoint of the same rank: its replies are
	// read from that checkpoint's floor from the third on.
	if len(s2.PartyRepliesFrom) != cfg.Parties || (nth > 1) != (s2.PartyRepliesFrom[1] > 1) {
		t.Errorf("checkpoint %d: party 2 read its replies from %v", nth, s2.PartyRepliesFrom)
	}
	// And its evaluation outputs; none of them taken for lost (the
	// broker did not crash: a chunk counted lost is a wrong floor).
	if len(s2.PartyEvalsFrom) != cfg.Parties || (nth > 1) != (s2.PartyEvalsFrom[1] > 1) || s2.PartyEvalChunksLost != 0 {
		t.Errorf("checkpoint %d: party 2 read its evaluations from %v, %d chunks lost", nth, s2.PartyEvalsFrom, s2.PartyEvalChunksLost)
	}
	if s2.Steps <= s1.Steps || s2.TestAccuracy < 0.9 {
		t.Errorf("resumed run: %d steps after %d, accuracy %.4f", s2.Steps, s1.Steps, s2.TestAccuracy)
	}
	for r, n := range s2.Rejected {
		if strings.HasPrefix(r, "trust-") {
			t.Errorf("the resumed run's receivers rejected %d messages as %s: %v", n, r, s2.Rejected)
		}
	}
	au, err := AuditRun(context.Background(), New(func(c *Config) {
		c.Synthetic = small()
		c.Parties = 4
		c.Run = cfg.Run
		c.Out = out
	}))
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
