package party

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/logread"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/trust"
)

// A resumed party with the trust layer reads what the aggregator sent
// after its checkpoint on a consumer per subject (reply.m and the
// controls, at once): the broker's permissions grant a party one
// consumer per filter, never one over both. It merges them by stream sequence and
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

// catchUp reads the reply and control subjects from the stream and
// handles what comes after the restored position (p.recov.skipTo), in stream
// order; then it moves p.recov.skipTo to what the verifier accepted. The read
// is logread's, from a live subscription where the bus's design delivers
// from one (logread.Options.Live), as the party's own subscription does.
func (p *Party) catchUp(ctx context.Context, bus broker.Bus) error {
	subjects := [2]string{p.subjects[schemas.KindReply], p.subjects[schemas.KindControl]}
	// The two subjects are read at once, each into a part of its own
	// (issue 35: one after the other, their counts and reads were a
	// good part of a party's return after a broker outage); merged, the
	// parts are what the reads one after the other gave.
	var (
		parts [2][]*heldDelivery
		errs  [2]error
		wg    sync.WaitGroup
	)
	for i, subj := range subjects {
		wg.Add(1)
		go func() {
			defer wg.Done()
			parts[i], errs[i] = p.catchUpOne(ctx, bus, subj, i)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs[0], errs[1]); err != nil {
		return err
	}
	held := append(parts[0], parts[1]...)
	slices.SortStableFunc(held, func(a, b *heldDelivery) int { return cmp.Compare(a.seq, b.seq) })
	for _, d := range held {
		p.handle(ctx, d)
	}
	p.mu.Lock()
	for i, subj := range subjects {
		p.recov.skipTo[i] = max(p.recov.skipTo[i], p.tr.ver.LastSeq(subj))
	}
	p.mu.Unlock()
	return nil
}

// catchUpOne reads subject subj (i: 0 the replies, 1 the controls) back
// from the stream for catchUp: what comes after the restored position,
// and any message it cannot decode (for the handler to reject).
func (p *Party) catchUpOne(ctx context.Context, bus broker.Bus, subj string, i int) ([]*heldDelivery, error) {
	var (
		held []*heldDelivery
		dec  = schemas.NewCodec()
		rep  schemas.Reply
		ctl  schemas.Control
	)
	p.mu.Lock()
	skipTo := p.recov.skipTo[i]
	p.mu.Unlock()
	keep := func(d broker.Delivery) {
		var msg schemas.Message = &rep
		if i == 1 {
			msg = &ctl
		}
		// What the checkpoint had handled is not kept; an undecodable
		// message is, for the handler to reject.
		if dec.Unmarshal(d.Data(), msg) != nil || msg.Head().Seq > skipTo {
			held = append(held, &heldDelivery{subject: d.Subject(), data: slices.Clone(d.Data()),
				sig: d.Header(trust.SigHeader), prev: d.Header(trust.PrevHeader), cp: d.Header(trust.CheckpointHeader), seq: d.Seq()})
		}
	}
	opts := logread.Options{Live: true, StartSeq: p.replyFloor(ctx, bus, subj, i)}
	_, err := logread.Read(ctx, bus, []string{subj}, opts, keep)
	if err != nil && opts.StartSeq > 0 {
		// The read from the floor failed (a bus that cannot count
		// from a position): the whole subject, as before floors.
		p.cfg.Log.Info().Int("party", p.cfg.ID).Str("subject", subj).Err(err).Msg("resume: reading the subject from the stream's start")
		held = held[:0]
		if i == 0 {
			p.mu.Lock()
			p.stats.RepliesFrom = 1
			p.mu.Unlock()
		}
		_, err = logread.Read(ctx, bus, []string{subj}, logread.Options{Live: true}, keep)
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", subj, err)
	}
	return held, nil
}

// replyFloor is where the catch-up reads the replies to this party (i 0)
// or the controls (i 1) from: the checkpoint's floor
// (Checkpoint.StreamFloor) if no message the checkpoint had not handled
// lies below it, else 0 (the whole subject). The aggregator numbers its
// replies to the party, and its controls, 1, 2, ... in stream order, so
// the messages below the floor are among those handled if
// there are no more of them than the checkpoint handled: the subject's
// count less the count from the floor. The floor was taken before the
// party's in-flight requests were sent, and each reply is stored after
// its request, so the check fails only for a checkpoint whose requests
// waited more than a checkpoint period for their replies.
func (p *Party) replyFloor(ctx context.Context, bus broker.Bus, subj string, i int) uint64 {
	p.mu.Lock()
	floor, handled := p.recov.resumeFloor, p.recov.skipTo[i]
	p.mu.Unlock()
	why := ""
	switch {
	case floor <= 1:
		why = "the checkpoint holds no stream position"
	default:
		all, err := bus.Count(ctx, subj)
		above, err2 := logread.CountFrom(ctx, bus, subj, floor)
		switch {
		case err != nil || err2 != nil:
			why = fmt.Sprintf("counting the messages: %v", errors.Join(err, err2))
		case all-min(all, above) > handled:
			why = fmt.Sprintf("%d messages below the floor (stream sequence %d), more than the %d the checkpoint handled", all-min(all, above), floor, handled)
		}
	}
	if why != "" {
		p.cfg.Log.Info().Int("party", p.cfg.ID).Str("subject", subj).Str("why", why).Msg("resume: reading the subject from the stream's start")
		floor = 0
	}
	if i == 0 {
		p.mu.Lock()
		p.stats.RepliesFrom = max(floor, 1)
		p.mu.Unlock()
	}
	return floor
}
