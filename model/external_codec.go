package model

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// This file is the wire format of the external-model protocol (EXTERNAL.md):
// frames of a 4-byte little-endian length and one msgpack map with string
// keys. msgpack/v5 encodes and decodes the values; its Encoder and Decoder
// are made once per model and reused, and work on the model's buffers in
// place (strings and blobs of an answer alias the frame), so the hot path
// (encoding a forward request, decoding its answer) never allocates. What
// msgpack/v5 does not check is checked here: the types of known keys,
// duplicate keys, negative integers, nesting depth, lengths beyond the
// frame and trailing bytes.

// Limits of the decoder, independent of the frame size.
const (
	extMaxKeys  = 64 // entries of the top-level map
	extMaxDepth = 8  // nesting of skipped values
)

// errFrame marks a frame that is not well-formed: a bad length prefix or a
// payload that is not a msgpack map of the protocol.
var errFrame = errors.New("malformed frame")

// readFrame reads one frame from r into buf (grown as needed) and returns
// the payload. hdr is scratch for the length prefix. A length of 0 or above
// max is an error wrapping errFrame, reported before the payload is read.
// got is how many bytes were read before an I/O error, for diagnostics.
func readFrame(r *bufio.Reader, hdr *[4]byte, buf []byte, max int) (payload []byte, got int, err error) {
	n, err := io.ReadFull(r, hdr[:])
	if err != nil {
		return buf[:0], n, err
	}
	size := binary.LittleEndian.Uint32(hdr[:])
	if size == 0 {
		return buf[:0], 4, fmt.Errorf("%w: empty frame", errFrame)
	}
	if uint64(size) > uint64(max) {
		return buf[:0], 4, fmt.Errorf("%w: length prefix %d exceeds the limit of %d bytes", errFrame, size, max)
	}
	if cap(buf) < int(size) {
		buf = make([]byte, size)
	}
	buf = buf[:size]
	m, err := io.ReadFull(r, buf)
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return buf[:0], 4 + m, err
	}
	return buf, 4 + m, nil
}

// beginFrame starts a frame in b (reset to empty) with a placeholder for the
// length prefix; endFrame fills it in.
func beginFrame(b []byte) []byte { return append(b[:0], 0, 0, 0, 0) }

func endFrame(b []byte) []byte {
	binary.LittleEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// extWriter encodes a frame with a msgpack Encoder writing into a slice
// it keeps: begin starts a frame on a buffer, end finishes it.
type extWriter struct {
	b   []byte
	enc *msgpack.Encoder
}

func newExtWriter() *extWriter {
	w := &extWriter{}
	w.enc = msgpack.NewEncoder(w)
	return w
}

// Write and WriteByte make extWriter the Encoder's writer; appending to a
// slice never fails, so the encoding methods below ignore errors.
func (w *extWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

func (w *extWriter) WriteByte(c byte) error {
	w.b = append(w.b, c)
	return nil
}

func (w *extWriter) begin(buf []byte) *extWriter {
	w.b = beginFrame(buf)
	return w
}

func (w *extWriter) end() []byte {
	b := endFrame(w.b)
	w.b = nil
	return b
}

func (w *extWriter) mapLen(n int)      { _ = w.enc.EncodeMapLen(n) }
func (w *extWriter) str(s string)      { _ = w.enc.EncodeString(s) }
func (w *extWriter) uint(v uint64)     { _ = w.enc.EncodeUint(v) }
func (w *extWriter) binHeader(n int)   { _ = w.enc.EncodeBytesLen(n) }
func (w *extWriter) uint32LE(v uint32) { w.b = binary.LittleEndian.AppendUint32(w.b, v) }

// key writes a map key and returns w, for key-value chains.
func (w *extWriter) key(k string) *extWriter {
	w.str(k)
	return w
}

// floats writes v as a bin of little-endian float64.
func (w *extWriter) floats(v []float64) {
	w.binHeader(8 * len(v))
	for _, x := range v {
		w.b = binary.LittleEndian.AppendUint64(w.b, math.Float64bits(x))
	}
}

// grow makes room for n more bytes.
func (w *extWriter) grow(n int) {
	if cap(w.b)-len(w.b) < n {
		w.b = append(make([]byte, 0, len(w.b)+n), w.b...)
	}
}

// extReader decodes a frame with a msgpack Decoder reading it in place.
type extReader struct {
	frame []byte
	rd    bytes.Reader
	dec   *msgpack.Decoder
}

func newExtReader() *extReader {
	r := &extReader{}
	r.dec = msgpack.NewDecoder(&r.rd)
	return r
}

func (r *extReader) reset(frame []byte) {
	r.frame = frame
	r.rd.Reset(frame)
	r.dec.Reset(&r.rd)
}

func (r *extReader) peek() (byte, error) {
	c, err := r.dec.PeekCode()
	if err == io.EOF {
		return 0, errors.New("unexpected end of frame")
	}
	return c, err
}

// take returns the next n bytes of the frame (aliasing it) and skips them.
func (r *extReader) take(n int) ([]byte, error) {
	left := r.rd.Len()
	if n < 0 || n > left {
		return nil, fmt.Errorf("value of %d bytes with %d left", n, left)
	}
	start := len(r.frame) - left
	if _, err := r.rd.Seek(int64(n), io.SeekCurrent); err != nil {
		return nil, err
	}
	return r.frame[start : start+n], nil
}

func isStr(c byte) bool {
	return msgpcode.IsFixedString(c) || c == msgpcode.Str8 || c == msgpcode.Str16 || c == msgpcode.Str32
}

func isBin(c byte) bool { return c == msgpcode.Bin8 || c == msgpcode.Bin16 || c == msgpcode.Bin32 }

func (r *extReader) mapLen() (int, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	if !msgpcode.IsFixedMap(c) && c != msgpcode.Map16 && c != msgpcode.Map32 {
		return 0, fmt.Errorf("a map expected, got %s", mpTypeName(c))
	}
	return r.dec.DecodeMapLen()
}

// bytesOf reads a str or (allowBin) a bin value and returns its bytes:
// old msgpack libraries write byte strings as str.
func (r *extReader) bytesOf(allowBin bool) ([]byte, error) {
	c, err := r.peek()
	if err != nil {
		return nil, err
	}
	if !isStr(c) && !(allowBin && isBin(c)) {
		want := "a string"
		if allowBin {
			want = "bin"
		}
		return nil, fmt.Errorf("%s expected, got %s", want, mpTypeName(c))
	}
	n, err := r.dec.DecodeBytesLen()
	if err != nil {
		return nil, err
	}
	return r.take(n)
}

func (r *extReader) str() ([]byte, error)  { return r.bytesOf(false) }
func (r *extReader) blob() ([]byte, error) { return r.bytesOf(true) }

// uint reads a non-negative integer of any msgpack integer type.
func (r *extReader) uint() (uint64, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	switch {
	case c <= msgpcode.PosFixedNumHigh || c >= msgpcode.Uint8 && c <= msgpcode.Uint64:
		return r.dec.DecodeUint64()
	case c >= msgpcode.NegFixedNumLow || c >= msgpcode.Int8 && c <= msgpcode.Int64:
		v, err := r.dec.DecodeInt64()
		if err == nil && v < 0 {
			err = fmt.Errorf("negative integer %d", v)
		}
		return uint64(v), err
	}
	return 0, fmt.Errorf("an integer expected, got %s", mpTypeName(c))
}

// float reads a float32, a float64 or an integer as a float64.
func (r *extReader) float() (float64, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	switch {
	case c == msgpcode.Float, c == msgpcode.Double,
		c <= msgpcode.PosFixedNumHigh, c >= msgpcode.NegFixedNumLow,
		c >= msgpcode.Uint8 && c <= msgpcode.Int64:
		return r.dec.DecodeFloat64()
	}
	return 0, fmt.Errorf("a number expected, got %s", mpTypeName(c))
}

// skip discards one value of any type, nested at most depth levels.
func (r *extReader) skip(depth int) error {
	if depth <= 0 {
		return errors.New("values nested too deeply")
	}
	c, err := r.peek()
	if err != nil {
		return err
	}
	items := 0
	switch {
	case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
		n, err := r.dec.DecodeMapLen()
		if err != nil {
			return err
		}
		items = 2 * n
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		if items, err = r.dec.DecodeArrayLen(); err != nil {
			return err
		}
	case c == 0xc1: // never used
		return fmt.Errorf("invalid msgpack code 0x%02x", c)
	default:
		return r.dec.Skip() // a scalar, str, bin or ext
	}
	if items > r.rd.Len() {
		// Every value takes at least one byte.
		return fmt.Errorf("container of %d values with %d bytes left", items, r.rd.Len())
	}
	for ; items > 0; items-- {
		if err := r.skip(depth - 1); err != nil {
			return err
		}
	}
	return nil
}

func mpTypeName(c byte) string {
	switch {
	case c <= 0x7f || c >= 0xe0 || (c >= 0xcc && c <= 0xd3):
		return "integer"
	case c >= 0x80 && c <= 0x8f, c == 0xde, c == 0xdf:
		return "map"
	case c >= 0x90 && c <= 0x9f, c == 0xdc, c == 0xdd:
		return "array"
	case c >= 0xa0 && c <= 0xbf, c >= 0xd9 && c <= 0xdb:
		return "string"
	case c == 0xc0:
		return "nil"
	case c == 0xc2, c == 0xc3:
		return "bool"
	case c >= 0xc4 && c <= 0xc6:
		return "bin"
	case c == 0xca, c == 0xcb:
		return "float"
	case c == 0xc1:
		return "reserved code 0xc1"
	}
	return "ext"
}

// extMsg is a decoded message of the protocol: the union of the fields of
// every message. Byte slices alias the frame they were decoded from.
type extMsg struct {
	op      []byte
	seq     uint64
	hasSeq  bool
	version uint64
	name    []byte
	inDim   uint64
	outDim  uint64
	nParams uint64
	init    []byte
	scale   float64
	hasScl  bool
	maxFrm  uint64
	params  []byte // init answer
	out     []byte // forward answer
	message []byte // error
}

// parse decodes frame into m. Unknown keys are skipped; a known key with a
// value of the wrong type, a duplicate key or trailing bytes are errors.
// Errors wrap errFrame.
func (r *extReader) parse(frame []byte, m *extMsg) error {
	*m = extMsg{}
	if err := r.decode(frame, m); err != nil {
		return fmt.Errorf("%w: %v", errFrame, err)
	}
	if m.op == nil {
		return fmt.Errorf("%w: no \"op\" key", errFrame)
	}
	return nil
}

func (r *extReader) decode(frame []byte, m *extMsg) error {
	r.reset(frame)
	n, err := r.mapLen()
	if err != nil {
		return err
	}
	if n > extMaxKeys {
		return fmt.Errorf("map of %d keys, at most %d", n, extMaxKeys)
	}
	var seen uint32
	for range n {
		k, err := r.str()
		if err != nil {
			return fmt.Errorf("key: %v", err)
		}
		bit := uint32(0)
		switch string(k) {
		case "op":
			bit = 1 << 0
			m.op, err = r.str()
		case "seq":
			bit = 1 << 1
			m.seq, err = r.uint()
			m.hasSeq = true
		case "version":
			bit = 1 << 2
			m.version, err = r.uint()
		case "name":
			bit = 1 << 3
			m.name, err = r.str()
		case "in_dim":
			bit = 1 << 4
			m.inDim, err = r.uint()
		case "out_dim":
			bit = 1 << 5
			m.outDim, err = r.uint()
		case "num_params":
			bit = 1 << 6
			m.nParams, err = r.uint()
		case "init":
			bit = 1 << 7
			m.init, err = r.str()
		case "init_scale":
			bit = 1 << 8
			m.scale, err = r.float()
			m.hasScl = true
		case "max_frame":
			bit = 1 << 9
			m.maxFrm, err = r.uint()
		case "params":
			bit = 1 << 10
			m.params, err = r.blob()
		case "out":
			bit = 1 << 11
			m.out, err = r.blob()
		case "message":
			bit = 1 << 12
			m.message, err = r.str()
		default:
			err = r.skip(extMaxDepth)
		}
		if err != nil {
			return fmt.Errorf("key %q: %v", k, err)
		}
		if seen&bit != 0 {
			return fmt.Errorf("duplicate key %q", k)
		}
		seen |= bit
	}
	if n := r.rd.Len(); n != 0 {
		return fmt.Errorf("%d trailing bytes after the map", n)
	}
	return nil
}
