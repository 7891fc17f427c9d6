package aggregator

import (
	"bytes"
	"fmt"
	"time"

	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/trust"
)

// aggTrust is the aggregator's side of the trust layer (package trust):
// its outbox, which numbers, chains and signs its replies and controls,
// and its verifier, which checks every party's messages before they
// act.
type aggTrust struct {
	out   *trust.Outbox
	reply []*trust.Publisher // by party
	ctl   *trust.Publisher
	ver   *trust.Verifier

	hdr       map[string]string
	sig, prev []byte
	vm        trust.Msg
	seal      bool   // sign the next message whatever the policy says
	cpHeader  string // the checkpoint the next message carries (CtlSeal)

	checkpoints uint64    // checkpoints published
	lastSeal    time.Time // when the last one was
	sealedFinal bool      // the final checkpoint is published
}

// initTrust sets up the trust layer from cfg.Key and cfg.Roster.
func (a *Aggregator) initTrust() error {
	cfg := &a.cfg
	if cfg.Key == nil && cfg.Roster == nil {
		return nil
	}
	if cfg.Key == nil || cfg.Roster == nil {
		return fmt.Errorf("%w: a key needs a roster and a roster a key", ErrConfig)
	}
	r := cfg.Roster
	if r.Run != cfg.Run || r.Parties() != a.q {
		return fmt.Errorf("%w: the roster is run %s's with %d parties, not run %s's with %d", ErrConfig, r.Run, r.Parties(), cfg.Run, a.q)
	}
	out, err := trust.NewOutbox(r, cfg.Key, cfg.Sign)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if self := out.Self(); self.ID != trust.AggregatorID {
		return fmt.Errorf("%w: the key is %s's in the roster, not the aggregator's", ErrConfig, self.ID)
	}
	// The aggregator makes checkpoints from current heads: no history.
	ver, err := trust.NewVerifier(r, trust.VerifierOptions{Subjects: r.Inbound(trust.AggregatorID), Every: cfg.Sign.Every, History: -1})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	t := &aggTrust{out: out, ver: ver, reply: make([]*trust.Publisher, a.q+1), hdr: make(map[string]string, 2),
		sig: make([]byte, 0, 160), prev: make([]byte, 0, 48)}
	for m := 1; m <= a.q; m++ {
		if t.reply[m], err = out.Publisher(a.wire.subjReply[m]); err != nil {
			return fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	if t.ctl, err = out.Publisher(schemas.Subject(cfg.Run, schemas.KindControl, 0)); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	a.tr = t
	return nil
}

// nextSeq is the sequence number of the next message of kind k (a reply
// to party m, or a control): each subject is numbered 1, 2, ...
func (a *Aggregator) nextSeq(k schemas.Kind, m int) uint64 {
	if t := a.tr; t != nil {
		if k == schemas.KindControl {
			return t.ctl.Next()
		}
		return t.reply[m].Next()
	}
	if k == schemas.KindControl {
		a.pub.ctlSeq++
		return a.pub.ctlSeq
	}
	a.pub.replySeq[m]++
	return a.pub.replySeq[m]
}

// stamp chains the encoded message data of kind k (to party m) and sets
// a.wire.msg's headers: a signature and the head before it when this message
// carries one, none otherwise. It allocates only for a signature.
func (a *Aggregator) stamp(k schemas.Kind, m int, data []byte) {
	t := a.tr
	a.wire.msg.Header = nil
	if t == nil {
		return
	}
	pub := t.ctl
	if k != schemas.KindControl {
		pub = t.reply[m]
	}
	st := pub.Append(data, t.seal)
	t.seal = false
	if st.Signed {
		t.sig = st.AppendSigHeader(t.sig[:0])
		t.prev = st.AppendPrevHeader(t.prev[:0])
		t.hdr[trust.SigHeader] = string(t.sig)
		t.hdr[trust.PrevHeader] = string(t.prev)
		if t.cpHeader != "" {
			t.hdr[trust.CheckpointHeader] = t.cpHeader
		} else {
			delete(t.hdr, trust.CheckpointHeader)
		}
		a.wire.msg.Header = t.hdr
	}
	t.cpHeader = ""
}

// DefaultSealEvery is the default Config.SealEvery.
const DefaultSealEvery = 5 * time.Second

// seal publishes a signed checkpoint of the log (a.mu held): every
// subject's sequence number and chain head as the aggregator published
// and accepted them, in a CtlSeal control message. The parties check it,
// countersign it and keep the receipts; final marks the run's last one.
func (a *Aggregator) seal(final bool) {
	t := a.tr
	if t == nil || t.sealedFinal {
		return // a final checkpoint covers the log: nothing comes after it
	}
	t.sealedFinal = final
	t.lastSeal = time.Now()
	entries := append(t.out.Entries(), t.ver.Entries()...)
	c, err := trust.NewCheckpoint(a.cfg.Run, t.checkpoints+1, final, t.lastSeal, 0, entries)
	if err == nil {
		err = c.Sign(a.cfg.Key, trust.AggregatorID)
	}
	var hv string
	if err == nil {
		hv, err = trust.EncodeCheckpointHeader(c)
	}
	if err != nil {
		a.cfg.Log.Error().Err(err).Msg("making a checkpoint of the log")
		return
	}
	t.checkpoints++
	t.cpHeader = hv
	ctl := &schemas.Control{Header: schemas.Header{Version: schemas.Version}, Op: schemas.CtlSeal,
		Round: uint32(c.Number), Reason: c.Digest().String()}
	a.publish(schemas.Subject(a.cfg.Run, schemas.KindControl, 0), schemas.KindControl, ctl)
	a.res.Checkpoints = t.checkpoints
}

// sealDue reports whether an interval checkpoint is due.
func (a *Aggregator) sealDue() bool {
	t := a.tr
	if t == nil || a.cfg.SealEvery < 0 {
		return false
	}
	if t.lastSeal.IsZero() {
		t.lastSeal = time.Now()
	}
	return time.Since(t.lastSeal) >= a.cfg.SealEvery
}

// verifyOutput verifies party m's request a.out (payload data). After a
// resume, requests the recovery verified already are not verified again
// (the verifier would call them replays): a request at or below the
// recovered stream position is let through only if it is the very
// message the recovery verified and has not applied yet; anything else
// there is skipped (errApplied), never applied.
func (a *Aggregator) verifyOutput(m int, data []byte) error {
	if a.recov.replaying {
		return nil // verified while the recovery read the stream
	}
	if r := a.recov.recovered; r != nil && a.wire.dlv != nil && a.wire.dlv.Seq() != 0 && a.wire.dlv.Seq() <= r.upTo {
		k := [2]uint64{uint64(m), a.out.Seq}
		if want, ok := r.pending[k]; ok && bytes.Equal(want, data) {
			delete(r.pending, k)
			return nil
		}
		return errApplied
	}
	return a.verify(a.out.Seq)
}

// verify checks the delivery being handled, whose own sequence number is
// seq: nil, or an error wrapping one of package trust's sentinels.
func (a *Aggregator) verify(seq uint64) error {
	t := a.tr
	if t == nil {
		return nil
	}
	d := a.wire.dlv
	t.vm = trust.Msg{StreamSeq: d.Seq(), Subject: d.Subject(), Seq: seq, Payload: d.Data(),
		Sig: d.Header(trust.SigHeader), Prev: d.Header(trust.PrevHeader)}
	if err := t.ver.Verify(&t.vm); err != nil {
		return &trustError{err}
	}
	return nil
}

// trustError marks a rejection by the trust layer: counted as
// "trust-<reason>".
type trustError struct{ err error }

func (e *trustError) Error() string { return e.err.Error() }
func (e *trustError) Unwrap() error { return e.err }

// reason is the label a rejection is counted under.
func reason(err error) string {
	if te, ok := err.(*trustError); ok {
		return "trust-" + trust.Reason(te.err)
	}
	return schemas.Reason(err)
}

// Outbox is the aggregator's trust outbox (nil without Config.Key).
func (a *Aggregator) Outbox() *trust.Outbox {
	if a.tr == nil {
		return nil
	}
	return a.tr.out
}

// Verifier is the aggregator's verifier of the parties' messages (nil
// without Config.Key).
func (a *Aggregator) Verifier() *trust.Verifier {
	if a.tr == nil {
		return nil
	}
	return a.tr.ver
}
