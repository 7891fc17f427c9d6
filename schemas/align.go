package schemas

import (
	"bytes"
	"fmt"
	"strconv"

	"github.com/vmihailenco/msgpack/v5"
)

// Private entity alignment (package align) speaks on two subjects per
// party, in the run's stream like every other message:
//
//	asyrevel.R.psi.m   party m -> hub (the aggregator)  AlignMsg
//	asyrevel.R.psih.m  hub -> party m                    AlignMsg
//
// They are not Kinds of the training protocol: ParseSubject does not know
// them, and replay lists their records as undecodable training messages.
const (
	AlignToken    = "psi"
	AlignHubToken = "psih"
)

// AlignSubject is party m's alignment subject: asyrevel.R.psi.m.
func AlignSubject(run string, m int) string {
	return "asyrevel." + run + "." + AlignToken + "." + strconv.Itoa(m)
}

// AlignHubSubject is the hub's alignment subject to party m:
// asyrevel.R.psih.m.
func AlignHubSubject(run string, m int) string {
	return "asyrevel." + run + "." + AlignHubToken + "." + strconv.Itoa(m)
}

// AlignPhase says what an AlignMsg carries.
type AlignPhase uint8

// Alignment phases.
const (
	// AlignSet: the sender's own keys, hashed to the group, raised to its
	// secret scalar and shuffled; 32-byte ristretto255 encodings.
	AlignSet AlignPhase = iota + 1
	// AlignEcho: a party's own scalar applied to the hub's set, in the
	// hub's order, each truncated to 16 bytes (party -> hub).
	AlignEcho
	// AlignResult: the intersection in the common order, as positions
	// (little-endian uint32) into the receiving party's shuffled set
	// (hub -> party).
	AlignResult
	// AlignAlive: a heartbeat; no data.
	AlignAlive
	// AlignAbort: the sender gives up; Reason says why (never a key).
	AlignAbort
	// AlignLayout: the joint layout of the aligned rows (hub -> party,
	// before the result): little-endian uint32 items, the number of
	// classes of the hub's labels of the intersection first, then the
	// parties' widths in order (Total = q + 1); Features is the joint
	// width and Parties q. With it a party writes a split folder's
	// manifest of its own (the blocks and classes its training needs).
	AlignLayout
	// AlignSize: the sender states the size of its set (Total) before
	// any element, with its Spec and (a party) its Width. The hub refuses
	// a party whose set is larger than the agreed multiple of its own,
	// and states its own size to every party, before its set, only when
	// every party's is within the bound. No data.
	AlignSize
	alignPhases
)

var alignPhaseNames = [...]string{AlignSet: "set", AlignEcho: "echo", AlignResult: "result", AlignAlive: "alive", AlignAbort: "abort", AlignLayout: "layout", AlignSize: "size"}

func (p AlignPhase) String() string {
	if p >= AlignSet && p < alignPhases {
		return alignPhaseNames[p]
	}
	return "phase(" + strconv.Itoa(int(p)) + ")"
}

// Element widths of the phases.
const (
	AlignElementSize = 32 // a ristretto255 encoding
	AlignEchoSize    = 16 // a truncated encoding: equality tests only
	AlignIndexSize   = 4  // a uint32 position
)

// AlignMsg is one chunk of an alignment phase. A phase of Total items is
// sent as chunks in order; Offset is the first item's position in it.
type AlignMsg struct {
	Header
	Phase  AlignPhase
	Total  uint64 // items in the whole phase
	Offset uint64 // position of this chunk's first item
	// Spec is the sender's key specification (columns, normalisation,
	// group, protocol version): every organisation must use the same.
	Spec string
	// Width is the sender's number of feature columns (set phase of a
	// party), or, in a result, the receiver's first column in the joint
	// feature set; Features is the joint width and Parties q (result).
	Width    uint32
	Features uint32
	Parties  uint32
	Reason   string // abort only
	Data     []byte // Items() items of the phase's size
}

const fieldsAlign = 12

// MaxAlignChunk bounds the items of one chunk (a 1 MiB payload at most:
// a NATS server's default limit).
const MaxAlignChunk = 1 << 15

// ItemSize is the size of one item of phase p (0 for phases without data).
func (p AlignPhase) ItemSize() int {
	switch p {
	case AlignSet:
		return AlignElementSize
	case AlignEcho:
		return AlignEchoSize
	case AlignResult, AlignLayout:
		return AlignIndexSize
	}
	return 0
}

// Items is the number of items in the chunk.
func (m *AlignMsg) Items() int {
	if s := m.Phase.ItemSize(); s > 0 {
		return len(m.Data) / s
	}
	return 0
}

// MarshalAlign encodes m as a msgpack array (header first, like every
// message of the package).
func MarshalAlign(dst []byte, m *AlignMsg) ([]byte, error) {
	w := &appendWriter{b: dst}
	enc := msgpack.NewEncoder(w)
	err := firstErr(
		enc.EncodeArrayLen(fieldsAlign),
		enc.EncodeUint(uint64(m.Version)), enc.EncodeUint(uint64(m.Party)), enc.EncodeUint(m.Seq),
		enc.EncodeUint(uint64(m.Phase)), enc.EncodeUint(m.Total), enc.EncodeUint(m.Offset),
		enc.EncodeString(m.Spec), enc.EncodeUint(uint64(m.Width)), enc.EncodeUint(uint64(m.Features)),
		enc.EncodeUint(uint64(m.Parties)), enc.EncodeString(m.Reason), enc.EncodeBytes(m.Data))
	if err != nil {
		return nil, fmt.Errorf("schemas: encoding align message: %w", err)
	}
	return w.b, nil
}

type appendWriter struct{ b []byte }

func (w *appendWriter) Write(p []byte) (int, error) { w.b = append(w.b, p...); return len(p), nil }

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// Limits of the text fields of an AlignMsg.
const (
	maxAlignSpec   = 512
	maxAlignReason = 1024
)

// UnmarshalAlign decodes an AlignMsg and checks its form: the schema
// version, a known phase, a whole number of items, no more than
// MaxAlignChunk, a chunk within Total. Errors wrap ErrDecode, ErrVersion,
// ErrRange or ErrShape. The receiver checks the party id against the
// subject and the order of chunks.
func UnmarshalAlign(data []byte) (*AlignMsg, error) {
	if len(data) > MaxMessageSize {
		return nil, fmt.Errorf("%w: align message of %d bytes", ErrDecode, len(data))
	}
	rd := bytes.NewReader(data)
	dec := msgpack.NewDecoder(rd)
	n, err := dec.DecodeArrayLen()
	if err != nil {
		return nil, fmt.Errorf("%w: align message: %v", ErrDecode, err)
	}
	if n < 1 {
		return nil, fmt.Errorf("%w: align message: empty array", ErrDecode)
	}
	var m AlignMsg
	v, err := dec.DecodeUint64()
	if err != nil {
		return nil, fmt.Errorf("%w: align message: %v", ErrDecode, err)
	}
	if v != uint64(Version) {
		return nil, fmt.Errorf("%w: align message version %d, want %d", ErrVersion, v, Version)
	}
	if n != fieldsAlign {
		return nil, fmt.Errorf("%w: align message of %d fields, want %d", ErrDecode, n, fieldsAlign)
	}
	m.Version = Version
	var party, phase, width, feats, parties uint64
	for _, p := range []*uint64{&party, &m.Seq, &phase, &m.Total, &m.Offset} {
		if *p, err = dec.DecodeUint64(); err != nil {
			return nil, fmt.Errorf("%w: align message: %v", ErrDecode, err)
		}
	}
	if m.Spec, err = dec.DecodeString(); err != nil {
		return nil, fmt.Errorf("%w: align message: %v", ErrDecode, err)
	}
	for _, p := range []*uint64{&width, &feats, &parties} {
		if *p, err = dec.DecodeUint64(); err != nil {
			return nil, fmt.Errorf("%w: align message: %v", ErrDecode, err)
		}
	}
	if m.Reason, err = dec.DecodeString(); err != nil {
		return nil, fmt.Errorf("%w: align message: %v", ErrDecode, err)
	}
	if m.Data, err = dec.DecodeBytes(); err != nil {
		return nil, fmt.Errorf("%w: align message: %v", ErrDecode, err)
	}
	if rd.Len() != 0 {
		return nil, fmt.Errorf("%w: align message: trailing bytes", ErrDecode)
	}
	switch {
	case party > MaxParties:
		return nil, fmt.Errorf("%w: align message party %d", ErrRange, party)
	case m.Seq == 0:
		return nil, fmt.Errorf("%w: align message sequence 0", ErrRange)
	case phase < uint64(AlignSet) || phase >= uint64(alignPhases):
		return nil, fmt.Errorf("%w: align message phase %d", ErrRange, phase)
	case width > 1<<31 || feats > 1<<31 || parties > MaxParties:
		return nil, fmt.Errorf("%w: align message widths %d/%d/%d", ErrRange, width, feats, parties)
	case len(m.Spec) > maxAlignSpec || len(m.Reason) > maxAlignReason:
		return nil, fmt.Errorf("%w: align message text of %d/%d bytes", ErrShape, len(m.Spec), len(m.Reason))
	}
	m.Party, m.Phase = uint16(party), AlignPhase(phase)
	m.Width, m.Features, m.Parties = uint32(width), uint32(feats), uint32(parties)
	size := m.Phase.ItemSize()
	switch {
	case size == 0 && len(m.Data) != 0:
		return nil, fmt.Errorf("%w: %s message carries %d bytes", ErrShape, m.Phase, len(m.Data))
	case size > 0 && len(m.Data)%size != 0:
		return nil, fmt.Errorf("%w: %s chunk of %d bytes is not a whole number of %d-byte items", ErrShape, m.Phase, len(m.Data), size)
	case size > 0 && len(m.Data)/size > MaxAlignChunk:
		return nil, fmt.Errorf("%w: %s chunk of %d items, at most %d", ErrShape, m.Phase, len(m.Data)/size, MaxAlignChunk)
	case size > 0 && (m.Offset > m.Total || uint64(len(m.Data)/size) > m.Total-m.Offset):
		return nil, fmt.Errorf("%w: %s chunk of %d items at %d exceeds the phase's %d", ErrRange, m.Phase, len(m.Data)/size, m.Offset, m.Total)
	case m.Total > 1<<32-1:
		return nil, fmt.Errorf("%w: %s of %d items", ErrRange, m.Phase, m.Total)
	}
	return &m, nil
}

// AlignSeqHead reads only the head of an encoded AlignMsg (array, version,
// party, seq) and returns its sequence number, 0 if it cannot: a receiver
// checks the sender's signature over the payload before it decodes the
// rest.
func AlignSeqHead(data []byte) uint64 {
	rd := bytes.NewReader(data)
	dec := msgpack.NewDecoder(rd)
	if n, err := dec.DecodeArrayLen(); err != nil || n != fieldsAlign {
		return 0
	}
	for range 2 {
		if _, err := dec.DecodeUint64(); err != nil {
			return 0
		}
	}
	seq, err := dec.DecodeUint64()
	if err != nil {
		return 0
	}
	return seq
}
