package aggregator

import (
	"context"
	"testing"
	"time"
)

// A resumed aggregator's live subscription to the requests starts at the
// first request that recovery read and did not apply: nothing recovery
// applied, or the checkpoint had, is delivered a second time. Before, it
// started at the checkpoint's floor (the stream's start without one), and
// every request up to the end of recovery's read was delivered again and
// skipped before the first new one was answered (10,000 to 20,000 on a9a:
// 0.1 to 0.2 s of the return after a broker outage).
func TestLiveRequestsGoOnAfterRecovery(t *testing.T) {
	const n = 50
	a, _, outs, _ := trustTest(t, 2, n)
	train(a, make([]float64, n*2))
	lg, request := storedRequests(t, a, outs[1], n)
	hub := lg.hub
	ctx := context.Background()
	var ck *Checkpoint
	for i := range 6 {
		a.handleOutputs(ctx, request())
		if i == 2 {
			ck = a.Checkpoint()
		}
	}
	request() // stored, never answered: the aggregator lost its broker
	request()

	b, err := New(a.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Resume(ck); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := b.Run(rctx, hub.Connect("aggregator")); done <- err }()
	// Training goes on: the two requests in flight are answered live.
	for {
		b.mu.Lock()
		steps := b.res.Steps
		b.mu.Unlock()
		if steps >= 8 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the resumed aggregator stopped at %d steps: %v", steps, err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	cancel()
	<-done
	r := b.resumed
	if r.Reapplied != 3 || r.Mismatched != 0 || r.Missing != 0 {
		t.Fatalf("recovery %+v", r)
	}
	if r.Skipped != 0 {
		t.Errorf("the live subscription delivered %d requests a second time that were applied before it (it starts at the first request recovery did not apply)", r.Skipped)
	}
}
