package broker_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/asyrevel/asyrevel/broker"
)

// The failure paths of the capture design's flow control: whatever the
// stream does not store is reported by Flush (ErrLost), never lost
// silently.

// A stream whose ingest buffer overflows drops core publishes without a
// word: Flush finds the gap in the stream's counts.
func TestCaptureIngestOverflowReported(t *testing.T) {
	ctx := context.Background()
	srv, err := broker.StartServer(ctx, broker.ServerConfig{Dir: t.TempDir(), Configure: func(o *server.Options) {
		o.StreamMaxBufferedMsgs = 4 // a stock server buffers 100,000
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	run := newRun()
	pubs := make([]*broker.JetStream, 4)
	for i := range pubs {
		pubs[i] = connectJSConfig(t, broker.JetStreamConfig{Server: srv, InProcess: true, Run: run, Name: "p" + strconv.Itoa(i)})
	}
	done := make(chan struct{})
	for i, b := range pubs {
		go func() {
			defer func() { done <- struct{}{} }()
			subj := broker.SubjectPrefix(run) + ".o." + strconv.Itoa(i)
			for j := range 3000 {
				if err := b.Publish(ctx, &broker.Message{Subject: subj, Data: []byte(strconv.Itoa(j))}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for range pubs {
		<-done
	}
	lost := 0
	for i, b := range pubs {
		fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err := b.Flush(fctx)
		cancel()
		n, cerr := b.Count(ctx, broker.SubjectPrefix(run)+".o."+strconv.Itoa(i))
		if cerr != nil {
			t.Fatal(cerr)
		}
		switch {
		case n < 3000 && !errors.Is(err, broker.ErrLost):
			t.Errorf("publisher %d: %d of 3000 stored, yet Flush said %v", i, n, err)
		case n == 3000 && err != nil:
			t.Errorf("publisher %d: all stored, yet Flush said %v", i, err)
		case n < 3000:
			lost++
			t.Logf("publisher %d: %d of 3000 stored; Flush: %v", i, n, err)
		}
	}
	if lost == 0 {
		t.Skip("the ingest buffer of 4 never overflowed on this machine: nothing to report")
	}
}

// A stream that refuses messages (here: larger than its limit): a refused
// marker fails Flush with the broker's error, and a refused core publish
// is found by the count check.
func TestCaptureRefusedMessagesReported(t *testing.T) {
	srv := startServer(t)
	ctx := context.Background()
	run := newRun()
	admin := connectJSConfig(t, broker.JetStreamConfig{Server: srv, InProcess: true, Run: run, Design: broker.DesignAcked})
	js, _ := jetstream.New(admin.Conn())
	st, err := js.Stream(ctx, broker.StreamName(run))
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.MaxMsgSize = 64
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	b := connectJSConfig(t, broker.JetStreamConfig{Server: srv, InProcess: true, Run: run, NoCreate: true, Design: broker.DesignCapture})
	subj := broker.SubjectPrefix(run) + ".r"
	big := []byte(strings.Repeat("x", 100))
	for _, tc := range []struct {
		name string
		m    broker.Message
	}{
		{"marker", broker.Message{Subject: subj, ID: "id-1", Data: big}}, // an ID makes it a marker
		{"core", broker.Message{Subject: subj + ".core", Data: big}},
	} {
		if err := b.Publish(ctx, &tc.m); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := b.Flush(fctx)
		cancel()
		if !errors.Is(err, broker.ErrLost) {
			t.Errorf("%s: Flush after a refused message: %v", tc.name, err)
		}
		t.Logf("%s: %v", tc.name, err)
		// Reported once: the next Flush is clean.
		if err := b.Flush(ctx); err != nil {
			t.Errorf("%s: second Flush: %v", tc.name, err)
		}
	}
	if err := b.Publish(ctx, &broker.Message{Subject: subj, Data: []byte("small")}); err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(ctx); err != nil {
		t.Errorf("Flush after a stored message: %v", err)
	}
}

// Flush confirms the messages after the last marker with a barrier the
// stream refuses to store; the barrier never reaches a Handler.
func TestCaptureBarrierInvisible(t *testing.T) {
	srv := startServer(t)
	ctx := context.Background()
	run := newRun()
	b := connectJSConfig(t, broker.JetStreamConfig{Server: srv, InProcess: true, Run: run, Window: 1024, MarkEvery: 1000})
	sub := connectJS(t, srv, true, run, "sub")
	subj := broker.SubjectPrefix(run) + ".b"
	got := make(chan string, 100)
	s, err := sub.Subscribe(ctx, []string{subj}, broker.SubscribeOptions{Deliver: broker.DeliverNew}, func(_ context.Context, d broker.Delivery) {
		got <- string(d.Data())
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 10 {
		if err := b.Publish(ctx, &broker.Message{Subject: subj, Data: []byte(strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
	if n := broker.UnconfirmedPublishes(b); n != 10 {
		t.Fatalf("%d unconfirmed before Flush, want 10 (no marker yet)", n)
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := broker.UnconfirmedPublishes(b); n != 0 {
		t.Fatalf("%d unconfirmed after Flush", n)
	}
	if n, err := b.Count(ctx, subj); err != nil || n != 10 {
		t.Fatalf("stored %d (%v), want 10", n, err)
	}
	for i := range 10 {
		select {
		case d := <-got:
			if d != strconv.Itoa(i) {
				t.Fatalf("delivery %d is %q", i, d)
			}
		case <-time.After(time.Minute):
			t.Fatalf("%d of 10 delivered", i)
		}
	}
	if err := sub.Flush(ctx); err != nil { // a round trip: anything in flight has arrived
		t.Fatal(err)
	}
	select {
	case d := <-got:
		t.Fatalf("a barrier was delivered: %q", d)
	case <-time.After(50 * time.Millisecond):
	}
}
