package trust

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
)

// Resuming and restarting. A participant that stops and starts again
// (asyrevel --resume, a refused party that joins again) must go on with
// its chains, or its receivers reject what it sends next as replays, and
// it must go on receiving where it stopped, or it accepts nothing (gaps)
// or, worse, something it had accepted already.
//
//   - A resumed participant restores its own chains (Outbox.Restore, from
//     Outbox.Entries) and its receiving state (Verifier.Restore, from
//     Verifier.State) from its saved state, which it keeps sealed with its
//     own key (SealState, OpenState): a state file that was altered, or
//     written by someone else, does not open. The run's stream, which
//     holds every message with its headers, is then read from there.
//   - A participant that lost its chains (a refused party's new process,
//     with the same key and no saved state) restarts them (Publisher.
//     Restart): its next message on each subject has the next sequence
//     number, is signed, and its previous-head header (PrevHeader) is
//     RestartHead, a value bound to the run, the subject and that
//     sequence number that no chain can reach. Receivers (Verifier) and
//     auditors (Auditor) accept such a message as a restart of the
//     owner's chain: only the owner's signature makes one, and its
//     sequence number must be beyond the last accepted, so nothing
//     accepted before is replaced and no earlier message can be replayed.
//     Unsigned messages before a restart stay unproven (the auditor
//     reports them as an unsealed tail).

// tagRestart starts the hash of a RestartHead.
const tagRestart = 0x02

// RestartHead is the previous head a restarted chain declares for its
// first message, whose sequence number is seq+1:
//
//	SHA-256(0x02 || "asyrevel/chain/v1" || u16(len run) || run || u16(len subject) || subject || u64(seq))
//
// No message's head can equal it (the domain tag differs from a link's),
// so a receiver tells a restart from a continued chain.
func RestartHead(run, subject string, seq uint64) Hash {
	b := make([]byte, 0, 1+len(chainDomain)+4+len(run)+len(subject)+8)
	b = append(b, tagRestart)
	b = append(b, chainDomain...)
	b = appendString16(b, run)
	b = appendString16(b, subject)
	b = binary.BigEndian.AppendUint64(b, seq)
	return sha256.Sum256(b)
}

// Restart starts the publisher's chain anew after sequence number seq
// (the highest any receiver may have accepted on the subject: the number
// of the subject's messages in the stream), for a sender that lost its
// chain's state. The next message gets seq+1, is signed, and declares
// RestartHead(run, subject, seq) as the head before it.
func (p *Publisher) Restart(seq uint64) {
	p.Resume(seq, RestartHead(p.o.roster.Run, p.subject, seq))
}

// isRestart reports whether prev, the previous-head header of message seq
// of subject, declares a restarted chain.
func isRestart(run, subject string, seq uint64, prev Hash) bool {
	return seq > 0 && prev == RestartHead(run, subject, seq-1)
}

// Restore puts the outbox's publishers at the saved entries (Entries): a
// resumed sender continues its chains. Each subject's next message is
// signed. It fails for a subject the participant does not own.
func (o *Outbox) Restore(entries []Entry) error {
	for _, e := range entries {
		p, err := o.Publisher(e.Subject)
		if err != nil {
			return err
		}
		p.Resume(e.Seq, e.Head)
	}
	return nil
}

// ChainState is what a receiver knows of one subject: its last accepted
// sequence number and head, that message's stream sequence, and how many
// accepted messages before it no signature covers yet.
type ChainState struct {
	Entry
	Unsigned int `json:"unsigned,omitempty"`
}

// State lists the receiving state of every subject with an accepted
// message, sorted by subject, for a saved state (Restore).
func (v *Verifier) State() []ChainState {
	es := v.Entries()
	out := make([]ChainState, len(es))
	for i, e := range es {
		out[i] = ChainState{Entry: e, Unsigned: v.UnsignedOn(e.Subject)}
	}
	return out
}

// Restore puts the verifier's subjects at the saved states (State), before
// any message is verified: the chains go on from there, and every message
// at or below a state's sequence number is a replay. It fails for a
// subject the verifier does not accept or a state that cannot be.
func (v *Verifier) Restore(states []ChainState) error {
	for _, s := range states {
		st := v.subjects[s.Subject]
		if st == nil {
			return fmt.Errorf("%w: %q in a saved state", ErrUnknownSubject, clip(s.Subject))
		}
		if s.Seq == 0 || s.Unsigned < 0 || s.Unsigned >= v.every {
			return fmt.Errorf("%w: saved state of %s: seq %d with %d unsigned", ErrMalformed, s.Subject, s.Seq, s.Unsigned)
		}
		st.mu.Lock()
		st.accept(s.Seq, s.Head, s.StreamSeq)
		st.unsigned = s.Unsigned
		st.mu.Unlock()
	}
	return nil
}

// Restarts is the number of restarted chains the verifier accepted.
func (v *Verifier) Restarts() uint64 { return v.restarts.Load() }

// ErrState reports a saved state that does not open: altered, truncated,
// sealed by another key or for another run or participant.
var ErrState = errors.New("trust: saved state does not verify")

const (
	stateMagic  = "ASYSTAT\x02"
	stateDomain = "asyrevel/state/v2\x00"
	// A seal of format 1 signs all it covers, not its digest.
	stateMagic1  = "ASYSTAT\x01"
	stateDomain1 = "asyrevel/state/v1\x00"
)

// SealState wraps data, a participant's saved state (a checkpoint file),
// with its owner's signature, bound to the run and the owner's id:
//
//	"ASYSTAT" 0x02 || run || owner || data || signature[64]
//
// (strings with a u16 length). The signature is Ed25519 over
// "asyrevel/state/v2" 0x00 followed by the SHA-256 of everything before
// it. Format 1 (0x01, "asyrevel/state/v1") signed everything before it
// itself: Ed25519 hashes what it signs twice with SHA-512, and with the
// two copies that took, sealing a9a's aggregator checkpoint (1.6 MB) cost
// 9 ms, more than its encoding, and the adaptive checkpoint period is 50
// times a save's cost (issue 35). OpenState opens both.
func SealState(key *Key, run, owner string, data []byte) []byte {
	b := make([]byte, 0, len(stateMagic)+4+len(run)+len(owner)+len(data)+64)
	b = append(b, stateMagic...)
	b = appendString16(b, run)
	b = appendString16(b, owner)
	b = append(b, data...)
	sig := key.Sign(stateSigned(b))
	return append(b, sig[:]...)
}

// stateSigned is what a seal of format 2 signs for body.
func stateSigned(body []byte) []byte {
	sum := sha256.Sum256(body)
	return append([]byte(stateDomain), sum[:]...)
}

// IsSealedState reports whether file starts like a SealState output (of
// either format).
func IsSealedState(file []byte) bool {
	return bytes.HasPrefix(file, []byte(stateMagic)) || bytes.HasPrefix(file, []byte(stateMagic1))
}

// OpenState checks a file SealState wrote with key for run and owner and
// returns its data; any other file fails with ErrState.
func OpenState(key *Key, run, owner string, file []byte) ([]byte, error) {
	if !IsSealedState(file) {
		return nil, fmt.Errorf("%w: not a sealed state (no signature: written without the trust layer?)", ErrState)
	}
	v1 := bytes.HasPrefix(file, []byte(stateMagic1))
	d := &decoder{b: file[len(stateMagic):]} // both magics are as long
	gotRun, gotOwner := d.str(), d.str()
	if d.err != nil || len(d.b) < 64 {
		return nil, fmt.Errorf("%w: truncated", ErrState)
	}
	if gotRun != run || gotOwner != owner {
		return nil, fmt.Errorf("%w: sealed for %s of run %s, not %s of run %s", ErrState, clip(gotOwner), clip(gotRun), owner, run)
	}
	n := len(file) - 64
	pub := key.priv.Public().(ed25519.PublicKey)
	signed := stateSigned(file[:n])
	if v1 {
		signed = append([]byte(stateDomain1), file[:n]...)
	}
	if !ed25519.Verify(pub, signed, file[n:]) {
		return nil, fmt.Errorf("%w: %s's signature does not verify: the file was altered or sealed with another key", ErrState, owner)
	}
	return file[len(file)-len(d.b) : n], nil
}
