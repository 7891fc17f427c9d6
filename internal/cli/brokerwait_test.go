package cli

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	runpkg "github.com/asyrevel/asyrevel/run"
)

// Start order does not matter: the parties and the aggregator started
// before their broker wait for it (saying so every few seconds) and the
// run goes on once it listens; with --broker-wait 0s a participant fails
// at once and names the broker.
func TestStartedBeforeTheBroker(t *testing.T) {
	t.Parallel()
	port := freePort(t)
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	code, _, errOut := runCLI(t, "party", "--nats", url, "--run", "early", "--id", "1", "--parties", "1",
		"--data", "synthetic:n=600,d=8,test=100", "--broker-wait", "0s")
	if code == 0 || !strings.Contains(errOut, "broker") {
		t.Fatalf("no broker, no wait: exit %d: %s", code, errOut)
	}
	common := []string{"--nats", url, "--run", "early", "--parties", "2", "--privacy", labelled, "--data", "synthetic:n=1500,d=8,test=300,noise=0.02",
		"--batch", "16", "--log", "warn"}
	// The broker starts once each participant has said it waits for one
	// (not after a fixed 6 s, which a busy machine could spend starting).
	waiting := func(args ...string) (<-chan result, *signalOn) {
		w := &signalOn{word: "retrying (--broker-wait)", seen: make(chan struct{})}
		ch := make(chan result, 1)
		go func() {
			var out syncBuffer
			code := execute(ctx, args, &out, w)
			ch <- result{code: code, out: out.String(), errOut: w.String()}
		}()
		return ch, w
	}
	var ps []<-chan result
	var said []*signalOn
	for _, m := range []string{"1", "2"} {
		p, w := waiting(append([]string{"party", "--id", m}, common...)...)
		ps, said = append(ps, p), append(said, w)
	}
	agg, w := waiting(append([]string{"aggregator", "--epochs", "2", "--out", t.TempDir()}, common...)...)
	for _, w := range append(said, w) {
		select {
		case <-w.seen:
		case <-ctx.Done():
			t.Fatalf("a participant never said it waits for the broker: %s", w.String())
		}
	}
	bctx, stop := context.WithCancel(ctx)
	defer stop()
	brk := goCLI(bctx, "broker", "--port", strconv.Itoa(port), "--store", t.TempDir())
	r := <-agg
	if r.code != 0 {
		t.Fatalf("aggregator: exit %d: %s", r.code, r.errOut)
	}
	if !strings.Contains(r.errOut, "retrying (--broker-wait)") {
		t.Errorf("the aggregator did not say it waited: %s", r.errOut)
	}
	for _, p := range ps {
		if r := <-p; r.code != 0 {
			t.Errorf("party: exit %d: %s", r.code, r.errOut)
		}
	}
	stop()
	<-brk
}

// A broker that goes down for a few seconds and comes back on its store,
// with nobody touching the participants: each of them resumes by itself
// from its checkpoint and the stream, the aggregator names the broker
// (not the parties) while it is gone and counts nobody as departed, the
// run ends normally, and its summary states the outage and the resume.
//
// No step of it is timed: the broker stops once every participant has
// saved a checkpoint in training (not after 5 s, which a busy machine
// could spend starting), it comes back once the aggregator has said it
// waited 4 s or more for the broker, longer than --party-timeout 2s (not
// after 4 s of the test's own clock), and the run ends after a fixed
// number of steps (not a --duration that the outage ate into).
func TestBrokerOutageIsNamed(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("short")
	}
	port := freePort(t)
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	store, ckpt := t.TempDir(), t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	bctx, stop := context.WithCancel(ctx)
	brk := goCLI(bctx, "broker", "--port", strconv.Itoa(port), "--store", store)
	waitPort(t, port)
	// The run's end: it trains at 5,000 to 10,000 steps a second on an idle
	// machine, and the broker stops some 200 ms into training.
	const run, steps = "outage", 20000
	// --wait is only a bound on a hang: the outage must not reach it.
	common := []string{"--nats", url, "--run", run, "--parties", "2", "--privacy", labelled, "--data", "synthetic:n=1500,d=8,test=300,noise=0.02",
		"--batch", "16", "--log", "warn", "--wait", "60s", "--checkpoint-every", "200ms", "--checkpoint-dir", ckpt}
	var ps []<-chan result
	for _, m := range []string{"1", "2"} {
		ps = append(ps, goCLI(ctx, append([]string{"party", "--id", m}, common...)...))
	}
	out := t.TempDir()
	// The aggregator's log is read as it runs: its own words say how long
	// it has waited for the broker (a line every 5 s, "broker at URL
	// unreachable ... waited=5s"; or, should it wait in training rather
	// than resume, "the broker is unreachable ... for=6s").
	gone := &signalOnMatch{re: regexp.MustCompile(`unreachable[^\n]*\b(waited|for)=([4-9]|[1-9][0-9]+)s`), seen: make(chan struct{})}
	agg := make(chan result, 1)
	aggDone := make(chan struct{})
	var aggOut syncBuffer
	go func() {
		defer close(aggDone)
		o := &aggOut
		code := execute(ctx, append([]string{"aggregator", "--steps", strconv.Itoa(steps), "--party-timeout", "2s", "--out", out}, common...), o, gone)
		fmt.Fprintf(gone, "(exit %d)\n", code)
		agg <- result{code: code, out: o.String(), errOut: gone.String()}
	}()
	// Training: every participant has saved its state at least once, and
	// the aggregator a second time (a periodic save, with steps applied).
	first := waitCheckpoints(t, ckpt, run, 2, time.Time{}, aggDone, gone)
	waitCheckpoints(t, ckpt, run, 0, first, aggDone, gone)
	stop()
	<-brk
	select {
	case <-gone.seen:
	case <-aggDone:
		t.Fatalf("the run ended before the broker's outage showed: %s", gone.String())
	case <-ctx.Done():
		t.Fatalf("the aggregator never said it waited 4 s for the broker: %s", gone.String())
	}
	b2ctx, stop2 := context.WithCancel(ctx)
	defer stop2()
	brk2 := goCLI(b2ctx, "broker", "--port", strconv.Itoa(port), "--store", store)
	r := <-agg
	for i, p := range ps {
		if pr := <-p; pr.code != 0 {
			t.Errorf("party %d: exit %d: %s", i+1, pr.code, pr.errOut)
		}
	}
	stop2()
	<-brk2
	if r.code != 0 {
		t.Errorf("aggregator: exit %d: %s", r.code, r.errOut)
	}
	if strings.Contains(r.errOut, "departed") || !strings.Contains(r.errOut, "unreachable") {
		t.Errorf("aggregator: want the broker named and no departure: %s", r.errOut)
	}
	var s struct {
		Outage  float64 `json:"broker_outage_seconds"`
		Resumes int     `json:"broker_resumes"`
		Steps   int64   `json:"steps"`
	}
	raw, err := readSummary(out, &s)
	t.Logf("summary: outage %.1f s, %d resumes, %d steps", s.Outage, s.Resumes, s.Steps)
	if err != nil || s.Outage < 3 || s.Resumes != 1 || s.Steps != steps {
		t.Errorf("summary: outage %.1f s (want 3 or more), %d resumes (want 1), %d steps (want %d) (%v): %s", s.Outage, s.Resumes, s.Steps, steps, err, raw)
	}
}

// waitCheckpoints waits until the checkpoint files of run in dir of the
// aggregator and of parties 1 to parties were all written after after
// (their files' modification times), and returns the aggregator's; it
// fails the test, with the aggregator's log, if it ends (done) first.
func waitCheckpoints(t *testing.T, dir, run string, parties int, after time.Time, done <-chan struct{}, log fmt.Stringer) time.Time {
	t.Helper()
	for deadline := time.Now().Add(patience); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		select {
		case <-done:
			t.Fatalf("the aggregator ended before its checkpoints were written in %s: %s", dir, log)
		default:
		}
		var agg time.Time
		all := true
		for role := 0; role <= parties && all; role++ {
			fi, err := os.Stat(runpkg.CheckpointPath(dir, run, role))
			all = err == nil && fi.ModTime().After(after)
			if role == 0 && all {
				agg = fi.ModTime()
			}
		}
		if all {
			return agg
		}
	}
	t.Fatalf("no checkpoint of run %s written in %s after %v (waited %v)", run, dir, after, patience)
	return time.Time{}
}
