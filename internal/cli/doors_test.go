package cli

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/asyrevel/asyrevel/trust"
)

// asyrevel broker --roster keeps its doors closed: party 1's key cannot
// store a 4,192,304-byte or a 1,046,576-byte message (the stream allowed
// 4 MiB and stored 50 such in 1.8 s), the auditor's requests with a reply
// subject inside the run place no answer there (2,000 landed in 1.06 s),
// and once the run is over its stream is sealed: nobody's request grows
// it any more.
func TestRosterBrokerClosedDoors(t *testing.T) {
	t.Parallel()
	const run = "doors"
	keys, receipts := t.TempDir(), t.TempDir()
	if code, _, errOut := runCLI(t, "keys", "--run", run, "--parties", "2", "--auditor", "--out", keys); code != 0 {
		t.Fatal(errOut)
	}
	roster := filepath.Join(keys, "roster.json")
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	port := freePort(t)
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	bctx, stopBroker := context.WithCancel(ctx)
	done := goCLI(bctx, "broker", "--roster", roster, "--port", strconv.Itoa(port), "--store", t.TempDir())
	defer func() { stopBroker(); <-done }()
	waitPort(t, port)
	connect := func(id string) *nats.Conn {
		k, err := trust.ReadKeyFile(filepath.Join(keys, id+".nk"))
		if err != nil {
			t.Fatal(err)
		}
		nc, err := nats.Connect(url, k.NATSOption(), nats.CustomInboxPrefix(trust.InboxPrefix(run, id)))
		if err != nil {
			t.Fatal(err)
		}
		return nc
	}
	auditor := connect(trust.AuditorID)
	defer auditor.Close()
	js, err := jetstream.New(auditor)
	if err != nil {
		t.Fatal(err)
	}
	var st jetstream.Stream
	for st == nil {
		if st, err = js.Stream(ctx, trust.StreamName(run)); err != nil && ctx.Err() != nil {
			t.Fatal(err)
		}
	}
	msgs := func() uint64 {
		t.Helper()
		// The server answers requests in order: what a request sent
		// before this one placed in the stream is stored by now, but
		// for the stream's own ingest; look until it stops moving.
		var last uint64
		for same := 0; same < 3; {
			info, err := st.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if info.State.Msgs == last {
				same++
			} else {
				last, same = info.State.Msgs, 0
			}
			time.Sleep(100 * time.Millisecond)
		}
		return last
	}
	before := msgs()
	for _, size := range []int{4_192_304, 1_046_576} {
		p := connect("party-1")
		_ = p.Publish("asyrevel."+run+".out.1", make([]byte, size))
		_ = p.Flush()
		p.Close()
	}
	if n := msgs(); n != before {
		t.Errorf("junk of 4,192,304 and 1,046,576 bytes: the stream grew from %d to %d messages", before, n)
	}
	for range 50 {
		_ = auditor.PublishRequest("$JS.API.STREAM.INFO."+trust.StreamName(run), "asyrevel."+run+".ctl", nil)
		_ = auditor.PublishRequest("$JS.API.DIRECT.GET."+trust.StreamName(run), "asyrevel."+run+".reply.1", []byte(`{"seq":1}`))
	}
	_ = auditor.Flush()
	if n := msgs(); n != before {
		t.Errorf("the auditor's requests placed %d answers in the run's stream", n-before)
	}
	// The run, to its end.
	common := []string{"--nats", url, "--run", run, "--parties", "2", "--data", "synthetic:n=1500,d=8,test=300,noise=0.02",
		"--batch", "16", "--log", "warn", "--roster", roster}
	var ps []<-chan result
	for _, m := range []string{"1", "2"} {
		ps = append(ps, goCLI(ctx, append([]string{"party", "--id", m, "--key", filepath.Join(keys, "party-"+m+".nk"), "--receipts", receipts}, common...)...))
	}
	if agg := <-goCLI(ctx, append([]string{"aggregator", "--epochs", "2", "--out", t.TempDir(), "--key", filepath.Join(keys, "aggregator.nk")}, common...)...); agg.code != 0 {
		t.Fatalf("aggregator: exit %d: %s", agg.code, agg.errOut)
	}
	for _, p := range ps {
		if r := <-p; r.code != 0 {
			t.Fatalf("party: exit %d: %s", r.code, r.errOut)
		}
	}
	sealed := false
	for end := time.Now().Add(patience); !sealed && time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		info, err := st.Info(ctx)
		sealed = err == nil && info.Config.Sealed
	}
	if !sealed {
		t.Fatal("the finished run's stream was not sealed")
	}
	before = msgs()
	p := connect("party-1")
	defer p.Close()
	for range 50 {
		_ = p.PublishRequest("$JS.API.STREAM.INFO."+trust.StreamName(run), "asyrevel."+run+".ctl", nil)
		_ = auditor.PublishRequest("$JS.API.STREAM.INFO."+trust.StreamName(run), "asyrevel."+run+".ctl", nil)
	}
	_ = p.Flush()
	_ = auditor.Flush()
	if n := msgs(); n != before {
		t.Errorf("the finished run's stream grew from %d to %d messages", before, n)
	}
}
