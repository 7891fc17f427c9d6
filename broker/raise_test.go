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

// Messages a full stream refused are reported as a full stream, not only
// as lost, when none of them was a marker (whose refusal names the
// cause): the count check asks whether the stream is at its bound. Before,
// a run stopped full with "messages lost: ... holds 1409 messages, 1411
// were published there" (TestMaxStoreStopsTheRun, once).
func TestCaptureFullWithoutMarker(t *testing.T) {
	srv := startServer(t)
	run := newRun()
	b := connectJSConfig(t, broker.JetStreamConfig{Server: srv, Run: run, Name: "a", Design: broker.DesignCapture, MaxBytes: 64 << 10,
		MarkEvery: 1000, Window: 1000})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	subject := broker.SubjectPrefix(run) + ".x"
	payload := bytes.Repeat([]byte{1}, 1<<10)
	for range 100 {
		if err := b.Publish(ctx, &broker.Message{Subject: subject, Data: payload}); err != nil {
			t.Fatal(err)
		}
	}
	err := b.Flush(ctx)
	if !errors.Is(err, broker.ErrStreamFull) || !errors.Is(err, broker.ErrLost) {
		t.Fatalf("100 KiB into a 64 KiB stream: %v, want ErrStreamFull and ErrLost", err)
	}
}
