package run

import (
	"context"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/broker/bustest"
	"github.com/asyrevel/asyrevel/schemas"
)

// Every transport design trains, and every design with a log stores every
// message the runtimes sent (the default one in particular).
func TestTrainEveryDesign(t *testing.T) {
	if testing.Short() {
		t.Skip("short: a whole run on each design (the broker's conformance suite checks each under -short)")
	}
	for _, d := range broker.Designs {
		t.Run(string(d), func(t *testing.T) {
			s, err := Train(context.Background(), New(func(c *Config) {
				c.Synthetic = small()
				c.Parties = 3
				c.Algo = "asyrevel-gau"
				c.Batch = 4
				c.Window = 4
				c.Design = string(d)
				c.InProcess = true
				c.MaxSteps = 3000
				c.Seed = 1
				c.EvalEvery = 100 * time.Millisecond
			}), Hooks{Log: testLog(t)})
			if err != nil {
				t.Fatal(err)
			}
			if s.Design != string(d) || s.Steps < 3000 {
				t.Fatalf("design %q, %d steps", s.Design, s.Steps)
			}
			if !d.Capabilities().Log {
				if s.MessagesStored != -1 || s.Stream != nil {
					t.Errorf("a design without a log reports %d stored", s.MessagesStored)
				}
				return
			}
			checkCounts(t, s)
			if s.MessagesSent == 0 || s.MessagesStored != s.MessagesSent || s.Lost != 0 || s.Dropped != 0 {
				t.Errorf("sent %d, stored %d, lost %d, dropped %d", s.MessagesSent, s.MessagesStored, s.Lost, s.Dropped)
			}
		})
	}
}

// Training through a stock nats-server binary (Debian's 2.9.10 where
// installed), which lacks multi-filter consumers, S2 compression and
// asynchronous persistence.
func TestTrainOnStockServer(t *testing.T) {
	url, version := bustest.StartStockServer(t)
	for _, d := range []broker.Design{broker.DefaultDesign, broker.DesignAcked} {
		s, err := Train(context.Background(), New(func(c *Config) {
			c.Synthetic = small()
			c.Parties = 3
			c.Algo = "asyrevel-gau"
			c.Batch = 16
			c.Window = 2
			c.NATS = url
			c.Design = string(d)
			c.Epochs = 5
			c.Seed = 1
			c.EvalEvery = 200 * time.Millisecond
		}), Hooks{Log: testLog(t)})
		if err != nil {
			t.Fatalf("%s on nats-server %s: %v", d, version, err)
		}
		checkCounts(t, s)
		if s.TestAccuracy < 0.85 || s.Lost != 0 || s.MessagesStored != s.MessagesSent {
			t.Errorf("%s on nats-server %s: accuracy %.3f, sent %d, stored %d", d, version, s.TestAccuracy, s.MessagesSent, s.MessagesStored)
		}
	}
}

// Messages carrying the dedupe ids the runtimes used to send
// ("run.sender.seq") can no longer make the broker drop the real ones:
// the runtimes send no id (issue 12's squatting attack).
func TestTrainIgnoresSquattedIDs(t *testing.T) {
	ctx := context.Background()
	srv, err := broker.StartServer(ctx, broker.ServerConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	const run = "squat"
	junk, err := broker.ConnectJetStream(ctx, broker.JetStreamConfig{Server: srv, Run: run, Design: broker.DesignAcked})
	if err != nil {
		t.Fatal(err)
	}
	subj := broker.SubjectPrefix(run) + ".junk"
	for sender := range 4 {
		for seq := 1; seq <= 2000; seq++ {
			if err := junk.Publish(ctx, &broker.Message{Subject: subj, ID: schemas.MsgID(run, sender, uint64(seq)), Data: []byte("x")}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := junk.Close(); err != nil {
		t.Fatal(err)
	}
	tctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	s, err := Train(tctx, New(func(c *Config) {
		c.Synthetic = small()
		c.Parties = 3
		c.Algo = "asyrevel-gau"
		c.Batch = 4
		c.Window = 2
		c.NATS = srv.URL()
		c.Run = run
		c.MaxSteps = 3000
		c.Seed = 1
		c.EvalEvery = 100 * time.Millisecond
	}), Hooks{Log: testLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, s)
	if s.Lost != 0 || s.MessagesStored != s.MessagesSent {
		t.Errorf("sent %d, stored %d", s.MessagesSent, s.MessagesStored)
	}
}

// Train starts the parties once the aggregator listens to what they send
// first, even when the aggregator subscribed before Train looks.
func TestWatchBusReady(t *testing.T) {
	hub := broker.NewMemoryHub()
	w := newWatchBus(hub.Connect("aggregator"), "r")
	nop := func(context.Context, broker.Delivery) {}
	ctx := context.Background()
	if _, err := w.Subscribe(ctx, []string{schemas.Filter("r", schemas.KindOutput)}, broker.SubscribeOptions{}, nop); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.ready:
		t.Fatal("ready before the aggregator listens to hellos")
	default:
	}
	if _, err := w.Subscribe(ctx, []string{schemas.Filter("r", schemas.KindHello), schemas.Filter("r", schemas.KindEval)}, broker.SubscribeOptions{}, nop); err != nil {
		t.Fatal(err)
	}
	for range 2 { // ready stays ready
		select {
		case <-w.ready:
		case <-time.After(time.Minute):
			t.Fatal("not ready after the aggregator subscribed")
		}
	}
}
