package trust

import (
	"errors"
	"fmt"
	"io"
	"iter"
	"maps"
	"slices"
	"strings"
)

// ProblemKind names what is wrong with a log.
type ProblemKind string

// Problem kinds.
const (
	// A signature that does not verify (or a malformed signature header).
	ProblemBadSignature ProblemKind = "bad_signature"
	// A valid signature by a participant that does not own the subject: a
	// message re-signed with another participant's key.
	ProblemWrongSigner ProblemKind = "wrong_signer"
	// A signature naming a signer not in the roster.
	ProblemUnknownKey ProblemKind = "unknown_key"
	// The owner signed another head than the stored messages give: a
	// message since the previous signature was altered, removed or added.
	ProblemBrokenChain ProblemKind = "broken_chain"
	// Sequence numbers missing on a subject: messages deleted or lost.
	ProblemGap ProblemKind = "gap"
	// A message stored after a later one of its subject.
	ProblemReorder ProblemKind = "reorder"
	// A sequence number stored again with other content (or too long
	// after to compare).
	ProblemReplay ProblemKind = "replay"
	// A byte-identical second copy of a message.
	ProblemDuplicate ProblemKind = "duplicate"
	// A message that should have carried a signature and did not.
	ProblemUnsigned ProblemKind = "unsigned"
	// Messages at the end of a subject that no signature or receipt
	// covers: the tail may have been cut after them.
	ProblemUnsealedTail ProblemKind = "unsealed_tail"
	// A message on a subject that is not the run's.
	ProblemUnknownSubject ProblemKind = "unknown_subject"
	// A message whose own sequence number could not be read (Msg.Seq 0).
	ProblemUndecodable ProblemKind = "undecodable"
	// Stream sequences missing: stored messages were removed.
	ProblemStreamGap ProblemKind = "stream_gap"
	// A receipt or checkpoint covers more than the log holds.
	ProblemTruncated ProblemKind = "truncated"
	// The log disagrees with a receipt or checkpoint at a message it
	// covers.
	ProblemRewritten ProblemKind = "rewritten"
	// A receipt or checkpoint whose signatures do not verify.
	ProblemBadReceipt ProblemKind = "bad_receipt"
	// Not a problem: a note that a sender's last messages are vouched for
	// by the aggregator's signed checkpoint, not by its own signature (a
	// party that left for good). AuditReport.Notes.
	ProblemDeparted ProblemKind = "departed"
	// A message stored before the message it answers (Msg.Cites), or
	// answering one the log does not hold: an effect before its cause.
	ProblemCausal ProblemKind = "causal_order"
	// Records of the store's own files that fail the store's checksum
	// (broker.CheckStore): the reader left them out, so what they held
	// shows as holes too.
	ProblemStoreDamage ProblemKind = "store_damage"
)

// Foreign is the Reason under which AuditReport.Rejected counts messages
// on subjects that are not the run's: nobody in the roster may publish
// there, so whoever made them (a server answering a participant's request
// whose reply subject lies in the stream, say), they are not the run's
// words. They are listed apart and do not count against the verdict;
// what they could hide (a missing genuine message) still shows.
const Foreign = "foreign_subject"

// Problem is one thing wrong with a log.
type Problem struct {
	StreamSeq uint64      `json:"stream_seq,omitempty"` // where in the stream; 0 for the end or a receipt
	Subject   string      `json:"subject,omitempty"`
	Seq       uint64      `json:"seq,omitempty"`
	Kind      ProblemKind `json:"kind"`
	Detail    string      `json:"detail"`
}

func (p Problem) String() string {
	var b strings.Builder
	if p.StreamSeq > 0 {
		fmt.Fprintf(&b, "stream seq %d: ", p.StreamSeq)
	}
	if p.Subject != "" {
		fmt.Fprintf(&b, "%s", p.Subject)
		if p.Seq > 0 {
			fmt.Fprintf(&b, " seq %d", p.Seq)
		}
		b.WriteString(": ")
	}
	fmt.Fprintf(&b, "%s: %s", p.Kind, p.Detail)
	return b.String()
}

// AuditOptions configures an Auditor.
type AuditOptions struct {
	// Every is the senders' Policy.Every; 0 means DefaultEvery.
	Every int
	// ReorderWindow is how many later messages of a subject the auditor
	// holds while it waits for a missing one before it declares a gap;
	// 0 means 64.
	ReorderWindow int
	// MaxProblems bounds the problems kept in the report (all are
	// counted); 0 means 10,000.
	MaxProblems int
	// TolerateDuplicates keeps byte-identical copies of a message (a
	// publisher's retry without a dedupe id) from failing the verdict;
	// they are still reported.
	TolerateDuplicates bool
	// AsReceiver judges each message first as its receiver did (a
	// Verifier in stream order): a message the receiver rejects without
	// changing its state (a replay, a byte-identical copy, a forged or
	// misattributed signature, an unsigned message that skips sequence
	// numbers, an undecodable one) was never part of the accepted
	// traffic. It is counted in AuditReport.Rejected, listed, and kept out
	// of the chains, so a rogue's refused messages do not make the log
	// fail; what they would hide (a missing genuine message) still shows
	// as a gap.
	AsReceiver bool
	// AnchorReceipts requires the log to hold the checkpoint that each
	// receipt added with AddReceipt countersigns, and that receipt's own
	// message; the caller adds what the log holds with AddLogCheckpoint
	// and AddLogReceipt. So a log cut after its last seal, with the seal
	// and the receipts, is NOT intact against the receipts the parties
	// kept.
	AnchorReceipts bool
}

// SenderStats counts the messages of one sender and kind.
type SenderStats struct {
	Sender   string `json:"sender"`
	Kind     string `json:"kind"`
	Messages uint64 `json:"messages"`
	Bytes    uint64 `json:"bytes"`
	Signed   uint64 `json:"signed"`
}

// AuditReport is the outcome of an audit.
type AuditReport struct {
	Run      string            `json:"run"`
	Messages uint64            `json:"messages"`
	FirstSeq uint64            `json:"first_stream_seq"`
	LastSeq  uint64            `json:"last_stream_seq"`
	Senders  []SenderStats     `json:"senders"`
	Receipts int               `json:"receipts_verified"`
	Problems []Problem         `json:"problems"`
	Counts   map[string]uint64 `json:"problem_counts"`
	Dropped  uint64            `json:"problems_not_listed,omitempty"`
	// Rejected counts, by reason (Reason), the messages their receiver
	// rejected (AuditOptions.AsReceiver); RejectedList shows the first
	// of them. They do not count against the verdict.
	Rejected     map[string]uint64 `json:"rejected_by_receiver,omitempty"`
	RejectedList []Problem         `json:"rejected,omitempty"`
	// Restarts counts chains their owner restarted (Publisher.Restart): a
	// party that joined again as a new process, say.
	Restarts uint64 `json:"restarts,omitempty"`
	// Notes are findings that do not count against the verdict: a
	// departed sender's tail vouched for by the aggregator's checkpoint.
	Notes []Problem `json:"notes,omitempty"`
	// Foreign counts the messages on subjects that are not the run's
	// (also in Rejected under Foreign).
	Foreign   uint64 `json:"foreign,omitempty"`
	IntactLog bool   `json:"intact"`
}

// Intact reports whether the log is complete and unaltered as far as the
// signatures and receipts given can tell.
func (r *AuditReport) Intact() bool { return r.IntactLog }

// WriteText prints the report for people.
func (r *AuditReport) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "run %s: %d messages (stream seq %d..%d), %d receipts verified\n", r.Run, r.Messages, r.FirstSeq, r.LastSeq, r.Receipts)
	fmt.Fprintf(&b, "%-12s %-6s %10s %12s %8s\n", "sender", "kind", "messages", "bytes", "signed")
	for _, s := range r.Senders {
		fmt.Fprintf(&b, "%-12s %-6s %10d %12d %8d\n", s.Sender, s.Kind, s.Messages, s.Bytes, s.Signed)
	}
	if r.Restarts > 0 {
		fmt.Fprintf(&b, "chains restarted by their owner (signed): %d\n", r.Restarts)
	}
	writeCounts(&b, "problems:", r.Counts)
	for _, p := range r.Problems {
		fmt.Fprintf(&b, "  %s\n", p)
	}
	if len(r.Rejected) > 0 {
		writeCounts(&b, "rejected by their receiver (not part of the accepted traffic):", r.Rejected)
		for _, p := range r.RejectedList {
			fmt.Fprintf(&b, "  %s\n", p)
		}
	}
	if r.Dropped > 0 {
		fmt.Fprintf(&b, "  ... and %d more\n", r.Dropped)
	}
	if len(r.Notes) > 0 {
		b.WriteString("notes (not against the verdict):\n")
		for _, p := range r.Notes {
			fmt.Fprintf(&b, "  %s\n", p)
		}
	}
	if r.IntactLog {
		b.WriteString("verdict: intact\n")
	} else {
		b.WriteString("verdict: NOT intact\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Auditor checks a run's whole log, message by message in stream order,
// against the roster's keys and, optionally, receipts and checkpoints; it
// does not care how the log is read. Give it the receipts and checkpoints
// first (AddReceipt, AddCheckpoint), then every stored message (Add), then
// call Finish. Not safe for concurrent use.
type Auditor struct {
	roster *Roster
	opts   AuditOptions

	subjects map[string]*auditState
	started  bool

	lastStream  uint64
	firstStream uint64
	messages    uint64
	claimStream uint64 // highest stream seq a verified receipt or checkpoint claims
	claimSrc    string
	receipts    int
	stats       map[[2]string]*SenderStats

	problems []Problem
	counts   map[string]uint64
	dropped  uint64
	fatal    bool
	trials   int // signatures tried against every key
	buf      []byte

	restarts     uint64
	foreign      uint64
	notes        []Problem
	cited        map[string]struct{} // IDs of messages not yet answered
	awaited      map[string]awaited  // cited IDs not yet stored, by ID
	anchors      []anchor            // receipts from outside the log
	inLog        map[anchorKey]bool  // checkpoints (party "") and receipts the log holds
	recv         *Verifier           // AuditOptions.AsReceiver
	rejected     map[string]uint64
	rejectedList []Problem
}

// expect is what a receipt or checkpoint says of one message.
type expect struct {
	seq       uint64
	head      Hash
	streamSeq uint64
	seals     bool // signed by the subject's owner: covers the chain up to seq
	source    string
}

// held is a message waiting for a missing earlier one.
type held struct {
	streamSeq uint64
	seq       uint64
	payload   []byte
	sig       string
	prev      string
}

type auditState struct {
	subject  string
	owner    *Participant
	kind     string
	mustSign bool

	chain      Chain
	anchored   bool   // chain head known (false after a declared gap until a signature)
	unsigned   int    // messages since the last coverage
	firstOpen  uint64 // stream seq of the first of them
	firstSeq   uint64 // seq of the first of them
	lastStream uint64
	hist       ring
	missing    [][2]uint64 // declared gaps, for late arrivals
	pending    []held
	expects    []expect // sorted by seq
	next       int      // expects[next:] are still ahead
	// vouchSeq is the last message whose head a checkpoint signed by
	// someone else than the owner (the aggregator's) confirms, and
	// vouchSrc that checkpoint: what the aggregator received from a party
	// that left without sealing its last messages.
	vouchSeq uint64
	vouchSrc string
}

// NewAuditor makes an auditor for the roster's run.
func NewAuditor(r *Roster, opts AuditOptions) (*Auditor, error) {
	if opts.Every < 0 || opts.ReorderWindow < 0 || opts.MaxProblems < 0 {
		return nil, errors.New("trust: audit options must not be negative")
	}
	if opts.Every == 0 {
		opts.Every = DefaultEvery
	}
	if opts.ReorderWindow == 0 {
		opts.ReorderWindow = 64
	}
	if opts.MaxProblems == 0 {
		opts.MaxProblems = 10000
	}
	a := &Auditor{roster: r, opts: opts, subjects: make(map[string]*auditState),
		stats: make(map[[2]string]*SenderStats), counts: make(map[string]uint64)}
	for _, s := range r.AllSubjects() {
		st := &auditState{subject: s, owner: r.Owner(s), kind: r.SubjectKind(s), mustSign: r.EverySigned(s),
			anchored: true, hist: newRing(256)}
		st.chain.Reset(0, GenesisHead(r.Run, s))
		a.subjects[s] = st
	}
	if opts.AsReceiver {
		var err error
		if a.recv, err = NewVerifier(r, VerifierOptions{Every: opts.Every, History: -1}); err != nil {
			return nil, err
		}
		a.rejected = make(map[string]uint64)
	}
	return a, nil
}

func (a *Auditor) report(p Problem) {
	a.counts[string(p.Kind)]++
	if !(p.Kind == ProblemDuplicate && a.opts.TolerateDuplicates) {
		a.fatal = true
	}
	if len(a.problems) < a.opts.MaxProblems {
		a.problems = append(a.problems, p)
	} else {
		a.dropped++
	}
}

// AddStoreDamage reports damage found in the store's files before the
// log was read (detail names the file, offset and reason); it counts
// against the verdict.
func (a *Auditor) AddStoreDamage(detail string) {
	a.report(Problem{Kind: ProblemStoreDamage, Detail: detail})
}

// errStarted is returned when evidence is added after the first message.
var errStarted = errors.New("trust: add receipts and checkpoints before the first message")

// AddReceipt verifies a receipt and registers what it covers. source
// names it in problems (e.g. its file). A receipt that does not verify is
// reported (ProblemBadReceipt) and returned as an error; it proves nothing.
func (a *Auditor) AddReceipt(rc *Receipt, source string) error {
	if err := a.addReceipt(rc, source); err != nil {
		return err
	}
	a.anchors = append(a.anchors, anchor{digest: rc.Checkpoint.Digest(), party: rc.Party, number: rc.Checkpoint.Number, source: source})
	return nil
}

// addReceipt verifies rc and registers what it covers.
func (a *Auditor) addReceipt(rc *Receipt, source string) error {
	if a.started {
		return errStarted
	}
	if err := rc.Verify(a.roster); err != nil {
		a.report(Problem{Kind: ProblemBadReceipt, Detail: fmt.Sprintf("%s: %v", source, err)})
		return err
	}
	a.receipts++
	a.addEntries(&rc.Checkpoint, rc.Party, source)
	return nil
}

// AddLogReceipt is AddReceipt for a receipt the log itself holds (on a
// party's rcpt subject, read in a first pass): it covers what it
// countersigns, and it is the log's copy of a receipt that a party keeps
// outside (AddReceipt), which the log must hold.
func (a *Auditor) AddLogReceipt(rc *Receipt, source string) error {
	if err := a.addReceipt(rc, source); err != nil {
		return err
	}
	a.held(anchorKey{rc.Checkpoint.Digest(), rc.Party})
	return nil
}

// AddLogCheckpoint is AddCheckpoint for a checkpoint the log holds (in
// the aggregator's seal): receipts kept outside the log (AddReceipt)
// countersign checkpoints the log must hold.
func (a *Auditor) AddLogCheckpoint(c *Checkpoint, source string) error {
	if err := a.AddCheckpoint(c, source); err != nil {
		return err
	}
	a.held(anchorKey{c.Digest(), ""})
	return nil
}

func (a *Auditor) held(k anchorKey) {
	if a.inLog == nil {
		a.inLog = make(map[anchorKey]bool)
	}
	a.inLog[k] = true
}

// anchor is a receipt from outside the log: the log must hold the
// checkpoint it countersigns and the receipt's own message.
type anchor struct {
	digest Hash
	party  string
	number uint64
	source string
}

type anchorKey struct {
	digest Hash
	party  string // "" for the checkpoint itself
}

// AddCheckpoint verifies a checkpoint (e.g. one found in the log, in a
// first pass) and registers what it covers, like AddReceipt.
func (a *Auditor) AddCheckpoint(c *Checkpoint, source string) error {
	if a.started {
		return errStarted
	}
	if err := c.Verify(a.roster); err != nil {
		a.report(Problem{Kind: ProblemBadReceipt, Detail: fmt.Sprintf("%s: %v", source, err)})
		return err
	}
	a.receipts++
	a.addEntries(c, "", source)
	return nil
}

func (a *Auditor) addEntries(c *Checkpoint, party, source string) {
	if c.StreamSeq > a.claimStream {
		a.claimStream, a.claimSrc = c.StreamSeq, source
	}
	for _, e := range c.Entries {
		st := a.subjects[e.Subject]
		owner := st.owner
		seals := owner.ID == c.Signer || owner.ID == party
		x := expect{seq: e.Seq, head: e.Head, streamSeq: e.StreamSeq, seals: seals, source: source}
		if e.StreamSeq > a.claimStream {
			a.claimStream, a.claimSrc = e.StreamSeq, source
		}
		i, _ := slices.BinarySearchFunc(st.expects, e.Seq, func(x expect, s uint64) int { return cmpUint(x.seq, s) })
		merged := false
		for j := i; j < len(st.expects) && st.expects[j].seq == e.Seq; j++ {
			if y := &st.expects[j]; y.head == x.head && y.streamSeq == x.streamSeq {
				y.seals = y.seals || seals
				merged = true
				break
			}
		}
		if !merged {
			st.expects = slices.Insert(st.expects, i, x)
		}
	}
}

// Add audits the next stored message. m.Payload is copied if it must be
// kept.
func (a *Auditor) Add(m *Msg) {
	a.started = true
	a.messages++
	if m.StreamSeq != 0 {
		switch {
		case a.firstStream == 0 && m.StreamSeq > 1:
			a.report(Problem{StreamSeq: m.StreamSeq, Kind: ProblemStreamGap,
				Detail: fmt.Sprintf("the log starts at stream seq %d: messages 1..%d were removed", m.StreamSeq, m.StreamSeq-1)})
		case a.lastStream != 0 && m.StreamSeq > a.lastStream+1:
			a.report(Problem{StreamSeq: m.StreamSeq, Kind: ProblemStreamGap,
				Detail: fmt.Sprintf("stream seqs %d..%d are missing: messages were removed", a.lastStream+1, m.StreamSeq-1)})
		case a.lastStream != 0 && m.StreamSeq <= a.lastStream:
			a.report(Problem{StreamSeq: m.StreamSeq, Kind: ProblemReorder,
				Detail: fmt.Sprintf("stream seq %d after %d", m.StreamSeq, a.lastStream)})
		}
		if a.firstStream == 0 {
			a.firstStream = m.StreamSeq
		}
		a.lastStream = max(a.lastStream, m.StreamSeq)
	}
	st := a.subjects[m.Subject]
	if st == nil {
		a.count("?", "?", m, false)
		a.foreign++
		if a.rejected == nil {
			a.rejected = make(map[string]uint64)
		}
		a.rejected[Foreign]++
		if len(a.rejectedList) < 20 {
			a.rejectedList = append(a.rejectedList, Problem{StreamSeq: m.StreamSeq, Subject: clip(m.Subject), Kind: ProblemUnknownSubject,
				Detail: "not a subject of the run; nobody in the roster may publish on it: listed apart, not the run's"})
		}
		return
	}
	a.count(st.owner.ID, st.kind, m, m.Sig != "")
	if a.recv != nil {
		var err error
		if m.Seq == 0 {
			err = fmt.Errorf("%w: undecodable message", ErrMalformed)
		} else {
			before := a.recv.LastSeq(m.Subject)
			if err = a.recv.Verify(m); err != nil && a.recv.LastSeq(m.Subject) != before {
				err = nil // the receiver's state moved: the auditor judges it
			}
		}
		if err != nil {
			r := Reason(err)
			if m.Seq == 0 {
				r = "undecodable"
			}
			a.rejected[r]++
			if len(a.rejectedList) < 20 {
				a.rejectedList = append(a.rejectedList, Problem{StreamSeq: m.StreamSeq, Subject: st.subject, Seq: m.Seq, Kind: ProblemKind(r), Detail: err.Error()})
			}
			return
		}
	}
	if m.Seq == 0 {
		a.report(Problem{StreamSeq: m.StreamSeq, Subject: st.subject, Kind: ProblemUndecodable,
			Detail: "the message's own sequence number could not be read"})
		return
	}
	a.causal(st, m)
	a.process(st, m.StreamSeq, m.Seq, m.Payload, m.Sig, m.Prev)
}

// causal checks m's causal links: the message it cites must be stored
// before it.
func (a *Auditor) causal(st *auditState, m *Msg) {
	if len(m.ID) > 0 {
		id := string(m.ID)
		if w, ok := a.awaited[id]; ok {
			delete(a.awaited, id)
			a.report(Problem{StreamSeq: w.streamSeq, Subject: w.subject, Seq: w.seq, Kind: ProblemCausal,
				Detail: fmt.Sprintf("answers %s seq %d, which is stored after it (stream seq %d): an effect before its cause", st.subject, m.Seq, m.StreamSeq)})
		} else {
			if a.cited == nil {
				a.cited = make(map[string]struct{})
			}
			a.cited[id] = struct{}{}
		}
	}
	if len(m.Cites) > 0 {
		id := string(m.Cites)
		if _, ok := a.cited[id]; ok {
			delete(a.cited, id) // each message is answered once
			return
		}
		if a.awaited == nil {
			a.awaited = make(map[string]awaited)
		}
		a.awaited[id] = awaited{streamSeq: m.StreamSeq, subject: st.subject, seq: m.Seq}
	}
}

// awaited is a message whose cited message has not been stored yet.
type awaited struct {
	streamSeq uint64
	subject   string
	seq       uint64
}

func (a *Auditor) count(sender, kind string, m *Msg, signed bool) {
	k := [2]string{sender, kind}
	s := a.stats[k]
	if s == nil {
		s = &SenderStats{Sender: sender, Kind: kind}
		a.stats[k] = s
	}
	s.Messages++
	s.Bytes += uint64(len(m.Payload))
	if signed {
		s.Signed++
	}
}

func (a *Auditor) process(st *auditState, streamSeq, seq uint64, payload []byte, sig, prev string) {
	last := st.chain.Seq()
	switch {
	case seq <= last:
		a.old(st, streamSeq, seq, payload)
	case len(st.pending) > 0 || seq > last+1:
		if seq == last+1 {
			// The missing message, stored late.
			a.report(Problem{StreamSeq: streamSeq, Subject: st.subject, Seq: seq, Kind: ProblemReorder,
				Detail: fmt.Sprintf("stored after seq %d (stream seq %d)", st.pending[0].seq, st.pending[0].streamSeq)})
			a.link(st, streamSeq, seq, payload, sig, prev)
			a.drain(st)
			return
		}
		a.hold(st, streamSeq, seq, payload, sig, prev)
	default:
		a.link(st, streamSeq, seq, payload, sig, prev)
	}
}

// old handles a sequence number at or below the chain's.
func (a *Auditor) old(st *auditState, streamSeq, seq uint64, payload []byte) {
	for _, r := range st.missing {
		if seq >= r[0] && seq <= r[1] {
			a.report(Problem{StreamSeq: streamSeq, Subject: st.subject, Seq: seq, Kind: ProblemReorder,
				Detail: "stored after its gap was declared"})
			return
		}
	}
	h, ok := st.hist.get(seq)
	prev, okPrev := st.hist.get(seq - 1)
	if seq == 1 {
		prev, okPrev = GenesisHead(a.roster.Run, st.subject), true
	}
	if ok && okPrev {
		var c Chain
		c.Reset(seq-1, prev)
		if c.Compute(seq, payload) == h {
			a.report(Problem{StreamSeq: streamSeq, Subject: st.subject, Seq: seq, Kind: ProblemDuplicate,
				Detail: "byte-identical copy of an earlier message (a retry without dedupe id, or a replay)"})
			return
		}
		a.report(Problem{StreamSeq: streamSeq, Subject: st.subject, Seq: seq, Kind: ProblemReplay,
			Detail: "sequence number used again with other content"})
		return
	}
	a.report(Problem{StreamSeq: streamSeq, Subject: st.subject, Seq: seq, Kind: ProblemReplay,
		Detail: fmt.Sprintf("sequence number at or below %d, stored again", st.chain.Seq())})
}

// hold keeps a message that comes after a missing one.
func (a *Auditor) hold(st *auditState, streamSeq, seq uint64, payload []byte, sig, prev string) {
	i, found := slices.BinarySearchFunc(st.pending, seq, func(h held, s uint64) int { return cmpUint(h.seq, s) })
	if found {
		a.report(Problem{StreamSeq: streamSeq, Subject: st.subject, Seq: seq, Kind: ProblemReplay,
			Detail: "sequence number stored twice"})
		return
	}
	st.pending = slices.Insert(st.pending, i, held{streamSeq, seq, slices.Clone(payload), sig, prev})
	if len(st.pending) > a.opts.ReorderWindow {
		a.declareGap(st)
	}
}

// drain links held messages that now follow the chain.
func (a *Auditor) drain(st *auditState) {
	for len(st.pending) > 0 && st.pending[0].seq == st.chain.Seq()+1 {
		h := st.pending[0]
		st.pending = st.pending[1:]
		a.link(st, h.streamSeq, h.seq, h.payload, h.sig, h.prev)
	}
	if len(st.pending) == 0 {
		st.pending = nil
	}
}

// declareGap gives up waiting for the messages before the first held one.
func (a *Auditor) declareGap(st *auditState) {
	if len(st.pending) == 0 {
		return
	}
	first := st.pending[0]
	from, to := st.chain.Seq()+1, first.seq-1
	a.report(Problem{StreamSeq: first.streamSeq, Subject: st.subject, Seq: first.seq, Kind: ProblemGap,
		Detail: fmt.Sprintf("seq %d..%d missing (%d messages)", from, to, to-from+1)})
	if len(st.missing) < 1024 {
		st.missing = append(st.missing, [2]uint64{from, to})
	}
	// What was accepted before the gap can no longer be proven by a later
	// signature.
	if st.unsigned > 0 {
		a.report(Problem{StreamSeq: st.firstOpen, Subject: st.subject, Seq: st.firstSeq, Kind: ProblemUnsealedTail,
			Detail: fmt.Sprintf("%d messages before the gap are covered by no signature", st.unsigned)})
	}
	st.unsigned = 0
	st.anchored = false
	st.chain.Reset(to, Hash{})
	for len(st.pending) > 0 && st.pending[0].seq == st.chain.Seq()+1 {
		h := st.pending[0]
		st.pending = st.pending[1:]
		a.link(st, h.streamSeq, h.seq, h.payload, h.sig, h.prev)
	}
	if len(st.pending) > 0 {
		a.declareGap(st)
	}
	st.pending = nil
}

// link audits the message that follows the chain.
func (a *Auditor) link(st *auditState, streamSeq, seq uint64, payload []byte, sigText, prevText string) {
	var head Hash
	if st.anchored {
		head = st.chain.Compute(seq, payload)
	}
	covered := false
	if sigText != "" {
		sig, err := ParseSignature(sigText)
		if err == nil {
			a.buf, err = checkSignature(a.roster, st.owner, a.buf, st.subject, seq, &sig)
		}
		var prev Hash
		restart := err == nil && len(prevText) == hashTextLen
		if restart {
			_, perr := decodeB64(prev[:], prevText)
			restart = perr == nil && isRestart(a.roster.Run, st.subject, seq, prev)
		}
		if restart {
			var c Chain
			c.Reset(seq-1, prev)
			restart = c.Compute(seq, payload) == sig.Head
		}
		switch {
		case restart:
			// The owner restarted its chain (Publisher.Restart): what it
			// sent before and left unsigned stays unproven.
			if st.anchored && st.unsigned > 0 {
				a.report(Problem{StreamSeq: st.firstOpen, Subject: st.subject, Seq: st.firstSeq, Kind: ProblemUnsealedTail,
					Detail: fmt.Sprintf("%d messages before %s restarted its chain at seq %d are covered by no signature", st.unsigned, st.owner.ID, seq)})
			}
			head, st.anchored, covered = sig.Head, true, true
			a.restarts++
		case err == nil && !st.anchored:
			head, st.anchored, covered = sig.Head, true, true // resynchronised
		case err == nil && sig.Head != head:
			a.report(Problem{StreamSeq: streamSeq, Subject: st.subject, Seq: seq, Kind: ProblemBrokenChain,
				Detail: a.brokenDetail(st, seq)})
			head, covered = sig.Head, true
		case err == nil:
			covered = true
		default:
			a.badSignature(st, streamSeq, seq, &sig, sigText, err)
		}
	} else if st.mustSign {
		a.report(Problem{StreamSeq: streamSeq, Subject: st.subject, Seq: seq, Kind: ProblemUnsigned,
			Detail: "every message of this subject must be signed"})
	} else if st.unsigned+1 == a.opts.Every {
		a.report(Problem{StreamSeq: streamSeq, Subject: st.subject, Seq: seq, Kind: ProblemUnsigned,
			Detail: fmt.Sprintf("%d unsigned messages in a row; the sender signs at least every %d", a.opts.Every, a.opts.Every)})
	}
	st.chain.Reset(seq, head)
	st.lastStream = streamSeq
	// Receipts and checkpoints about this message.
	for st.next < len(st.expects) && st.expects[st.next].seq < seq {
		st.next++ // about a missing message: its gap is reported
	}
	for ; st.next < len(st.expects) && st.expects[st.next].seq == seq; st.next++ {
		x := &st.expects[st.next]
		switch {
		case !st.anchored && x.seals:
			head, st.anchored, covered = x.head, true, true
			st.chain.Reset(seq, head)
		case !st.anchored:
			// Nothing to compare with: the gap is reported.
		case x.head != head:
			a.report(Problem{StreamSeq: streamSeq, Subject: st.subject, Seq: seq, Kind: ProblemRewritten,
				Detail: fmt.Sprintf("%s says the head after this message is %s; the log gives %s", x.source, x.head, head)})
		case x.streamSeq != 0 && streamSeq != 0 && x.streamSeq != streamSeq:
			a.report(Problem{StreamSeq: streamSeq, Subject: st.subject, Seq: seq, Kind: ProblemRewritten,
				Detail: fmt.Sprintf("%s says this message is stored at stream seq %d", x.source, x.streamSeq)})
		case x.seals:
			covered = true
		default:
			st.vouchSeq, st.vouchSrc = seq, x.source
		}
	}
	if st.anchored {
		st.hist.put(seq, head)
	}
	if covered || !st.anchored {
		st.unsigned = 0
		return
	}
	if st.unsigned == 0 {
		st.firstOpen, st.firstSeq = streamSeq, seq
	}
	st.unsigned++
}

func (a *Auditor) brokenDetail(st *auditState, seq uint64) string {
	if st.unsigned == 0 {
		return fmt.Sprintf("%s signed another head than this message gives: the message was altered", st.owner.ID)
	}
	return fmt.Sprintf("%s signed another head than the log gives: this message or one of the %d unsigned ones since seq %d (stream seq %d) was altered, removed or inserted",
		st.owner.ID, st.unsigned, st.firstSeq, st.firstOpen)
}

// badSignature reports a signature that failed, and finds out whether
// another participant's key made it.
func (a *Auditor) badSignature(st *auditState, streamSeq, seq uint64, sig *Signature, text string, err error) {
	kind := ProblemBadSignature
	switch {
	case errors.Is(err, ErrWrongSigner):
		kind = ProblemWrongSigner
	case errors.Is(err, ErrUnknownKey):
		kind = ProblemUnknownKey
	case errors.Is(err, ErrMalformed):
	case a.trials < 1000:
		// Did another participant's key make it while naming the owner?
		a.trials++
		for i := range a.roster.Participants {
			p := &a.roster.Participants[i]
			if p.ID == sig.Signer {
				continue
			}
			var ok bool
			if a.buf, ok = verifySig(p.pub, a.buf, a.roster.Run, st.subject, seq, sig); ok {
				kind = ProblemWrongSigner
				err = fmt.Errorf("signed with %s's key, though the header names %s; the subject belongs to %s", p.ID, sig.Signer, st.owner.ID)
				break
			}
		}
	}
	a.report(Problem{StreamSeq: streamSeq, Subject: st.subject, Seq: seq, Kind: kind, Detail: err.Error()})
}

// Finish ends the audit: it declares the gaps still open, reports
// unsealed tails and what receipts cover beyond the log, and returns the
// report.
func (a *Auditor) Finish() *AuditReport {
	for _, w := range a.awaited {
		a.report(Problem{StreamSeq: w.streamSeq, Subject: w.subject, Seq: w.seq, Kind: ProblemCausal,
			Detail: "answers a message the log does not hold"})
	}
	clear(a.awaited)
	for _, x := range a.anchors {
		if !a.opts.AnchorReceipts {
			break
		}
		switch {
		case !a.inLog[anchorKey{x.digest, ""}]:
			a.report(Problem{Kind: ProblemTruncated,
				Detail: fmt.Sprintf("%s countersigns checkpoint %d, which the log does not hold: the log was cut or its seal removed", x.source, x.number)})
		case !a.inLog[anchorKey{x.digest, x.party}]:
			a.report(Problem{Kind: ProblemTruncated,
				Detail: fmt.Sprintf("%s: the log lacks %s's receipt of checkpoint %d, which it published", x.source, x.party, x.number)})
		}
	}
	subjects := make([]string, 0, len(a.subjects))
	for s := range a.subjects {
		subjects = append(subjects, s)
	}
	slices.Sort(subjects)
	for _, s := range subjects {
		st := a.subjects[s]
		a.declareGap(st)
		switch {
		case st.unsigned > 0 && st.vouchSeq == st.chain.Seq() && st.vouchSeq != 0:
			// The sender stopped without sealing (a party gone for good),
			// but the aggregator's signed checkpoint states it received
			// exactly this tail: a cut log would end before it.
			a.notes = append(a.notes, Problem{StreamSeq: st.firstOpen, Subject: st.subject, Seq: st.firstSeq, Kind: ProblemDeparted,
				Detail: fmt.Sprintf("%s's last %d messages (seq %d..%d) carry no signature of its own (it stopped without sealing: departed?); %s, signed by the aggregator, states it received them up to seq %d with this head",
					st.owner.ID, st.unsigned, st.firstSeq, st.chain.Seq(), st.vouchSrc, st.vouchSeq)})
		case st.unsigned > 0:
			a.report(Problem{StreamSeq: st.firstOpen, Subject: st.subject, Seq: st.firstSeq, Kind: ProblemUnsealedTail,
				Detail: fmt.Sprintf("the last %d messages (seq %d..%d) are covered by no signature or receipt: the log may have been cut after them, or the sender stopped without sealing",
					st.unsigned, st.firstSeq, st.chain.Seq())})
		}
		if st.next < len(st.expects) {
			x := st.expects[len(st.expects)-1]
			a.report(Problem{Subject: st.subject, Seq: x.seq, Kind: ProblemTruncated,
				Detail: fmt.Sprintf("%s covers seq %d; the log ends at seq %d", x.source, x.seq, st.chain.Seq())})
		}
	}
	if a.claimStream > a.lastStream && a.lastStream != 0 || a.claimStream > 0 && a.messages == 0 {
		a.report(Problem{Kind: ProblemTruncated,
			Detail: fmt.Sprintf("%s covers stream seq %d; the log ends at %d", a.claimSrc, a.claimStream, a.lastStream)})
	}
	rep := &AuditReport{Run: a.roster.Run, Messages: a.messages, FirstSeq: a.firstStream, LastSeq: a.lastStream,
		Receipts: a.receipts, Problems: a.problems, Counts: a.counts, Dropped: a.dropped, IntactLog: !a.fatal,
		Rejected: a.rejected, RejectedList: a.rejectedList, Restarts: a.restarts, Foreign: a.foreign, Notes: a.notes}
	for _, s := range a.stats {
		rep.Senders = append(rep.Senders, *s)
	}
	slices.SortFunc(rep.Senders, func(x, y SenderStats) int {
		if c := strings.Compare(x.Sender, y.Sender); c != 0 {
			return c
		}
		return strings.Compare(x.Kind, y.Kind)
	})
	return rep
}

// CheckLog audits a whole log against receipts: Auditor with the receipts
// added first, then every message of log in stream order. The error is
// about the receipts (one that does not verify); the log's problems are
// in the report.
func CheckLog(r *Roster, log iter.Seq[*Msg], receipts []*Receipt, opts AuditOptions) (*AuditReport, error) {
	a, err := NewAuditor(r, opts)
	if err != nil {
		return nil, err
	}
	var errs []error
	for i, rc := range receipts {
		if err := a.AddReceipt(rc, fmt.Sprintf("receipt %d (%s, checkpoint %d)", i+1, rc.Party, rc.Checkpoint.Number)); err != nil {
			errs = append(errs, err)
		}
	}
	for m := range log {
		a.Add(m)
	}
	return a.Finish(), errors.Join(errs...)
}

// writeCounts writes title and the counts of m in the order of their keys,
// on one line; nothing if m is empty.
func writeCounts[V int | int64 | uint64](b *strings.Builder, title string, m map[string]V) {
	if len(m) == 0 {
		return
	}
	b.WriteString(title)
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(b, " %s %d", k, m[k])
	}
	b.WriteString("\n")
}
