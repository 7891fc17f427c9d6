package serve

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/asyrevel/asyrevel/trust"
)

// WireVersion is the version of the scoring messages.
const WireVersion = 1

// SigHeader carries a scoring message's signature: "SIGNER.BASE64SIG".
const SigHeader = "Asy-Score-Sig"

// Limits of a scoring message.
const (
	MaxIDs   = 1 << 16 // ids in one request
	MaxIDLen = 256     // bytes of one id
)

// Errors of scoring messages.
var (
	// ErrMessage: a malformed, unsigned, forged or replayed scoring
	// message; it is rejected and counted.
	ErrMessage = errors.New("serve: bad scoring message")
)

// RequestSubject is where the aggregator asks every party of run to score.
func RequestSubject(run string) string { return "asyrevel." + run + ".score" }

// AnswerSubject is where party m answers.
func AnswerSubject(run string, m int) string {
	return "asyrevel." + run + ".scored." + strconv.Itoa(m)
}

// AnswerFilter matches every party's answers.
func AnswerFilter(run string) string { return "asyrevel." + run + ".scored.*" }

// Request asks every party for its outputs on IDs. Req numbers the
// aggregator's requests, strictly increasing.
type Request struct {
	V   int      `msgpack:"v"`
	Req uint64   `msgpack:"req"`
	IDs []string `msgpack:"ids"`
}

// Answer is party Party's answer to request Req: its K outputs for each id
// of the request (C, float64 little-endian, id after id) or, if it lacks or
// refuses some ids, those (Unknown, Refused) and no outputs; Err says why a
// party could not score at all.
type Answer struct {
	V       int      `msgpack:"v"`
	Req     uint64   `msgpack:"req"`
	Party   int      `msgpack:"party"`
	K       int      `msgpack:"k"`
	C       []byte   `msgpack:"c"`
	Unknown []string `msgpack:"unknown,omitempty"`
	Refused []string `msgpack:"refused,omitempty"`
	Err     string   `msgpack:"err,omitempty"`
}

// Check validates a decoded request.
func (r *Request) Check() error {
	switch {
	case r.V != WireVersion:
		return fmt.Errorf("%w: version %d, want %d", ErrMessage, r.V, WireVersion)
	case r.Req == 0:
		return fmt.Errorf("%w: request number 0", ErrMessage)
	case len(r.IDs) == 0 || len(r.IDs) > MaxIDs:
		return fmt.Errorf("%w: %d ids (1..%d)", ErrMessage, len(r.IDs), MaxIDs)
	}
	for _, id := range r.IDs {
		if len(id) == 0 || len(id) > MaxIDLen {
			return fmt.Errorf("%w: an id of %d bytes (1..%d)", ErrMessage, len(id), MaxIDLen)
		}
	}
	return nil
}

// Outputs decodes the answer's outputs for n ids into dst (n*K values),
// checking that every one is finite.
func (a *Answer) Outputs(dst []float64, n, k int) error {
	if a.K != k || len(a.C) != 8*n*k {
		return fmt.Errorf("%w: party %d answered %d bytes of outputs (k %d) for %d ids (k %d)", ErrMessage, a.Party, len(a.C), a.K, n, k)
	}
	for i := range dst[:n*k] {
		v := math.Float64frombits(binary.LittleEndian.Uint64(a.C[8*i:]))
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("%w: party %d answered a non-finite output %v", ErrMessage, a.Party, v)
		}
		dst[i] = v
	}
	return nil
}

// appendFloats appends v as little-endian float64s.
func appendFloats(b []byte, v []float64) []byte {
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
	}
	return b
}

func marshal(v any) ([]byte, error) { return msgpack.Marshal(v) }

func unmarshal(b []byte, v any) error {
	if err := msgpack.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: %w", ErrMessage, err)
	}
	return nil
}

// signed is what a scoring message's signature covers.
func signed(run, subject string, payload []byte) []byte {
	b := make([]byte, 0, len(run)+len(subject)+len(payload)+24)
	b = append(b, "asyrevel-score\x00"...)
	b = append(b, run...)
	b = append(b, 0)
	b = append(b, subject...)
	b = append(b, 0)
	return append(b, payload...)
}

// sign is the SigHeader value of key's signature over a message.
func sign(key *trust.Key, run, subject string, payload []byte) string {
	s := key.Sign(signed(run, subject, payload))
	return key.PublicKey() + "." + base64.RawURLEncoding.EncodeToString(s[:])
}

// verifier checks the signatures of one sender: the roster's public key of
// the participant who owns the subject.
type verifier struct {
	signer string
	pub    ed25519.PublicKey
}

func newVerifier(r *trust.Roster, m int) (*verifier, error) {
	if r == nil {
		return nil, nil
	}
	id := trust.AggregatorID
	if m > 0 {
		id = trust.PartyID(m)
	}
	p, ok := r.Participant(id)
	if !ok {
		return nil, fmt.Errorf("%w: the roster has no %s", ErrMismatch, id)
	}
	pub, err := trust.ParsePublicKey(p.PublicKey)
	if err != nil {
		return nil, err
	}
	return &verifier{signer: p.PublicKey, pub: pub}, nil
}

// check verifies the header h of a message (nil verifier: no keys, no
// check).
func (v *verifier) check(h, run, subject string, payload []byte) error {
	if v == nil {
		return nil
	}
	signer, sig, ok := strings.Cut(h, ".")
	if !ok {
		return fmt.Errorf("%w: unsigned", ErrMessage)
	}
	if signer != v.signer {
		return fmt.Errorf("%w: signed by %s, not by the subject's owner", ErrMessage, signer)
	}
	raw, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || len(raw) != ed25519.SignatureSize || !ed25519.Verify(v.pub, signed(run, subject, payload), raw) {
		return fmt.Errorf("%w: the signature does not verify", ErrMessage)
	}
	return nil
}
