package serve

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/trust"
)

// The trust layer of scoring is training's (package trust): each subject's
// messages are numbered 1, 2, ... and chained by their sender
// (trust.Publisher), signed at least every trust.DefaultEvery messages or
// trust.DefaultMaxDelay, and checked by the receiver (trust.Verifier)
// before it acts. The signatures are amortised: a request or an answer
// costs a SHA-256 link, not an Ed25519 signature and its check.
//
// Scoring adds three rules of its own. A party signs its answer to a
// signed request, so that the parties' chains are sealed whenever the
// aggregator's is. The aggregator signs the request after one that a party
// did not answer (a party that was away resynchronises on it), and when it
// falls idle or closes it sends a request without ids, signed, which
// every party answers signed: a log of scoring ends sealed. A receiver
// that missed messages (a gap: it was down) resumes at the next signed
// message that carries the head before it (trust.PrevHeader), as a late
// receiver does.

// chainOut is a sender's side of one subject: nil without keys.
type chainOut struct {
	pub  *trust.Publisher
	hdr  map[string]string
	sig  []byte
	prev []byte
}

// newChainOut is key's publisher of subject, or nil without a key. The
// chain goes on after the messages the run's log holds on subject (a
// process that scores a run again restarts its chain: trust.Publisher.
// Restart).
func newChainOut(ctx context.Context, bus broker.Bus, r *trust.Roster, key *trust.Key, subject string, log zerolog.Logger) (*chainOut, error) {
	if key == nil || r == nil {
		return nil, nil
	}
	out, err := trust.NewOutbox(r, key, trust.Policy{})
	if err != nil {
		return nil, err
	}
	pub, err := out.Publisher(subject)
	if err != nil {
		return nil, err
	}
	n, err := bus.Count(ctx, subject)
	switch {
	case errors.Is(err, broker.ErrUnsupported):
		n = 0
	case err != nil:
		// A participant the broker does not let read the stream's counts:
		// it cannot know where its chain stands, and restarts beyond any
		// number it can have used (an auditor reports the jump as a gap).
		log.Warn().Err(err).Str("subject", subject).Msg("scoring: cannot count this subject's messages in the run's log; restarting its chain at a time-based number")
		n = uint64(timeSeq())
	}
	if n > 0 {
		pub.Restart(n)
	}
	return &chainOut{pub: pub, hdr: make(map[string]string, 2), sig: make([]byte, 0, 160), prev: make([]byte, 0, 48)}, nil
}

// next is the sequence number the next message gets.
func (c *chainOut) next() uint64 { return c.pub.Next() }

// stamp chains payload (whose own seq field holds next()) and returns the
// headers to publish it with: nil unless it carries a signature. The map
// is reused by the next call.
func (c *chainOut) stamp(payload []byte, seal bool) (map[string]string, bool) {
	st := c.pub.Append(payload, seal)
	if !st.Signed {
		return nil, false
	}
	c.sig = st.AppendSigHeader(c.sig[:0])
	c.prev = st.AppendPrevHeader(c.prev[:0])
	c.hdr[trust.SigHeader] = string(c.sig)
	c.hdr[trust.PrevHeader] = string(c.prev)
	return c.hdr, true
}

// chainIn is a receiver's side of one subject: nil without keys.
type chainIn struct {
	roster  *trust.Roster
	subject string

	mu sync.Mutex
	v  *trust.Verifier
	m  trust.Msg
}

func newChainIn(r *trust.Roster, subject string) (*chainIn, error) {
	if r == nil {
		return nil, nil
	}
	c := &chainIn{roster: r, subject: subject}
	var err error
	if c.v, err = c.fresh(); err != nil {
		return nil, err
	}
	return c, nil
}

// fresh is a verifier of the subject alone that may start at any signed
// message carrying the head before it.
func (c *chainIn) fresh() (*trust.Verifier, error) {
	return trust.NewVerifier(c.roster, trust.VerifierOptions{Subjects: []string{c.subject}, Late: []string{c.subject}, History: -1})
}

// check verifies delivery d, whose own sequence number is seq. After a
// gap, a signed message that carries the head before it is accepted (the
// chain goes on from it); one without waits for the next signed one. It
// reports whether the message was signed.
func (c *chainIn) check(d broker.Delivery, seq uint64) (signed bool, err error) {
	if c == nil {
		return false, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m = trust.Msg{StreamSeq: d.Seq(), Subject: d.Subject(), Seq: seq, Payload: d.Data(),
		Sig: d.Header(trust.SigHeader), Prev: d.Header(trust.PrevHeader)}
	err = c.v.Verify(&c.m)
	if errors.Is(err, trust.ErrGap) && c.m.Sig != "" && c.m.Prev != "" {
		// The message lies beyond the last accepted (a gap is never a
		// replay): a verifier that starts here checks its payload against
		// the signed head.
		v, ferr := c.fresh()
		if ferr != nil {
			return false, ferr
		}
		if err = v.Verify(&c.m); err == nil {
			c.v = v
		}
	}
	c.m.Payload = nil
	if err != nil {
		return false, fmt.Errorf("%w: %w", schemas.ErrScore, err)
	}
	return c.m.Sig != "", nil
}
