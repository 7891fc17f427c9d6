package run

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/trust"
)

// permsNet starts the embedded broker of a 2-party run with the trust
// layer on, and connects the aggregator (which creates the stream) and
// party 1 as the runtimes do.
func permsNet(t *testing.T) (*network, *Config, broker.Bus) {
	t.Helper()
	cfg := &Config{Run: "perm", Parties: 2, Log: testLog(t), StoreDir: t.TempDir()}
	var err error
	if cfg.trust, err = makeRunKeys(cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cfg.trust.close)
	n, err := openNetwork(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.close)
	agg, err := n.connect(context.Background(), "aggregator")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agg.Close() })
	return n, cfg, agg
}

// rawConn connects as participant id with its key, its inbox prefix and
// an error handler that collects the broker's refusals.
func rawConn(t *testing.T, n *network, cfg *Config, id string) (*nats.Conn, func() []string) {
	t.Helper()
	p, _ := cfg.trust.roster.Participant(id)
	var mu sync.Mutex
	var refusals []string
	nc, err := nats.Connect(n.url, cfg.trust.key(p.Index()).NATSOption(), nats.CustomInboxPrefix(trust.InboxPrefix(cfg.Run, id)),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			mu.Lock()
			refusals = append(refusals, err.Error())
			mu.Unlock()
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc, func() []string {
		nc.Flush()
		time.Sleep(50 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), refusals...)
	}
}

// The embedded broker of a run with the trust layer on refuses anonymous
// connections; a party can neither publish on another party's subject
// nor read another party's replies, nor delete, purge or shorten the
// stream, nor read it past its own subjects.
func TestBrokerPermissions(t *testing.T) {
	n, cfg, agg := permsNet(t)
	ctx := context.Background()
	if _, err := nats.Connect(n.url); err == nil {
		t.Fatal("an anonymous connection was admitted")
	}
	// The party's own runtime connection works.
	party1, err := n.connect(ctx, "party-1")
	if err != nil {
		t.Fatal(err)
	}
	defer party1.Close()
	if err := party1.Publish(ctx, &broker.Message{Subject: schemas.Subject(cfg.Run, schemas.KindHello, 1), Data: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if err := party1.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	nc, refusals := rawConn(t, n, cfg, "party-1")
	// Publishing on party 2's subjects and the aggregator's.
	for _, s := range []string{schemas.Subject(cfg.Run, schemas.KindOutput, 2), schemas.Subject(cfg.Run, schemas.KindReply, 1),
		schemas.Subject(cfg.Run, schemas.KindControl, 0), trust.ReceiptSubject(cfg.Run, 2)} {
		if err := nc.Publish(s, []byte("forged")); err != nil {
			t.Fatal(err)
		}
	}
	// Reading party 2's replies, and everything.
	for _, s := range []string{schemas.Subject(cfg.Run, schemas.KindReply, 2), "asyrevel.perm.>", ">"} {
		if _, err := nc.SubscribeSync(s); err != nil {
			t.Fatal(err)
		}
	}
	got := refusals()
	if len(got) != 7 {
		t.Fatalf("%d refusals, want 7 (4 publishes, 3 subscriptions): %q", len(got), got)
	}
	for _, r := range got {
		if !strings.Contains(strings.ToLower(r), "permissions violation") {
			t.Errorf("refusal %q", r)
		}
	}
	c, err := agg.Count(ctx, "asyrevel.perm.>")
	if err != nil || c != 1 {
		t.Fatalf("the stream holds %d messages (%v), want the hello alone", c, err)
	}

	// The JetStream API: destructive and reading calls.
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream := broker.StreamName(cfg.Run)
	try := func(name string, f func(ctx context.Context) error) {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if err := f(ctx); err == nil {
			t.Errorf("%s: allowed", name)
		}
	}
	try("delete the stream", func(ctx context.Context) error { return js.DeleteStream(ctx, stream) })
	try("limit the stream to 10 messages", func(ctx context.Context) error {
		_, err := js.UpdateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{"asyrevel.perm.>"}, MaxMsgs: 10, DenyDelete: true, DenyPurge: true})
		return err
	})
	s, err := js.Stream(ctx, stream) // stream info is allowed: counts, no contents
	if err != nil {
		t.Fatal(err)
	}
	try("purge", func(ctx context.Context) error { return s.Purge(ctx) })
	try("delete a message", func(ctx context.Context) error { return s.DeleteMsg(ctx, 1) })
	try("get a message", func(ctx context.Context) error { _, err := s.GetMsg(ctx, 1); return err })
	try("a consumer on party 2's replies", func(ctx context.Context) error {
		_, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{NamePrefix: "party-1-reply",
			FilterSubjects: []string{schemas.Subject(cfg.Run, schemas.KindReply, 2)}})
		return err
	})
	try("an unfiltered consumer", func(ctx context.Context) error {
		_, err := s.CreateConsumer(ctx, jetstream.ConsumerConfig{Name: "party-1-ctl_1"})
		return err
	})
	// Its own consumer on the control subject is allowed.
	if _, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{NamePrefix: "party-1-ctl",
		FilterSubjects: []string{schemas.Subject(cfg.Run, schemas.KindControl, 0)}}); err != nil {
		t.Fatalf("party 1's own consumer: %v", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c := info.Config; !c.DenyDelete || !c.DenyPurge || c.MaxMsgs != -1 || c.MaxBytes != -1 || c.MaxAge != 0 || c.AllowMsgTTL || c.Retention != jetstream.LimitsPolicy {
		t.Fatalf("stream configuration %+v", c)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("the stream holds %d messages", info.State.Msgs)
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		t.Fatal(ctx.Err())
	}
}
