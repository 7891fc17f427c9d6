package cli

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"
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
func TestBrokerOutageIsNamed(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("short")
	}
	port := freePort(t)
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	store := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	bctx, stop := context.WithCancel(ctx)
	brk := goCLI(bctx, "broker", "--port", strconv.Itoa(port), "--store", store)
	waitPort(t, port)
	common := []string{"--nats", url, "--run", "outage", "--parties", "2", "--privacy", labelled, "--data", "synthetic:n=1500,d=8,test=300,noise=0.02",
		"--batch", "16", "--log", "warn", "--wait", "8s", "--checkpoint-every", "500ms"}
	var ps []<-chan result
	for _, m := range []string{"1", "2"} {
		ps = append(ps, goCLI(ctx, append([]string{"party", "--id", m}, common...)...))
	}
	out := t.TempDir()
	agg := goCLI(ctx, append([]string{"aggregator", "--duration", "12s", "--party-timeout", "2s", "--out", out}, common...)...)
	time.Sleep(5 * time.Second) // training
	stop()
	<-brk
	time.Sleep(4 * time.Second) // longer than --party-timeout
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
	if raw, err := readSummary(out, &s); err != nil || s.Outage < 3 || s.Resumes != 1 || s.Steps == 0 {
		t.Errorf("summary: outage %.1f s, %d resumes, %d steps (%v): %s", s.Outage, s.Resumes, s.Steps, err, raw)
	}
}
