package party

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/trust"
)

// partyTrust is the party's side of the trust layer (package trust):
// its outbox, which numbers, chains and signs what it publishes, and its
// verifier, which checks the aggregator's replies and controls before
// they act.
type partyTrust struct {
	out  *trust.Outbox
	pubs [schemas.KindControl + 1]*trust.Publisher // own subjects by kind
	rcpt *trust.Publisher                          // receipts
	ver  *trust.Verifier
	// own and in are the subjects the party publishes and receives, for
	// checking checkpoints.
	own, in []string

	hdr       map[string]string
	sig, prev []byte
	vm        trust.Msg
	seal      bool // sign the next message whatever the policy says
	rcptBuf   []byte
	final     bool // the final checkpoint is countersigned
}

// initTrust sets up the trust layer from cfg.Key and cfg.Roster.
func (p *Party) initTrust() error {
	cfg := &p.cfg
	if cfg.Key == nil && cfg.Roster == nil {
		return nil
	}
	if cfg.Key == nil || cfg.Roster == nil {
		return fmt.Errorf("%w: party %d: a key needs a roster and a roster a key", ErrConfig, cfg.ID)
	}
	r := cfg.Roster
	if r.Run != cfg.Run {
		return fmt.Errorf("%w: party %d: the roster is run %s's, not %s's", ErrConfig, cfg.ID, r.Run, cfg.Run)
	}
	out, err := trust.NewOutbox(r, cfg.Key, cfg.Sign)
	if err != nil {
		return fmt.Errorf("%w: party %d: %w", ErrConfig, cfg.ID, err)
	}
	if self := out.Self(); self.ID != trust.PartyID(cfg.ID) {
		return fmt.Errorf("%w: party %d: the key is %s's in the roster", ErrConfig, cfg.ID, self.ID)
	}
	in := r.Inbound(out.Self().ID)
	ver, err := trust.NewVerifier(r, trust.VerifierOptions{Subjects: in, Every: cfg.Sign.Every, Late: in})
	if err != nil {
		return fmt.Errorf("%w: party %d: %w", ErrConfig, cfg.ID, err)
	}
	t := &partyTrust{out: out, ver: ver, in: in, hdr: make(map[string]string, 2),
		sig: make([]byte, 0, 160), prev: make([]byte, 0, 48)}
	for _, k := range []schemas.Kind{schemas.KindHello, schemas.KindOutput, schemas.KindEval} {
		if t.pubs[k], err = out.Publisher(p.subjects[k]); err != nil {
			return fmt.Errorf("%w: party %d: %w", ErrConfig, cfg.ID, err)
		}
		t.own = append(t.own, p.subjects[k])
	}
	if t.rcpt, err = out.Publisher(trust.ReceiptSubject(cfg.Run, cfg.ID)); err != nil {
		return fmt.Errorf("%w: party %d: %w", ErrConfig, cfg.ID, err)
	}
	t.own = append(t.own, t.rcpt.Subject())
	p.tr = t
	return nil
}

// nextSeq is the sequence number of the next message of kind k: each
// subject is numbered 1, 2, ... (the trust layer's chains need it).
func (p *Party) nextSeq(k schemas.Kind) uint64 {
	if p.tr != nil {
		// The chain numbers the subject; p.seqs follows it, for the
		// checkpoint: what it counts as sent is what a resume sends
		// again when the stream lost it (checkpoint.go).
		p.seqs[k] = p.tr.pubs[k].Next()
		return p.seqs[k]
	}
	p.seqs[k]++
	return p.seqs[k]
}

// stamp chains the encoded message data of kind k and sets p.wire.msg's
// headers: a signature (and the head before it) when this message
// carries one, none otherwise. It allocates only for a signature.
func (p *Party) stamp(k schemas.Kind, data []byte) {
	t := p.tr
	p.wire.msg.Header = nil
	if t == nil {
		return
	}
	st := t.pubs[k].Append(data, t.seal)
	t.seal = false
	if st.Signed {
		t.sig = st.AppendSigHeader(t.sig[:0])
		t.prev = st.AppendPrevHeader(t.prev[:0])
		t.hdr[trust.SigHeader] = string(t.sig)
		t.hdr[trust.PrevHeader] = string(t.prev)
		p.wire.msg.Header = t.hdr
	}
}

// verify checks a delivery from the aggregator whose own sequence number
// is seq: nil, or an error wrapping one of package trust's sentinels.
func (p *Party) verify(d broker.Delivery, seq uint64) error {
	t := p.tr
	if t == nil {
		return nil
	}
	t.vm = trust.Msg{StreamSeq: d.Seq(), Subject: d.Subject(), Seq: seq, Payload: d.Data(),
		Sig: d.Header(trust.SigHeader), Prev: d.Header(trust.PrevHeader)}
	return t.ver.Verify(&t.vm)
}

// rejectTrust counts a delivery the verifier refused, by its reason
// ("trust-bad_signature", ...).
func (p *Party) rejectTrust(err error) {
	r := "trust-" + trust.Reason(err)
	p.stats.Rejected[r]++
	p.cfg.Log.Warn().Int("party", p.cfg.ID).Str("reason", r).Err(err).Msg("rejected message")
}

// Outbox is the party's trust outbox (nil without Config.Key).
func (p *Party) Outbox() *trust.Outbox {
	if p.tr == nil {
		return nil
	}
	return p.tr.out
}

// Verifier is the party's verifier of the aggregator's messages (nil
// without Config.Key).
func (p *Party) Verifier() *trust.Verifier {
	if p.tr == nil {
		return nil
	}
	return p.tr.ver
}

// finalSealWait bounds how long a party with the trust layer waits, after
// the stop, for the aggregator's final checkpoint to countersign.
const finalSealWait = 3 * time.Second

// pauseSealWait bounds how long a party waits, after a pause, for the
// seal that follows it: the aggregator answers what is in flight first
// (at most 5 s).
const pauseSealWait = 8 * time.Second

// onSeal checks the aggregator's checkpoint carried by the seal control c
// (delivered as d), countersigns it, keeps the receipt in Config.Receipts
// and publishes it on the party's receipt subject. A checkpoint that does
// not match what the party sent and received is rejected and logged: it
// is evidence against the log or the aggregator.
func (p *Party) onSeal(d broker.Delivery, c *schemas.Control) {
	t := p.tr
	if t == nil {
		return // nothing to countersign with
	}
	cp, err := trust.DecodeCheckpointHeader(d.Header(trust.CheckpointHeader))
	if err == nil {
		err = cp.Verify(p.cfg.Roster)
	}
	if err == nil && (cp.Digest().String() != c.Reason || uint64(c.Round) != cp.Number&0xffffffff) {
		err = fmt.Errorf("%w: the seal message names another checkpoint than it carries", trust.ErrBrokenChain)
	}
	if err != nil {
		p.rejectCheckpoint(fmt.Errorf("checkpoint: %w", err))
		return
	}
	res := trust.CheckCheckpoint(cp, trust.View{Source: t.out, Subjects: t.own, Own: true}, trust.View{Source: t.ver, Subjects: t.in})
	if !res.OK() || len(res.Pending) > 0 {
		p.rejectCheckpoint(fmt.Errorf("checkpoint %d disagrees with what party %d sent and received: %d mismatched (%v), %d not received yet",
			cp.Number, p.cfg.ID, len(res.Mismatched), res.Mismatched, len(res.Pending)))
		return
	}
	rc := trust.Countersign(cp, p.cfg.Key, t.out.Self().ID)
	if dir := p.cfg.Receipts; dir != "" {
		if _, err := trust.WriteReceipt(dir, rc); err != nil {
			p.cfg.Log.Error().Int("party", p.cfg.ID).Err(err).Msg("keeping a receipt")
		}
	}
	data, err := trust.AppendReceiptMessage(t.rcptBuf[:0], t.rcpt.Next(), rc)
	if err != nil {
		p.cfg.Log.Error().Int("party", p.cfg.ID).Err(err).Msg("encoding a receipt")
		return
	}
	t.rcptBuf = data
	if seq := t.rcpt.Next(); seq <= p.recov.rcptInStream {
		// Countersigned again after a resume: the stream holds it.
		p.chainAgain(t.rcpt, rcptKind, seq, data)
		p.stats.Receipts++
		if cp.Final {
			t.final = true
		}
		return
	}
	st := t.rcpt.Append(data, true)
	hdr := map[string]string{trust.SigHeader: st.SigHeader(), trust.PrevHeader: string(st.AppendPrevHeader(nil))}
	if err := p.bus.Publish(p.ctx, &broker.Message{Subject: t.rcpt.Subject(), Header: hdr, Data: data}); err != nil {
		// An interrupt cancels the publish of a seal that came just
		// before it. The receipt is kept and on the chain, not in the
		// log: a checkpoint saved now would resume after the seal and
		// the log would lack the receipt for good (the audit: "the log
		// lacks party-m's receipt"). Without one, the resume reads the
		// seal again and publishes it.
		p.recov.rcptLost = true
		switch {
		case p.ctx.Err() == nil || !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded):
			p.cfg.Log.Error().Int("party", p.cfg.ID).Err(err).Msg("publishing a receipt (no checkpoint is saved after it: a resume publishes it again)")
		case !p.started:
			// Stopped before training started: a shutdown, not an
			// error, and there is nothing to resume.
			p.cfg.Log.Debug().Int("party", p.cfg.ID).Err(err).Msg("the party was stopped before training started: the seal's receipt is not published")
		default:
			// Stopped (Ctrl-C, say): a shutdown, not an error.
			p.cfg.Log.Info().Int("party", p.cfg.ID).Err(err).Msg("the party was stopped: the seal's receipt is not published (no checkpoint is saved after it: a resume publishes it again)")
		}
		return
	}
	p.stats.MessagesUp++
	p.stats.BytesUp += int64(len(data))
	p.stats.Receipts++
	if cp.Final {
		t.final = true
	}
}

// rejectCheckpoint counts and logs a checkpoint the party will not
// countersign.
func (p *Party) rejectCheckpoint(err error) {
	p.stats.Rejected["trust-checkpoint"]++
	p.cfg.Log.Error().Int("party", p.cfg.ID).Err(err).Msg("not countersigning the aggregator's checkpoint")
}

// awaitingSeal reports whether the party still waits for the final
// checkpoint (p.mu held): with the trust layer, until it came or the wait
// after the stop ran out.
func (p *Party) awaitingSeal() bool { return p.tr != nil && !p.tr.final }

// endAfterSeal ends a stopping party's run once the final checkpoint is
// countersigned, or its wait ran out (gaveUp).
func (p *Party) endAfterSeal(gaveUp bool) {
	if gaveUp {
		p.cfg.Log.Warn().Int("party", p.cfg.ID).Msg("no final checkpoint from the aggregator after the stop: the end of the log is not countersigned")
	}
	p.tr.final = true
	p.stop.sealBy = time.Time{}
	close(p.done)
}
