package cli

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/asyrevel/asyrevel/trust"
)

// The README's parties started without the aggregator, stopped, then
// started again with the aggregator and the same --run: the dead
// processes' hellos are not joins, the run trains with the live ones and
// ends, and its log passes audit verify and replay --reexecute. Before,
// the aggregator took the dead parties' hellos and initial passes ("table
// filled; training starts"), the new parties were told "run id already
// used", and the aggregator waited for parties that were gone.
func TestDeadJoinIsNotAJoin(t *testing.T) {
	t.Parallel()
	const run = "deadjoin"
	keys, store, receipts, out := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	if code, _, errOut := runCLI(t, "keys", "--run", run, "--parties", "2", "--auditor", "--out", keys); code != 0 {
		t.Fatal(errOut)
	}
	roster := filepath.Join(keys, "roster.json")
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	port := freePort(t)
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	bctx, stopBroker := context.WithCancel(ctx)
	brokerDone := goCLI(bctx, "broker", "--roster", roster, "--port", strconv.Itoa(port), "--store", store)
	var once sync.Once
	var brokerOut result
	stop := func() { once.Do(func() { stopBroker(); brokerOut = <-brokerDone }) }
	defer stop()
	waitPort(t, port)
	common := []string{"--nats", url, "--run", run, "--parties", "2", "--data", "synthetic:n=1500,d=8,test=300,noise=0.02",
		"--batch", "16", "--log", "warn", "--roster", roster}
	party := func(ctx context.Context, m string) <-chan result {
		return goCLI(ctx, append([]string{"party", "--id", m, "--key", filepath.Join(keys, "party-"+m+".nk"), "--receipts", receipts}, common...)...)
	}
	// The parties alone: they say hello, then are stopped (Ctrl-C).
	pctx, stopParties := context.WithCancel(ctx)
	dead := []<-chan result{party(pctx, "1"), party(pctx, "2")}
	waitHellos(t, ctx, url, run, filepath.Join(keys, "auditor.nk"), 2)
	stopParties()
	for _, p := range dead {
		<-p
	}
	// Everyone again, the aggregator too, with the same --run.
	live := []<-chan result{party(ctx, "1"), party(ctx, "2")}
	agg := <-goCLI(ctx, append([]string{"aggregator", "--epochs", "2", "--join-wait", "30s", "--out", out,
		"--key", filepath.Join(keys, "aggregator.nk")}, common...)...)
	if agg.code != 0 {
		t.Fatalf("aggregator: exit %d after %v: %s", agg.code, agg.took.Round(time.Millisecond), agg.errOut)
	}
	for i, p := range live {
		if r := <-p; r.code != 0 {
			t.Fatalf("party %d: exit %d: %s", i+1, r.code, r.errOut)
		}
	}
	waitSealed(t, ctx, url, run, filepath.Join(keys, "auditor.nk"))
	stop()
	if !strings.Contains(brokerOut.out, "its stream is sealed") {
		t.Errorf("the broker did not seal the finished run's stream: %s%s", brokerOut.out, brokerOut.errOut)
	}
	code, stdout, errOut := runCLI(t, "audit", "verify", "--store", store, "--run", run, "--roster", roster, "--receipts", receipts)
	if code != 0 || !strings.Contains(stdout, "verdict: intact") {
		t.Fatalf("audit verify: exit %d: %s%s\naggregator: %s", code, stdout, errOut, agg.errOut)
	}
	code, stdout, errOut = runCLI(t, "replay", "--store", store, "--run", run, "--out", t.TempDir(), "--reexecute", "--summary", filepath.Join(out, "summary.json"))
	if code != 0 || !strings.Contains(stdout+errOut, " 0 different") {
		t.Fatalf("replay --reexecute: exit %d: %s%s", code, stdout, errOut)
	}
	// The default privacy's label-free run has no reply to recompute,
	// and re-execution says so rather than name a reply it never sent.
	if !strings.Contains(errOut, "label-free: no replies to recompute") || strings.Contains(errOut, "defense: reply") {
		t.Errorf("replay --reexecute of a label-free run does not say it has no replies: %s", errOut)
	}
}

// waitHellos waits until run's stream holds n hellos, read as the run's
// auditor.
func waitHellos(t *testing.T, ctx context.Context, url, run, auditorKey string, n uint64) {
	t.Helper()
	waitStream(t, ctx, url, run, auditorKey, fmt.Sprintf("%d hellos", n), func(info *jetstream.StreamInfo) bool {
		var got uint64
		for _, c := range info.State.Subjects {
			got += c
		}
		return got >= n
	}, jetstream.WithSubjectFilter("asyrevel."+run+".join.*"))
}

// waitSealed waits until run's stream is sealed (asyrevel broker
// --roster seals it once the run is over), read as the run's auditor.
func waitSealed(t *testing.T, ctx context.Context, url, run, auditorKey string) {
	t.Helper()
	waitStream(t, ctx, url, run, auditorKey, "sealed", func(info *jetstream.StreamInfo) bool { return info.Config.Sealed })
}

// waitStream waits until run's stream info, read as the run's auditor,
// satisfies ok.
func waitStream(t *testing.T, ctx context.Context, url, run, auditorKey, what string, ok func(*jetstream.StreamInfo) bool, opts ...jetstream.StreamInfoOpt) {
	t.Helper()
	k, err := trust.ReadKeyFile(auditorKey)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url, k.NATSOption(), nats.CustomInboxPrefix(trust.InboxPrefix(run, trust.AuditorID)))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for ctx.Err() == nil {
		if st, err := js.Stream(ctx, trust.StreamName(run)); err == nil {
			if info, err := st.Info(ctx, opts...); err == nil && ok(info) {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the run's stream was never %s", what)
}
