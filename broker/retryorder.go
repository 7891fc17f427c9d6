package broker

import (
	"context"
	"sync"
)

// subjectOrder keeps the order the receivers check while the fail-over
// publisher (JetStreamConfig.Retry) has many messages in flight: one
// message at a time on each subject (each subject is its sender's chain,
// whose order receivers and audits check; a message published again
// after a loss then cannot land behind a later one of its subject), and a
// message on the barrier subject (the run's control subject) only alone:
// it waits until every earlier message is stored, and later ones wait for
// it. Before, one message at a time in all kept every order, at one
// stream round trip (three nodes' acknowledgement) a message.
type subjectOrder struct {
	barrier string // the subject that orders against all others

	mu       sync.Mutex
	busy     map[string]struct{} // subjects with a message in flight
	inFlight int
	fenced   bool // a barrier message is in flight
	fencing  int  // barrier messages waiting: others wait behind them
	waiters  int
	changed  chan struct{} // closed (and replaced) when a waiter may go on
}

func newSubjectOrder(barrier string) *subjectOrder {
	return &subjectOrder{barrier: barrier, busy: make(map[string]struct{}), changed: make(chan struct{})}
}

// acquire waits until a message on subject may be published, or ctx is
// done, or closing is closed (then ErrClosed).
func (o *subjectOrder) acquire(ctx context.Context, closing <-chan struct{}, subject string) error {
	isBarrier := subject == o.barrier
	o.mu.Lock()
	if isBarrier {
		o.fencing++
	}
	for {
		_, busy := o.busy[subject]
		free := !o.fenced && !busy && (isBarrier && o.inFlight == 0 || !isBarrier && o.fencing == 0)
		if free {
			o.busy[subject] = struct{}{}
			o.inFlight++
			if isBarrier {
				o.fencing--
				o.fenced = true
			}
			o.mu.Unlock()
			return nil
		}
		ch := o.changed
		o.waiters++
		o.mu.Unlock()
		var err error
		select {
		case <-ch:
		case <-ctx.Done():
			err = ctx.Err()
		case <-closing:
			err = ErrClosed
		}
		o.mu.Lock()
		o.waiters--
		if err != nil {
			if isBarrier {
				o.fencing--
				o.wake()
			}
			o.mu.Unlock()
			return err
		}
	}
}

// release ends the flight of subject's message (stored, or given up).
func (o *subjectOrder) release(subject string) {
	o.mu.Lock()
	if _, ok := o.busy[subject]; ok {
		delete(o.busy, subject)
		o.inFlight--
		if subject == o.barrier {
			o.fenced = false
		}
		o.wake()
	}
	o.mu.Unlock()
}

// wake lets the waiters look again; o.mu is held.
func (o *subjectOrder) wake() {
	if o.waiters > 0 {
		close(o.changed)
		o.changed = make(chan struct{})
	}
}
