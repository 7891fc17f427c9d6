package trust

import (
	"crypto/ed25519"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// SigHeader is the NATS header that carries a Signature.
const SigHeader = "Asy-Sig"

// PrevHeader is the NATS header that carries, on a signed message, the
// chain head before it (43 base64url characters): it lets a receiver
// that starts reading a subject late check the message against the
// signature (VerifierOptions.Late).
const PrevHeader = "Asy-Prev"

// sigDomain starts every message a chain signature signs.
const sigDomain = "asyrevel/sig/v1\x00"

// Signature is a sender's signature over a chain head: it states "after my
// message number Seq on Subject of Run, the chain head was Head", and so
// proves that message and every earlier one of the subject. Seq, Subject
// and Run are not in it: the receiver knows them from the message the
// signature travels with.
type Signature struct {
	Signer string   // participant id of the signer
	Head   Hash     // the head the signer signed
	Sig    [64]byte // Ed25519 over SignedMessage(run, subject, seq, Head)
}

// SignedMessage is what a chain signature signs:
//
//	"asyrevel/sig/v1" 0x00 || u16(len run) || run || u16(len subject) || subject || u64(seq) || head
//
// (integers big-endian). It appends to dst and returns the result.
func SignedMessage(dst []byte, run, subject string, seq uint64, head Hash) []byte {
	dst = append(dst, sigDomain...)
	dst = appendString16(dst, run)
	dst = appendString16(dst, subject)
	dst = binary.BigEndian.AppendUint64(dst, seq)
	return append(dst, head[:]...)
}

// SigHeaderLen is the length of the header value of a signature by
// signer (AppendHeader): len(signer) + 1 + 43 + 1 + 86.
func SigHeaderLen(signer string) int { return len(signer) + 2 + hashTextLen + sigTextLen }

// AppendHeader appends the compact header value of s to dst:
//
//	<signer>.<head, 43 base64url characters>.<signature, 86 base64url characters>
//
// e.g. 141 bytes for the aggregator. '.' appears neither in participant
// ids nor in base64url. It does not allocate when dst has room.
func (s *Signature) AppendHeader(dst []byte) []byte {
	dst = append(dst, s.Signer...)
	dst = append(dst, '.')
	dst = b64.AppendEncode(dst, s.Head[:])
	dst = append(dst, '.')
	return b64.AppendEncode(dst, s.Sig[:])
}

// Header is the header value of s (AppendHeader).
func (s *Signature) Header() string {
	return string(s.AppendHeader(make([]byte, 0, SigHeaderLen(s.Signer))))
}

// ErrMalformed reports a header, file or message this package cannot
// decode.
var ErrMalformed = errors.New("trust: malformed")

// ParseSignature decodes a header value written by AppendHeader. Exactly
// one text decodes to each signature (strict base64url, a well-formed
// participant id), so a decoded value encodes back to the same text. It
// does not allocate, except for its error.
func ParseSignature(v string) (Signature, error) {
	var s Signature
	i := strings.IndexByte(v, '.')
	if i < 0 || len(v)-i-1 != hashTextLen+1+sigTextLen || v[i+1+hashTextLen] != '.' {
		return s, fmt.Errorf("%w signature header %q: want <signer>.<43 characters>.<86 characters>", ErrMalformed, clip(v))
	}
	signer := v[:i]
	if _, _, err := ParseID(signer); err != nil {
		return s, fmt.Errorf("%w signature header: %w", ErrMalformed, err)
	}
	if _, err := decodeB64(s.Head[:], v[i+1:i+1+hashTextLen]); err != nil {
		return s, fmt.Errorf("%w signature header: head: %w", ErrMalformed, err)
	}
	if _, err := decodeB64(s.Sig[:], v[i+2+hashTextLen:]); err != nil {
		return s, fmt.Errorf("%w signature header: signature: %w", ErrMalformed, err)
	}
	s.Signer = signer
	return s, nil
}

// verifySig checks an Ed25519 signature; buf is scratch space for the
// signed message.
func verifySig(pub ed25519.PublicKey, buf []byte, run, subject string, seq uint64, s *Signature) ([]byte, bool) {
	buf = SignedMessage(buf[:0], run, subject, seq, s.Head)
	return buf, ed25519.Verify(pub, buf, s.Sig[:])
}

// SignHead signs head as the chain head after message seq of subject in
// run, with key, as participant signer. For tools and tests; a Publisher
// signs without allocating.
func SignHead(key *Key, signer, run, subject string, seq uint64, head Hash) Signature {
	return Signature{Signer: signer, Head: head, Sig: key.Sign(SignedMessage(nil, run, subject, seq, head))}
}

// VerifyHead checks a signature over head as the chain head after message
// seq of subject in run, against the roster: the signer must be the
// subject's owner. It returns nil, or an error wrapping ErrUnknownKey,
// ErrBadSignature or ErrWrongSigner.
func VerifyHead(r *Roster, subject string, seq uint64, s *Signature) error {
	owner := r.Owner(subject)
	if owner == nil {
		return fmt.Errorf("%w: %q", ErrUnknownSubject, clip(subject))
	}
	_, err := checkSignature(r, owner, nil, subject, seq, s)
	return err
}

// checkSignature verifies s as a signature of owner over (subject, seq,
// s.Head). If the signer is another participant whose key does verify it,
// the error wraps ErrWrongSigner. buf is scratch space.
func checkSignature(r *Roster, owner *Participant, buf []byte, subject string, seq uint64, s *Signature) ([]byte, error) {
	signer, ok := r.byID[s.Signer]
	if !ok {
		return buf, fmt.Errorf("%w: signed by %q, who is not in the roster", ErrUnknownKey, s.Signer)
	}
	buf, ok = verifySig(signer.pub, buf, r.Run, subject, seq, s)
	switch {
	case !ok && signer == owner:
		return buf, fmt.Errorf("%w: %s's signature on %s seq %d does not verify", ErrBadSignature, owner.ID, subject, seq)
	case !ok:
		return buf, fmt.Errorf("%w: signature on %s seq %d claims %s (the subject belongs to %s) and does not verify", ErrBadSignature, subject, seq, signer.ID, owner.ID)
	case signer != owner:
		return buf, fmt.Errorf("%w: %s seq %d is signed by %s; the subject belongs to %s", ErrWrongSigner, subject, seq, signer.ID, owner.ID)
	}
	return buf, nil
}
