package trust

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/internal/freeport"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestStreamNameMatchesBroker(t *testing.T) {
	if StreamName("r-1") != broker.StreamName("r-1") {
		t.Fatalf("trust.StreamName %q, broker.StreamName %q", StreamName("r-1"), broker.StreamName("r-1"))
	}
}

// permPolicy is the default layout plus one explicit-ack durable consumer
// for the aggregator, to prove the acknowledgement grants.
func permPolicy() BrokerPolicy {
	return BrokerPolicy{
		AggregatorCreatesStream: true,
		Consumers: func(r *Roster, p *Participant) []ConsumerGrant {
			g := DefaultConsumers(r, p)
			if p.Role == RoleAggregator {
				g = append(g, ConsumerGrant{Names: []string{"aggregator-durable"}, Filter: "asyrevel." + r.Run + ".eval.*", Ack: true})
			}
			return g
		},
	}
}

func TestGrants(t *testing.T) {
	tr := newTestRun(t, "r", 3)
	grants, err := tr.roster.Grants(permPolicy())
	if err != nil {
		t.Fatal(err)
	}
	if len(grants) != 4 || grants[0].ID != AggregatorID {
		t.Fatalf("%d grants", len(grants))
	}
	p2 := grants[2]
	for _, s := range []string{"asyrevel.r.out.2", "asyrevel.r.join.2", "asyrevel.r.eval.2", "asyrevel.r.rcpt.2",
		"$JS.API.CONSUMER.CREATE.ASYREVEL_r.party-2-reply_1.asyrevel.r.reply.2",
		"$JS.API.CONSUMER.MSG.NEXT.ASYREVEL_r.party-2-ctl_16", "$JS.API.CONSUMER.INFO.ASYREVEL_r.party-2-ctl_3",
		// Its durables (DesignAcked), one filter each, with acks.
		"$JS.API.CONSUMER.CREATE.ASYREVEL_r.party-2-reply.asyrevel.r.reply.2", "$JS.ACK.ASYREVEL_r.party-2-ctl.>",
		"$JS.API.CONSUMER.RESET.ASYREVEL_r.party-2-reply"} {
		if !slices.Contains(p2.Publish, s) {
			t.Errorf("party-2 may not publish to %s", s)
		}
	}
	for _, s := range p2.Publish {
		if strings.Contains(s, ".1") && strings.HasPrefix(s, "asyrevel.") || strings.Contains(s, "reply.1") || strings.Contains(s, "aggregator") ||
			strings.Contains(s, "STREAM") || (strings.Contains(s, "DELETE") || strings.Contains(s, "RESET") || strings.Contains(s, "$JS.ACK")) && !strings.Contains(s, ".party-2-") {
			t.Errorf("party-2 may publish to %s", s)
		}
	}
	if !slices.Equal(p2.Subscribe, []string{"asyrevel.r.score", "asyrevel.r.ctl", "asyrevel.r.psih.2", "asyrevel.r.reply.2", "_INBOX.r.party-2.>"}) {
		t.Errorf("party-2 subscribes to %v", p2.Subscribe)
	}
	agg := grants[0]
	for _, s := range []string{"asyrevel.r.ctl", "asyrevel.r.reply.3", "$JS.API.STREAM.CREATE.ASYREVEL_r", "$JS.API.STREAM.INFO.ASYREVEL_r",
		"$JS.ACK.ASYREVEL_r.aggregator-durable.>", "$JS.ACK.*.*.ASYREVEL_r.aggregator-durable.>"} {
		if !slices.Contains(agg.Publish, s) {
			t.Errorf("the aggregator may not publish to %s", s)
		}
	}
	for _, bad := range []BrokerPolicy{
		{Stream: "a.b"},
		{Consumers: func(r *Roster, p *Participant) []ConsumerGrant {
			return []ConsumerGrant{{Names: []string{"x_" + p.ID}, Filter: "asyrevel.r.>"}}
		}},
		{Consumers: func(r *Roster, p *Participant) []ConsumerGrant {
			return []ConsumerGrant{{Names: []string{"same"}, Filter: "asyrevel.r.ctl"}}
		}},
		{Consumers: func(r *Roster, p *Participant) []ConsumerGrant {
			return []ConsumerGrant{{Names: []string{"a.b" + p.ID}, Filter: "asyrevel.r.ctl"}}
		}},
		{Consumers: func(r *Roster, p *Participant) []ConsumerGrant {
			return []ConsumerGrant{{Names: []string{"n" + p.ID}, Filter: "other.subject"}}
		}},
		{Consumers: func(r *Roster, p *Participant) []ConsumerGrant {
			return []ConsumerGrant{{Filter: "asyrevel.r.ctl"}}
		}},
	} {
		if _, err := tr.roster.Grants(bad); err == nil {
			t.Errorf("policy accepted: %+v", bad)
		}
	}
	users := NkeyUsers(grants)
	if len(users) != 4 || users[1].Nkey != grants[1].PublicKey || users[1].Permissions.Response != nil ||
		!slices.Equal(users[1].Permissions.Publish.Deny, deniedAPI) {
		t.Fatalf("users %+v", users[1])
	}
	block := AuthorizationBlock("r", grants)
	for _, g := range grants {
		if !strings.Contains(block, fmt.Sprintf("nkey: %q", g.PublicKey)) {
			t.Errorf("block lacks %s", g.ID)
		}
	}
}

// permBroker is a broker under test: its URL and a view of its
// JetStream state that needs no participant's rights.
type permBroker struct {
	url string
	jsz func(t *testing.T) *server.JSInfo
}

func TestPermissionsEmbedded(t *testing.T) {
	tr := newTestRun(t, "perm", 2)
	pol := permPolicy()
	grants, err := tr.roster.Grants(pol)
	if err != nil {
		t.Fatal(err)
	}
	ns := startServer(t, &server.Options{JetStream: true, StoreDir: t.TempDir(), Nkeys: NkeyUsers(grants)})
	checkPermissions(t, tr, pol, permBroker{url: ns.ClientURL(), jsz: func(t *testing.T) *server.JSInfo {
		info, err := ns.Jsz(&server.JSzOptions{Accounts: true, Streams: true, Consumer: true, Config: true})
		if err != nil {
			t.Fatal(err)
		}
		return info
	}})
}

// startServer starts an embedded nats-server on a free loopback port and
// stops it when the test ends.
func startServer(t *testing.T, opts *server.Options) *server.Server {
	t.Helper()
	opts.Host, opts.Port, opts.NoLog, opts.NoSigs = "127.0.0.1", -1, true, true
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	return ns
}

// TestPermissionsExternal runs a separate nats-server process, built from
// the module's nats-server version, with the authorization block that
// 'asyrevel keys server-config' prints.
func TestPermissionsExternal(t *testing.T) {
	if testing.Short() {
		t.Skip("short: builds and runs a nats-server process")
	}
	bin := buildNATSServer(t)
	tr := newTestRun(t, "ext", 2)
	pol := BrokerPolicy{AggregatorCreatesStream: true} // what 'asyrevel keys server-config' prints
	grants, err := tr.roster.Grants(pol)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	port, hport := freePort(t), freePort(t)
	conf := fmt.Sprintf("listen: \"127.0.0.1:%d\"\nhttp: \"127.0.0.1:%d\"\njetstream {\n  store_dir: %q\n}\n%s",
		port, hport, filepath.Join(dir, "store"), AuthorizationBlock(tr.roster.Run, grants))
	confPath := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-c", confPath)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("nats-server output:\n%s", out.String())
		}
	})
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	deadline := time.Now().Add(3 * time.Minute) // a bound on a hang, not on speed
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nats-server did not start: %v\n%s", err, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	checkPermissions(t, tr, pol, permBroker{url: url, jsz: func(t *testing.T) *server.JSInfo {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/jsz?accounts=true&streams=true&consumers=true&config=true", hport))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var info server.JSInfo
		if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
			t.Fatal(err)
		}
		return &info
	}})
}

// buildNATSServer builds the nats-server of go.mod's version into a
// temporary folder, or skips the test.
func buildNATSServer(t *testing.T) string {
	bin := filepath.Join(t.TempDir(), "nats-server")
	goBin, err := exec.LookPath("go") // go test puts its own toolchain first on PATH
	if err != nil {
		t.Skipf("cannot build nats-server from the module: no go command: %v", err)
	}
	out, err := exec.Command(goBin, "build", "-o", bin, "github.com/nats-io/nats-server/v2").CombinedOutput()
	if err != nil {
		t.Skipf("cannot build nats-server from the module (go build github.com/nats-io/nats-server/v2): %v\n%s", err, out)
	}
	return bin
}

func freePort(t *testing.T) int {
	p, err := freeport.Pick("127.0.0.1", 1)
	if err != nil {
		t.Fatal(err)
	}
	return p[0]
}

// pconn is a participant's connection and the asynchronous errors the
// server sends it.
type pconn struct {
	id   string
	nc   *nats.Conn
	js   jetstream.JetStream
	mu   sync.Mutex
	errs []error
}

func connectAs(t *testing.T, url string, tr *testRun, id string) *pconn {
	t.Helper()
	c := &pconn{id: id}
	nc, err := nats.Connect(url, nats.Name(id), tr.keys[id].NATSOption(),
		nats.CustomInboxPrefix(InboxPrefix(tr.roster.Run, id)),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			c.mu.Lock()
			c.errs = append(c.errs, err)
			c.mu.Unlock()
		}))
	if err != nil {
		t.Fatalf("%s cannot connect: %v", id, err)
	}
	t.Cleanup(nc.Close)
	c.nc = nc
	if c.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	return c
}

// violation waits for the server's permission violation on subject.
func (c *pconn) violation(what, subject string) error {
	deadline := time.Now().Add(3 * time.Minute) // a bound on a hang, not on speed
	for time.Now().Before(deadline) {
		c.mu.Lock()
		for i, err := range c.errs {
			if strings.Contains(err.Error(), "Permissions Violation for "+what+" to \""+subject+"\"") {
				c.errs = slices.Delete(c.errs, i, i+1)
				c.mu.Unlock()
				return nil
			}
		}
		c.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
	}
	return fmt.Errorf("no permission violation for %s to %q", what, subject)
}

// deniedPub publishes to subject and expects the server to refuse it.
func (c *pconn) deniedPub(t *testing.T, subject string) {
	t.Helper()
	if err := c.nc.PublishRequest(subject, c.nc.NewRespInbox(), []byte(`{}`)); err != nil {
		t.Fatalf("%s publish %s: %v", c.id, subject, err)
	}
	c.nc.Flush()
	if err := c.violation("Publish", subject); err != nil {
		t.Errorf("%s: %v", c.id, err)
	}
}

// deniedSub subscribes to subject and expects the server to refuse it.
func (c *pconn) deniedSub(t *testing.T, subject string) {
	t.Helper()
	sub, err := c.nc.SubscribeSync(subject)
	if err != nil {
		t.Fatalf("%s subscribe %s: %v", c.id, subject, err)
	}
	c.nc.Flush()
	if err := c.violation("Subscription", subject); err != nil {
		t.Errorf("%s: %v", c.id, err)
	}
	sub.Unsubscribe()
}

// noViolations checks that the server refused nothing c did so far. The
// refusals of one connection come in order: a last publish that every
// participant is refused marks their end (a fixed 20 ms wait let a busy
// host's late refusal go unseen).
func (c *pconn) noViolations(t *testing.T) {
	t.Helper()
	marker := "asyrevel-test-end." + strconv.FormatInt(time.Now().UnixNano(), 10)
	if err := c.nc.Publish(marker, nil); err != nil {
		t.Fatalf("%s publish %s: %v", c.id, marker, err)
	}
	c.nc.Flush()
	if err := c.violation("Publish", marker); err != nil {
		t.Errorf("%s: %v", c.id, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, err := range c.errs {
		t.Errorf("%s: unexpected error from the server: %v", c.id, err)
	}
}

// checkPermissions proves every grant a participant needs and every
// refusal the roster's permissions promise, against a running broker whose
// users come from pol. The acknowledgements of an explicit-ack consumer
// are tried when pol grants the aggregator one (permPolicy).
func checkPermissions(t *testing.T, tr *testRun, pol BrokerPolicy, b permBroker) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	run := tr.roster.Run
	S := StreamName(run)
	s := func(kind string, m int) string { return subj(run, kind, m) }

	// Nobody without a roster key gets in.
	if nc, err := nats.Connect(b.url, nats.Timeout(5*time.Second)); err == nil {
		nc.Close()
		t.Fatal("anonymous connection accepted")
	} else if !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("anonymous connection: %v", err)
	}
	stranger, _ := GenerateKey()
	if nc, err := nats.Connect(b.url, stranger.NATSOption()); err == nil {
		nc.Close()
		t.Fatal("a key outside the roster was accepted")
	}

	agg := connectAs(t, b.url, tr, AggregatorID)
	p1 := connectAs(t, b.url, tr, "party-1")
	p2 := connectAs(t, b.url, tr, "party-2")

	// The aggregator creates the stream; nobody can change it after.
	scfg := jetstream.StreamConfig{Name: S, Subjects: []string{"asyrevel." + run + ".>"}, Retention: jetstream.LimitsPolicy,
		Storage: jetstream.FileStorage, MaxMsgs: -1, MaxBytes: -1, MaxMsgSize: -1, MaxConsumers: -1, DenyDelete: true, DenyPurge: true}
	if _, err := agg.js.CreateStream(ctx, scfg); err != nil {
		t.Fatalf("aggregator creates the stream: %v", err)
	}
	cut := scfg
	cut.MaxMsgs = 10
	if _, err := agg.js.CreateStream(ctx, cut); err == nil {
		t.Fatal("a second create changed the stream's limits")
	}

	// What each participant needs: publish with acks on its own subjects.
	pubs := []struct {
		c       *pconn
		subject string
	}{
		{p1, s("join", 1)}, {p1, s("out", 1)}, {p1, s("eval", 1)}, {p1, s("rcpt", 1)},
		{p2, s("out", 2)}, {p2, s("eval", 2)},
		{agg, s("reply", 1)}, {agg, s("reply", 2)}, {agg, s("ctl", 0)},
	}
	for _, p := range pubs {
		if _, err := p.c.js.Publish(ctx, p.subject, []byte(p.c.id)); err != nil {
			t.Fatalf("%s publishes on %s: %v", p.c.id, p.subject, err)
		}
	}
	// Each reads its own subjects through its own ordered consumers.
	read := func(c *pconn, prefix, filter, want string) {
		t.Helper()
		cons, err := c.js.OrderedConsumer(ctx, S, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}, NamePrefix: prefix})
		if err != nil {
			t.Fatalf("%s ordered consumer on %s: %v", c.id, filter, err)
		}
		msg, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatalf("%s reads %s: %v", c.id, filter, err)
		}
		if msg.Subject() != want {
			t.Fatalf("%s reads %s on %s, want %s", c.id, msg.Subject(), filter, want)
		}
		if _, err := cons.Info(ctx); err != nil {
			t.Fatalf("%s: info of its own consumer: %v", c.id, err)
		}
	}
	read(p1, "party-1-reply", s("reply", 1), s("reply", 1))
	read(p1, "party-1-ctl", s("ctl", 0), s("ctl", 0))
	read(p2, "party-2-reply", s("reply", 2), s("reply", 2))
	read(agg, "aggregator-out", "asyrevel."+run+".out.*", s("out", 1))
	read(agg, "aggregator-join", "asyrevel."+run+".join.*", s("join", 1))
	read(agg, "aggregator-rcpt", "asyrevel."+run+".rcpt.*", s("rcpt", 1))
	// An explicit-ack durable consumer: fetch, acknowledge (confirmed by
	// the server), and the ack floor moves.
	withDurable := pol.Consumers != nil
	if withDurable {
		dur, err := agg.js.CreateConsumer(ctx, S, jetstream.ConsumerConfig{Durable: "aggregator-durable",
			FilterSubject: "asyrevel." + run + ".eval.*", AckPolicy: jetstream.AckExplicitPolicy})
		if err != nil {
			t.Fatalf("aggregator creates its durable consumer: %v", err)
		}
		batch, err := dur.Fetch(2, jetstream.FetchMaxWait(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for msg := range batch.Messages() {
			if err := msg.DoubleAck(ctx); err != nil {
				t.Fatalf("aggregator acks: %v", err)
			}
			n++
		}
		info, err := dur.Info(ctx)
		if err != nil || n != 2 || info.NumAckPending != 0 || info.AckFloor.Stream == 0 {
			t.Fatalf("durable consumer after acks: %d fetched, %+v, %v", n, info, err)
		}
	} else {
		// A refused request gets no answer: give it a short deadline.
		short, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := agg.js.CreateConsumer(short, S, jetstream.ConsumerConfig{Durable: "aggregator-durable",
			FilterSubject: "asyrevel." + run + ".eval.*", AckPolicy: jetstream.AckExplicitPolicy})
		cancel()
		if err == nil {
			t.Fatal("a consumer outside the grants was created")
		}
	}
	if _, err := agg.js.Stream(ctx, S); err != nil {
		t.Fatalf("aggregator reads the stream's info: %v", err)
	}
	for _, c := range []*pconn{agg, p1, p2} {
		if !withDurable && c == agg {
			agg.violation("Publish", "$JS.API.CONSUMER.CREATE."+S+".aggregator-durable.asyrevel."+run+".eval.*")
		}
		c.noViolations(t)
	}

	// What they may not do. A party: anything on others' subjects, any
	// read past its consumers, anything that changes or shortens the log.
	api := "$JS.API."
	for _, subject := range []string{
		s("out", 2), s("join", 2), s("eval", 2), s("rcpt", 2), s("reply", 1), s("ctl", 0), "asyrevel." + run + ".junk",
		api + "STREAM.DELETE." + S, api + "STREAM.PURGE." + S, api + "STREAM.UPDATE." + S,
		api + "STREAM.MSG.DELETE." + S, api + "STREAM.MSG.GET." + S, api + "DIRECT.GET." + S,
		api + "DIRECT.GET." + S + "." + s("out", 2), api + "STREAM.INFO." + S, api + "STREAM.CREATE.EVIL",
		api + "STREAM.LIST", api + "STREAM.NAMES", api + "CONSUMER.LIST." + S, api + "CONSUMER.NAMES." + S,
		api + "CONSUMER.CREATE." + S, // legacy ephemeral: any filter
		api + "CONSUMER.CREATE." + S + ".evil",
		api + "CONSUMER.CREATE." + S + ".party-1-reply_5", // the name without a filter: any filter
		api + "CONSUMER.CREATE." + S + ".party-1-reply_5." + s("reply", 2),
		api + "CONSUMER.CREATE." + S + ".party-1-reply_5.asyrevel." + run + ".>",
		api + "CONSUMER.CREATE." + S + ".party-1-reply_99." + s("reply", 1), // beyond the granted lives
		api + "CONSUMER.CREATE." + S + ".aggregator-out_1.asyrevel." + run + ".out.*",
		api + "CONSUMER.DURABLE.CREATE." + S + ".x",
		api + "CONSUMER.MSG.NEXT." + S + ".aggregator-out_1", api + "CONSUMER.INFO." + S + ".aggregator-out_1",
		api + "CONSUMER.MSG.NEXT." + S + ".party-2-reply_1",
		api + "CONSUMER.DELETE." + S + ".aggregator-out_1", api + "CONSUMER.DELETE." + S + ".party-2-reply_1",
		"$JS.ACK." + S + ".aggregator-durable.1.1.1.1.0", "$JS.ACK._.x." + S + ".aggregator-durable.1.1.1.1.0",
		"_INBOX." + run + ".party-2.x", "_INBOX." + run + ".aggregator.x",
	} {
		p1.deniedPub(t, subject)
	}
	for _, subject := range []string{">", "asyrevel.>", "asyrevel." + run + ".>", s("out", 2), s("reply", 2), s("out", 1),
		"_INBOX.>", "_INBOX." + run + ".party-2.>", "_INBOX." + run + ".aggregator.>", "$JS.API.>", "$JS.ACK.>"} {
		p1.deniedSub(t, subject)
	}
	// The aggregator: nothing on the parties' subjects, nothing that
	// changes or shortens the log.
	for _, subject := range []string{
		s("out", 1), s("join", 1), s("eval", 2), s("rcpt", 2),
		api + "STREAM.DELETE." + S, api + "STREAM.PURGE." + S, api + "STREAM.UPDATE." + S,
		api + "STREAM.MSG.DELETE." + S, api + "STREAM.MSG.GET." + S, api + "DIRECT.GET." + S, api + "STREAM.CREATE.EVIL",
		api + "CONSUMER.CREATE." + S + ".evil", api + "CONSUMER.CREATE." + S + ".aggregator-out_2.asyrevel." + run + ".>",
		api + "CONSUMER.DELETE." + S + ".party-1-reply_1",
		api + "CONSUMER.MSG.NEXT." + S + ".party-1-reply_1",
		"_INBOX." + run + ".party-1.x",
	} {
		agg.deniedPub(t, subject)
	}
	for _, subject := range []string{">", "_INBOX." + run + ".party-1.>", s("reply", 1), s("ctl", 0)} {
		agg.deniedSub(t, subject)
	}

	// The broker itself keeps a consumer to its filter, and refuses a push
	// consumer that would deliver into the stream.
	for _, tc := range []struct{ name, cfg string }{
		{"filter other than the subject's", `{"name":"party-1-reply_4","filter_subject":"` + s("reply", 2) + `","ack_policy":"none"}`},
		{"push into the stream", `{"name":"party-1-reply_4","filter_subject":"` + s("reply", 1) + `","deliver_subject":"` + s("out", 2) + `","ack_policy":"none"}`},
	} {
		req := `{"stream_name":"` + S + `","config":` + tc.cfg + `}`
		msg, err := p1.nc.Request(api+"CONSUMER.CREATE."+S+".party-1-reply_4."+s("reply", 1), []byte(req), 5*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var resp struct {
			Error *struct {
				Description string `json:"description"`
			} `json:"error"`
		}
		if json.Unmarshal(msg.Data, &resp); resp.Error == nil {
			t.Errorf("%s: the broker created the consumer: %s", tc.name, msg.Data)
		}
	}

	// After all that: one stream, unchanged, every message kept, and only
	// the participants' own consumers.
	info2 := b.jsz(t)
	var streams []server.StreamDetail
	for _, a := range info2.AccountDetails {
		streams = append(streams, a.Streams...)
	}
	if len(streams) != 1 || streams[0].Name != S {
		t.Fatalf("streams %+v", streams)
	}
	st := streams[0]
	if st.State.Msgs != uint64(len(pubs)) || st.Config == nil || !st.Config.DenyDelete || !st.Config.DenyPurge || st.Config.MaxMsgs != -1 {
		t.Fatalf("stream after the attempts: %d messages (want %d), config %+v", st.State.Msgs, len(pubs), st.Config)
	}
	consumers := pol.Consumers
	if consumers == nil {
		consumers = DefaultConsumers
	}
	allowed := map[string]bool{}
	for _, p := range tr.roster.Participants {
		for _, c := range consumers(tr.roster, &p) {
			for _, n := range c.Names {
				allowed[n] = true
			}
		}
	}
	for _, c := range st.Consumer {
		if !allowed[c.Name] {
			t.Errorf("consumer %s exists", c.Name)
		}
	}
	if len(st.Consumer) == 0 {
		t.Error("no consumer seen: the broker's view is empty")
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("timed out")
	}
}
