package schemas

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// ScoreVersion is the version of the scoring messages (serve's wire). Version 2: each
// subject's messages are numbered and chained by the trust layer, as
// training's are (version 1 signed every message on its own).
const ScoreVersion = 2

// Limits of a scoring message.
const (
	MaxScoreIDs   = 1 << 16 // ids in one request
	MaxScoreIDLen = 256     // bytes of one id
)

// Errors of scoring messages.
var (
	// ErrScore: a malformed, unsigned, forged or replayed scoring
	// message; it is rejected and counted.
	ErrScore = errors.New("schemas: bad scoring message")
)

// ScoreSubject is where the aggregator asks every party of run to score.
func ScoreSubject(run string) string { return "asyrevel." + run + ".score" }

// ScoredSubject is where party m answers.
func ScoredSubject(run string, m int) string {
	return "asyrevel." + run + ".scored." + strconv.Itoa(m)
}

// ScoreRequest asks every party for its outputs on IDs. Seq numbers the
// aggregator's requests 1, 2, ... (with the run's keys, the sequence
// number of the trust layer's chain over the request subject; without,
// any increasing number). A request without ids seals: every party
// answers it, signed, with no outputs.
//
// On the wire a msgpack array [v, seq, [id, ...]].
type ScoreRequest struct {
	V   int
	Seq uint64
	IDs []string
}

// ScoreAnswer is party Party's answer to request Req: its K outputs for each id
// of the request (C, float64 little-endian, id after id) or, if it lacks or
// refuses some ids, those (Unknown, Refused) and no outputs; Err says why a
// party could not score at all. Seq numbers the party's answers as
// ScoreRequest.Seq numbers the requests.
//
// On the wire a msgpack array [v, seq, party, req, k, c, [unknown...],
// [refused...], err].
type ScoreAnswer struct {
	V       int
	Seq     uint64
	Party   int
	Req     uint64
	K       int
	C       []byte
	Unknown []string
	Refused []string
	Err     string
}

// Check validates a decoded request.
func (r *ScoreRequest) Check() error {
	switch {
	case r.V != ScoreVersion:
		return fmt.Errorf("%w: version %d, want %d", ErrScore, r.V, ScoreVersion)
	case r.Seq == 0:
		return fmt.Errorf("%w: request number 0", ErrScore)
	case len(r.IDs) > MaxScoreIDs:
		return fmt.Errorf("%w: %d ids (0..%d)", ErrScore, len(r.IDs), MaxScoreIDs)
	}
	for _, id := range r.IDs {
		if len(id) == 0 || len(id) > MaxScoreIDLen {
			return fmt.Errorf("%w: an id of %d bytes (1..%d)", ErrScore, len(id), MaxScoreIDLen)
		}
	}
	return nil
}

// AppendScoreOutputs appends a party's outputs as ScoreAnswer.C holds
// them: little-endian float64s, id after id.
func AppendScoreOutputs(b []byte, v []float64) []byte {
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
	}
	return b
}

// AppendScoreRequest appends the encoding of a request for ids to b.
func AppendScoreRequest(b []byte, seq uint64, ids []string) []byte {
	b = mpArray(b, 3)
	b = mpUint(b, ScoreVersion)
	b = mpUint(b, seq)
	b = mpArray(b, len(ids))
	for _, id := range ids {
		b = mpStr(b, id)
	}
	return b
}

// DecodeScoreRequest decodes a request. Its ids are appended to ids[:0] as
// slices of data (no copy: valid while data is), and returned.
func DecodeScoreRequest(data []byte, ids [][]byte) (v int, seq uint64, _ [][]byte, err error) {
	r := mpReader{b: data}
	if n := r.array(); n != 3 {
		return 0, 0, ids, r.fail("request: an array of 3")
	}
	v, seq = int(r.uint()), r.uint()
	n := r.array()
	if r.err == nil && (n < 0 || n > MaxScoreIDs) {
		return 0, 0, ids, fmt.Errorf("%w: %d ids (0..%d)", ErrScore, n, MaxScoreIDs)
	}
	ids = ids[:0]
	for range max(n, 0) {
		id := r.str()
		if r.err != nil {
			break
		}
		ids = append(ids, id)
	}
	if r.err == nil && r.off != len(data) {
		r.fail("request: bytes after the message")
	}
	return v, seq, ids, r.err
}

// AppendScoreAnswer appends the encoding of a to b.
func AppendScoreAnswer(b []byte, a *ScoreAnswer) []byte {
	b = mpArray(b, 9)
	b = mpUint(b, uint64(a.V))
	b = mpUint(b, a.Seq)
	b = mpUint(b, uint64(a.Party))
	b = mpUint(b, a.Req)
	b = mpUint(b, uint64(a.K))
	b = mpBin(b, a.C)
	for _, l := range [][]string{a.Unknown, a.Refused} {
		b = mpArray(b, len(l))
		for _, id := range l {
			b = mpStr(b, id)
		}
	}
	return mpStr(b, a.Err)
}

// DecodeScoreAnswer decodes an answer into a; a.C is a slice of data (valid
// while data is).
func DecodeScoreAnswer(data []byte, a *ScoreAnswer) error {
	r := mpReader{b: data}
	if n := r.array(); n != 9 {
		return r.fail("answer: an array of 9")
	}
	a.V, a.Seq, a.Party, a.Req, a.K = int(r.uint()), r.uint(), int(r.uint()), r.uint(), int(r.uint())
	a.C = r.bin()
	a.Unknown, a.Refused = r.strs(a.Unknown[:0]), r.strs(a.Refused[:0])
	a.Err = string(r.str())
	if r.err == nil && r.off != len(data) {
		r.fail("answer: bytes after the message")
	}
	if r.err == nil && (a.Party < 0 || a.K < 0 || a.K > 1<<16) {
		r.fail("answer: party or k out of range")
	}
	return r.err
}

// ScoreSeq reads only the sequence number of an encoded request or answer (0
// if it cannot): the auditor's view of a scoring message before it checks
// the message's chain and signature.
func ScoreSeq(data []byte) uint64 {
	r := mpReader{b: data}
	if n := r.array(); n != 3 && n != 9 {
		return 0
	}
	r.uint()
	seq := r.uint()
	if r.err != nil {
		return 0
	}
	return seq
}

// The msgpack subset of the scoring messages: arrays, unsigned integers,
// strings and binary values, written and read without reflection or an
// allocation per id.

func mpArray(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x90|byte(n))
	case n < 1<<16:
		return append(b, 0xdc, byte(n>>8), byte(n))
	}
	return binary.BigEndian.AppendUint32(append(b, 0xdd), uint32(n))
}

func mpUint(b []byte, v uint64) []byte {
	switch {
	case v < 128:
		return append(b, byte(v))
	case v < 1<<8:
		return append(b, 0xcc, byte(v))
	case v < 1<<16:
		return binary.BigEndian.AppendUint16(append(b, 0xcd), uint16(v))
	case v < 1<<32:
		return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xcf), v)
}

func mpStr(b []byte, s string) []byte {
	n := len(s)
	switch {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n < 1<<8:
		b = append(b, 0xd9, byte(n))
	case n < 1<<16:
		b = binary.BigEndian.AppendUint16(append(b, 0xda), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xdb), uint32(n))
	}
	return append(b, s...)
}

func mpBin(b []byte, v []byte) []byte {
	n := len(v)
	switch {
	case n < 1<<8:
		b = append(b, 0xc4, byte(n))
	case n < 1<<16:
		b = binary.BigEndian.AppendUint16(append(b, 0xc5), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xc6), uint32(n))
	}
	return append(b, v...)
}

// mpReader reads the subset; the first error sticks and every later read
// gives a zero value.
type mpReader struct {
	b   []byte
	off int
	err error
}

func (r *mpReader) fail(what string) error {
	if r.err == nil {
		r.err = fmt.Errorf("%w: malformed %s at byte %d", ErrScore, what, r.off)
	}
	return r.err
}

func (r *mpReader) byte() byte {
	if r.err != nil || r.off >= len(r.b) {
		r.fail("message (truncated)")
		return 0
	}
	c := r.b[r.off]
	r.off++
	return c
}

// be reads an n-byte big-endian unsigned integer.
func (r *mpReader) be(n int) uint64 {
	if r.err != nil || len(r.b)-r.off < n {
		r.fail("message (truncated)")
		return 0
	}
	var v uint64
	for _, c := range r.b[r.off : r.off+n] {
		v = v<<8 | uint64(c)
	}
	r.off += n
	return v
}

func (r *mpReader) array() int {
	c := r.byte()
	switch {
	case r.err != nil:
		return -1
	case c&0xf0 == 0x90:
		return int(c & 0x0f)
	case c == 0xdc:
		return int(r.be(2))
	case c == 0xdd:
		return int(r.be(4))
	case c == 0xc0: // nil: an empty list
		return 0
	}
	r.fail("array")
	return -1
}

func (r *mpReader) uint() uint64 {
	c := r.byte()
	switch {
	case r.err != nil:
		return 0
	case c < 0x80:
		return uint64(c)
	case c == 0xcc:
		return r.be(1)
	case c == 0xcd:
		return r.be(2)
	case c == 0xce:
		return r.be(4)
	case c == 0xcf:
		return r.be(8)
	}
	r.fail("unsigned integer")
	return 0
}

// raw reads n bytes as a slice of the message.
func (r *mpReader) raw(n uint64) []byte {
	if r.err != nil || uint64(len(r.b)-r.off) < n {
		r.fail("message (truncated)")
		return nil
	}
	v := r.b[r.off : r.off+int(n) : r.off+int(n)]
	r.off += int(n)
	return v
}

func (r *mpReader) str() []byte {
	c := r.byte()
	switch {
	case r.err != nil:
		return nil
	case c&0xe0 == 0xa0:
		return r.raw(uint64(c & 0x1f))
	case c == 0xd9:
		return r.raw(r.be(1))
	case c == 0xda:
		return r.raw(r.be(2))
	case c == 0xdb:
		return r.raw(r.be(4))
	}
	r.fail("string")
	return nil
}

func (r *mpReader) bin() []byte {
	c := r.byte()
	switch {
	case r.err != nil:
		return nil
	case c == 0xc0:
		return nil
	case c == 0xc4:
		return r.raw(r.be(1))
	case c == 0xc5:
		return r.raw(r.be(2))
	case c == 0xc6:
		return r.raw(r.be(4))
	}
	r.fail("binary value")
	return nil
}

// strs reads a list of at most MaxScoreIDs strings (copied) onto dst.
func (r *mpReader) strs(dst []string) []string {
	n := r.array()
	if r.err == nil && n > MaxScoreIDs {
		r.fail("list (too long)")
	}
	for range max(n, 0) {
		s := r.str()
		if r.err != nil {
			return dst
		}
		dst = append(dst, string(s))
	}
	return dst
}
