package run

import (
	"context"
	"fmt"
	"slices"
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
	var readBytes int64
	// The party's sequence numbers in the stream, by subject: after a
	// broker crash some may be missing in the middle, not only at the end.
	var (
		have  = map[schemas.Kind][]uint64{}
		own   []trust.Msg
		count int
		dec   = schemas.NewCodec()
		h     schemas.Hello
		o     schemas.PartyOutput
		ev    schemas.EvalOutput
		chain = map[string]uint64{}
	)
	for _, e := range ck.TrustOut {
		chain[e.Subject] = e.Seq
	}
	for _, kind := range []schemas.Kind{schemas.KindHello, schemas.KindOutput, schemas.KindEval} {
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
			have[kind] = append(have[kind], seq)
			count++
			readBytes += int64(len(d.Data()))
			if ck.Trust && seq > chain[d.Subject()] {
				own = append(own, trust.Msg{StreamSeq: d.Seq(), Subject: d.Subject(), Seq: seq, Payload: slices.Clone(d.Data()),
					Sig: d.Header(trust.SigHeader), Prev: d.Header(trust.PrevHeader)})
			}
		}
		subj := schemas.Subject(cfg.Run, kind, m)
		var err error
		// From the checkpoint's floor where it holds what the resume
		// looks at (see party.Checkpoint.StreamFloor): the requests
		// (most of the party's messages) below the outbox and all after
		// the checkpoint; the evaluation chunks (the largest, on the
		// networks) after FloorEvalSeq. Those up to present were
		// published before the floor was counted and are taken as in
		// the stream, as a full read would find them.
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
			own0, count0 := len(own), count
			_, err = logread.Read(ctx, b, []string{subj}, logread.Options{StartSeq: ck.StreamFloor}, fn)
			if err == nil {
				if present > 0 {
					have[kind] = append(have[kind], present)
				}
				if kind == schemas.KindEval {
					p.ReadEvalsFrom(ck.StreamFloor)
				}
				continue
			}
			cfg.hooks.Log.Info().Int("party", m).Err(err).Msg("party: reading its " + what + " from the stream's start")
			have[kind], own, count = have[kind][:0], own[:own0], count0
		}
		if kind == schemas.KindEval {
			p.ReadEvalsFrom(1)
		}
		if _, err = logread.Deliveries(ctx, b, []string{subj}, fn); err != nil {
			return fmt.Errorf("reading party %d's messages in the stream: %w", m, err)
		}
	}
	if ck.Trust {
		// Its receipts: the countersignatures it makes again are not sent
		// again either.
		subj := trust.ReceiptSubject(cfg.Run, m)
		_, err := logread.Deliveries(ctx, b, []string{subj}, func(d broker.Delivery) {
			if seq, _, err := trust.ParseReceiptMessage(d.Data()); err == nil && seq > chain[subj] {
				own = append(own, trust.Msg{StreamSeq: d.Seq(), Subject: subj, Seq: seq, Payload: slices.Clone(d.Data()),
					Sig: d.Header(trust.SigHeader), Prev: d.Header(trust.PrevHeader)})
			}
		})
		if err != nil {
			return fmt.Errorf("reading party %d's receipts in the stream: %w", m, err)
		}
	}
	if err := p.ResumeStream(ck, have, own); err != nil {
		return err
	}
	cfg.hooks.Log.Info().Int("party", m).Int64("steps", ck.Steps).Int("stream_messages", count).Int64("stream_bytes", readBytes).
		Uint64("evaluations_from", p.Stats().EvalsFrom).Dur("took", time.Since(t0).Round(time.Millisecond)).Time("saved", ck.Saved).
		Msg("party: resuming from its checkpoint")
	return nil
}
