package aggregator

import (
	"context"
	"testing"
)

// A checkpoint's stream position (Checkpoint.StreamFloor) is the lowest
// floor of its outbox's messages: none for the messages a fresh
// aggregator published before any count of the stream (the first save's
// probe), so its first checkpoints hold none. A resumed aggregator's
// never fall back to none (issue 34): recovery counts the stream before
// the aggregator publishes anything, so its checkpoints hold that count
// from the first on, before any save has counted again, and a resume
// from them reads from there.
func TestResumedCheckpointsKeepTheirStreamPosition(t *testing.T) {
	const n = 50
	a, _, outs, _ := trustTest(t, 2, n)
	train(a, make([]float64, n*2))
	lg, request := storedRequests(t, a, outs[1], n)
	ctx := context.Background()
	for range 3 {
		a.handleOutputs(ctx, request())
	}
	ck := a.Checkpoint()
	if ck.StreamFloor != 0 || len(ck.Outbox) == 0 {
		t.Fatalf("a fresh aggregator's checkpoint before any count: floor %d, %d kept messages; want none, some", ck.StreamFloor, len(ck.Outbox))
	}
	for range 3 {
		a.handleOutputs(ctx, request())
	}

	resume := func(ck *Checkpoint) *Aggregator { return resumedOn(t, a.cfg, lg.bus, ck) }
	stored := lg.hub.Len() // the stream's count when recovery begins
	b := resume(ck)
	if r := b.resumed; r.ReadFrom != 1 || r.FromStart == "" || r.Reapplied != 3 {
		t.Fatalf("resumed from a checkpoint without a floor: %+v", r)
	}
	for step, answer := range []int{0, 2} {
		for range answer {
			b.handleOutputs(ctx, request())
		}
		c := b.Checkpoint()
		if c.StreamFloor != stored {
			t.Errorf("resumed aggregator's checkpoint %d: floor %d, want %d (the count recovery took)", step+1, c.StreamFloor, stored)
		}
		for _, s := range c.Outbox {
			if s.Floor != stored {
				t.Errorf("checkpoint %d: message %s %d kept with floor %d, want %d", step+1, s.Subject, s.Seq, s.Floor, stored)
			}
		}
		ck = c
	}

	// Resumed from the resumed aggregator's checkpoint: read from its
	// floor (nothing after it to apply again).
	b2 := resume(ck)
	if r := b2.resumed; r.ReadFrom != stored || r.FromStart != "" || r.Reapplied != 0 || r.Mismatched != 0 || r.Missing != 0 {
		t.Errorf("resumed from a resumed aggregator's checkpoint: %+v, want read from %d", r, stored)
	}
}
