package cli

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
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
