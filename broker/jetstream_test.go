package broker_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/broker/bustest"
)

func TestStreamConfig(t *testing.T) {
	srv := startServer(t)
	run := newRun()
	b := connectJS(t, srv, true, run, "p")
	js, err := jetstream.New(b.Conn())
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(context.Background(), broker.StreamName(run))
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	if cfg.Name != "ASYREVEL_"+run || len(cfg.Subjects) != 1 || cfg.Subjects[0] != "asyrevel."+run+".>" {
		t.Errorf("name %q subjects %q", cfg.Name, cfg.Subjects)
	}
	if cfg.Retention != jetstream.LimitsPolicy || cfg.Storage != jetstream.FileStorage {
		t.Errorf("retention %v storage %v", cfg.Retention, cfg.Storage)
	}
	if !cfg.DenyDelete || !cfg.DenyPurge || cfg.Duplicates != 2*time.Minute {
		t.Errorf("deny delete %v deny purge %v duplicates %v", cfg.DenyDelete, cfg.DenyPurge, cfg.Duplicates)
	}
	if err := st.Purge(context.Background()); err == nil {
		t.Error("purge allowed")
	}
}

func TestConcurrentConnect(t *testing.T) {
	srv := startServer(t)
	run := newRun()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cfg := broker.JetStreamConfig{Server: srv, InProcess: i%2 == 0, Run: run}
			if i%3 == 0 {
				cfg.Duplicates = time.Minute // a different configuration
			}
			b, err := broker.ConnectJetStream(ctx, cfg)
			if err != nil {
				errs <- err
				return
			}
			b.Close()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("connect: %v", err)
	}
}

func TestConnectInvalid(t *testing.T) {
	ctx := context.Background()
	for _, run := range []string{"", "a.b", "a b", "a*"} {
		if _, err := broker.ConnectJetStream(ctx, broker.JetStreamConfig{URL: "nats://127.0.0.1:1", Run: run}); !errors.Is(err, broker.ErrInvalid) {
			t.Errorf("run %q: %v", run, err)
		}
	}
	if _, err := broker.ConnectJetStream(ctx, broker.JetStreamConfig{Run: "r"}); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("no URL: %v", err)
	}
	if _, err := broker.ConnectJetStream(ctx, broker.JetStreamConfig{Run: "r", InProcess: true}); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("InProcess without Server: %v", err)
	}
	if _, err := broker.StartServer(ctx, broker.ServerConfig{}); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("server without dir: %v", err)
	}
}

func TestSubjectOutsideRun(t *testing.T) {
	srv := startServer(t)
	b := connectJS(t, srv, true, newRun(), "p")
	ctx := context.Background()
	if err := b.Publish(ctx, &broker.Message{Subject: "asyrevel.other.x"}); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("publish: %v", err)
	}
	nop := func(context.Context, broker.Delivery) {}
	if _, err := b.Subscribe(ctx, []string{"asyrevel.>"}, broker.SubscribeOptions{}, nop); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("subscribe: %v", err)
	}
	if _, err := b.Count(ctx, "asyrevel.other.>"); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("count: %v", err)
	}
}

func TestNoListenServer(t *testing.T) {
	ctx := context.Background()
	srv, err := broker.StartServer(ctx, broker.ServerConfig{Dir: t.TempDir(), NoListen: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	if srv.URL() != "" {
		t.Errorf("URL %q without listener", srv.URL())
	}
	b := connectJS(t, srv, true, newRun(), "p")
	if err := b.Publish(ctx, &broker.Message{Subject: broker.SubjectPrefix(b.Run()) + ".x"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// Every design with dedupe reports each duplicate ID, and stores one.
func TestDuplicatesCounted(t *testing.T) {
	srv := startServer(t)
	for _, d := range []broker.Design{broker.DesignCapture, broker.DesignOrdered, broker.DesignAcked} {
		run := newRun()
		b := connectDesign(t, srv, true, run, "p", d)
		ctx := context.Background()
		subj := broker.SubjectPrefix(b.Run()) + ".d"
		for range 3 {
			if err := b.Publish(ctx, &broker.Message{Subject: subj, ID: "same"}); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Publish(ctx, &broker.Message{Subject: subj, ID: "other"}); err != nil {
			t.Fatal(err)
		}
		if err := b.Flush(ctx); err != nil {
			t.Fatalf("%s: %v", d, err)
		}
		if n := b.Duplicates(); n != 2 {
			t.Errorf("%s: Duplicates() = %d, want 2", d, n)
		}
		if n, err := b.Count(ctx, subj); err != nil || n != 2 {
			t.Errorf("%s: %d stored (%v), want 2", d, n, err)
		}
	}
}

// An idle durable subscription must get its coalesced ack out long before
// AckWait, so the broker has nothing pending to redeliver.
func TestIdleAckFlushed(t *testing.T) {
	srv := startServer(t)
	b := connectDesign(t, srv, true, newRun(), "p", broker.DesignAcked)
	ctx := context.Background()
	subj := broker.SubjectPrefix(b.Run()) + ".a"
	var mu sync.Mutex
	n := 0
	sub, err := b.Subscribe(ctx, []string{subj}, broker.SubscribeOptions{Durable: "idle"}, func(_ context.Context, d broker.Delivery) {
		if err := d.Ack(); err != nil {
			t.Error(err)
		}
		mu.Lock()
		n++
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for range 10 {
		if err := b.Publish(ctx, &broker.Message{Subject: subj}); err != nil {
			t.Fatal(err)
		}
	}
	js, _ := jetstream.New(b.Conn())
	bustest.CheckFor(t, 5*time.Second, 2*time.Millisecond, func() error {
		c, err := js.Consumer(ctx, broker.StreamName(b.Run()), "idle")
		if err != nil {
			return err
		}
		info := c.CachedInfo()
		if info.AckFloor.Stream != 10 || info.NumAckPending != 0 {
			return errors.New("acks not flushed yet")
		}
		return nil
	})
}

// Publish blocks while the window of unconfirmed messages is full and
// honours ctx; a Flush that cannot be confirmed fails; Close does not hang.
func TestPublishWindow(t *testing.T) {
	for _, d := range []broker.Design{broker.DesignCapture, broker.DesignOrdered, broker.DesignAcked} {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			srv, err := broker.StartServer(ctx, broker.ServerConfig{Dir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			b := connectJSConfig(t, broker.JetStreamConfig{Server: srv, Run: newRun(), Design: d, Window: 4})
			subj := broker.SubjectPrefix(b.Run()) + ".x"
			for i := range 300 {
				if err := b.Publish(ctx, &broker.Message{Subject: subj, Data: []byte("x")}); err != nil {
					t.Fatalf("publish %d: %v", i, err)
				}
				if n := broker.UnconfirmedPublishes(b); n > 4 {
					t.Fatalf("%d unconfirmed publishes with a window of 4", n)
				}
			}
			if err := b.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			srv.Shutdown() // no confirmation comes any more
			// These fit the window, unless a marker's failure has already
			// told the publisher that the stream is gone (capture): then
			// it publishes nothing until a barrier gets through, and
			// Publish waits for ctx. (With context.Background here, that
			// race hung the test for good.)
			for i := range 4 {
				pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				err := b.Publish(pctx, &broker.Message{Subject: subj})
				cancel()
				if err != nil && !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("publish %d: %v", i, err)
				}
			}
			tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			// The window is full, unless the client has failed the
			// unconfirmed publishes at the disconnection already (nats.go
			// does, for acked publishes and markers): Flush reports them
			// either way.
			if err := b.Publish(tctx, &broker.Message{Subject: subj}); err != nil && !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("publish into a full window: %v", err)
			}
			fctx, cancel2 := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancel2()
			if err := b.Flush(fctx); err == nil {
				t.Fatal("flush confirmed with the server gone")
			}
			start := time.Now()
			_ = b.Close()
			if el := time.Since(start); el > 2*time.Second {
				t.Errorf("Close took %v while disconnected", el)
			}
		})
	}
}

// NoCreate needs the stream to exist; a server without JetStream is named.
func TestConnectNeedsStream(t *testing.T) {
	srv := startServer(t)
	ctx := context.Background()
	_, err := broker.ConnectJetStream(ctx, broker.JetStreamConfig{Server: srv, Run: newRun(), NoCreate: true})
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("NoCreate without a stream: %v", err)
	}
	plain, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	plain.Start()
	defer plain.Shutdown()
	if !plain.ReadyForConnections(5 * time.Second) {
		t.Fatal("plain server not ready")
	}
	_, err = broker.ConnectJetStream(ctx, broker.JetStreamConfig{URL: plain.ClientURL(), Run: newRun()})
	if !errors.Is(err, broker.ErrServer) || !strings.Contains(err.Error(), "-js") {
		t.Fatalf("server without JetStream: %v", err)
	}
	// The core design needs no JetStream.
	b, err := broker.ConnectJetStream(ctx, broker.JetStreamConfig{URL: plain.ClientURL(), Run: newRun(), Design: broker.DesignCore})
	if err != nil {
		t.Fatalf("core design on a plain server: %v", err)
	}
	b.Close()
}

// A server that goes away must not hang Flush or Close.
func TestServerGone(t *testing.T) {
	ctx := context.Background()
	srv, err := broker.StartServer(ctx, broker.ServerConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	b := connectJS(t, srv, false, newRun(), "p")
	srv.Shutdown()
	subj := broker.SubjectPrefix(b.Run()) + ".x"
	for range 10 {
		_ = b.Publish(ctx, &broker.Message{Subject: subj})
	}
	fctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := b.Flush(fctx); err == nil {
		t.Error("flush succeeded with the server gone")
	}
	start := time.Now()
	err = b.Close()
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("Close took %v while disconnected", el)
	}
	t.Logf("close while disconnected: %v", err)
}

// With EndOnLoss, the connection's loss ends publishing at once: Lost is
// closed, Publish and Flush fail with ErrConnLost (also a Flush already
// waiting when the broker went), and nothing published afterwards reaches
// the stream when the broker comes back on its store. Without it, the
// same Bus goes on after the reconnect.
func TestEndOnLoss(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	srv, err := broker.StartServer(ctx, broker.ServerConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	url := srv.URL()
	port := srv.NATS().Addr().(*net.TCPAddr).Port
	run := newRun()
	b, err := broker.ConnectJetStream(ctx, broker.JetStreamConfig{URL: url, Run: run, Name: "p", EndOnLoss: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	subj := broker.SubjectPrefix(run) + ".x"
	for range 5 {
		if err := b.Publish(ctx, &broker.Message{Subject: subj, Data: []byte("before")}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.Lost():
		t.Fatal("Lost closed while connected")
	default:
	}
	srv.Shutdown()
	select {
	case <-b.Lost():
	case <-time.After(time.Minute):
		t.Fatal("Lost not closed a minute after the broker went")
	}
	if err := b.Publish(ctx, &broker.Message{Subject: subj, Data: []byte("after")}); !errors.Is(err, broker.ErrConnLost) {
		t.Errorf("publish after the loss: %v, want ErrConnLost", err)
	}
	if err := b.Flush(ctx); !errors.Is(err, broker.ErrConnLost) {
		t.Errorf("flush after the loss: %v, want ErrConnLost", err)
	}
	// The broker back on its store and port: the lost Bus sends nothing.
	srv2, err := broker.StartServer(ctx, broker.ServerConfig{Dir: dir, Port: port})
	if err != nil {
		t.Fatal(err)
	}
	defer srv2.Shutdown()
	time.Sleep(700 * time.Millisecond) // nats.go reconnects meanwhile
	_ = b.Publish(ctx, &broker.Message{Subject: subj, Data: []byte("after")})
	r, err := broker.ConnectJetStream(ctx, broker.JetStreamConfig{URL: url, Run: run, Name: "reader"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	time.Sleep(200 * time.Millisecond)
	if n, err := r.Count(ctx, subj); err != nil || n != 5 {
		t.Errorf("the stream holds %d messages (%v), want the 5 sent before the loss", n, err)
	}
}
