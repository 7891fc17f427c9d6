package broker_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/broker"
)

// RaiseMaxBytes lifts a full stream's bound so that publishing goes on,
// and never lowers it.
func TestRaiseMaxBytes(t *testing.T) {
	srv := startServer(t)
	run := newRun()
	const bound = 64 << 10
	b := connectJSConfig(t, broker.JetStreamConfig{Server: srv, Run: run, Name: "a", Design: broker.DesignOrdered, MaxBytes: bound})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	subject := broker.SubjectPrefix(run) + ".x"
	payload := bytes.Repeat([]byte{1}, 4<<10)
	fill := func() error {
		for range 64 {
			if err := b.Publish(ctx, &broker.Message{Subject: subject, Data: payload}); err != nil {
				return err
			}
		}
		return b.Flush(ctx)
	}
	if err := fill(); !errors.Is(err, broker.ErrStreamFull) {
		t.Fatalf("256 KiB into a 64 KiB stream: %v, want ErrStreamFull", err)
	}
	if before, raised, err := b.RaiseMaxBytes(ctx, bound/2); err != nil || raised || before != bound {
		t.Fatalf("lowering: before %d, raised %v, err %v; want %d, false, nil", before, raised, err, bound)
	}
	if before, raised, err := b.RaiseMaxBytes(ctx, 4<<20); err != nil || !raised || before != bound {
		t.Fatalf("raising: before %d, raised %v, err %v; want %d, true, nil", before, raised, err, bound)
	}
	// A later participant's smaller bound does not lower it either.
	b = connectJSConfig(t, broker.JetStreamConfig{Server: srv, Run: run, Name: "b", Design: broker.DesignOrdered, MaxBytes: bound})
	if err := fill(); err != nil {
		t.Fatalf("after the bound was raised: %v", err)
	}
	if _, raised, err := b.RaiseMaxBytes(ctx, 0); err != nil || !raised {
		t.Fatalf("lifting the bound: raised %v, err %v", raised, err)
	}
	if _, raised, err := b.RaiseMaxBytes(ctx, 1<<30); err != nil || raised {
		t.Fatalf("an unbounded stream was bounded: raised %v, err %v", raised, err)
	}
}
