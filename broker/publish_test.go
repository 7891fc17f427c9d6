package broker_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/broker/bustest"
)

// A fast batch is confirmed without Flush once the publisher goes idle,
// and a small window never deadlocks the publisher.
func TestPublishConfirmedWhenIdle(t *testing.T) {
	srv := startServer(t)
	for _, inProcess := range []bool{true, false} {
		run := newRun()
		b := connectJSConfig(t, broker.JetStreamConfig{Server: srv, InProcess: inProcess, Run: run, MaxPending: 8})
		if !broker.UsesFastBatches(b) {
			t.Fatal("not publishing in fast batches")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		subj := broker.SubjectPrefix(run) + ".w"
		for i := range 100 {
			if err := b.Publish(ctx, &broker.Message{Subject: subj, ID: run + "." + strconv.Itoa(i), Data: []byte("x")}); err != nil {
				t.Fatalf("publish %d: %v", i, err)
			}
		}
		bustest.CheckFor(t, 5*time.Second, time.Millisecond, func() error {
			if n := broker.UnconfirmedPublishes(b); n != 0 {
				return errors.New(strconv.Itoa(n) + " unconfirmed")
			}
			return nil
		})
		if n, err := b.Count(ctx, subj); err != nil || n != 100 {
			t.Fatalf("count %d, %v", n, err)
		}
		if err := b.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A publisher in fast batches whose stream does not allow them falls back
// to one ack per message without losing or doubling a message.
func TestPublishBatchFallback(t *testing.T) {
	srv := startServer(t)
	run := newRun()
	ctx := context.Background()
	// The stream without AllowBatchPublish.
	connectJSConfig(t, broker.JetStreamConfig{Server: srv, Run: run, PerMessageAcks: true})
	b := connectJSConfig(t, broker.JetStreamConfig{Server: srv, Run: run, NoCreate: true})
	broker.ForceFastBatches(b)
	subj := broker.SubjectPrefix(run) + ".f"
	for i := range 50 {
		id := ""
		if i%2 == 0 {
			id = run + "." + strconv.Itoa(i)
		}
		if err := b.Publish(ctx, &broker.Message{Subject: subj, ID: id, Data: []byte(strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if broker.UsesFastBatches(b) {
		t.Error("still in fast batches")
	}
	if n, err := b.Count(ctx, subj); err != nil || n != 50 {
		t.Fatalf("count %d, %v", n, err)
	}
}
