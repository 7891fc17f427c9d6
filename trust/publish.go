package trust

import (
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of a Policy, chosen from BenchmarkStep, BenchmarkSign and
// BenchmarkVerifySignature (see the package documentation, "Cost"). The
// chain alone costs about 0.6 µs of CPU per pipeline step at batch 1 and
// 4 µs at batch 64; a signature and its check about 70 µs. Signing every
// message would add 130 µs a step, 20 times a whole batch-1 step on the
// in-memory bus; every 256th adds 0.5 µs, every 1,024th 0.13 µs, and
// beyond that the chain is the cost. A message then waits for its proof at
// most 1,024 messages or 100 ms; the 100 ms bound costs at most 10
// signatures a second per subject.
const (
	DefaultEvery    = 1024
	DefaultMaxDelay = 100 * time.Millisecond
	DefaultHistory  = 1024
)

// Policy says when a sender signs.
type Policy struct {
	// Every: sign at least every Every-th message of a subject (at most
	// Every-1 unsigned messages in a row). 1 signs every message; 0 means
	// DefaultEvery. Receivers must use the same value (VerifierOptions).
	Every int
	// MaxDelay: sign a message when the oldest unsigned message of its
	// subject was appended at least MaxDelay ago. 0 means DefaultMaxDelay,
	// a negative value turns the rule off. Nothing is signed without a
	// message to carry it: a subject that falls silent stays unsealed until
	// its next message or a receipt (Receipt) seals it.
	MaxDelay time.Duration
	// History is how many recent heads a Publisher keeps for checking
	// checkpoints (HeadAt, 32 bytes each); 0 means DefaultHistory, a
	// negative value none.
	History int
	// DedupeIDs makes each Stamp carry a broker dedupe id (Stamp.MsgID)
	// that nobody without the sender's key can predict. Without it, no
	// Nats-Msg-Id is needed: receivers reject duplicates by sequence number.
	DedupeIDs bool
}

func (p Policy) withDefaults() (Policy, error) {
	if p.Every < 0 {
		return p, fmt.Errorf("trust: policy: Every %d must not be negative", p.Every)
	}
	if p.Every == 0 {
		p.Every = DefaultEvery
	}
	if p.MaxDelay == 0 {
		p.MaxDelay = DefaultMaxDelay
	}
	if p.History == 0 {
		p.History = DefaultHistory
	}
	return p, nil
}

// Outbox is a participant's sending side: its key, its place in the
// roster and one Publisher per subject it owns. Safe for concurrent use;
// each Publisher is used by one goroutine at a time.
type Outbox struct {
	roster    *Roster
	self      *Participant
	key       *Key
	pol       Policy
	dedupeKey [32]byte

	mu   sync.Mutex
	pubs map[string]*Publisher
}

// ErrNotOwner is returned when a participant asks to publish on a subject
// the roster gives to another.
var ErrNotOwner = errors.New("trust: subject belongs to another participant")

// NewOutbox is the sending side of the participant whose key is key.
func NewOutbox(r *Roster, key *Key, pol Policy) (*Outbox, error) {
	self, err := r.Identify(key)
	if err != nil {
		return nil, err
	}
	pol, err = pol.withDefaults()
	if err != nil {
		return nil, err
	}
	o := &Outbox{roster: r, self: self, key: key, pol: pol, pubs: make(map[string]*Publisher)}
	// A MAC key for dedupe ids, derived from (not equal to) the secret.
	h := sha256.New()
	h.Write([]byte("asyrevel/dedupe/v1\x00"))
	h.Write(key.priv.Seed())
	h.Sum(o.dedupeKey[:0])
	return o, nil
}

// Self is the participant the outbox sends as.
func (o *Outbox) Self() *Participant { return o.self }

// Roster is the roster the outbox was made with.
func (o *Outbox) Roster() *Roster { return o.roster }

// Publisher returns the Publisher of subject, making it on first use. It
// fails with ErrNotOwner for a subject the roster gives to another
// participant and ErrUnknownSubject for one not of the run.
func (o *Outbox) Publisher(subject string) (*Publisher, error) {
	owner := o.roster.Owner(subject)
	if owner == nil {
		return nil, fmt.Errorf("%w: %q is not a subject of run %s", ErrUnknownSubject, clip(subject), o.roster.Run)
	}
	if owner != o.self {
		return nil, fmt.Errorf("%w: %s may not publish on %s (it is %s's)", ErrNotOwner, o.self.ID, subject, owner.ID)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if p, ok := o.pubs[subject]; ok {
		return p, nil
	}
	p := &Publisher{
		o:        o,
		subject:  subject,
		mustSign: o.roster.EverySigned(subject),
		hist:     newRing(o.pol.History),
	}
	p.chain.Reset(0, GenesisHead(o.roster.Run, subject))
	if o.pol.DedupeIDs {
		p.mac = hmac.New(sha256.New, o.dedupeKey[:])
	}
	o.pubs[subject] = p
	return p, nil
}

// Entries lists (subject, seq, head) of every subject the outbox has
// published on, sorted by subject, for a checkpoint.
func (o *Outbox) Entries() []Entry {
	o.mu.Lock()
	pubs := make([]*Publisher, 0, len(o.pubs))
	for _, p := range o.pubs {
		pubs = append(pubs, p)
	}
	o.mu.Unlock()
	var out []Entry
	for _, p := range pubs {
		p.mu.Lock()
		if p.chain.Seq() > 0 {
			out = append(out, Entry{Subject: p.subject, Seq: p.chain.Seq(), Head: p.chain.Head()})
		}
		p.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Subject, b.Subject) })
	return out
}

// HeadAt is the head after message seq of subject, if the outbox published
// it and still remembers it (Policy.History).
func (o *Outbox) HeadAt(subject string, seq uint64) (Hash, bool) {
	o.mu.Lock()
	p := o.pubs[subject]
	o.mu.Unlock()
	if p == nil {
		return Hash{}, false
	}
	return p.HeadAt(seq)
}

// Publisher numbers, chains and signs the messages of one subject. Its
// methods are safe for concurrent use, but the messages of a subject must
// reach the broker in the order of their sequence numbers, so one
// goroutine at a time should append and publish.
type Publisher struct {
	o        *Outbox
	subject  string
	mustSign bool

	mu       sync.Mutex
	chain    Chain
	unsigned int         // messages appended since the last signature
	signNext bool        // sign the next message (after Resume)
	due      atomic.Bool // the oldest unsigned message is MaxDelay old
	timer    *time.Timer // sets due MaxDelay after the first unsigned message
	hist     ring
	buf      []byte // scratch for the signed message
	mac      hash.Hash
	macOut   [32]byte
}

// Stamp is what a Publisher adds to a message: its sequence number and
// chain head, a signature if this message carries one, and a dedupe id if
// the policy asks for them.
type Stamp struct {
	Seq    uint64
	Head   Hash
	Signed bool
	Sig    Signature // valid when Signed
	Prev   Hash      // the head before this message
	id     [16]byte
	hasID  bool
}

// Subject is the publisher's subject.
func (p *Publisher) Subject() string { return p.subject }

// Next is the sequence number the next appended message gets: the
// message's own seq field must hold it, since the chain covers the payload.
func (p *Publisher) Next() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.chain.Seq() + 1
}

// Seq is the last appended message's sequence number (0 before the
// first).
func (p *Publisher) Seq() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.chain.Seq()
}

// Head is the chain head after the last appended message.
func (p *Publisher) Head() Hash {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.chain.Head()
}

// Append chains the next message (sequence number Next) with payload and
// returns its stamp. The message is signed when seal is set (a sender's
// last message, the last message of an evaluation round), when the
// subject's every message is signed (Roster.EverySigned), when it is the
// Every-th unsigned one or when the oldest unsigned one is MaxDelay old.
//
// Append commits: if publishing the message then fails, publish the same
// payload with the same stamp again (never another payload under that
// sequence number), or receivers see a gap. It does not allocate.
func (p *Publisher) Append(payload []byte, seal bool) Stamp {
	pol := &p.o.pol
	p.mu.Lock()
	defer p.mu.Unlock()
	prev := p.chain.Head()
	seq, head := p.chain.Append(payload)
	p.hist.put(seq, head)
	st := Stamp{Seq: seq, Head: head, Prev: prev}
	// The clock rule reads a flag a timer sets: no clock read per message.
	if seal || p.mustSign || p.signNext || p.unsigned+1 >= pol.Every || p.due.Load() {
		p.buf = SignedMessage(p.buf[:0], p.o.roster.Run, p.subject, seq, head)
		st.Signed = true
		st.Sig = Signature{Signer: p.o.self.ID, Head: head, Sig: p.o.key.Sign(p.buf)}
		p.unsigned, p.signNext = 0, false
		if p.timer != nil {
			p.timer.Stop()
		}
		p.due.Store(false)
	} else {
		if p.unsigned == 0 && pol.MaxDelay > 0 {
			if p.timer == nil {
				p.timer = time.AfterFunc(pol.MaxDelay, func() { p.due.Store(true) })
			} else {
				p.timer.Reset(pol.MaxDelay)
			}
		}
		p.unsigned++
	}
	if p.mac != nil {
		p.mac.Reset()
		p.mac.Write(p.chain.head[:]) // a field: a local would escape
		p.mac.Sum(p.macOut[:0])
		copy(st.id[:], p.macOut[:16])
		st.hasID = true
	}
	return st
}

// Unsigned is the number of appended messages not yet covered by a
// signature.
func (p *Publisher) Unsigned() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.unsigned
}

// Resume puts the publisher at sequence seq with head head, from a saved
// state (a restarted sender continues its chain rather than starting a new
// one, which receivers would reject as replays). The next message is
// signed: receivers may have counted unsigned messages the saved state
// does not know of.
func (p *Publisher) Resume(seq uint64, head Hash) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.chain.Reset(seq, head)
	p.hist.reset()
	p.hist.put(seq, head)
	p.unsigned = 0
	p.signNext = true
	if p.timer != nil {
		p.timer.Stop()
	}
}

// HeadAt is the head after message seq, if it is among the History most
// recent ones.
func (p *Publisher) HeadAt(seq uint64) (Hash, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hist.get(seq)
}

// AppendSigHeader appends the value of the SigHeader header to dst, or
// returns dst unchanged when the message carries no signature.
func (s *Stamp) AppendSigHeader(dst []byte) []byte {
	if !s.Signed {
		return dst
	}
	return s.Sig.AppendHeader(dst)
}

// AppendPrevHeader appends the value of the PrevHeader header to dst, or
// returns dst unchanged when the message carries no signature.
func (s *Stamp) AppendPrevHeader(dst []byte) []byte {
	if !s.Signed {
		return dst
	}
	return b64.AppendEncode(dst, s.Prev[:])
}

// SigHeader is the value of the SigHeader header, "" when the message
// carries no signature.
func (s *Stamp) SigHeader() string {
	if !s.Signed {
		return ""
	}
	return s.Sig.Header()
}

// MsgID is the message's broker dedupe id (Nats-Msg-Id), "" unless the
// policy asks for them: 22 base64url characters of an HMAC, keyed with a
// key derived from the sender's secret, of the chain head. A resent
// message gets the same id (the broker drops the copy); nobody without the
// sender's key can compute the id of its next message, so nobody can
// squat on it.
func (s *Stamp) MsgID() string {
	if !s.hasID {
		return ""
	}
	return b64.EncodeToString(s.id[:])
}

// AppendMsgID appends MsgID to dst without allocating.
func (s *Stamp) AppendMsgID(dst []byte) []byte {
	if !s.hasID {
		return dst
	}
	return b64.AppendEncode(dst, s.id[:])
}

// ring keeps the heads of the most recent sequence numbers. Its memory is
// taken at the first put, so subjects without messages cost nothing.
type ring struct {
	n     int
	heads []Hash
	from  uint64 // lowest seq stored; 0 = empty
	last  uint64
}

func newRing(n int) ring { return ring{n: max(n, 0)} }

func (r *ring) reset() { r.from, r.last = 0, 0 }

func (r *ring) put(seq uint64, h Hash) {
	if r.n == 0 {
		return
	}
	if r.heads == nil {
		r.heads = make([]Hash, r.n)
	}
	if r.from == 0 || seq != r.last+1 {
		r.from = seq
	}
	r.heads[seq%uint64(r.n)] = h
	r.last = seq
	if r.last-r.from >= uint64(r.n) {
		r.from = r.last - uint64(r.n) + 1
	}
}

func (r *ring) get(seq uint64) (Hash, bool) {
	if r.from == 0 || seq < r.from || seq > r.last {
		return Hash{}, false
	}
	return r.heads[seq%uint64(r.n)], true
}
