package logread

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/asyrevel/asyrevel/broker"
)

// Stall is how long a read may see nothing, with messages still due,
// before it fails.
const Stall = 30 * time.Second

// Options changes how Read reads.
type Options struct {
	// Live lets the bus deliver the stored messages from a live
	// subscription to the filters where its design does so
	// (broker.SubscribeOptions.StreamOnly false): a party catching up on
	// its own subjects. Without it the messages come from the stream
	// alone, which a reader of the log that may not subscribe to the
	// subjects (a resume, an audit) needs.
	Live bool
	// StartSeq, if not 0, reads only the messages from this stream
	// sequence on, from the stream alone (Live is ignored; the design
	// must count what a subscription
	// started there has to deliver: broker.PendingAtStart). Where it
	// cannot, Read returns ErrNoCount and reads nothing: the caller reads
	// from the start instead.
	StartSeq uint64
}

// ErrNoCount reports a read from a stream position that the bus cannot
// count (Options.StartSeq).
var ErrNoCount = errors.New("logread: the bus cannot count the messages from a stream position")

// Messages reads every message of the run's stream that matches filters
// (they must not overlap), as stored when it is called, and hands each
// subject and payload to fn in stream order where the design has it. It
// returns the number read.
func Messages(ctx context.Context, bus broker.Bus, filters []string, fn func(subject string, data []byte)) (int64, error) {
	return Deliveries(ctx, bus, filters, func(d broker.Delivery) { fn(d.Subject(), d.Data()) })
}

// Deliveries is Messages handing fn each delivery (headers and stream
// sequence included; valid during the call only).
func Deliveries(ctx context.Context, bus broker.Bus, filters []string, fn func(broker.Delivery)) (int64, error) {
	return Read(ctx, bus, filters, Options{}, fn)
}

// Read is Deliveries with options. The messages are counted when it is
// called; fn is called for that many deliveries, one at a time, and
// never after Read returns.
func Read(ctx context.Context, bus broker.Bus, filters []string, opts Options, fn func(broker.Delivery)) (int64, error) {
	if opts.StartSeq > 0 {
		return readFrom(ctx, bus, filters, opts, fn)
	}
	var n uint64
	for _, f := range filters {
		v, err := bus.Count(ctx, f)
		if err != nil {
			return 0, err
		}
		n += v
	}
	if n == 0 {
		return 0, nil
	}
	c := &counter{n: n, done: make(chan struct{})}
	sub, err := bus.Subscribe(ctx, filters, broker.SubscribeOptions{Deliver: broker.DeliverAll, StreamOnly: !opts.Live}, func(_ context.Context, d broker.Delivery) {
		c.take(d, fn)
	})
	if err != nil {
		return 0, err
	}
	defer sub.Close()
	return c.wait(ctx, "")
}

// counter hands fn the first n deliveries of a read, one at a time, and
// closes done after the nth.
type counter struct {
	mu   sync.Mutex
	seen uint64
	n    uint64
	done chan struct{}
}

func (c *counter) take(d broker.Delivery, fn func(broker.Delivery)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen >= c.n {
		return
	}
	fn(d)
	if c.seen++; c.seen == c.n {
		close(c.done)
	}
}

// wait waits until the nth delivery, ctx is done, or the read makes no
// progress for Stall.
func (c *counter) wait(ctx context.Context, where string) (int64, error) {
	stall := time.NewTicker(Stall)
	defer stall.Stop()
	prev := uint64(0)
	for {
		select {
		case <-c.done:
			return int64(c.n), nil
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-stall.C:
			c.mu.Lock()
			s := c.seen
			c.mu.Unlock()
			if s == prev {
				return 0, fmt.Errorf("read %d of %d messages%s, then nothing for %v", s, c.n, where, Stall)
			}
			prev = s
		}
	}
}

// readFrom is Read from opts.StartSeq: the subscription's own count of
// what it has to deliver says when it is done (the stream's count per
// subject covers the whole stream).
func readFrom(ctx context.Context, bus broker.Bus, filters []string, opts Options, fn func(broker.Delivery)) (int64, error) {
	c := &counter{done: make(chan struct{})}
	ready := make(chan struct{}) // c.n is set
	// From the stream alone whatever opts.Live says: the count is a
	// stream consumer's.
	sub, pending, err := subscribeFrom(ctx, bus, filters, opts.StartSeq, func(hctx context.Context, d broker.Delivery) {
		select {
		case <-ready:
		case <-hctx.Done():
			return
		}
		c.take(d, fn)
	})
	if err != nil {
		return 0, err
	}
	defer sub.Close()
	if pending == 0 {
		return 0, nil
	}
	c.n = pending
	close(ready)
	return c.wait(ctx, fmt.Sprintf(" from stream sequence %d", opts.StartSeq))
}

// CountFrom is the number of stored messages on filter from stream
// sequence seq on: what a subscription started there has to deliver
// (broker.PendingAtStart). ErrNoCount where the bus cannot say.
func CountFrom(ctx context.Context, bus broker.Bus, filter string, seq uint64) (uint64, error) {
	sub, n, err := subscribeFrom(ctx, bus, []string{filter}, seq, func(context.Context, broker.Delivery) {})
	if err != nil {
		return 0, err
	}
	sub.Close()
	return n, nil
}

// subscribeFrom subscribes h to filters from stream sequence seq, from
// the stream alone, and returns the number of messages the subscription
// has to deliver (ErrNoCount where the bus cannot say: several filters on
// a server without multi-filter consumers, say).
func subscribeFrom(ctx context.Context, bus broker.Bus, filters []string, seq uint64, h broker.Handler) (broker.Subscription, uint64, error) {
	sub, err := bus.Subscribe(ctx, filters, broker.SubscribeOptions{StartSeq: max(seq, 1), StreamOnly: true}, h)
	if errors.Is(err, broker.ErrUnsupported) {
		return nil, 0, fmt.Errorf("%w: %w", ErrNoCount, err)
	}
	if err != nil {
		return nil, 0, err
	}
	n, ok := broker.PendingAtStart(sub)
	if !ok {
		sub.Close()
		return nil, 0, ErrNoCount
	}
	return sub, n, nil
}
