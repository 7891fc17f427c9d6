package main

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
	port := freePort(t)
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	code, _, errOut := runCLI(t, "party", "--nats", url, "--run", "early", "--id", "1", "--parties", "1",
		"--data", "synthetic:n=600,d=8,test=100", "--broker-wait", "0s")
	if code == 0 || !strings.Contains(errOut, "broker") {
		t.Fatalf("no broker, no wait: exit %d: %s", code, errOut)
	}
	common := []string{"--nats", url, "--run", "early", "--parties", "2", "--data", "synthetic:n=1500,d=8,test=300,noise=0.02",
		"--batch", "16", "--log", "warn"}
	var ps []<-chan result
	for _, m := range []string{"1", "2"} {
		ps = append(ps, goCLI(ctx, append([]string{"party", "--id", m}, common...)...))
	}
	agg := goCLI(ctx, append([]string{"aggregator", "--epochs", "2", "--out", t.TempDir()}, common...)...)
	time.Sleep(6 * time.Second) // a progress line each
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
