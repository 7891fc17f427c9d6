package schemas

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	mathbits "math/bits"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// MaxMessageSize bounds an encoded message; larger input is rejected before
// it is decoded.
const MaxMessageSize = 8 << 20

// Field counts of the msgpack arrays (header fields included). A decoder
// accepts more fields than it knows (a newer minor revision) and skips them.
const (
	fieldsHello  = 10
	fieldsOutput = 6
	// A reply has 8 fields, then two optional ones that older decoders
	// skip: Grad (the first-order baseline's gradient, written when it is
	// not empty or Mean follows) and Mean (written when set). A store of a
	// version that wrote Mean as the ninth field still decodes: a bool
	// there is Mean.
	fieldsReply   = 8
	fieldsEval    = 8
	fieldsControl = 7
)

// Codec encodes and decodes messages. Each message is a msgpack array whose
// first three elements are the Header; float vectors are msgpack bin blobs
// of little-endian IEEE-754 float64, sample ids bin blobs of little-endian
// uint32. A Codec reuses its buffers: the slice returned by Marshal is valid
// until the next Marshal, and Unmarshal reuses the slices of the message it
// decodes into. A Codec is not safe for concurrent use; use one per
// goroutine.
type Codec struct {
	buf  bytes.Buffer
	enc  *msgpack.Encoder
	rd   bytes.Reader
	dec  *msgpack.Decoder
	data []byte // message being decoded
	err  error  // first encoding error
	// Wide writes every float vector as float64, as revisions before
	// the narrow vectors did (a benchmark's or a test's choice).
	Wide bool
}

// NewCodec returns a Codec ready for use.
func NewCodec() *Codec {
	c := &Codec{}
	c.enc = msgpack.NewEncoder(&c.buf)
	c.dec = msgpack.NewDecoder(&c.rd)
	return c
}

// Marshal encodes m. The result is valid until the next call on c.
func (c *Codec) Marshal(m Message) ([]byte, error) {
	c.buf.Reset()
	c.err = nil
	m.encode(c)
	if c.err != nil {
		return nil, fmt.Errorf("schemas: encoding %s: %w", m.Kind(), c.err)
	}
	return c.buf.Bytes(), nil
}

// Unmarshal decodes data into m, reusing m's slices. It returns an error
// wrapping ErrDecode for anything that is not a well-formed message of m's
// kind; it does not Validate.
func (c *Codec) Unmarshal(data []byte, m Message) error {
	if len(data) > MaxMessageSize {
		return fmt.Errorf("%w: %s of %d bytes exceeds %d", ErrDecode, m.Kind(), len(data), MaxMessageSize)
	}
	c.data = data
	c.rd.Reset(data)
	c.dec.Reset(&c.rd)
	err := m.decode(c)
	c.data = nil
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrDecode, m.Kind(), err)
	}
	if c.rd.Len() != 0 {
		return fmt.Errorf("%w: %s: %d trailing bytes", ErrDecode, m.Kind(), c.rd.Len())
	}
	return nil
}

// encoding helpers: the first error sticks in c.err.

func (c *Codec) check(err error) {
	if err != nil && c.err == nil {
		c.err = err
	}
}

func (c *Codec) head(n int, h *Header) {
	c.check(c.enc.EncodeArrayLen(n))
	c.uint(uint64(h.Version))
	c.uint(uint64(h.Party))
	c.uint(h.Seq)
}

func (c *Codec) uint(v uint64) { c.check(c.enc.EncodeUint(v)) }

func (c *Codec) str(s string) { c.check(c.enc.EncodeString(s)) }

func (c *Codec) floats(v []float64) {
	c.check(c.enc.EncodeBytesLen(8 * len(v)))
	c.buf.Grow(8 * len(v))
	b := c.buf.AvailableBuffer()
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
	}
	c.buf.Write(b)
}

// Narrow float vectors (the default): a request's outputs and a reply's
// losses travel as float32, and c_hat and h_bar as float32 differences
// from c and h (msgpack ext types extF32 and extDiff32), half the bytes of
// float64 where the differences keep float32's relative precision (a
// finite difference of size mu loses nothing that matters). A decoder
// reads both forms; what the receiver computes with is what the bytes
// say, so re-execution and resume are exact either way.
const (
	extF32    int8 = 1 // little-endian float32 values
	extDiff32 int8 = 2 // float32 differences from the message's base vector
)

// floats32 writes v as float32 (ext extF32), or as float64 when c.Wide.
func (c *Codec) floats32(v []float64) {
	if c.Wide || !fitF32(v, nil) {
		// A value past float32's range would arrive as an infinity: the
		// receiver must see it as it is (and refuse it as out of range).
		c.floats(v)
		return
	}
	c.check(c.enc.EncodeExtHeader(extF32, 4*len(v)))
	c.buf.Grow(4 * len(v))
	b := c.buf.AvailableBuffer()
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(float32(x)))
	}
	c.buf.Write(b)
}

// diff32 writes v as float32 differences from base, the float32 values of
// it decoded (ext extDiff32); as float64 when c.Wide or the lengths
// differ.
func (c *Codec) diff32(v, base []float64) {
	if c.Wide || len(v) != len(base) || len(v) == 0 || !fitF32(v, base) || !fitF32(base, nil) {
		c.floats(v)
		return
	}
	c.check(c.enc.EncodeExtHeader(extDiff32, 4*len(v)))
	c.buf.Grow(4 * len(v))
	b := c.buf.AvailableBuffer()
	for i, x := range v {
		// The true difference: the receiver adds it to the base it
		// decodes, so the two differ by what was sent (the point of a
		// finite difference), not by the base's rounding.
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(float32(x-base[i])))
	}
	c.buf.Write(b)
}

// Packed sample ids (ext extIDs): a request's ids are indexes below the
// training set's size, so each takes only the bits of the largest one (15
// for a9a's 32,561 rows, against 32): the payload is the width w (one
// byte), the number of ids (a uvarint), then the ids w bits each, least
// significant bit first, zero padding to the byte. One set of ids has one
// encoding: a decoder refuses a width larger than the largest id needs
// and padding bits that are not zero.
const extIDs int8 = 3

func (c *Codec) ids(v []uint32) {
	if c.Wide || len(v) == 0 {
		c.check(c.enc.EncodeBytesLen(4 * len(v)))
		c.buf.Grow(4 * len(v))
		b := c.buf.AvailableBuffer()
		for _, x := range v {
			b = binary.LittleEndian.AppendUint32(b, x)
		}
		c.buf.Write(b)
		return
	}
	var hi uint32
	for _, x := range v {
		hi |= x
	}
	w := max(mathbits.Len32(hi), 1)
	packed := (len(v)*w + 7) / 8
	var head [1 + binary.MaxVarintLen64]byte
	head[0] = byte(w)
	nh := 1 + binary.PutUvarint(head[1:], uint64(len(v)))
	c.check(c.enc.EncodeExtHeader(extIDs, nh+packed))
	c.buf.Grow(nh + packed)
	b := c.buf.AvailableBuffer()
	b = append(b, head[:nh]...)
	var acc uint64
	nb := 0
	for _, x := range v {
		acc |= uint64(x) << nb
		nb += w
		for nb >= 8 {
			b = append(b, byte(acc))
			acc >>= 8
			nb -= 8
		}
	}
	if nb > 0 {
		b = append(b, byte(acc))
	}
	c.buf.Write(b)
}

// decoding helpers

// array reads the array header and returns how many unknown trailing fields
// to skip.
func (c *Codec) array(want int, h *Header) (extra int, err error) {
	n, err := c.dec.DecodeArrayLen()
	if err != nil {
		return 0, err
	}
	if n < 1 {
		return 0, fmt.Errorf("empty array")
	}
	v, err := c.dec.DecodeUint64()
	if err != nil {
		return 0, err
	}
	if v > math.MaxUint16 {
		return 0, fmt.Errorf("version %d out of range", v)
	}
	h.Version = uint16(v)
	if h.Version != Version {
		// Another version may lay out its fields differently: stop here,
		// Validate reports the version.
		return -1, nil
	}
	if n < want {
		return 0, fmt.Errorf("array of %d fields, want %d", n, want)
	}
	if h.Party, err = decUint[uint16](c); err != nil {
		return 0, err
	}
	if h.Seq, err = c.dec.DecodeUint64(); err != nil {
		return 0, err
	}
	return n - want, nil
}

// peekIs reports whether the next value starts with one of codes.
func (c *Codec) peekIs(codes ...byte) bool {
	code, err := c.dec.PeekCode()
	if err != nil {
		return false
	}
	for _, x := range codes {
		if code == x {
			return true
		}
	}
	return false
}

// peekUint reports whether the next value is an unsigned integer (an
// optional field of this revision, not a newer one's unknown field).
func (c *Codec) peekUint() bool {
	code, err := c.dec.PeekCode()
	return err == nil && (msgpcode.IsFixedNum(code) && int8(code) >= 0 ||
		code == msgpcode.Uint8 || code == msgpcode.Uint16 || code == msgpcode.Uint32 || code == msgpcode.Uint64)
}

// skip discards unknown trailing fields; for a message of another version it
// discards everything.
func (c *Codec) skip(extra int) error {
	if extra < 0 {
		c.rd.Reset(nil)
		return nil
	}
	for ; extra > 0; extra-- {
		if err := c.dec.Skip(); err != nil {
			return err
		}
	}
	return nil
}

// decUint decodes an unsigned integer that must fit T.
func decUint[T uint8 | uint16 | uint32](c *Codec) (T, error) {
	v, err := c.dec.DecodeUint64()
	if err == nil && v > uint64(^T(0)) {
		err = fmt.Errorf("%d out of %T range", v, T(0))
	}
	return T(v), err
}

func (c *Codec) str64(limit int) (string, error) {
	s, err := c.dec.DecodeString()
	if err == nil && len(s) > limit {
		err = fmt.Errorf("string of %d bytes exceeds %d", len(s), limit)
	}
	return s, err
}

// blob returns the next bin field as a slice of the message being decoded.
func (c *Codec) blob(unit int) ([]byte, error) {
	n, err := c.dec.DecodeBytesLen()
	if err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, nil
	}
	if n > c.rd.Len() {
		return nil, fmt.Errorf("blob of %d bytes with %d left", n, c.rd.Len())
	}
	if n%unit != 0 {
		return nil, fmt.Errorf("blob of %d bytes is not a multiple of %d", n, unit)
	}
	start := len(c.data) - c.rd.Len()
	b := c.data[start : start+n]
	if _, err := c.rd.Seek(int64(n), 1); err != nil {
		return nil, err
	}
	return b, nil
}

// fitF32 reports whether every v[i] (minus base[i], with a base) is
// within float32's finite range, or not finite already (NaN and
// infinities stay what they are).
func fitF32(v, base []float64) bool {
	for i, x := range v {
		if base != nil {
			x -= base[i]
		}
		if math.Abs(x) > math.MaxFloat32 && !math.IsInf(x, 0) {
			return false
		}
	}
	return true
}

// WireVector rounds v in place as sending it alone does (a request's c,
// a reply's delta, a training-set evaluation chunk): what its receiver
// decodes. A simulation of the pipeline applies it where the pipeline
// sends (experiment's simulator), so that both compute with the same
// numbers.
func WireVector(v []float64) {
	if !fitF32(v, nil) {
		return // sent as float64
	}
	for i, x := range v {
		v[i] = float64(float32(x))
	}
}

// WirePair rounds base and v in place as sending them together does (c
// and c_hat, h and h_bar): base as WireVector, v as base's decoded value
// plus the float32 difference from base's own.
func WirePair(base, v []float64) {
	diff := len(v) == len(base) && len(v) > 0 && fitF32(v, base) && fitF32(base, nil)
	if diff {
		for i := range v {
			v[i] = float64(float32(v[i] - base[i]))
		}
	}
	WireVector(base)
	if diff {
		for i := range v {
			v[i] += base[i]
		}
	}
}

// readVector reads a float vector in any of its forms: float64 (bin),
// float32 (extF32), or float32 differences from base (extDiff32).
func (c *Codec) readVector(dst, base []float64) ([]float64, error) {
	if c.peekIs(msgpcode.Bin8, msgpcode.Bin16, msgpcode.Bin32) {
		return c.readFloats(dst)
	}
	id, n, err := c.dec.DecodeExtHeader()
	if err != nil {
		return dst[:0], err
	}
	if n < 0 || n > c.rd.Len() || n%4 != 0 {
		return dst[:0], fmt.Errorf("float32 vector of %d bytes with %d left", n, c.rd.Len())
	}
	k := n / 4
	switch id {
	case extF32:
	case extDiff32:
		if k != len(base) {
			return dst[:0], fmt.Errorf("%d differences for a base of %d values", k, len(base))
		}
	default:
		return dst[:0], fmt.Errorf("unknown vector encoding %d", id)
	}
	start := len(c.data) - c.rd.Len()
	b := c.data[start : start+n]
	if _, err := c.rd.Seek(int64(n), 1); err != nil {
		return dst[:0], err
	}
	if cap(dst) < k {
		dst = make([]float64, k)
	}
	dst = dst[:k]
	for i := range dst {
		x := float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
		if id == extDiff32 {
			x += base[i]
		}
		dst[i] = x
	}
	return dst, nil
}

func (c *Codec) readFloats(dst []float64) ([]float64, error) {
	b, err := c.blob(8)
	if err != nil {
		return dst[:0], err
	}
	n := len(b) / 8
	if cap(dst) < n {
		dst = make([]float64, n)
	}
	dst = dst[:n]
	for i := range dst {
		dst[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return dst, nil
}

func (c *Codec) readIDs(dst []uint32) ([]uint32, error) {
	if c.peekIs(msgpcode.FixExt1, msgpcode.FixExt2, msgpcode.FixExt4, msgpcode.FixExt8, msgpcode.FixExt16,
		msgpcode.Ext8, msgpcode.Ext16, msgpcode.Ext32) {
		return c.readPackedIDs(dst)
	}
	b, err := c.blob(4)
	if err != nil {
		return dst[:0], err
	}
	n := len(b) / 4
	if cap(dst) < n {
		dst = make([]uint32, n)
	}
	dst = dst[:n]
	for i := range dst {
		dst[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return dst, nil
}

// readPackedIDs reads ids written as ext extIDs (see ids).
func (c *Codec) readPackedIDs(dst []uint32) ([]uint32, error) {
	id, n, err := c.dec.DecodeExtHeader()
	if err != nil {
		return dst[:0], err
	}
	if id != extIDs {
		return dst[:0], fmt.Errorf("unknown id encoding %d", id)
	}
	if n < 2 || n > c.rd.Len() {
		return dst[:0], fmt.Errorf("packed ids of %d bytes with %d left", n, c.rd.Len())
	}
	start := len(c.data) - c.rd.Len()
	b := c.data[start : start+n]
	if _, err := c.rd.Seek(int64(n), 1); err != nil {
		return dst[:0], err
	}
	w := int(b[0])
	count, k := binary.Uvarint(b[1:])
	if w < 1 || w > 32 || k <= 0 {
		return dst[:0], fmt.Errorf("packed ids: width %d, bad count", w)
	}
	bits := b[1+k:]
	if count == 0 || count > uint64(len(bits))*8/uint64(w) || (int(count)*w+7)/8 != len(bits) {
		return dst[:0], fmt.Errorf("packed ids: %d ids of %d bits in %d bytes", count, w, len(bits))
	}
	m := int(count)
	if cap(dst) < m {
		dst = make([]uint32, m)
	}
	dst = dst[:m]
	var acc uint64
	nb, j := 0, 0
	mask := uint64(1)<<w - 1
	var hi uint32
	for i := range dst {
		for nb < w {
			acc |= uint64(bits[j]) << nb
			j++
			nb += 8
		}
		dst[i] = uint32(acc & mask)
		hi |= dst[i]
		acc >>= w
		nb -= w
	}
	if acc != 0 {
		return dst[:0], fmt.Errorf("packed ids: padding bits are not zero")
	}
	if max(mathbits.Len32(hi), 1) != w {
		return dst[:0], fmt.Errorf("packed ids: width %d where %d bits hold every id", w, max(mathbits.Len32(hi), 1))
	}
	return dst, nil
}

// Per-message encoding and decoding.

func (m *Hello) encode(c *Codec) {
	n := fieldsHello
	if m.Call != "" {
		n++ // an eleventh field, which older decoders skip
	}
	c.head(n, &m.Header)
	c.str(m.Model)
	c.uint(uint64(m.InDim))
	c.uint(uint64(m.OutDim))
	c.uint(uint64(m.NTrain))
	c.uint(uint64(m.NTest))
	c.str(m.PublicKey)
	c.str(m.IDHash)
	if m.Call != "" {
		c.str(m.Call)
	}
}

func (m *Hello) decode(c *Codec) (err error) {
	extra, err := c.array(fieldsHello, &m.Header)
	if err != nil {
		return err
	}
	if extra < 0 {
		return c.skip(extra)
	}
	if m.Model, err = c.str64(64); err != nil {
		return err
	}
	for _, p := range []*uint32{&m.InDim, &m.OutDim, &m.NTrain, &m.NTest} {
		if *p, err = decUint[uint32](c); err != nil {
			return err
		}
	}
	if m.PublicKey, err = c.str64(128); err != nil {
		return err
	}
	if m.IDHash, err = c.str64(128); err != nil {
		return err
	}
	// A hello of ten fields (a party's first, or an earlier revision's)
	// answers no call.
	m.Call = ""
	if extra > 0 {
		if m.Call, err = c.str64(MaxCall); err != nil {
			return err
		}
		extra--
	}
	return c.skip(extra)
}

func (m *PartyOutput) encode(c *Codec) {
	c.head(fieldsOutput, &m.Header)
	c.ids(m.IDs)
	c.floats32(m.C)
	c.diff32(m.CHat, m.C)
}

func (m *PartyOutput) decode(c *Codec) (err error) {
	extra, err := c.array(fieldsOutput, &m.Header)
	if err != nil || extra < 0 {
		m.IDs, m.C, m.CHat = m.IDs[:0], m.C[:0], m.CHat[:0]
		if err != nil {
			return err
		}
		return c.skip(extra)
	}
	if m.IDs, err = c.readIDs(m.IDs); err != nil {
		return err
	}
	if m.C, err = c.readVector(m.C, nil); err != nil {
		return err
	}
	if m.CHat, err = c.readVector(m.CHat, m.C); err != nil {
		return err
	}
	return c.skip(extra)
}

func (m *Reply) encode(c *Codec) {
	n := fieldsReply
	switch {
	case len(m.Cause) > 0:
		n += 3 // Grad (maybe empty) and Mean are written before Cause
	case m.Mean:
		n += 2
	case len(m.Grad) > 0:
		n++
	}
	c.head(n, &m.Header)
	c.uint(m.ReqSeq)
	c.floats32(m.H)
	c.diff32(m.HBar, m.H)
	c.floats32(m.Delta)
	c.uint(uint64(m.Staleness))
	if n > fieldsReply {
		c.floats(m.Grad)
	}
	if n > fieldsReply+1 {
		c.check(c.enc.EncodeBool(m.Mean))
	}
	if len(m.Cause) > 0 {
		c.check(c.enc.EncodeBytes(m.Cause))
	}
}

func (m *Reply) decode(c *Codec) (err error) {
	// A reply of 8 fields (without Grad) is still a reply.
	extra, err := c.array(fieldsReply, &m.Header)
	m.Grad = m.Grad[:0]
	if err != nil || extra < 0 {
		m.H, m.HBar, m.Delta = m.H[:0], m.HBar[:0], m.Delta[:0]
		if err != nil {
			return err
		}
		return c.skip(extra)
	}
	if m.ReqSeq, err = c.dec.DecodeUint64(); err != nil {
		return err
	}
	if m.H, err = c.readVector(m.H, nil); err != nil {
		return err
	}
	if m.HBar, err = c.readVector(m.HBar, m.H); err != nil {
		return err
	}
	if m.Delta, err = c.readVector(m.Delta, nil); err != nil {
		return err
	}
	if m.Staleness, err = decUint[uint32](c); err != nil {
		return err
	}
	m.Mean = false
	if extra > 0 && !c.peekIs(msgpcode.True, msgpcode.False) {
		if m.Grad, err = c.readFloats(m.Grad); err != nil {
			return err
		}
		extra--
	}
	if extra > 0 && c.peekIs(msgpcode.True, msgpcode.False) {
		if m.Mean, err = c.dec.DecodeBool(); err != nil {
			return err
		}
		extra--
	}
	m.Cause = m.Cause[:0]
	if extra > 0 && c.peekIs(msgpcode.Bin8) {
		b, err := c.blob(1)
		if err != nil {
			return err
		}
		if len(b) != DigestSize {
			return fmt.Errorf("cause of %d bytes, want %d", len(b), DigestSize)
		}
		m.Cause = append(m.Cause, b...)
		extra--
	}
	return c.skip(extra)
}

func (m *EvalOutput) encode(c *Codec) {
	c.head(fieldsEval, &m.Header)
	c.uint(uint64(m.Round))
	c.uint(uint64(m.Split))
	c.uint(uint64(m.First))
	c.uint(uint64(m.Total))
	if m.Split == SplitTest {
		// The test set's outputs give the accuracy a run reports, which
		// scoring the saved models reproduces from float64 outputs.
		c.floats(m.C)
	} else {
		c.floats32(m.C)
	}
}

func (m *EvalOutput) decode(c *Codec) (err error) {
	extra, err := c.array(fieldsEval, &m.Header)
	if err != nil || extra < 0 {
		m.C = m.C[:0]
		if err != nil {
			return err
		}
		return c.skip(extra)
	}
	if m.Round, err = decUint[uint32](c); err != nil {
		return err
	}
	var s uint8
	if s, err = decUint[uint8](c); err != nil {
		return err
	}
	m.Split = Split(s)
	if m.First, err = decUint[uint32](c); err != nil {
		return err
	}
	if m.Total, err = decUint[uint32](c); err != nil {
		return err
	}
	if m.C, err = c.readVector(m.C, nil); err != nil {
		return err
	}
	return c.skip(extra)
}

func (m *Control) encode(c *Codec) {
	// Optional last fields, each written when it or a later one is set:
	// BatchSeed, Keep, then the hold-out's share (a float64) and seed.
	// Older decoders skip what they do not know.
	hold := m.HoldOut != nil
	keep := m.Keep != 0 || hold
	seed := m.BatchSeed != 0 || keep
	n := fieldsControl
	for _, on := range [...]bool{seed, keep, hold, hold} {
		if on {
			n++
		}
	}
	c.head(n, &m.Header)
	c.uint(uint64(m.Op))
	c.uint(uint64(m.Round))
	c.uint(uint64(m.Splits))
	c.str(m.Reason)
	if seed {
		c.uint(m.BatchSeed)
	}
	if keep {
		c.uint(uint64(m.Keep))
	}
	if hold {
		c.check(c.enc.EncodeFloat64(m.HoldOut.Share))
		c.uint(m.HoldOut.Seed)
	}
}

func (m *Control) decode(c *Codec) (err error) {
	extra, err := c.array(fieldsControl, &m.Header)
	if err != nil {
		return err
	}
	if extra < 0 {
		return c.skip(extra)
	}
	var op uint8
	if op, err = decUint[uint8](c); err != nil {
		return err
	}
	m.Op = ControlKind(op)
	if m.Round, err = decUint[uint32](c); err != nil {
		return err
	}
	if m.Splits, err = decUint[uint8](c); err != nil {
		return err
	}
	if m.Reason, err = c.str64(1024); err != nil {
		return err
	}
	m.BatchSeed, m.Keep = 0, 0
	if extra > 0 && c.peekUint() {
		if m.BatchSeed, err = c.dec.DecodeUint64(); err != nil {
			return err
		}
		extra--
	}
	if extra > 0 && c.peekUint() {
		if m.Keep, err = decUint[uint32](c); err != nil {
			return err
		}
		extra--
	}
	m.HoldOut = nil
	if extra > 0 && c.peekIs(msgpcode.Double) {
		h := &HoldOut{}
		if h.Share, err = c.dec.DecodeFloat64(); err != nil {
			return err
		}
		if extra--; extra == 0 || !c.peekUint() {
			return fmt.Errorf("a hold-out share without its seed")
		}
		if h.Seed, err = c.dec.DecodeUint64(); err != nil {
			return err
		}
		extra--
		m.HoldOut = h
	}
	return c.skip(extra)
}
