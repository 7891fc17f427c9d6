package trust

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash"
)

// Hash is a SHA-256 digest: a chain head or a checkpoint digest.
type Hash [32]byte

// b64 is the text encoding of every binary field in headers and files:
// base64url without padding, strict (one text per value).
var b64 = base64.RawURLEncoding.Strict()

// String is the base64url (unpadded) text of h: 43 characters.
func (h Hash) String() string { return b64.EncodeToString(h[:]) }

// MarshalText encodes h as String does.
func (h Hash) MarshalText() ([]byte, error) { return []byte(h.String()), nil }

// UnmarshalText decodes the text String writes.
func (h *Hash) UnmarshalText(text []byte) error {
	p, err := ParseHash(string(text))
	if err != nil {
		return err
	}
	*h = p
	return nil
}

// ParseHash decodes the text String writes: exactly 43 base64url
// characters.
func ParseHash(s string) (Hash, error) {
	var h Hash
	if len(s) != hashTextLen {
		return h, fmt.Errorf("trust: hash %q: want %d base64url characters, got %d", clip(s), hashTextLen, len(s))
	}
	if _, err := decodeB64(h[:], s); err != nil {
		return h, fmt.Errorf("trust: hash %q: %w", clip(s), err)
	}
	return h, nil
}

const (
	hashTextLen = 43 // base64url of 32 bytes
	sigTextLen  = 86 // base64url of 64 bytes
)

// Domain tags: every hash this package computes starts with one, so that
// no input of one kind can be read as another.
const (
	tagGenesis = 0x00 // followed by chainDomain: a chain's first head
	tagLink    = 0x01 // a chain link
)

const chainDomain = "asyrevel/chain/v1"

// GenesisHead is the head of a subject's chain before its first message:
//
//	SHA-256(0x00 || "asyrevel/chain/v1" || u16(len run) || run || u16(len subject) || subject)
//
// (integers big-endian). It binds the chain to its run and subject, so a
// message cannot be moved to another subject or run without breaking it.
func GenesisHead(run, subject string) Hash {
	b := make([]byte, 0, 1+len(chainDomain)+4+len(run)+len(subject))
	b = append(b, tagGenesis)
	b = append(b, chainDomain...)
	b = appendString16(b, run)
	b = appendString16(b, subject)
	return sha256.Sum256(b)
}

// NextHead is the head after the message with sequence seq and payload,
// given the head before it:
//
//	SHA-256(0x01 || prev || u64(seq) || payload)
//
// The payload is the last field, so its length needs no prefix (SHA-256
// pads with the total length). NextHead allocates; a Chain computes the
// same without allocating.
func NextHead(prev Hash, seq uint64, payload []byte) Hash {
	var c Chain
	c.head = prev
	return c.Compute(seq, payload)
}

// Chain is the hash chain of one subject: its last sequence number and
// head. The zero Chain is usable after Reset; a Chain must not be copied
// after first use. It is not safe for concurrent use.
type Chain struct {
	seq  uint64
	head Hash
	h    hash.Hash
	buf  [1 + 32 + 8]byte
	out  [32]byte
}

// NewChain starts the chain of subject in run at sequence 0 and its
// genesis head.
func NewChain(run, subject string) *Chain {
	c := &Chain{}
	c.Reset(0, GenesisHead(run, subject))
	return c
}

// Reset puts the chain at sequence seq with head head (a resynchronisation
// at a signed head, or a resume).
func (c *Chain) Reset(seq uint64, head Hash) {
	c.seq, c.head = seq, head
}

// Seq is the sequence number of the last message appended (0 before the
// first).
func (c *Chain) Seq() uint64 { return c.seq }

// Head is the head after the last message appended.
func (c *Chain) Head() Hash { return c.head }

// Compute returns the head the chain would have after a message with
// sequence seq and payload, without changing the chain. It does not
// allocate once the chain has hashed a first message.
func (c *Chain) Compute(seq uint64, payload []byte) Hash {
	if c.h == nil {
		c.h = sha256.New()
	}
	c.h.Reset()
	c.buf[0] = tagLink
	copy(c.buf[1:33], c.head[:])
	binary.BigEndian.PutUint64(c.buf[33:], seq)
	c.h.Write(c.buf[:])
	c.h.Write(payload)
	c.h.Sum(c.out[:0])
	return Hash(c.out)
}

// Append adds the message with the next sequence number and payload and
// returns that sequence number and the new head.
func (c *Chain) Append(payload []byte) (uint64, Hash) {
	h := c.Compute(c.seq+1, payload)
	c.seq++
	c.head = h
	return c.seq, h
}

func appendString16(b []byte, s string) []byte {
	if len(s) > 0xffff {
		panic("trust: string longer than 65535 bytes")
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

// decodeB64 decodes the strict base64url text s into dst, which must have
// exactly the decoded length. It does not allocate.
func decodeB64(dst []byte, s string) (int, error) {
	if b64.DecodedLen(len(s)) != len(dst) {
		return 0, fmt.Errorf("want %d bytes of base64url", len(dst))
	}
	// The decoder skips line breaks; a canonical text has none.
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return 0, fmt.Errorf("bad base64url character at %d", i)
		}
	}
	// Decode 4 characters (3 bytes) at a time through a stack buffer.
	var q [4]byte
	var o [3]byte
	n := 0
	for i := 0; i < len(s); i += 4 {
		j := min(i+4, len(s))
		k := copy(q[:], s[i:j])
		m, err := b64.Decode(o[:], q[:k])
		if err != nil {
			return n, fmt.Errorf("bad base64url at character %d", i)
		}
		n += copy(dst[n:], o[:m])
	}
	return n, nil
}

// clip shortens s for an error message.
func clip(s string) string {
	if len(s) > 48 {
		return s[:45] + "..."
	}
	return s
}
