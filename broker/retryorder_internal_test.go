package broker

import (
	"context"
	"errors"
	"testing"
	"time"
)

// gotIn says whether acquire of subject returns within d.
func gotIn(o *subjectOrder, subject string, d time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return o.acquire(ctx, nil, subject) == nil
}

func TestSubjectOrder(t *testing.T) {
	const ctl = "asyrevel.r.ctl"
	o := newSubjectOrder(ctl)
	short := 30 * time.Millisecond
	if !gotIn(o, "a", short) || !gotIn(o, "b", short) {
		t.Fatal("two subjects at once")
	}
	if gotIn(o, "a", short) {
		t.Fatal("a second message of subject a while the first is in flight")
	}
	// The control message waits for a and b; c waits behind it.
	ctlGot := make(chan error, 1)
	go func() { ctlGot <- o.acquire(context.Background(), nil, ctl) }()
	time.Sleep(short)
	if gotIn(o, "c", short) {
		t.Fatal("c went before a waiting control message")
	}
	o.release("a")
	select {
	case <-ctlGot:
		t.Fatal("the control message went with b in flight")
	case <-time.After(short):
	}
	o.release("b")
	select {
	case err := <-ctlGot:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the control message did not go once a and b were stored")
	}
	if gotIn(o, "a", short) {
		t.Fatal("a went with a control message in flight")
	}
	o.release(ctl)
	if !gotIn(o, "a", short) {
		t.Fatal("a after the control message")
	}
	o.release("a")
	o.release("a") // a second release changes nothing
	if o.inFlight != 0 {
		t.Fatalf("%d in flight", o.inFlight)
	}
	// A waiting control message given up lets the others go.
	if !gotIn(o, "a", short) {
		t.Fatal("a")
	}
	ctx, cancel := context.WithTimeout(context.Background(), short)
	err := o.acquire(ctx, nil, ctl)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("control message: %v", err)
	}
	if !gotIn(o, "b", short) {
		t.Fatal("b after a control message gave up")
	}
	closing := make(chan struct{})
	close(closing)
	if err := o.acquire(context.Background(), closing, "a"); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed: %v", err)
	}
}
