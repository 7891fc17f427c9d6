package run

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/logread"
	"github.com/asyrevel/asyrevel/party"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/trust"
)

// resumeParty restores party m from its checkpoint ck and the sequence
// numbers of its messages in the stream (per subject), read back one
// subject at a time (a single filter: what the broker's permissions grant
// a party on its own subjects). With the trust layer, the messages after
// the checkpoint's chains are handed over with their headers.
func resumeParty(ctx context.Context, b broker.Bus, cfg *job, p *party.Party, ck *party.Checkpoint, m int) error {
	if ck == nil {
		return fmt.Errorf("%w: party %d", ErrNoCheckpoint, m)
	}
	t0 := time.Now()
	chain := map[string]uint64{}
	for _, e := range ck.TrustOut {
		chain[e.Subject] = e.Seq
	}
	// The subjects are read at once, each on a consumer of its own into
	// a part of its own, and the parts put together in the order they
	// were read one after the other before: each read is mostly the
	// broker's round trips (a consumer made, counted, deleted), and
	// after a broker outage the four of them were 0.3 to 1.4 s of a
	// party's return (issue 35).
	kinds := []schemas.Kind{schemas.KindHello, schemas.KindOutput, schemas.KindEval}
	parts := make([]resumePart, len(kinds)+1)
	var wg sync.WaitGroup
	for i, kind := range kinds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			parts[i].err = parts[i].readKind(ctx, b, cfg, p, ck, m, kind, chain)
		}()
	}
	if ck.Trust {
		// Its receipts: the countersignatures it makes again are not sent
		// again either.
		wg.Add(1)
		go func() {
			defer wg.Done()
			pt := &parts[len(kinds)]
			subj := trust.ReceiptSubject(cfg.Run, m)
			_, err := logread.Deliveries(ctx, b, []string{subj}, func(d broker.Delivery) {
				if seq, _, err := trust.ParseReceiptMessage(d.Data()); err == nil && seq > chain[subj] {
					pt.own = append(pt.own, trust.Msg{StreamSeq: d.Seq(), Subject: subj, Seq: seq, Payload: slices.Clone(d.Data()),
						Sig: d.Header(trust.SigHeader), Prev: d.Header(trust.PrevHeader)})
				}
			})
			if err != nil {
				pt.err = fmt.Errorf("reading party %d's receipts in the stream: %w", m, err)
			}
		}()
	}
	wg.Wait()
	var (
		have      = map[schemas.Kind][]uint64{}
		own       []trust.Msg
		count     int
		readBytes int64
	)
	for i := range parts {
		pt := &parts[i]
		if pt.err != nil {
			return pt.err
		}
		if i < len(kinds) && len(pt.have) > 0 {
			have[kinds[i]] = pt.have
		}
		own = append(own, pt.own...)
		count += pt.count
		readBytes += pt.bytes
	}
	if err := p.ResumeStream(ck, have, own); err != nil {
		return err
	}
	cfg.hooks.Log.Info().Int("party", m).Int64("steps", ck.Steps).Int("stream_messages", count).Int64("stream_bytes", readBytes).
		Uint64("evaluations_from", p.Stats().EvalsFrom).Dur("took", time.Since(t0).Round(time.Millisecond)).Time("saved", ck.Saved).
		Msg("party: resuming from its checkpoint")
	return nil
}

// resumePart is what resumeParty read of one of the party's subjects.
type resumePart struct {
	have  []uint64    // the sequence numbers the stream holds
	own   []trust.Msg // those after the checkpoint's chain, with their headers (trust layer)
	count int
	bytes int64
	err   error
}

// readKind reads party m's messages of kind back from the stream into
// pt: from the checkpoint's floor where it holds what the resume looks
// at (see party.Checkpoint.StreamFloor): the requests (most of the
// party's messages) below the outbox and all after the checkpoint; the
// evaluation chunks (the largest, on the networks) after FloorEvalSeq.
// Those up to present were published before the floor was counted and
// are taken as in the stream, as a full read would find them.
func (pt *resumePart) readKind(ctx context.Context, b broker.Bus, cfg *job, p *party.Party, ck *party.Checkpoint, m int, kind schemas.Kind, chain map[string]uint64) error {
	var (
		dec = schemas.NewCodec()
		h   schemas.Hello
		o   schemas.PartyOutput
		ev  schemas.EvalOutput
	)
	var msg schemas.Message = &h
	switch kind {
	case schemas.KindOutput:
		msg = &o
	case schemas.KindEval:
		msg = &ev
	}
	fn := func(d broker.Delivery) {
		if dec.Unmarshal(d.Data(), msg) != nil {
			return
		}
		seq := msg.Head().Seq
		pt.have = append(pt.have, seq)
		pt.count++
		pt.bytes += int64(len(d.Data()))
		if ck.Trust && seq > chain[d.Subject()] {
			pt.own = append(pt.own, trust.Msg{StreamSeq: d.Seq(), Subject: d.Subject(), Seq: seq, Payload: slices.Clone(d.Data()),
				Sig: d.Header(trust.SigHeader), Prev: d.Header(trust.PrevHeader)})
		}
	}
	subj := schemas.Subject(cfg.Run, kind, m)
	fromFloor, present, what := false, uint64(0), "requests"
	switch kind {
	case schemas.KindOutput:
		if fromFloor = ck.StreamFloor > 1 && len(ck.Outbox) > 0; fromFloor {
			lowest := ck.Outbox[0].Seq
			for _, s := range ck.Outbox {
				lowest = min(lowest, s.Seq)
			}
			present = lowest - 1
		}
	case schemas.KindEval:
		fromFloor, present, what = ck.StreamFloor > 1 && ck.FloorEvalKnown, ck.FloorEvalSeq, "evaluation outputs"
	}
	if fromFloor {
		_, err := logread.Read(ctx, b, []string{subj}, logread.Options{StartSeq: ck.StreamFloor}, fn)
		if err == nil {
			if present > 0 {
				pt.have = append(pt.have, present)
			}
			if kind == schemas.KindEval {
				p.ReadEvalsFrom(ck.StreamFloor)
			}
			return nil
		}
		cfg.hooks.Log.Info().Int("party", m).Err(err).Msg("party: reading its " + what + " from the stream's start")
		*pt = resumePart{}
	}
	if kind == schemas.KindEval {
		p.ReadEvalsFrom(1)
	}
	if _, err := logread.Deliveries(ctx, b, []string{subj}, fn); err != nil {
		return fmt.Errorf("reading party %d's messages in the stream: %w", m, err)
	}
	return nil
}
