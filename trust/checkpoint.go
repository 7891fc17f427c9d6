package trust

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Entry is one subject's state in a checkpoint: its last sequence number
// and chain head as the checkpoint's signer saw them, and that message's
// stream sequence (0 if unknown).
type Entry struct {
	Subject   string `json:"subject"`
	Seq       uint64 `json:"seq"`
	Head      Hash   `json:"head"`
	StreamSeq uint64 `json:"stream_seq,omitempty"`
}

// Checkpoint is the aggregator's signed statement of the log's state: for
// every subject, how far its chain went and to which head. Parties check
// the entries they can, countersign it (Receipt) and keep it outside the
// broker; from then on, truncating, deleting or rewriting anything the
// checkpoint covers is provable.
type Checkpoint struct {
	Run       string
	Number    uint64 // 1, 2, ... within the run
	Final     bool   // the run's last checkpoint
	UnixNano  int64  // when the aggregator made it
	StreamSeq uint64 // the last stream sequence the aggregator had seen, 0 if unknown
	Entries   []Entry
	Signer    string   // participant id of the signer (the aggregator)
	Sig       [64]byte // Ed25519 over CheckpointSigned(Digest())
}

// Receipt is a checkpoint countersigned by a party: the party checked the
// entries of the subjects it published and received and keeps this copy.
// Its countersignature also seals the party's own subjects up to the
// checkpoint's entries.
type Receipt struct {
	Checkpoint Checkpoint
	Party      string   // participant id of the countersigner
	PartySig   [64]byte // Ed25519 over ReceiptSigned(Checkpoint.Digest(), Party)
}

// Limits of the decoders.
const (
	MaxEntries    = 5*1024 + 1 // every subject of a run with the most parties
	maxSubjectLen = 255
	maxFileSize   = 4 << 20
)

const (
	checkpointMagic  = "ASYCKPT\x01"
	receiptMagic     = "ASYRCPT\x01"
	checkpointDomain = "asyrevel/checkpoint/v1\x00"
	ckptSigDomain    = "asyrevel/checkpoint-sig/v1\x00"
	receiptDomain    = "asyrevel/receipt/v1\x00"
)

// NewCheckpoint makes an unsigned checkpoint; it sorts a copy of entries by
// subject and checks them (Validate).
func NewCheckpoint(run string, number uint64, final bool, at time.Time, streamSeq uint64, entries []Entry) (*Checkpoint, error) {
	c := &Checkpoint{Run: run, Number: number, Final: final, UnixNano: at.UnixNano(), StreamSeq: streamSeq,
		Entries: slices.Clone(entries), Signer: AggregatorID}
	slices.SortFunc(c.Entries, func(a, b Entry) int { return strings.Compare(a.Subject, b.Subject) })
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// Validate checks the checkpoint's form, without a roster: a valid run id
// and signer id, number >= 1, at most MaxEntries entries, strictly sorted
// by subject, each with a subject of 1..255 printable bytes and seq >= 1.
func (c *Checkpoint) Validate() error {
	if err := checkRunID(c.Run); err != nil {
		return err
	}
	if c.Number == 0 {
		return fmt.Errorf("%w checkpoint: number 0", ErrMalformed)
	}
	if _, _, err := ParseID(c.Signer); err != nil {
		return fmt.Errorf("%w checkpoint: signer: %w", ErrMalformed, err)
	}
	if len(c.Entries) > MaxEntries {
		return fmt.Errorf("%w checkpoint: %d entries, at most %d", ErrMalformed, len(c.Entries), MaxEntries)
	}
	for i, e := range c.Entries {
		if len(e.Subject) == 0 || len(e.Subject) > maxSubjectLen {
			return fmt.Errorf("%w checkpoint: entry %d: subject of %d bytes", ErrMalformed, i+1, len(e.Subject))
		}
		for j := 0; j < len(e.Subject); j++ {
			if b := e.Subject[j]; b <= ' ' || b >= 0x7f {
				return fmt.Errorf("%w checkpoint: entry %d: subject %q has a non-printable byte", ErrMalformed, i+1, clip(e.Subject))
			}
		}
		if e.Seq == 0 {
			return fmt.Errorf("%w checkpoint: entry %d (%s): seq 0", ErrMalformed, i+1, e.Subject)
		}
		if i > 0 && c.Entries[i-1].Subject >= e.Subject {
			return fmt.Errorf("%w checkpoint: entries not strictly sorted by subject at %d (%s)", ErrMalformed, i+1, e.Subject)
		}
	}
	return nil
}

func checkRunID(run string) error {
	if len(run) == 0 || len(run) > 64 {
		return fmt.Errorf("%w: run id of %d characters", ErrMalformed, len(run))
	}
	for i := 0; i < len(run); i++ {
		if r := run[i]; !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return fmt.Errorf("%w: run id %q", ErrMalformed, clip(run))
		}
	}
	return nil
}

// Entry returns the entry of subject, if the checkpoint has one.
func (c *Checkpoint) Entry(subject string) (Entry, bool) {
	i, ok := slices.BinarySearchFunc(c.Entries, subject, func(e Entry, s string) int { return strings.Compare(e.Subject, s) })
	if !ok {
		return Entry{}, false
	}
	return c.Entries[i], true
}

// appendBody appends the canonical encoding of everything but the
// signature (integers big-endian, strings with a u16 length):
//
//	"ASYCKPT" 0x01 || u8 flags (1 = final) || run || u64 number || i64 unix nano ||
//	u64 stream seq || signer || u32 n || n × (subject || u64 seq || head[32] || u64 stream seq)
func (c *Checkpoint) appendBody(b []byte) []byte {
	b = append(b, checkpointMagic...)
	var flags byte
	if c.Final {
		flags = 1
	}
	b = append(b, flags)
	b = appendString16(b, c.Run)
	b = binary.BigEndian.AppendUint64(b, c.Number)
	b = binary.BigEndian.AppendUint64(b, uint64(c.UnixNano))
	b = binary.BigEndian.AppendUint64(b, c.StreamSeq)
	b = appendString16(b, c.Signer)
	b = binary.BigEndian.AppendUint32(b, uint32(len(c.Entries)))
	for _, e := range c.Entries {
		b = appendString16(b, e.Subject)
		b = binary.BigEndian.AppendUint64(b, e.Seq)
		b = append(b, e.Head[:]...)
		b = binary.BigEndian.AppendUint64(b, e.StreamSeq)
	}
	return b
}

// Digest is SHA-256("asyrevel/checkpoint/v1" 0x00 || body): what the
// signer signs and parties countersign.
func (c *Checkpoint) Digest() Hash {
	h := sha256.New()
	h.Write([]byte(checkpointDomain))
	h.Write(c.appendBody(nil))
	var d Hash
	h.Sum(d[:0])
	return d
}

// CheckpointSigned is what a checkpoint's signature signs:
// "asyrevel/checkpoint-sig/v1" 0x00 || digest.
func CheckpointSigned(digest Hash) []byte {
	return append([]byte(ckptSigDomain), digest[:]...)
}

// ReceiptSigned is what a receipt's countersignature signs:
// "asyrevel/receipt/v1" 0x00 || checkpoint digest || u16(len party) || party.
func ReceiptSigned(digest Hash, party string) []byte {
	b := append([]byte(receiptDomain), digest[:]...)
	return appendString16(b, party)
}

// Sign signs the checkpoint with key as participant signer.
func (c *Checkpoint) Sign(key *Key, signer string) error {
	c.Signer = signer
	if err := c.Validate(); err != nil {
		return err
	}
	c.Sig = key.Sign(CheckpointSigned(c.Digest()))
	return nil
}

// Verify checks the checkpoint against the roster: its form, its run, a
// signature by the roster's aggregator, and subjects of the run.
func (c *Checkpoint) Verify(r *Roster) error {
	if err := c.Validate(); err != nil {
		return err
	}
	if c.Run != r.Run {
		return fmt.Errorf("%w: checkpoint %d is of run %q, not %q", ErrBadSignature, c.Number, c.Run, r.Run)
	}
	if c.Signer != AggregatorID {
		return fmt.Errorf("%w: checkpoint %d signed by %s; only the aggregator signs checkpoints", ErrWrongSigner, c.Number, c.Signer)
	}
	p, ok := r.Participant(c.Signer)
	if !ok {
		return fmt.Errorf("%w: checkpoint %d: %s", ErrUnknownKey, c.Number, c.Signer)
	}
	if !ed25519.Verify(p.pub, CheckpointSigned(c.Digest()), c.Sig[:]) {
		return fmt.Errorf("%w: checkpoint %d: the aggregator's signature does not verify", ErrBadSignature, c.Number)
	}
	for _, e := range c.Entries {
		if r.Owner(e.Subject) == nil {
			return fmt.Errorf("%w: checkpoint %d lists %q, not a subject of run %s", ErrUnknownSubject, c.Number, clip(e.Subject), r.Run)
		}
	}
	return nil
}

// AppendBinary appends the checkpoint's canonical encoding: the body
// (see Digest) followed by the 64-byte signature.
func (c *Checkpoint) AppendBinary(b []byte) ([]byte, error) {
	if err := c.Validate(); err != nil {
		return b, err
	}
	b = c.appendBody(b)
	return append(b, c.Sig[:]...), nil
}

// MarshalBinary is AppendBinary to a new slice.
func (c *Checkpoint) MarshalBinary() ([]byte, error) { return c.AppendBinary(nil) }

// UnmarshalCheckpoint decodes a checkpoint written by MarshalBinary. It
// accepts exactly the canonical encoding: a decoded checkpoint encodes
// back to the same bytes. It does not check the signature (Verify does).
func UnmarshalCheckpoint(data []byte) (*Checkpoint, error) {
	d := decoder{b: data}
	c := d.checkpoint()
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d bytes after the checkpoint", len(d.b))
	}
	if d.err != nil {
		return nil, fmt.Errorf("%w checkpoint: %w", ErrMalformed, d.err)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// Countersign makes party's receipt of checkpoint c with key. The caller
// checks the checkpoint first (Verify, CheckCheckpoint).
func Countersign(c *Checkpoint, key *Key, party string) *Receipt {
	cc := *c
	cc.Entries = slices.Clone(c.Entries)
	return &Receipt{Checkpoint: cc, Party: party, PartySig: key.Sign(ReceiptSigned(c.Digest(), party))}
}

// Verify checks the receipt against the roster: the checkpoint (Verify)
// and a countersignature by the named party.
func (rc *Receipt) Verify(r *Roster) error {
	if err := rc.Checkpoint.Verify(r); err != nil {
		return err
	}
	p, ok := r.Participant(rc.Party)
	if !ok {
		return fmt.Errorf("%w: receipt countersigned by %q, who is not in the roster", ErrUnknownKey, clip(rc.Party))
	}
	if p.Role != RoleParty {
		return fmt.Errorf("%w: receipt countersigned by %s; only parties countersign", ErrWrongSigner, p.ID)
	}
	if !ed25519.Verify(p.pub, ReceiptSigned(rc.Checkpoint.Digest(), rc.Party), rc.PartySig[:]) {
		return fmt.Errorf("%w: %s's countersignature on checkpoint %d does not verify", ErrBadSignature, rc.Party, rc.Checkpoint.Number)
	}
	return nil
}

// AppendBinary appends the receipt's canonical encoding:
//
//	"ASYRCPT" 0x01 || party (u16 length) || u32 length || checkpoint (MarshalBinary) || countersignature[64]
func (rc *Receipt) AppendBinary(b []byte) ([]byte, error) {
	if _, _, err := ParseID(rc.Party); err != nil {
		return b, fmt.Errorf("%w receipt: party: %w", ErrMalformed, err)
	}
	b = append(b, receiptMagic...)
	b = appendString16(b, rc.Party)
	at := len(b)
	b = append(b, 0, 0, 0, 0)
	b, err := rc.Checkpoint.AppendBinary(b)
	if err != nil {
		return b[:at], err
	}
	binary.BigEndian.PutUint32(b[at:], uint32(len(b)-at-4))
	return append(b, rc.PartySig[:]...), nil
}

// MarshalBinary is AppendBinary to a new slice.
func (rc *Receipt) MarshalBinary() ([]byte, error) { return rc.AppendBinary(nil) }

// UnmarshalReceipt decodes a receipt written by MarshalBinary; like
// UnmarshalCheckpoint it accepts only the canonical encoding and does not
// check signatures.
func UnmarshalReceipt(data []byte) (*Receipt, error) {
	d := decoder{b: data}
	d.magic(receiptMagic)
	party := d.str()
	n := d.u32()
	body := d.take(int(n))
	var rc Receipt
	copy(rc.PartySig[:], d.take(64))
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d bytes after the receipt", len(d.b))
	}
	if d.err != nil {
		return nil, fmt.Errorf("%w receipt: %w", ErrMalformed, d.err)
	}
	if _, _, err := ParseID(party); err != nil {
		return nil, fmt.Errorf("%w receipt: party: %w", ErrMalformed, err)
	}
	c, err := UnmarshalCheckpoint(body)
	if err != nil {
		return nil, fmt.Errorf("receipt: %w", err)
	}
	rc.Checkpoint, rc.Party = *c, party
	return &rc, nil
}

// decoder reads the canonical binary encodings, bounds-checked; after the
// first error every read returns zero values.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf(format, args...)
	}
}

func (d *decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.b) {
		d.fail("truncated: want %d bytes, %d left", n, len(d.b))
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) magic(m string) {
	if v := d.take(len(m)); d.err == nil && string(v) != m {
		d.fail("bad magic %q, want %q", v, m)
	}
}

func (d *decoder) u8() byte {
	if v := d.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if v := d.take(4); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if v := d.take(8); v != nil {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

func (d *decoder) str() string {
	var n uint16
	if v := d.take(2); v != nil {
		n = binary.BigEndian.Uint16(v)
	}
	return string(d.take(int(n)))
}

func (d *decoder) checkpoint() *Checkpoint {
	c := &Checkpoint{}
	d.magic(checkpointMagic)
	switch f := d.u8(); f {
	case 0:
	case 1:
		c.Final = true
	default:
		d.fail("bad flags %#x", f)
	}
	c.Run = d.str()
	c.Number = d.u64()
	c.UnixNano = int64(d.u64())
	c.StreamSeq = d.u64()
	c.Signer = d.str()
	n := d.u32()
	if d.err == nil && n > MaxEntries {
		d.fail("%d entries, at most %d", n, MaxEntries)
	}
	// Each entry takes at least 2+1+8+32+8 bytes: do not trust n further.
	if d.err == nil && uint64(n)*51 > uint64(len(d.b)) {
		d.fail("truncated: %d entries in %d bytes", n, len(d.b))
	}
	if d.err != nil {
		return c
	}
	c.Entries = make([]Entry, n)
	for i := range c.Entries {
		e := &c.Entries[i]
		e.Subject = d.str()
		e.Seq = d.u64()
		copy(e.Head[:], d.take(32))
		e.StreamSeq = d.u64()
	}
	copy(c.Sig[:], d.take(64))
	return c
}

// receiptFile is a receipt's JSON file form.
type receiptFile struct {
	Version        int     `json:"version"`
	Run            string  `json:"run"`
	Checkpoint     uint64  `json:"checkpoint"`
	Final          bool    `json:"final"`
	UnixNano       int64   `json:"unix_nano"`
	StreamSeq      uint64  `json:"stream_seq"`
	Signer         string  `json:"signer"`
	Signature      string  `json:"signature"`
	Party          string  `json:"party"`
	PartySignature string  `json:"party_signature"`
	Entries        []Entry `json:"entries"`
}

// ReceiptVersion is the version of the receipt file format.
const ReceiptVersion = 1

// MarshalJSON is the receipt's file form: one JSON object with the
// checkpoint's fields, its entries, the two signatures (base64url) and
// the party.
func (rc *Receipt) MarshalJSON() ([]byte, error) {
	c := &rc.Checkpoint
	if err := c.Validate(); err != nil {
		return nil, err
	}
	f := receiptFile{
		Version: ReceiptVersion, Run: c.Run, Checkpoint: c.Number, Final: c.Final, UnixNano: c.UnixNano,
		StreamSeq: c.StreamSeq, Signer: c.Signer, Signature: b64.EncodeToString(c.Sig[:]),
		Party: rc.Party, PartySignature: b64.EncodeToString(rc.PartySig[:]), Entries: c.Entries,
	}
	if f.Entries == nil {
		f.Entries = []Entry{}
	}
	return json.MarshalIndent(f, "", "  ")
}

// UnmarshalJSON reads the file form MarshalJSON writes. Unknown fields
// are refused; the checkpoint must pass Validate.
func (rc *Receipt) UnmarshalJSON(data []byte) error {
	got, err := ParseReceiptJSON(data)
	if err != nil {
		return err
	}
	*rc = *got
	return nil
}

// ParseReceiptJSON reads a receipt file's content.
func ParseReceiptJSON(data []byte) (*Receipt, error) {
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("%w receipt: %d bytes, at most %d", ErrMalformed, len(data), maxFileSize)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f receiptFile
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%w receipt: %w", ErrMalformed, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w receipt: data after the JSON object", ErrMalformed)
	}
	if f.Version != ReceiptVersion {
		return nil, fmt.Errorf("%w receipt: version %d, want %d", ErrMalformed, f.Version, ReceiptVersion)
	}
	rc := &Receipt{Party: f.Party, Checkpoint: Checkpoint{Run: f.Run, Number: f.Checkpoint, Final: f.Final,
		UnixNano: f.UnixNano, StreamSeq: f.StreamSeq, Signer: f.Signer, Entries: f.Entries}}
	if len(f.Signature) != sigTextLen {
		return nil, fmt.Errorf("%w receipt: signature of %d characters, want %d", ErrMalformed, len(f.Signature), sigTextLen)
	}
	if _, err := decodeB64(rc.Checkpoint.Sig[:], f.Signature); err != nil {
		return nil, fmt.Errorf("%w receipt: signature: %w", ErrMalformed, err)
	}
	if len(f.PartySignature) != sigTextLen {
		return nil, fmt.Errorf("%w receipt: party_signature of %d characters, want %d", ErrMalformed, len(f.PartySignature), sigTextLen)
	}
	if _, err := decodeB64(rc.PartySig[:], f.PartySignature); err != nil {
		return nil, fmt.Errorf("%w receipt: party_signature: %w", ErrMalformed, err)
	}
	if _, _, err := ParseID(rc.Party); err != nil {
		return nil, fmt.Errorf("%w receipt: party: %w", ErrMalformed, err)
	}
	if err := rc.Checkpoint.Validate(); err != nil {
		return nil, fmt.Errorf("receipt: %w", err)
	}
	return rc, nil
}

// ReceiptFileName is the name of the file WriteReceipt writes for party's
// receipt of checkpoint number n of run: RUN.party-M.checkpoint-000012.json.
// The run's id and the party are in the name, so one folder can keep the
// receipts of several runs (a second run into the same output folder)
// and of several parties (a --receipts folder they share).
func ReceiptFileName(run, party string, n uint64) string {
	return fmt.Sprintf("%s.%s.checkpoint-%06d.json", run, party, n)
}

// WriteReceipt writes rc into dir (made if missing) as
// ReceiptFileName(number) and returns the path. A file already there is
// replaced only by the same receipt; another receipt under the same number
// is refused (it would destroy evidence).
func WriteReceipt(dir string, rc *Receipt) (string, error) {
	data, err := rc.MarshalJSON()
	if err != nil {
		return "", err
	}
	data = append(data, '\n')
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("trust: receipts: %w", err)
	}
	path := filepath.Join(dir, ReceiptFileName(rc.Checkpoint.Run, rc.Party, rc.Checkpoint.Number))
	if old, err := os.ReadFile(path); err == nil {
		if bytes.Equal(old, data) {
			return path, nil
		}
		return "", fmt.Errorf("%w: %s holds another receipt for checkpoint %d; keeping it", ErrExists, path, rc.Checkpoint.Number)
	}
	if err := writeFile(path, data, 0o644, false); err != nil {
		return "", err
	}
	return path, nil
}

// ReadReceipts reads every *.json receipt file in dir, ordered by
// checkpoint number. It fails on the first file it cannot decode, naming
// it; it does not check signatures (Receipt.Verify, Auditor.AddReceipt do).
func ReadReceipts(dir string) ([]*Receipt, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, fmt.Errorf("trust: receipts: %w", err)
	}
	if names == nil {
		if _, err := os.Stat(dir); err != nil {
			return nil, fmt.Errorf("trust: receipts: %w", err)
		}
	}
	var out []*Receipt
	for _, name := range names {
		data, err := readLimited(name, maxFileSize)
		if err != nil {
			return nil, fmt.Errorf("trust: receipts: %w", err)
		}
		rc, err := ParseReceiptJSON(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out = append(out, rc)
	}
	slices.SortStableFunc(out, func(a, b *Receipt) int {
		if c := cmpUint(a.Checkpoint.Number, b.Checkpoint.Number); c != 0 {
			return c
		}
		return strings.Compare(a.Party, b.Party)
	})
	return out, nil
}

func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrMalformed, path, limit)
	}
	return data, nil
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// HeadSource is what a participant remembers of the chains it published or
// received: an Outbox or a Verifier.
type HeadSource interface {
	// HeadAt is the head after message seq of subject, if remembered.
	HeadAt(subject string, seq uint64) (Hash, bool)
	// LastSeq is the last sequence number published or accepted on subject.
	LastSeq(subject string) uint64
}

// View is a set of subjects whose checkpoint entries a participant checks
// against one of its HeadSources.
type View struct {
	Source   HeadSource
	Subjects []string
	// Own marks subjects the participant publishes: an entry beyond its
	// last sequence number is then a false claim, not one it has yet to see.
	Own bool
}

// CheckResult is the outcome of CheckCheckpoint.
type CheckResult struct {
	Matched int
	// Mismatched entries: another head than the participant's, or (own
	// subjects) a sequence number it never published.
	Mismatched []EntryMismatch
	// Pending entries of received subjects that the participant has not
	// received that far yet; check again later.
	Pending []Entry
	// Unchecked entries too old for the participant's history.
	Unchecked []Entry
}

// EntryMismatch is one checkpoint entry that disagrees with a participant.
type EntryMismatch struct {
	Entry  Entry
	Reason string
}

// OK reports whether nothing mismatched.
func (r *CheckResult) OK() bool { return len(r.Mismatched) == 0 }

// CheckCheckpoint compares a checkpoint's entries with what a participant
// published and received. A party countersigns only when the result is OK
// and nothing is Pending.
func CheckCheckpoint(c *Checkpoint, views ...View) CheckResult {
	var res CheckResult
	for _, v := range views {
		for _, s := range v.Subjects {
			e, ok := c.Entry(s)
			last := v.Source.LastSeq(s)
			if !ok {
				continue // the signer has seen nothing of s yet
			}
			if e.Seq > last {
				if v.Own {
					res.Mismatched = append(res.Mismatched, EntryMismatch{e, fmt.Sprintf("claims seq %d on %s, published only up to %d", e.Seq, s, last)})
				} else {
					res.Pending = append(res.Pending, e)
				}
				continue
			}
			h, ok := v.Source.HeadAt(s, e.Seq)
			switch {
			case !ok:
				res.Unchecked = append(res.Unchecked, e)
			case h != e.Head:
				res.Mismatched = append(res.Mismatched, EntryMismatch{e, fmt.Sprintf("head at %s seq %d differs", s, e.Seq)})
			default:
				res.Matched++
			}
		}
	}
	return res
}

// LastSeq is the last sequence number appended on subject (0 if none).
func (o *Outbox) LastSeq(subject string) uint64 {
	o.mu.Lock()
	p := o.pubs[subject]
	o.mu.Unlock()
	if p == nil {
		return 0
	}
	return p.Seq()
}

// LastSeq is the last sequence number accepted on subject (0 if none).
func (v *Verifier) LastSeq(subject string) uint64 {
	seq, _, _ := v.Head(subject)
	return seq
}
