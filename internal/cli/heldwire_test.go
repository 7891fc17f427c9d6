package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/run"
)

// Issue 34: the aggregator and the parties in processes of their own hold
// out the rows `train` would, with no --holdout on the parties: the
// aggregator, stopping by patience, keeps DefaultHoldOut of the training
// rows aside and its call tells each party, which keeps the same rows
// aside before it answers (its hello counts them as the aggregator's). A
// party given another --holdout refuses the call, naming both and the fix;
// the run goes on when it comes back without it. Before, the aggregator
// held out nothing unless every process was given --holdout, and watched
// the training loss.
func TestSeparateProcessesHoldOutAlike(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := writeTumours(t, dir, 455)
	url := startBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	out := filepath.Join(dir, "out")
	common := []string{"--nats", url, "--run", "heldwire", "--parties", "2", "--data", data, "--log", "warn", "--privacy", labelled}
	agg := goCLI(ctx, append([]string{"aggregator", "--join-wait", "60s", "--out", out, "--no-privacy-report"}, common...)...)
	common = append(common, "--scale", "standard")
	p1 := goCLI(ctx, append([]string{"party", "--id", "1"}, common...)...)
	var bad result
	select {
	case bad = <-goCLI(ctx, append([]string{"party", "--id", "2", "--holdout", "0.2"}, common...)...):
	case a := <-agg:
		t.Fatalf("aggregator: exit %d before the parties joined: %s%s", a.code, a.out, a.errOut)
	}
	if bad.code == 0 {
		t.Fatalf("a party given --holdout 0.2 joined a run that holds out 0.1: %s", bad.out)
	}
	for _, w := range []string{"the aggregator keeps 0.1 of the training rows aside, chosen with seed 1", "this party was given --holdout 0.2 --seed 1",
		"same --holdout and --seed, or drop them here"} {
		if !strings.Contains(bad.errOut, w) {
			t.Errorf("the refusal does not say %q: %s", w, bad.errOut)
		}
	}
	p2 := goCLI(ctx, append([]string{"party", "--id", "2"}, common...)...)
	a := <-agg
	if a.code != 0 {
		t.Fatalf("aggregator: exit %d: %s%s", a.code, a.out, a.errOut)
	}
	for m, p := range []<-chan result{p1, p2} {
		r := <-p
		if r.code != 0 {
			t.Fatalf("party %d: exit %d: %s%s", m+1, r.code, r.out, r.errOut)
		}
		// round(0.1 * 455) of the rows, as train holds out.
		if w := "kept 46 training rows aside, as the aggregator did (--holdout 0.1 --seed 1)"; !strings.Contains(r.out, w) {
			t.Errorf("party %d does not say %q: %s", m+1, w, r.out)
		}
	}
	var s stopSummary
	if raw, err := readSummary(out, &s); err != nil {
		t.Fatal(err)
	} else if s.EarlyStop == nil || s.EarlyStop.Watched != "held-out" || s.EarlyStop.HeldOut != 46 || s.Samples != 409 {
		t.Fatalf("the aggregator's summary: %s", raw)
	}
	if !strings.Contains(a.out, "held-out accuracy") {
		t.Errorf("the aggregator's report does not give the held-out accuracy: %s", a.out)
	}
}

// A party that took the aggregator's hold-out from its call and is then
// stopped and started again with --resume (no --holdout on either) keeps
// aside what its checkpoint records: its requests name rows the
// aggregator trains on, nothing is rejected, and the whole signed log
// passes audit verify. The party is stopped after its first checkpoint
// and the aggregator once the resumed party has saved one of its own, as
// TestSeparateResumeTrusted does, never at a time.
func TestResumedPartyKeepsTheHoldOut(t *testing.T) {
	t.Parallel()
	srv, store, keys := rosterBroker(t, "heldres", 2)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	ckDir := t.TempDir()
	common := []string{"--nats", srv.URL(), "--run", "heldres", "--parties", "2", "--batch", "16", "--log", "warn", "--privacy", labelled,
		"--roster", filepath.Join(keys, "roster.json"), "--checkpoint-dir", ckDir, "--checkpoint-every", "200ms", "--data", "synthetic:n=2000,d=8,test=400"}
	ck2 := run.CheckpointPath(ckDir, "heldres", 2)
	key := func(id string) []string { return []string{"--key", filepath.Join(keys, id+".nk")} }
	party := func(ctx context.Context, id string, more ...string) <-chan result {
		return goCLI(ctx, slices.Concat([]string{"party", "--id", id}, key("party-"+id), common, more)...)
	}
	aggregator := func(ctx context.Context, more ...string) <-chan result {
		// A run of a given length holds out rows only when told to.
		return goCLI(ctx, slices.Concat([]string{"aggregator", "--holdout", "0.1", "--eval-every", "500ms"}, key("aggregator"), common, more)...)
	}
	p1 := party(ctx, "1")
	c2, stop2 := context.WithCancelCause(ctx)
	p2 := party(c2, "2")
	ca, stopA := context.WithCancelCause(ctx)
	agg := aggregator(ca, "--duration", "10m")
	first := waitFile(t, ctx, ck2, nil)
	stop2(errors.New("terminated"))
	if r := <-p2; r.code != exitPaused || !strings.Contains(r.out, "kept 200 training rows aside") {
		t.Fatalf("party 2 stopped: exit %d, want %d (paused), having kept 200 rows aside: %s%s", r.code, exitPaused, r.out, r.errOut)
	}
	p2 = party(ctx, "2", "--resume")
	waitFile(t, ctx, ck2, first)
	stopA(errors.New("terminated"))
	if r := <-agg; r.code != exitPaused {
		t.Fatalf("aggregator stopped: exit %d, want %d (paused): %s", r.code, exitPaused, r.errOut)
	}
	ra := <-aggregator(ctx, "--resume", "--duration", "1s")
	r1, r2 := <-p1, <-p2
	for name, r := range map[string]result{"aggregator resumed": ra, "party 1": r1, "party 2 resumed": r2} {
		if r.code != 0 || strings.Contains(r.errOut, "rejected message") || strings.Contains(r.errOut, "trust-") {
			t.Errorf("%s: exit %d: %s", name, r.code, r.errOut)
		}
	}
	if w := "party 2 kept 200 training rows aside, as the aggregator did (--holdout 0.1 --seed 1)"; !strings.Contains(r2.out, w) {
		t.Errorf("the resumed party does not say %q: %s", w, r2.out)
	}
	srv.Shutdown()
	code, out, errOut := runCLI(t, "audit", "verify", "--store", store, "--run", "heldres", "--roster", filepath.Join(keys, "roster.json"))
	if code != 0 || !strings.Contains(out, "intact") || strings.Contains(out, "rejected by their receiver") {
		t.Errorf("audit verify: exit %d: %s%s", code, out, errOut)
	}
}

// waitFile waits until path holds something other than not (nil: until
// it exists) and returns it.
func waitFile(t *testing.T, ctx context.Context, path string, not []byte) []byte {
	t.Helper()
	for ctx.Err() == nil {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 && (not == nil || !bytes.Equal(b, not)) {
			return b
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s: no new file before the test's deadline", path)
	return nil
}
