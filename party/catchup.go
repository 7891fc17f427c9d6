package party

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/trust"
)

// A resumed party with the trust layer reads what the aggregator sent
// after its checkpoint one subject at a time (reply.m, then the
// controls): the broker's permissions grant a party one consumer per
// filter, never one over both. It merges them by stream sequence and
// handles them in that order, as it would have live, while its live
// subscription (started first, so nothing falls between) waits; what the
// live subscription then delivers again is skipped by sequence number.

// heldDelivery is a message read back from the stream.
type heldDelivery struct {
	subject       string
	data          []byte
	sig, prev, cp string // the trust headers: signature, previous head, checkpoint
	seq           uint64
}

func (d *heldDelivery) Subject() string { return d.subject }
func (d *heldDelivery) Data() []byte    { return d.data }
func (d *heldDelivery) ID() string      { return "" }
func (d *heldDelivery) Seq() uint64     { return d.seq }
func (d *heldDelivery) Ack() error      { return nil }
func (d *heldDelivery) Header(k string) string {
	switch k {
	case trust.SigHeader:
		return d.sig
	case trust.PrevHeader:
		return d.prev
	case trust.CheckpointHeader:
		return d.cp
	}
	return ""
}

// catchUpStall is how long a catch-up read may see nothing before it
// fails.
const catchUpStall = 30 * time.Second

// catchUp reads the reply and control subjects from the stream and
// handles what comes after the restored position (p.skipTo), in stream
// order; then it moves p.skipTo to what the verifier accepted.
func (p *Party) catchUp(ctx context.Context, bus broker.Bus) error {
	subjects := [2]string{p.subjects[schemas.KindReply], p.subjects[schemas.KindControl]}
	var held []*heldDelivery
	for i, subj := range subjects {
		n, err := bus.Count(ctx, subj)
		if err != nil {
			return err
		}
		if n == 0 {
			continue
		}
		var (
			mu   sync.Mutex
			seen uint64
			done = make(chan struct{})
			dec  = schemas.NewCodec()
			rep  schemas.Reply
			ctl  schemas.Control
		)
		sub, err := bus.Subscribe(ctx, []string{subj}, broker.SubscribeOptions{Deliver: broker.DeliverAll}, func(_ context.Context, d broker.Delivery) {
			mu.Lock()
			defer mu.Unlock()
			if seen >= n {
				return
			}
			var msg schemas.Message = &rep
			if i == 1 {
				msg = &ctl
			}
			// What the checkpoint had handled is not kept; an undecodable
			// message is, for the handler to reject.
			if dec.Unmarshal(d.Data(), msg) != nil || msg.Head().Seq > p.skipTo[i] {
				held = append(held, &heldDelivery{subject: d.Subject(), data: slices.Clone(d.Data()),
					sig: d.Header(trust.SigHeader), prev: d.Header(trust.PrevHeader), cp: d.Header(trust.CheckpointHeader), seq: d.Seq()})
			}
			if seen++; seen == n {
				close(done)
			}
		})
		if err != nil {
			return err
		}
		err = waitRead(ctx, done, &mu, &seen, n)
		sub.Close()
		if err != nil {
			return fmt.Errorf("reading %s: %w", subj, err)
		}
	}
	slices.SortStableFunc(held, func(a, b *heldDelivery) int { return cmp.Compare(a.seq, b.seq) })
	for _, d := range held {
		p.handle(ctx, d)
	}
	p.mu.Lock()
	for i, subj := range subjects {
		p.skipTo[i] = max(p.skipTo[i], p.tr.ver.LastSeq(subj))
	}
	p.mu.Unlock()
	return nil
}

// waitRead waits until done is closed, ctx ends or the count seen stops
// growing for catchUpStall.
func waitRead(ctx context.Context, done chan struct{}, mu *sync.Mutex, seen *uint64, n uint64) error {
	stall := time.NewTicker(catchUpStall)
	defer stall.Stop()
	prev := uint64(0)
	for {
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-stall.C:
			mu.Lock()
			s := *seen
			mu.Unlock()
			if s == prev {
				return fmt.Errorf("read %d of %d messages, then nothing for %v", s, n, catchUpStall)
			}
			prev = s
		}
	}
}
