package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/asyrevel/asyrevel/broker/bustest"
	"github.com/asyrevel/asyrevel/trust"
)

// An auditor's key (keys --auditor) reads a live run's log through a
// broker that admits only the roster, message by message, and audit
// verify --nats --key gives its verdict; the auditor may publish nothing
// and read nothing but the stream. On the embedded broker and, where its
// binary is installed, on a stock nats-server.
func TestAuditorReadsLive(t *testing.T) {
	t.Parallel()
	for _, server := range []string{"embedded", "stock"} {
		t.Run(server, func(t *testing.T) {
			run := "aud" + server
			keys := t.TempDir()
			if code, _, errOut := runCLI(t, "keys", "--run", run, "--parties", "2", "--auditor", "--out", keys); code != 0 {
				t.Fatal(errOut)
			}
			roster := filepath.Join(keys, "roster.json")
			ctx, cancel := context.WithTimeout(context.Background(), patience)
			defer cancel()
			var url string
			switch server {
			case "embedded":
				port := freePort(t)
				url = "nats://127.0.0.1:" + strconv.Itoa(port)
				bctx, stop := context.WithCancel(ctx)
				done := goCLI(bctx, "broker", "--roster", roster, "--port", strconv.Itoa(port), "--store", t.TempDir())
				defer func() { stop(); <-done }()
				waitPort(t, port)
			case "stock":
				if bustest.StockServerBinary() == "" {
					t.Skipf("no stock nats-server binary: install one (make stock-server, or apt-get install nats-server) or set %s", bustest.StockServerEnv)
				}
				code, block, errOut := runCLI(t, "keys", "server-config", roster)
				if code != 0 {
					t.Fatalf("keys server-config: exit %d: %s", code, errOut)
				}
				url, _ = bustest.StartStockServerConfig(t, block)
			}
			common := []string{"--nats", url, "--run", run, "--parties", "2", "--privacy", labelled,
				"--data", "synthetic:n=1500,d=8,test=300,noise=0.02", "--batch", "16", "--log", "warn", "--roster", roster}
			// The parties share one receipts folder: each receipt file is
			// named after its run and its party.
			receipts := t.TempDir()
			var ps []<-chan result
			for _, m := range []string{"1", "2"} {
				ps = append(ps, goCLI(ctx, append([]string{"party", "--id", m, "--key", filepath.Join(keys, "party-"+m+".nk"), "--receipts", receipts}, common...)...))
			}
			agg := <-goCLI(ctx, append([]string{"aggregator", "--epochs", "3", "--out", t.TempDir(), "--key", filepath.Join(keys, "aggregator.nk")}, common...)...)
			if agg.code != 0 {
				t.Fatalf("aggregator: exit %d: %s", agg.code, agg.errOut)
			}
			for _, p := range ps {
				if r := <-p; r.code != 0 {
					t.Fatalf("party: exit %d: %s", r.code, r.errOut)
				}
			}
			aud := filepath.Join(keys, "auditor.nk")
			// Without the key the broker refuses; with it the log is read.
			if code, _, _ := runCLI(t, "audit", "verify", "--nats", url, "--run", run, "--roster", roster); code == 0 {
				t.Error("audit verify without a key read a broker that admits only the roster")
			}
			code, out, errOut := runCLI(t, "audit", "verify", "--nats", url, "--run", run, "--roster", roster, "--key", aud, "--receipts", receipts)
			if code != 0 || !strings.Contains(out, "verdict: intact") {
				t.Fatalf("audit verify as the auditor: exit %d: %s %s", code, out, errOut)
			}
			for _, p := range []string{"party-1", "party-2"} {
				if m, _ := filepath.Glob(filepath.Join(receipts, run+"."+p+".checkpoint-*.json")); len(m) == 0 {
					t.Errorf("the shared receipts folder holds no receipt of %s", p)
				}
			}
			// The auditor may not speak, subscribe to the run or make a
			// consumer.
			k, err := trust.ReadKeyFile(aud)
			if err != nil {
				t.Fatal(err)
			}
			errs := make(chan error, 8)
			nc, err := nats.Connect(url, k.NATSOption(), nats.CustomInboxPrefix(trust.InboxPrefix(run, trust.AuditorID)),
				nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			_ = nc.Publish("asyrevel."+run+".out.1", []byte("x"))
			_, _ = nc.SubscribeSync("asyrevel." + run + ".>")
			_, cerr := nc.Request(fmt.Sprintf("$JS.API.CONSUMER.CREATE.ASYREVEL_%s.x", run), []byte(`{}`), time.Second)
			_ = nc.Flush()
			time.Sleep(200 * time.Millisecond)
			var refused []string
			for len(errs) > 0 {
				refused = append(refused, (<-errs).Error())
			}
			text := strings.ToLower(strings.Join(refused, "; "))
			if !strings.Contains(text, "publish to \"asyrevel.") || !strings.Contains(text, "subscription to \"asyrevel.") || cerr == nil {
				t.Errorf("the auditor was not refused: %v; consumer create: %v", refused, cerr)
			}
		})
	}
}

// waitPort waits until something listens on the loopback port.
func waitPort(t *testing.T, port int) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for time.Now().Before(deadline) {
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err == nil {
			c.Close()
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal(errors.New("nothing listens on the broker's port"))
}
