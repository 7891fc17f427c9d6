package model

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// This file is the wire format of the external-model protocol (EXTERNAL.md):
// frames of a 4-byte little-endian length and one msgpack map with string
// keys. The msgpack subset is hand-written so that the hot path (encoding a
// forward request, decoding its answer) works in place on reused buffers and
// never allocates, and so that the decoder can be fuzzed on its own.

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

// msgpack encoding helpers: each appends one value to b.

func mpMap(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x80|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xde), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, 0xdf), uint32(n))
}

func mpStr(b []byte, s string) []byte {
	n := len(s)
	switch {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n <= math.MaxUint8:
		b = append(b, 0xd9, byte(n))
	case n <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, 0xda), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xdb), uint32(n))
	}
	return append(b, s...)
}

func mpUint(b []byte, v uint64) []byte {
	switch {
	case v < 128:
		return append(b, byte(v))
	case v <= math.MaxUint8:
		return append(b, 0xcc, byte(v))
	case v <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xcd), uint16(v))
	case v <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xcf), v)
}

func mpFloat(b []byte, v float64) []byte {
	return binary.BigEndian.AppendUint64(append(b, 0xcb), math.Float64bits(v))
}

// mpBinHeader appends the header of a bin value of n bytes; the caller
// appends the n bytes.
func mpBinHeader(b []byte, n int) []byte {
	switch {
	case n <= math.MaxUint8:
		return append(b, 0xc4, byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xc5), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, 0xc6), uint32(n))
}

func mpFloats(b []byte, v []float64) []byte {
	b = mpBinHeader(b, 8*len(v))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
	}
	return b
}

// mpReader decodes msgpack values from a byte slice in place: strings and
// blobs it returns alias the slice.
type mpReader struct {
	b   []byte
	off int
}

func (r *mpReader) take(n int) ([]byte, error) {
	if n < 0 || n > len(r.b)-r.off {
		return nil, fmt.Errorf("value of %d bytes with %d left", n, len(r.b)-r.off)
	}
	s := r.b[r.off : r.off+n]
	r.off += n
	return s, nil
}

func (r *mpReader) code() (byte, error) {
	if r.off >= len(r.b) {
		return 0, errors.New("unexpected end of frame")
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

// length reads a big-endian length of 1, 2 or 4 bytes.
func (r *mpReader) length(size int) (int, error) {
	s, err := r.take(size)
	if err != nil {
		return 0, err
	}
	switch size {
	case 1:
		return int(s[0]), nil
	case 2:
		return int(binary.BigEndian.Uint16(s)), nil
	}
	v := binary.BigEndian.Uint32(s)
	if uint64(v) > uint64(len(r.b)) {
		// Cannot fit in the frame; also keeps int conversion safe on
		// 32-bit platforms.
		return 0, fmt.Errorf("length %d exceeds the frame", v)
	}
	return int(v), nil
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

func (r *mpReader) mapLen() (int, error) {
	c, err := r.code()
	if err != nil {
		return 0, err
	}
	switch {
	case c >= 0x80 && c <= 0x8f:
		return int(c & 0x0f), nil
	case c == 0xde:
		return r.length(2)
	case c == 0xdf:
		return r.length(4)
	}
	return 0, fmt.Errorf("a map expected, got %s", mpTypeName(c))
}

// bytesOf reads a str or a bin value (old msgpack libraries write byte
// strings as str) and returns its bytes.
func (r *mpReader) bytesOf(allowBin bool) ([]byte, error) {
	c, err := r.code()
	if err != nil {
		return nil, err
	}
	var n int
	switch {
	case c >= 0xa0 && c <= 0xbf:
		n = int(c & 0x1f)
	case c == 0xd9 || (allowBin && c == 0xc4):
		n, err = r.length(1)
	case c == 0xda || (allowBin && c == 0xc5):
		n, err = r.length(2)
	case c == 0xdb || (allowBin && c == 0xc6):
		n, err = r.length(4)
	default:
		want := "a string"
		if allowBin {
			want = "bin"
		}
		return nil, fmt.Errorf("%s expected, got %s", want, mpTypeName(c))
	}
	if err != nil {
		return nil, err
	}
	return r.take(n)
}

func (r *mpReader) str() ([]byte, error)  { return r.bytesOf(false) }
func (r *mpReader) blob() ([]byte, error) { return r.bytesOf(true) }

// uint reads a non-negative integer of any msgpack integer type.
func (r *mpReader) uint() (uint64, error) {
	c, err := r.code()
	if err != nil {
		return 0, err
	}
	if c <= 0x7f {
		return uint64(c), nil
	}
	if c >= 0xe0 {
		return 0, fmt.Errorf("negative integer %d", int8(c))
	}
	var size int
	signed := false
	switch c {
	case 0xcc, 0xcd, 0xce, 0xcf:
		size = 1 << (c - 0xcc)
	case 0xd0, 0xd1, 0xd2, 0xd3:
		size, signed = 1<<(c-0xd0), true
	default:
		return 0, fmt.Errorf("an integer expected, got %s", mpTypeName(c))
	}
	s, err := r.take(size)
	if err != nil {
		return 0, err
	}
	var v uint64
	for _, x := range s {
		v = v<<8 | uint64(x)
	}
	if signed && s[0]&0x80 != 0 {
		return 0, errors.New("negative integer")
	}
	return v, nil
}

// float reads a float32, a float64 or an integer as a float64.
func (r *mpReader) float() (float64, error) {
	if r.off < len(r.b) {
		switch c := r.b[r.off]; {
		case c == 0xca:
			r.off++
			s, err := r.take(4)
			if err != nil {
				return 0, err
			}
			return float64(math.Float32frombits(binary.BigEndian.Uint32(s))), nil
		case c == 0xcb:
			r.off++
			s, err := r.take(8)
			if err != nil {
				return 0, err
			}
			return math.Float64frombits(binary.BigEndian.Uint64(s)), nil
		case c >= 0xe0:
			r.off++
			return float64(int8(c)), nil
		case c >= 0xd0 && c <= 0xd3:
			r.off++
			s, err := r.take(1 << (c - 0xd0))
			if err != nil {
				return 0, err
			}
			var v uint64
			for _, x := range s {
				v = v<<8 | uint64(x)
			}
			shift := 64 - 8*len(s)
			return float64(int64(v<<shift) >> shift), nil
		}
	}
	v, err := r.uint()
	if err != nil {
		return 0, fmt.Errorf("a number expected: %v", err)
	}
	return float64(v), nil
}

// skip discards one value of any type, nested at most depth levels.
func (r *mpReader) skip(depth int) error {
	if depth <= 0 {
		return errors.New("values nested too deeply")
	}
	c, err := r.code()
	if err != nil {
		return err
	}
	var n, items int // bytes to skip, then nested values to skip
	switch {
	case c <= 0x7f, c >= 0xe0, c == 0xc0, c == 0xc2, c == 0xc3:
	case c >= 0x80 && c <= 0x8f:
		items = 2 * int(c&0x0f)
	case c >= 0x90 && c <= 0x9f:
		items = int(c & 0x0f)
	case c >= 0xa0 && c <= 0xbf:
		n = int(c & 0x1f)
	case c == 0xc4, c == 0xd9:
		n, err = r.length(1)
	case c == 0xc5, c == 0xda:
		n, err = r.length(2)
	case c == 0xc6, c == 0xdb:
		n, err = r.length(4)
	case c == 0xc7: // ext8: length, type, data
		n, err = r.length(1)
		n++
	case c == 0xc8:
		n, err = r.length(2)
		n++
	case c == 0xc9:
		n, err = r.length(4)
		n++
	case c == 0xca:
		n = 4
	case c == 0xcb:
		n = 8
	case c >= 0xcc && c <= 0xcf:
		n = 1 << (c - 0xcc)
	case c >= 0xd0 && c <= 0xd3:
		n = 1 << (c - 0xd0)
	case c >= 0xd4 && c <= 0xd8: // fixext 1..16, plus the type byte
		n = 1<<(c-0xd4) + 1
	case c == 0xdc:
		items, err = r.length(2)
	case c == 0xdd:
		items, err = r.length(4)
	case c == 0xde:
		items, err = r.length(2)
		items *= 2
	case c == 0xdf:
		items, err = r.length(4)
		items *= 2
	default: // 0xc1, never used
		return fmt.Errorf("invalid msgpack code 0x%02x", c)
	}
	if err != nil {
		return err
	}
	if _, err := r.take(n); err != nil {
		return err
	}
	if items > len(r.b)-r.off {
		// Every value takes at least one byte.
		return fmt.Errorf("container of %d values with %d bytes left", items, len(r.b)-r.off)
	}
	for ; items > 0; items-- {
		if err := r.skip(depth - 1); err != nil {
			return err
		}
	}
	return nil
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
func (m *extMsg) parse(frame []byte) error {
	*m = extMsg{}
	if err := m.decode(frame); err != nil {
		return fmt.Errorf("%w: %v", errFrame, err)
	}
	if m.op == nil {
		return fmt.Errorf("%w: no \"op\" key", errFrame)
	}
	return nil
}

func (m *extMsg) decode(frame []byte) error {
	r := mpReader{b: frame}
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
	if r.off != len(frame) {
		return fmt.Errorf("%d trailing bytes after the map", len(frame)-r.off)
	}
	return nil
}
