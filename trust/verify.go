package trust

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Sentinel errors of the Verifier (and of VerifyHead). Every rejection
// wraps exactly one of them (a malformed signature header wraps
// ErrBadSignature and ErrMalformed); Reason gives a stable label for each.
var (
	ErrUnknownSubject = errors.New("trust: not a subject this receiver accepts")
	ErrReplay         = errors.New("trust: replayed or non-increasing sequence")
	ErrGap            = errors.New("trust: sequence gap")
	ErrUnsigned       = errors.New("trust: signature missing")
	ErrUnknownKey     = errors.New("trust: signer not in the roster")
	ErrBadSignature   = errors.New("trust: bad signature")
	ErrWrongSigner    = errors.New("trust: signed by a participant that does not own the subject")
	ErrBrokenChain    = errors.New("trust: broken chain")
)

// reason indexes the rejection counters.
type reason int

const (
	reasonOther reason = iota
	reasonUnknownSubject
	reasonReplay
	reasonGap
	reasonUnsigned
	reasonUnknownKey
	reasonBadSignature
	reasonWrongSigner
	reasonBrokenChain
	numReasons
)

var reasonTable = [numReasons]struct {
	err  error
	name string
}{
	reasonOther:          {nil, "other"},
	reasonUnknownSubject: {ErrUnknownSubject, "unknown_subject"},
	reasonReplay:         {ErrReplay, "replay"},
	reasonGap:            {ErrGap, "gap"},
	reasonUnsigned:       {ErrUnsigned, "unsigned"},
	reasonUnknownKey:     {ErrUnknownKey, "unknown_key"},
	reasonBadSignature:   {ErrBadSignature, "bad_signature"},
	reasonWrongSigner:    {ErrWrongSigner, "wrong_signer"},
	reasonBrokenChain:    {ErrBrokenChain, "broken_chain"},
}

func reasonOf(err error) reason {
	for r := reasonUnknownSubject; r < numReasons; r++ {
		if errors.Is(err, reasonTable[r].err) {
			return r
		}
	}
	return reasonOther
}

// Reason is a short, stable label for the sentinel error err wraps, for
// counting rejections (summary.json): "unknown_subject", "replay", "gap",
// "unsigned", "unknown_key", "bad_signature", "wrong_signer",
// "broken_chain", or "other".
func Reason(err error) string { return reasonTable[reasonOf(err)].name }

// Msg is one message as a receiver or an auditor sees it.
type Msg struct {
	// StreamSeq is the message's stream sequence, 0 if unknown.
	StreamSeq uint64
	Subject   string
	// Seq is the message's own sequence number on its subject (1, 2, ...),
	// read from the message.
	Seq     uint64
	Payload []byte
	// Sig is the value of the SigHeader header, "" if absent.
	Sig string
	// Prev is the value of the PrevHeader header, "" if absent: the chain
	// head before this message, which senders add to signed messages so
	// that a late receiver (VerifierOptions.Late) can bind the first
	// message it gets to the signature.
	Prev string
	// ID and Cites are the message's causal links, for the auditor: ID
	// names it (e.g. a request's digest) for messages that come after it,
	// and Cites is the ID of a message it answers (e.g. a reply's cause,
	// signed inside its payload). The auditor reports a message stored
	// before the one it cites (ProblemCausal). Both nil: no link.
	ID    []byte
	Cites []byte
}

// VerifierOptions configures a Verifier.
type VerifierOptions struct {
	// Subjects are the subjects the receiver accepts (Roster.Inbound of the
	// receiver); nil means every subject of the run.
	Subjects []string
	// Every is the senders' Policy.Every: a message that would be the
	// Every-th unsigned one in a row is rejected with ErrUnsigned. 0 means
	// DefaultEvery.
	Every int
	// History is how many recent heads are kept per subject for checking
	// checkpoints (HeadAt, 32 bytes each, taken at a subject's first
	// message); 0 means DefaultHistory, a negative value none. A party
	// needs them for the subjects it receives; the aggregator, which makes
	// checkpoints from current heads, needs none.
	History int
	// Late lists subjects the receiver may start reading after their
	// first messages (a party subscribes to the control subject when it
	// joins, after controls addressed to others): the first message it
	// gets on such a subject may have any sequence number if it carries
	// a valid signature of the owner and the head before it (Msg.Prev)
	// from which its payload gives the signed head; the chain goes on
	// from there. Otherwise it is rejected (ErrGap) like any gap.
	Late []string
}

// Verifier checks the messages a receiver gets: one sender per subject
// (the roster's owner), consecutive sequence numbers from 1, and every
// message chained to the previous one and, at the latest every Every
// messages, proven by the owner's signature over the chain head.
//
// A message without a signature that extends the chain is accepted on the
// broker's word (its permissions let only the owner publish on the
// subject) and counted as unsigned until a signature covers it; a
// signature proves every message before it. Rejected messages change
// nothing, with two exceptions that let a receiver go on after a loss:
// after a gap, and after a signature whose head differs from the one the
// received messages give (ErrBrokenChain), the chain continues from the
// owner's signed head; the message carrying that signature is rejected.
//
// Safe for concurrent use; messages of one subject must come in stream
// order.
type Verifier struct {
	roster   *Roster
	every    int
	subjects map[string]*inState // read-only after NewVerifier

	rejected [numReasons]atomic.Uint64
	restarts atomic.Uint64
}

// inState is the receiving state of one subject.
type inState struct {
	subject  string
	owner    *Participant
	mustSign bool
	late     bool // may start mid-chain at a signed message (VerifierOptions.Late)

	mu        sync.Mutex
	chain     Chain
	streamSeq uint64 // of the last accepted message
	unsigned  int    // accepted messages not yet covered by a signature
	accepted  uint64
	hist      ring
	buf       []byte
}

// NewVerifier makes a verifier for the roster's run.
func NewVerifier(r *Roster, opts VerifierOptions) (*Verifier, error) {
	if opts.Every < 0 {
		return nil, fmt.Errorf("trust: verifier: Every %d must not be negative", opts.Every)
	}
	if opts.Every == 0 {
		opts.Every = DefaultEvery
	}
	if opts.History == 0 {
		opts.History = DefaultHistory
	}
	subjects := opts.Subjects
	if subjects == nil {
		subjects = r.AllSubjects()
	}
	v := &Verifier{roster: r, every: opts.Every, subjects: make(map[string]*inState, len(subjects))}
	for _, s := range subjects {
		owner := r.Owner(s)
		if owner == nil {
			return nil, fmt.Errorf("%w: %q is not a subject of run %s", ErrUnknownSubject, clip(s), r.Run)
		}
		st := &inState{subject: s, owner: owner, mustSign: r.EverySigned(s), late: slices.Contains(opts.Late, s), hist: newRing(opts.History), buf: make([]byte, 0, 128)}
		st.chain.Reset(0, GenesisHead(r.Run, s))
		v.subjects[s] = st
	}
	return v, nil
}

// Verify checks m and, if it is accepted, advances its subject's chain. It
// returns nil or an error wrapping one of the package's sentinel errors;
// count it by Reason. It does not allocate when it accepts.
func (v *Verifier) Verify(m *Msg) error {
	st := v.subjects[m.Subject]
	if st == nil {
		v.rejected[reasonUnknownSubject].Add(1)
		return fmt.Errorf("%w: %q", ErrUnknownSubject, clip(m.Subject))
	}
	st.mu.Lock()
	err := st.verify(v, m)
	if err == nil {
		st.accepted++ // under the subject's lock: no counter shared between subjects
	}
	st.mu.Unlock()
	if err != nil {
		v.rejected[reasonOf(err)].Add(1)
	}
	return err
}

func (st *inState) verify(v *Verifier, m *Msg) error {
	last := st.chain.Seq()
	if m.Seq <= last {
		return fmt.Errorf("%w: %s seq %d, already at %d", ErrReplay, st.subject, m.Seq, last)
	}
	var sig Signature
	signed := m.Sig != ""
	if signed {
		var err error
		if sig, err = ParseSignature(m.Sig); err != nil {
			return fmt.Errorf("%w: %s seq %d: %w", ErrBadSignature, st.subject, m.Seq, err)
		}
	}
	if signed && len(m.Prev) == hashTextLen {
		// A restarted chain (Publisher.Restart): the owner's signature over
		// the head this payload gives after the restart head.
		var prev Hash
		if _, err := decodeB64(prev[:], m.Prev); err == nil && isRestart(v.roster.Run, st.subject, m.Seq, prev) {
			if err := v.anchor(st, m, prev, &sig, " restarts the chain, but"); err != nil {
				return err
			}
			v.restarts.Add(1)
			return nil
		}
	}
	if m.Seq > last+1 && st.late && last == 0 && signed && m.Prev != "" {
		// A late receiver's first message: the owner's signature over the
		// head that the stated previous head and this payload give.
		var prev Hash
		if _, err := decodeB64(prev[:], m.Prev); err != nil || len(m.Prev) != hashTextLen {
			return fmt.Errorf("%w: %s seq %d: previous head header: %w", ErrMalformed, st.subject, m.Seq, err)
		}
		return v.anchor(st, m, prev, &sig, ":")
	}
	if m.Seq > last+1 {
		if !signed {
			return fmt.Errorf("%w: %s seq %d after %d; waiting for a signed message to resynchronise", ErrGap, st.subject, m.Seq, last)
		}
		var err error
		if st.buf, err = checkSignature(v.roster, st.owner, st.buf, st.subject, m.Seq, &sig); err != nil {
			return fmt.Errorf("%w: %s seq %d after %d, and its signature fails: %w", ErrGap, st.subject, m.Seq, last, err)
		}
		lost := st.unsigned
		st.accept(m.Seq, sig.Head, m.StreamSeq)
		st.unsigned = 0
		return fmt.Errorf("%w: %s seq %d after %d: %d missing; resynchronised at %s's signature on this message (which is rejected); %d earlier accepted messages stay unproven",
			ErrGap, st.subject, m.Seq, last, m.Seq-last-1, st.owner.ID, lost)
	}
	head := st.chain.Compute(m.Seq, m.Payload)
	if !signed {
		if st.mustSign {
			return fmt.Errorf("%w: every message on %s must be signed (seq %d)", ErrUnsigned, st.subject, m.Seq)
		}
		if st.unsigned+1 >= v.every {
			return fmt.Errorf("%w: %s seq %d would be unsigned message %d in a row; the sender signs at least every %d", ErrUnsigned, st.subject, m.Seq, st.unsigned+1, v.every)
		}
		st.accept(m.Seq, head, m.StreamSeq)
		st.unsigned++
		return nil
	}
	var err error
	if st.buf, err = checkSignature(v.roster, st.owner, st.buf, st.subject, m.Seq, &sig); err != nil {
		return err
	}
	if sig.Head != head {
		n := st.unsigned
		st.accept(m.Seq, sig.Head, m.StreamSeq)
		st.unsigned = 0
		if n == 0 {
			return fmt.Errorf("%w: %s seq %d: %s signed another head than this message gives: the message was altered; chain continues from the signed head",
				ErrBrokenChain, st.subject, m.Seq, st.owner.ID)
		}
		return fmt.Errorf("%w: %s seq %d: %s signed another head than the messages received give: this message or one of the %d accepted unsigned ones before it (from seq %d) is not what %s sent; chain continues from the signed head",
			ErrBrokenChain, st.subject, m.Seq, st.owner.ID, n, m.Seq-uint64(n), st.owner.ID)
	}
	st.accept(m.Seq, head, m.StreamSeq)
	st.unsigned = 0
	return nil
}

func (st *inState) accept(seq uint64, head Hash, streamSeq uint64) {
	st.chain.Reset(seq, head)
	st.hist.put(seq, head)
	st.streamSeq = streamSeq
}

// Accepted is the number of messages accepted.
func (v *Verifier) Accepted() uint64 {
	var n uint64
	for _, st := range v.subjects {
		st.mu.Lock()
		n += st.accepted
		st.mu.Unlock()
	}
	return n
}

// Rejected counts the rejected messages by Reason (only reasons with a
// count).
func (v *Verifier) Rejected() map[string]uint64 {
	out := make(map[string]uint64)
	for r := range numReasons {
		if n := v.rejected[r].Load(); n > 0 {
			out[reasonTable[r].name] = n
		}
	}
	return out
}

// Unsigned is the number of accepted messages, over all subjects, that no
// signature covers yet: they rest on the broker's permissions alone.
func (v *Verifier) Unsigned() int {
	n := 0
	for _, st := range v.subjects {
		st.mu.Lock()
		n += st.unsigned
		st.mu.Unlock()
	}
	return n
}

// UnsignedOn is Unsigned for one subject.
func (v *Verifier) UnsignedOn(subject string) int {
	st := v.subjects[subject]
	if st == nil {
		return 0
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.unsigned
}

// Head is the sequence number and head of subject's last accepted message
// (0 and the genesis head before the first); ok is false for a subject the
// verifier does not accept.
func (v *Verifier) Head(subject string) (seq uint64, head Hash, ok bool) {
	st := v.subjects[subject]
	if st == nil {
		return 0, Hash{}, false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.chain.Seq(), st.chain.Head(), true
}

// HeadAt is the head after message seq of subject, if it was accepted and
// is among the History most recent ones.
func (v *Verifier) HeadAt(subject string, seq uint64) (Hash, bool) {
	st := v.subjects[subject]
	if st == nil {
		return Hash{}, false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.hist.get(seq)
}

// Entries lists (subject, seq, head, stream seq) of every subject with an
// accepted message, sorted by subject, for a checkpoint.
func (v *Verifier) Entries() []Entry {
	var out []Entry
	for _, st := range v.subjects {
		st.mu.Lock()
		if st.chain.Seq() > 0 {
			out = append(out, Entry{Subject: st.subject, Seq: st.chain.Seq(), Head: st.chain.Head(), StreamSeq: st.streamSeq})
		}
		st.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Subject, b.Subject) })
	return out
}

// anchor accepts m on a stated previous head prev (a restarted chain, or a
// late receiver's first message): the signed head must be the one prev and
// m's payload give, and the owner's signature must hold. what completes
// the error's wording after the subject and sequence number.
func (v *Verifier) anchor(st *inState, m *Msg, prev Hash, sig *Signature, what string) error {
	var c Chain
	c.Reset(m.Seq-1, prev)
	if c.Compute(m.Seq, m.Payload) != sig.Head {
		return fmt.Errorf("%w: %s seq %d%s the signed head is not the one this message gives", ErrBrokenChain, st.subject, m.Seq, what)
	}
	var err error
	if st.buf, err = checkSignature(v.roster, st.owner, st.buf, st.subject, m.Seq, sig); err != nil {
		return err
	}
	st.accept(m.Seq, sig.Head, m.StreamSeq)
	st.unsigned = 0
	return nil
}
