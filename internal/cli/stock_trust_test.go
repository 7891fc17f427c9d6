package cli

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/broker/bustest"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/trust"
)

// An operator who runs a stock nats-server (Debian's 2.9.10 where
// installed) configures it with the block of asyrevel keys server-config;
// the aggregator and the parties then train through it with their keys,
// in every transport design. A connection without a key is refused, and
// so is a party that publishes on another party's subject or reads
// another party's replies.
func TestStockServerRoster(t *testing.T) {
	t.Parallel()
	if bustest.StockServerBinary() == "" {
		t.Skipf("no stock nats-server binary: install one (make stock-server, or apt-get install nats-server) or set %s", bustest.StockServerEnv)
	}
	for _, design := range []string{"capture", "ordered", "acked"} {
		t.Run(design, func(t *testing.T) {
			run := "stock" + design
			keys := t.TempDir()
			if code, _, errOut := runCLI(t, "keys", "--run", run, "--parties", "2", "--out", keys); code != 0 {
				t.Fatal(errOut)
			}
			roster := filepath.Join(keys, "roster.json")
			code, block, errOut := runCLI(t, "keys", "server-config", roster)
			if code != 0 {
				t.Fatalf("keys server-config: exit %d: %s", code, errOut)
			}
			url, version := bustest.StartStockServerConfig(t, block)
			t.Logf("nats-server %s", version)

			if nc, err := nats.Connect(url); err == nil {
				nc.Close()
				t.Fatal("an anonymous connection was admitted")
			}
			checkStockRefusals(t, url, run, keys)

			ctx, cancel := context.WithTimeout(context.Background(), patience)
			defer cancel()
			common := []string{"--nats", url, "--run", run, "--privacy", "off", "--parties", "2", "--transport", design,
				"--data", "synthetic:n=2000,d=8,test=400,noise=0.02", "--batch", "16", "--log", "info",
				"--roster", roster, "--checkpoint-every", "-1s"}
			var ps []<-chan result
			for _, m := range []string{"1", "2"} {
				ps = append(ps, goCLI(ctx, append([]string{"party", "--id", m, "--key", filepath.Join(keys, "party-"+m+".nk")}, common...)...))
			}
			out := t.TempDir()
			agg := <-goCLI(ctx, append([]string{"aggregator", "--epochs", "8", "--out", out, "--key", filepath.Join(keys, "aggregator.nk")}, common...)...)
			if agg.code != 0 {
				cancel()
				for _, p := range ps {
					r := <-p
					t.Logf("party: exit %d: %s", r.code, r.errOut)
				}
				t.Fatalf("aggregator: exit %d after %v: %s%s", agg.code, agg.took, agg.out, agg.errOut)
			}
			var partyLogs []string
			for i, p := range ps {
				r := <-p
				if r.code != 0 {
					t.Errorf("party %d: exit %d: %s", i+1, r.code, r.errOut)
				}
				partyLogs = append(partyLogs, r.errOut)
			}
			var s struct {
				Acc      float64          `json:"test_accuracy"`
				Steps    int64            `json:"steps"`
				Rejected map[string]int64 `json:"rejected"`
				Outputs  int64            `json:"outputs"`
				Stream   struct {
					Out  int64 `json:"out"`
					Rcpt int64 `json:"rcpt"`
				} `json:"stream"`
			}
			raw, err := readSummary(out, &s)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s through nats-server %s: %d steps, test accuracy %.3f in %v", design, version, s.Steps, s.Acc, agg.took.Round(time.Millisecond))
			// Every party countersigned the final checkpoint: it had
			// received every reply the checkpoint covers, through its own
			// consumers.
			if s.Acc < 0.85 || s.Steps == 0 || len(s.Rejected) > 0 || s.Stream.Out != s.Outputs || s.Stream.Rcpt < 2 {
				t.Fatalf("training through the stock server: %s\naggregator: %s\nparties: %s", raw, agg.errOut, strings.Join(partyLogs, "\n"))
			}
		})
	}
}

// With --no-stream-create the aggregator may not create the stream: it
// says so at once instead of waiting for an answer that never comes.
func TestStockServerNoStreamCreate(t *testing.T) {
	t.Parallel()
	if bustest.StockServerBinary() == "" {
		t.Skipf("no stock nats-server binary: install one (make stock-server, or apt-get install nats-server) or set %s", bustest.StockServerEnv)
	}
	keys := t.TempDir()
	if code, _, errOut := runCLI(t, "keys", "--run", "nocreate", "--parties", "1", "--out", keys); code != 0 {
		t.Fatal(errOut)
	}
	code, block, errOut := runCLI(t, "keys", "server-config", "--no-stream-create", filepath.Join(keys, "roster.json"))
	if code != 0 {
		t.Fatalf("keys server-config: exit %d: %s", code, errOut)
	}
	url, _ := bustest.StartStockServerConfig(t, block)
	// Waiting for an answer that never comes would run into the long
	// deadline: its cancel ends the aggregator with other words.
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	r := <-goCLI(ctx, "aggregator", "--nats", url, "--run", "nocreate", "--parties", "1", "--data", "synthetic:n=200,d=4,test=50",
		"--roster", filepath.Join(keys, "roster.json"), "--key", filepath.Join(keys, "aggregator.nk"), "--log", "error", "--checkpoint-every", "-1s", "--epochs", "1")
	if r.code != 1 || !strings.Contains(r.errOut, "may not create") || ctx.Err() != nil {
		t.Fatalf("exit %d after %v (deadline: %v), want 1 at once with the reason: %s", r.code, r.took, ctx.Err(), r.errOut)
	}
}

// checkStockRefusals connects as party 1 with its key and tries what the
// permissions forbid: every try must be refused by the server.
func checkStockRefusals(t *testing.T, url, run, keys string) {
	t.Helper()
	k, err := trust.ReadKeyFile(filepath.Join(keys, "party-1.nk"))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Wipe()
	var mu sync.Mutex
	var refusals []string
	nc, err := nats.Connect(url, k.NATSOption(), nats.CustomInboxPrefix(trust.InboxPrefix(run, "party-1")),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			mu.Lock()
			refusals = append(refusals, err.Error())
			mu.Unlock()
		}))
	if err != nil {
		t.Fatalf("party 1 with its key: %v", err)
	}
	defer nc.Close()
	for _, s := range []string{schemas.Subject(run, schemas.KindOutput, 2), schemas.Subject(run, schemas.KindReply, 1),
		schemas.Subject(run, schemas.KindControl, 0)} {
		if err := nc.Publish(s, []byte("forged")); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []string{schemas.Subject(run, schemas.KindReply, 2), ">"} {
		if _, err := nc.SubscribeSync(s); err != nil {
			t.Fatal(err)
		}
	}
	// The JetStream API: another party's consumers, consumers that read
	// past one's own subjects, and what shortens or reads the log.
	stream, reply2 := broker.StreamName(run), schemas.Subject(run, schemas.KindReply, 2)
	api := []string{
		"$JS.API.CONSUMER.CREATE." + stream + ".party-2-reply." + reply2,
		"$JS.API.CONSUMER.CREATE." + stream + ".party-1-reply." + reply2,
		"$JS.API.CONSUMER.CREATE." + stream + ".party-1-reply",
		"$JS.API.CONSUMER.CREATE." + stream,
		"$JS.API.CONSUMER.MSG.NEXT." + stream + ".party-2-reply",
		"$JS.API.STREAM.DELETE." + stream,
		"$JS.API.STREAM.PURGE." + stream,
		"$JS.API.STREAM.UPDATE." + stream,
		"$JS.API.STREAM.MSG.GET." + stream,
		"$JS.API.DIRECT.GET." + stream,
	}
	for _, s := range api {
		if err := nc.PublishRequest(s, nc.NewRespInbox(), []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	want := 5 + len(api)
	deadline := time.Now().Add(patience)
	for {
		nc.Flush()
		mu.Lock()
		n := len(refusals)
		mu.Unlock()
		if n >= want || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(refusals) != want {
		t.Fatalf("%d refusals, want %d (3 publishes, 2 subscriptions, %d API calls): %q", len(refusals), want, len(api), refusals)
	}
	all := strings.Join(refusals, "\n")
	for _, s := range api {
		if !strings.Contains(all, `"`+s+`"`) {
			t.Errorf("%s: not refused", s)
		}
	}
	for _, r := range refusals {
		if !strings.Contains(strings.ToLower(r), "permissions violation") {
			t.Errorf("refusal %q", r)
		}
	}
}

// Three 'asyrevel broker --roster' nodes form a cluster that admits only
// the roster's users; the stream is created once the cluster has formed,
// on three nodes, and a run with durable consumers and acks trains
// through it with every participant on its own home node.
func TestRosterCluster(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("cluster in -short mode")
	}
	const run = "rostercluster"
	keys := t.TempDir()
	if code, _, errOut := runCLI(t, "keys", "--run", run, "--parties", "2", "--out", keys); code != 0 {
		t.Fatal(errOut)
	}
	roster := filepath.Join(keys, "roster.json")
	ports := freeTCPPorts(t, 6)
	var urls, routes []string
	for i := range 3 {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", ports[i]))
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ports[3+i]))
	}
	bctx, stopBrokers := context.WithCancel(context.Background())
	var brokers []<-chan result
	defer func() {
		stopBrokers()
		for _, b := range brokers {
			if r := <-b; r.code != 0 {
				t.Errorf("broker: exit %d: %s%s", r.code, r.out, r.errOut)
			}
		}
	}()
	dir := t.TempDir()
	for i := range 3 {
		brokers = append(brokers, goCLI(bctx, "broker", "--roster", roster, "--cluster-name", "rc", "--server-name", fmt.Sprintf("n%d", i+1),
			"--port", strconv.Itoa(ports[i]), "--cluster-port", strconv.Itoa(ports[3+i]), "--routes", strings.Join(routes, ","),
			"--store", filepath.Join(dir, fmt.Sprintf("n%d", i+1)), "--log", "error"))
	}
	for _, u := range urls {
		deadline := time.Now().Add(patience)
		for {
			c, err := net.Dial("tcp", strings.TrimPrefix(u, "nats://"))
			if err == nil {
				c.Close()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no broker on %s", u)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if nc, err := nats.Connect(u); err == nil {
			nc.Close()
			t.Fatalf("an anonymous connection to %s was admitted", u)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	home := func(i int) string { return strings.Join([]string{urls[i%3], urls[(i+1)%3], urls[(i+2)%3]}, ",") }
	// The stream is made on three nodes once the cluster has formed (read
	// as the aggregator: stream info is its to read).
	k, err := trust.ReadKeyFile(filepath.Join(keys, "aggregator.nk"))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Wipe()
	nc, err := nats.Connect(home(0), k.NATSOption(), nats.CustomInboxPrefix(trust.InboxPrefix(run, "aggregator")))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	for {
		sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := js.Stream(sctx, broker.StreamName(run))
		scancel()
		if err == nil {
			if r := st.CachedInfo().Config.Replicas; r != 3 {
				t.Fatalf("the stream is on %d nodes, want 3", r)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no stream: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if os.Getenv(clusterTrainEnv) == "" {
		t.Logf("training through the cluster skipped: set %s=1 (opt-in: see TestTrainClusterPermissions in package run)", clusterTrainEnv)
		return
	}
	common := []string{"--run", run, "--parties", "2", "--transport", "acked", "--roster", roster,
		"--data", "synthetic:n=2000,d=8,test=400,noise=0.02", "--batch", "16", "--log", "warn", "--checkpoint-every", "-1s"}
	var ps []<-chan result
	for m := 1; m <= 2; m++ {
		ps = append(ps, goCLI(ctx, append([]string{"party", "--id", strconv.Itoa(m), "--nats", home(m),
			"--key", filepath.Join(keys, fmt.Sprintf("party-%d.nk", m))}, common...)...))
	}
	out := t.TempDir()
	agg := <-goCLI(ctx, append([]string{"aggregator", "--epochs", "8", "--out", out, "--nats", home(0),
		"--key", filepath.Join(keys, "aggregator.nk")}, common...)...)
	for i, p := range ps {
		if r := <-p; r.code != 0 {
			t.Errorf("party %d: exit %d: %s", i+1, r.code, r.errOut)
		}
	}
	if agg.code != 0 {
		t.Fatalf("aggregator: exit %d: %s%s", agg.code, agg.out, agg.errOut)
	}
	var s struct {
		Acc      float64          `json:"test_accuracy"`
		Rejected map[string]int64 `json:"rejected"`
		Stream   struct {
			Rcpt int64 `json:"rcpt"`
		} `json:"stream"`
	}
	raw, err := readSummary(out, &s)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("acked over a 3-node roster cluster: test accuracy %.3f in %v", s.Acc, agg.took.Round(time.Millisecond))
	if s.Acc < 0.85 || len(s.Rejected) > 0 || s.Stream.Rcpt < 2 {
		t.Fatalf("training through the roster cluster: %s", raw)
	}
}

// clusterTrainEnv opts in to training through a permissioned cluster in
// the tests (run.TestTrainClusterPermissions says why it is opt-in).
const clusterTrainEnv = "ASYREVEL_CLUSTER_TESTS"
