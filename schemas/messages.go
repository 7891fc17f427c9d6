package schemas

import (
	"crypto/sha256"
	"fmt"
	"math"
)

// Version is the schema version this package writes and accepts.
const Version uint16 = 1

// Header is the head of every message: the schema version, the party the
// message is from (party -> aggregator) or to (aggregator -> party; 0 for
// control), and the sender's sequence number. Every sender numbers all the
// messages it publishes with one strictly increasing sequence starting at 1;
// receivers reject a sequence that does not increase (a replay).
type Header struct {
	Version uint16
	Party   uint16
	Seq     uint64
}

func (h *Header) check(lim *Limits) error {
	if h.Version != Version {
		return fmt.Errorf("%w: got %d, want %d", ErrVersion, h.Version, Version)
	}
	if int(h.Party) != lim.Party {
		return fmt.Errorf("%w: message says party %d, subject says %d", ErrParty, h.Party, lim.Party)
	}
	if h.Seq == 0 {
		return fmt.Errorf("%w: sequence 0", ErrRange)
	}
	return nil
}

// Limits is what a receiver knows when it validates a message: the party id
// its subject names and the run's shapes. Zero fields are not checked.
type Limits struct {
	Party    int // party id from the subject (0 for control)
	K        int // outputs per sample and party
	NTrain   int // training samples: ids must be < NTrain
	NTest    int // test samples
	MaxBatch int // most samples in one PartyOutput or Reply
	Batch    int // exact number of samples expected (replies), 0 = any
	// MaxAbs bounds the magnitude of every value (outputs, losses): a
	// finite but huge value (1e308) would overflow the receiver's
	// arithmetic into Inf and NaN. 0 = no bound beyond finiteness.
	MaxAbs float64
	// FirstOrder is the first-order baseline (TIG, split learning):
	// PartyOutputs carry c only (no c_hat) and Replies carry the
	// gradient dF_0/dc (k values a sample) instead of function values.
	FirstOrder bool
}

// Message is implemented by the five message types of the protocol.
type Message interface {
	// Kind is the message type, which fixes its subject token.
	Kind() Kind
	// Validate checks the message against what the receiver knows and
	// returns an error wrapping one of the package's sentinel errors.
	Validate(lim Limits) error
	// Head returns the message header.
	Head() *Header

	encode(c *Codec)
	decode(c *Codec) error
}

// Hello announces a party: its model kind and shapes, and its public key.
type Hello struct {
	Header
	Model     string // model kind, e.g. "linear", "mlp", "external"
	InDim     uint32 // d_m, the party's feature count
	OutDim    uint32 // k, outputs per sample
	NTrain    uint32 // training samples the party holds
	NTest     uint32 // test samples the party holds
	PublicKey string // the party's nkeys public key ("" when unsigned)
	IDHash    string // fingerprint of the party's training sample ids ("" if none)
	// Call is the nonce of the aggregator's call (CtlCall) that this hello
	// answers; CallAsked in a party's first hello, which asks to be
	// called; "" in a hello of an earlier revision, which knows no call.
	// The aggregator admits a party by a hello that answers its own call:
	// a hello stored by a process that has died since, before the
	// aggregator started, is not a join. An eleventh field, written when
	// set: a hello of ten fields still decodes (Call "").
	Call string
}

// MaxCall bounds the length of Hello.Call and of a call's nonce.
const MaxCall = 64

// CallAsked is the Call of a party's first hello: it asks the aggregator
// to call it (CtlCall).
const CallAsked = "?"

// PartyOutput is one zeroth-order request: the party's outputs c at w_m and
// c_hat at w_m + mu u for the batch IDs (k values per sample, sample after
// sample). Seq identifies the request; the reply echoes it.
type PartyOutput struct {
	Header
	IDs  []uint32
	C    []float64
	CHat []float64
}

// Reply answers a PartyOutput: the head's loss h at the stored outputs and
// h_bar with the party's slot replaced by c_hat, per sample of the request;
// or, in delta mode, only Delta = h_bar - h (H and HBar empty); or, with
// Mean set, one value in Delta: the mean of h_bar - h over the request's
// samples, all that the party's update needs (a privacy defense); or, in
// the first-order baseline (TIG), only Grad = dF_0/dc of the party's slot,
// k values a sample (H, HBar and Delta empty). Staleness is the largest
// number of updates of another party that the slots used to compute h were
// behind.
type Reply struct {
	Header
	ReqSeq    uint64 // the Seq of the PartyOutput answered
	H         []float64
	HBar      []float64
	Delta     []float64
	Staleness uint32
	Mean      bool      // Delta holds the batch mean of h_bar - h (one value)
	Grad      []float64 // TIG only: dF_0/dc_m per sample, sample after sample
	// Cause names the request answered, by content: RequestDigest of the
	// PartyOutput's encoded payload (DigestSize bytes; empty in logs of
	// earlier revisions). It is inside the signed payload, so the log
	// proves which message a reply answers and that the reply was made
	// after it: re-execution applies requests in the order their replies
	// name them, and the audit rejects a log that stores a reply before
	// the request it answers.
	Cause []byte
}

// DigestSize is the length of a RequestDigest.
const DigestSize = 16

// RequestDigest appends to dst the digest of an encoded request payload,
// the first DigestSize bytes of its SHA-256, and returns the result.
func RequestDigest(dst, payload []byte) []byte {
	h := sha256.Sum256(payload)
	return append(dst, h[:DigestSize]...)
}

// Split names a set of samples in an EvalOutput.
type Split uint8

// Splits.
const (
	SplitInit  Split = iota + 1 // the initial full pass over the training set
	SplitTrain                  // training set, on an eval request
	SplitTest                   // test set, on an eval request
)

// String names the split.
func (s Split) String() string {
	switch s {
	case SplitInit:
		return "init"
	case SplitTrain:
		return "train"
	case SplitTest:
		return "test"
	}
	return fmt.Sprintf("split(%d)", s)
}

// EvalOutput carries a party's outputs c for the contiguous samples
// First .. First+len(C)/k-1 of a split, for eval round Round (0 for
// SplitInit). A split is sent in chunks; Total is the split's size.
type EvalOutput struct {
	Header
	Round uint32
	Split Split
	First uint32
	Total uint32
	C     []float64
}

// ControlKind is what a Control message asks.
type ControlKind uint8

// Control kinds.
const (
	CtlStart      ControlKind = iota + 1 // the table is full: start stepping
	CtlEval                              // publish EvalOutputs for round Round
	CtlCheckpoint                        // save local state
	CtlStop                              // stop: the run is over
	// CtlRefuse refuses one party (Header.Party = m, 1..q) or, with
	// Header.Party = 0, aborts the run for everyone: the addressee stops
	// and reports Reason as an error. A refusal of party m names in Round
	// the sequence number of the Hello it refuses (0: whatever party m
	// sent), so that a second process with the same id does not take the
	// refusal of the first for its own.
	CtlRefuse
	// CtlSeal carries the aggregator's signed checkpoint of the log
	// (package trust): Round is its number, Reason its digest (43
	// base64url characters), and the header Asy-Checkpoint the
	// checkpoint itself. Parties check it, countersign it and keep the
	// receipt.
	CtlSeal
	// CtlPause pauses the run (its operator stopped it): the parties send
	// no new request, answer what was asked, countersign the seal that
	// follows, save their state and stop; a resume goes on.
	CtlPause
	// CtlCall answers party m's hello (Header.Party = m, Round its
	// sequence number, as CtlRefuse names it) with the aggregator's call:
	// Reason is a nonce drawn when the aggregator started. The party, if
	// it is the process that said that hello, answers with a hello whose
	// Call is the nonce and then sends its initial pass: the aggregator
	// admits only such a hello, so that a hello a dead process left in the
	// log is not a join. A party of an earlier revision rejects the call
	// (an unknown control) and is never admitted.
	CtlCall
)

// String names the control kind.
func (k ControlKind) String() string {
	switch k {
	case CtlStart:
		return "start"
	case CtlEval:
		return "eval"
	case CtlCheckpoint:
		return "checkpoint"
	case CtlStop:
		return "stop"
	case CtlRefuse:
		return "refuse"
	case CtlSeal:
		return "seal"
	case CtlPause:
		return "pause"
	case CtlCall:
		return "call"
	}
	return fmt.Sprintf("control(%d)", k)
}

// Eval split masks for Control.Splits.
const (
	EvalTrain uint8 = 1 << iota
	EvalTest
)

// Control is broadcast by the aggregator to all parties. Its Header.Party
// is 0, but for CtlRefuse, which addresses one party (or 0: all).
type Control struct {
	Header
	Op     ControlKind
	Round  uint32 // CtlEval: the round; CtlRefuse: the refused Hello's sequence number; CtlStop: the round kept (Keep)
	Splits uint8  // EvalTrain|EvalTest for CtlEval
	Reason string // human-readable, for CtlStop and CtlRefuse
	// BatchSeed, if not 0 on CtlStart, says that the aggregator draws the
	// batches: a party's r-th request (r = 0, 1, ...) must carry the ids
	// DrawBatch(BatchSeed, party, r, its batch size, NTrain).
	BatchSeed uint64
	// Keep, on CtlEval, names the evaluation round that was the best so
	// far (0: none named): a party keeps its parameters of that round and
	// of the newest one it answered, and may forget the others. A stop's
	// Round names the round whose models every participant keeps and
	// saves, one of those (0: each keeps its last model).
	Keep uint32
	// HoldOut, on CtlCall, is the share of the training rows the
	// aggregator keeps aside and the seed that chose them: the party
	// keeps the same rows aside before it answers, so that both train on
	// the same rows. nil: the call says nothing of a hold-out (an earlier
	// revision's call). Optional last fields, after BatchSeed and Keep:
	// older decoders skip them, and a party of an earlier revision then
	// answers with all its rows, which the aggregator refuses (Hello's
	// NTrain does not match).
	HoldOut *HoldOut
}

// HoldOut names the training rows a run keeps aside, never trained on:
// round(Share * n) of its n training rows, chosen at random with Seed
// (dataset.TestSplit with Shuffle). Share 0: none.
type HoldOut struct {
	Share float64 // in [0, 1)
	Seed  uint64
}

// Rows reports whether h keeps rows aside (nil: none).
func (h *HoldOut) Rows() bool { return h != nil && h.Share > 0 }

// String describes h as the command line gives it.
func (h *HoldOut) String() string {
	if !h.Rows() {
		return "no hold-out"
	}
	return fmt.Sprintf("--holdout %g --seed %d", h.Share, h.Seed)
}

// Same reports whether h and o keep the same rows aside (the seed matters
// only when rows are kept).
func (h *HoldOut) Same(o *HoldOut) bool {
	if !h.Rows() || !o.Rows() {
		return h.Rows() == o.Rows()
	}
	return h.Share == o.Share && h.Seed == o.Seed
}

// Check reports a share that is not a fraction of the rows in [0, 1)
// (NaN, infinite, negative, 1 or more) as ErrRange.
func (h *HoldOut) Check() error {
	if h != nil && !(h.Share >= 0 && h.Share < 1) {
		return fmt.Errorf("%w: a hold-out of %v of the training rows, want a share in [0, 1)", ErrRange, h.Share)
	}
	return nil
}

// Kind implements Message.
func (*Hello) Kind() Kind       { return KindHello }
func (*PartyOutput) Kind() Kind { return KindOutput }
func (*Reply) Kind() Kind       { return KindReply }
func (*EvalOutput) Kind() Kind  { return KindEval }
func (*Control) Kind() Kind     { return KindControl }

// Head implements Message.
func (h *Header) Head() *Header { return h }

// Validate implements Message.
func (m *Hello) Validate(lim Limits) error {
	if err := m.check(&lim); err != nil {
		return err
	}
	if m.InDim == 0 || m.OutDim == 0 {
		return fmt.Errorf("%w: hello with in=%d out=%d", ErrShape, m.InDim, m.OutDim)
	}
	if lim.K > 0 && int(m.OutDim) != lim.K {
		return fmt.Errorf("%w: hello has k=%d, run has k=%d", ErrShape, m.OutDim, lim.K)
	}
	if lim.NTrain > 0 && int(m.NTrain) != lim.NTrain {
		return fmt.Errorf("%w: party holds %d training samples, aggregator %d", ErrShape, m.NTrain, lim.NTrain)
	}
	if lim.NTest > 0 && int(m.NTest) != lim.NTest {
		return fmt.Errorf("%w: party holds %d test samples, aggregator %d", ErrShape, m.NTest, lim.NTest)
	}
	if len(m.Model) > 64 || len(m.PublicKey) > 128 || len(m.IDHash) > 128 || len(m.Call) > MaxCall {
		return fmt.Errorf("%w: hello strings too long", ErrRange)
	}
	return nil
}

// Validate implements Message.
func (m *PartyOutput) Validate(lim Limits) error {
	if err := m.check(&lim); err != nil {
		return err
	}
	b := len(m.IDs)
	if b == 0 || (lim.MaxBatch > 0 && b > lim.MaxBatch) {
		return fmt.Errorf("%w: batch of %d samples (max %d)", ErrShape, b, lim.MaxBatch)
	}
	if lim.FirstOrder {
		// TIG: c only.
		if len(m.CHat) != 0 || len(m.C) == 0 || len(m.C)%b != 0 || (lim.K > 0 && len(m.C) != b*lim.K) {
			return fmt.Errorf("%w: first-order request with %d ids, %d c and %d c_hat values, want %d c and no c_hat", ErrShape, b, len(m.C), len(m.CHat), b*max(lim.K, 1))
		}
	} else {
		if lim.K > 0 && (len(m.C) != b*lim.K || len(m.CHat) != b*lim.K) {
			return fmt.Errorf("%w: %d ids with %d c and %d c_hat values, want %d each", ErrShape, b, len(m.C), len(m.CHat), b*lim.K)
		}
		if len(m.C) != len(m.CHat) || len(m.C)%b != 0 {
			return fmt.Errorf("%w: %d ids with %d c and %d c_hat values", ErrShape, b, len(m.C), len(m.CHat))
		}
	}
	if err := checkIDs(m.IDs, lim.NTrain); err != nil {
		return err
	}
	if err := finite("c", m.C, lim.MaxAbs); err != nil {
		return err
	}
	return finite("c_hat", m.CHat, lim.MaxAbs)
}

// Validate implements Message. Limits.Batch, if set, is the size of the
// request being answered. With Limits.FirstOrder the reply must carry a
// gradient (and Limits.K, if set, fixes its values per sample); without, it
// must carry function values and no gradient.
func (m *Reply) Validate(lim Limits) error {
	if err := m.check(&lim); err != nil {
		return err
	}
	var b int
	values := len(m.H) + len(m.HBar) + len(m.Delta)
	switch {
	case lim.FirstOrder:
		k := max(lim.K, 1)
		if values != 0 || m.Mean || len(m.Grad) == 0 || len(m.Grad)%k != 0 {
			return fmt.Errorf("%w: first-order reply with %d gradient values (k=%d) and %d function values", ErrShape, len(m.Grad), k, values)
		}
		b = len(m.Grad) / k
	case len(m.Grad) > 0:
		return fmt.Errorf("%w: reply carries a gradient in a zeroth-order run", ErrShape)
	case m.Mean:
		if len(m.Delta) != 1 || len(m.H) != 0 || len(m.HBar) != 0 {
			return fmt.Errorf("%w: mean reply with %d h, %d h_bar, %d delta", ErrShape, len(m.H), len(m.HBar), len(m.Delta))
		}
		b = lim.Batch // one value for the whole batch
	case len(m.Delta) > 0 && len(m.H) == 0 && len(m.HBar) == 0:
		b = len(m.Delta)
	case len(m.Delta) == 0 && len(m.H) > 0 && len(m.H) == len(m.HBar):
		b = len(m.H)
	default:
		return fmt.Errorf("%w: reply with %d h, %d h_bar, %d delta", ErrShape, len(m.H), len(m.HBar), len(m.Delta))
	}
	if (lim.Batch > 0 && b != lim.Batch) || (lim.MaxBatch > 0 && b > lim.MaxBatch) {
		return fmt.Errorf("%w: reply for %d samples, want %d", ErrShape, b, lim.Batch)
	}
	if m.ReqSeq == 0 {
		return fmt.Errorf("%w: reply to request 0", ErrRange)
	}
	for _, v := range [...]struct {
		n string
		x []float64
	}{{"h", m.H}, {"h_bar", m.HBar}, {"delta", m.Delta}, {"grad", m.Grad}} {
		if err := finite(v.n, v.x, lim.MaxAbs); err != nil {
			return err
		}
	}
	return nil
}

// Validate implements Message.
func (m *EvalOutput) Validate(lim Limits) error {
	if err := m.check(&lim); err != nil {
		return err
	}
	var n int
	switch m.Split {
	case SplitInit, SplitTrain:
		n = lim.NTrain
	case SplitTest:
		n = lim.NTest
	default:
		return fmt.Errorf("%w: unknown split %d", ErrRange, m.Split)
	}
	if m.Split == SplitInit && m.Round != 0 {
		return fmt.Errorf("%w: init pass with round %d", ErrRange, m.Round)
	}
	if lim.K > 0 && (len(m.C) == 0 || len(m.C)%lim.K != 0) {
		return fmt.Errorf("%w: %d values is not a positive multiple of k=%d", ErrShape, len(m.C), lim.K)
	}
	if n > 0 && int(m.Total) != n {
		return fmt.Errorf("%w: %s split of %d samples, want %d", ErrShape, m.Split, m.Total, n)
	}
	k := max(lim.K, 1)
	if uint64(m.First)+uint64(len(m.C)/k) > uint64(m.Total) {
		return fmt.Errorf("%w: samples %d..%d beyond split size %d", ErrRange, m.First, int(m.First)+len(m.C)/k-1, m.Total)
	}
	return finite("c", m.C, lim.MaxAbs)
}

// Validate implements Message.
// A CtlRefuse may address any party id up to MaxParties.
func (m *Control) Validate(lim Limits) error {
	if (m.Op == CtlRefuse || m.Op == CtlCall) && int(m.Party) <= MaxParties {
		lim.Party = int(m.Party)
	}
	if err := m.check(&lim); err != nil {
		return err
	}
	if m.Op < CtlStart || m.Op > CtlCall {
		return fmt.Errorf("%w: unknown control %d", ErrRange, m.Op)
	}
	if m.Op == CtlCall && (m.Party == 0 || m.Reason == "" || len(m.Reason) > MaxCall) {
		return fmt.Errorf("%w: a call to party %d with a nonce of %d bytes", ErrRange, m.Party, len(m.Reason))
	}
	if m.HoldOut != nil && m.Op != CtlCall {
		return fmt.Errorf("%w: a hold-out on a %s, not on a call", ErrRange, m.Op)
	}
	if err := m.HoldOut.Check(); err != nil {
		return err
	}
	if m.Op == CtlEval && m.Splits&(EvalTrain|EvalTest) == 0 {
		return fmt.Errorf("%w: eval without splits", ErrRange)
	}
	if len(m.Reason) > 1024 {
		return fmt.Errorf("%w: reason too long", ErrRange)
	}
	return nil
}

func checkIDs(ids []uint32, n int) error {
	if n <= 0 {
		return nil
	}
	for _, id := range ids {
		if int64(id) >= int64(n) {
			return fmt.Errorf("%w: sample id %d not below %d", ErrRange, id, n)
		}
	}
	return nil
}

// finite checks that every value of x is finite and, if bound > 0, at most
// bound in magnitude.
func finite(name string, x []float64, bound float64) error {
	for i, v := range x {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("%w: %s[%d] = %v", ErrNonFinite, name, i, v)
		}
		if bound > 0 && math.Abs(v) > bound {
			return fmt.Errorf("%w: |%s[%d]| = %g exceeds the bound %g", ErrRange, name, i, math.Abs(v), bound)
		}
	}
	return nil
}
