package trust

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/asyrevel/asyrevel/schemas"
)

// Role is what a participant does in a run.
type Role string

// Roles.
const (
	RoleAggregator Role = "aggregator"
	RoleParty      Role = "party"
)

// AuditorID is the id of a roster's auditor (or the prefix of
// "auditor-NAME").
const AuditorID = "auditor"

// RoleAuditor is the role of a roster's auditors: they read the run's
// stream and publish nothing.
const RoleAuditor Role = "auditor"

// IsAuditorID reports whether id names an auditor: "auditor" or
// "auditor-NAME" with NAME of letters, digits, '-' and '_'.
func IsAuditorID(id string) bool {
	if id == AuditorID {
		return true
	}
	name, ok := strings.CutPrefix(id, AuditorID+"-")
	return ok && len(name) <= 64 && validName(name)
}

// AggregatorID is the participant id of the aggregator.
const AggregatorID = "aggregator"

// PartyID is the participant id of party m: "party-m".
func PartyID(m int) string { return "party-" + strconv.Itoa(m) }

// ErrID reports a malformed participant id.
var ErrID = errors.New("trust: bad participant id")

// ParseID reads a participant id: "aggregator" gives (RoleAggregator, 0),
// "party-m" gives (RoleParty, m) for m in 1..schemas.MaxParties, written
// without leading zeros.
func ParseID(id string) (Role, int, error) {
	if id == AggregatorID {
		return RoleAggregator, 0, nil
	}
	if num, ok := strings.CutPrefix(id, "party-"); ok && len(num) >= 1 && len(num) <= 4 && num[0] != '0' {
		m := 0
		for i := 0; i < len(num); i++ {
			if num[i] < '0' || num[i] > '9' {
				m = -1
				break
			}
			m = 10*m + int(num[i]-'0')
		}
		if m >= 1 && m <= schemas.MaxParties {
			return RoleParty, m, nil
		}
	}
	return "", 0, fmt.Errorf("%w %q: want %q or party-1 .. party-%d", ErrID, clip(id), AggregatorID, schemas.MaxParties)
}

// ReceiptSubject is the subject on which party m publishes its
// countersigned checkpoints (receipts): asyrevel.R.rcpt.m.
func ReceiptSubject(run string, m int) string {
	return "asyrevel." + run + ".rcpt." + strconv.Itoa(m)
}

// Participant is one entry of a roster.
type Participant struct {
	ID        string `json:"id"`
	Role      Role   `json:"role"`
	PublicKey string `json:"public_key"`

	index int // 0 for the aggregator, m for party m
	pub   ed25519.PublicKey
}

// Index is the participant's number: 0 for the aggregator, m for party-m
// (the party id of package schemas).
func (p *Participant) Index() int { return p.index }

// subjectInfo is what a roster knows of one subject.
type subjectInfo struct {
	owner    *Participant
	kind     string // subject token: join, out, eval, rcpt, reply, ctl
	mustSign bool   // every message signed
}

// Roster is the run's list of participants and their public keys: who may
// say what. It holds no secrets. A Roster is immutable after it is made
// and safe for concurrent use.
type Roster struct {
	Version      int           `json:"version"`
	Run          string        `json:"run"`
	Participants []Participant `json:"participants"`
	// Auditors may read the run's stream and nothing else (Grants): an
	// organisation's or a regulator's identity for audit verify --nats
	// on a live run. They publish nothing; their ids are "auditor" or
	// "auditor-NAME".
	Auditors []Participant `json:"auditors,omitempty"`

	byID     map[string]*Participant
	byKey    map[string]*Participant
	subjects map[string]subjectInfo
}

// RosterVersion is the roster format this package writes and reads.
const RosterVersion = 1

// maxRosterSize bounds a roster file (1,025 participants need ~110 KB).
const maxRosterSize = 1 << 20

// NewRoster checks and indexes a roster for run: exactly one aggregator
// and parties party-1 .. party-Q without holes, each with a distinct valid
// user public key. The participants are ordered aggregator first, then by
// party number; their Role may be left empty (it follows from the id).
func NewRoster(run string, ps []Participant) (*Roster, error) {
	if err := schemas.CheckRun(run); err != nil {
		return nil, fmt.Errorf("trust: roster: %w", err)
	}
	r := &Roster{Version: RosterVersion, Run: run, Participants: slices.Clone(ps)}
	if err := r.index(); err != nil {
		return nil, err
	}
	return r, nil
}

// NewRosterWithAuditors is NewRoster with auditors (Roster.Auditors):
// identities that may read the run's stream and nothing else.
func NewRosterWithAuditors(run string, ps, auditors []Participant) (*Roster, error) {
	if err := schemas.CheckRun(run); err != nil {
		return nil, fmt.Errorf("trust: roster: %w", err)
	}
	r := &Roster{Version: RosterVersion, Run: run, Participants: slices.Clone(ps), Auditors: slices.Clone(auditors)}
	if err := r.index(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *Roster) index() error {
	if r.Version != RosterVersion {
		return fmt.Errorf("trust: roster version %d, want %d", r.Version, RosterVersion)
	}
	if err := schemas.CheckRun(r.Run); err != nil {
		return fmt.Errorf("trust: roster: %w", err)
	}
	if len(r.Participants) > schemas.MaxParties+1 {
		return fmt.Errorf("trust: roster has %d participants, at most %d", len(r.Participants), schemas.MaxParties+1)
	}
	r.byID = make(map[string]*Participant, len(r.Participants))
	r.byKey = make(map[string]*Participant, len(r.Participants))
	for i := range r.Participants {
		p := &r.Participants[i]
		role, m, err := ParseID(p.ID)
		if err != nil {
			return fmt.Errorf("trust: roster entry %d: %w", i+1, err)
		}
		if p.Role == "" {
			p.Role = role
		}
		if p.Role != role {
			return fmt.Errorf("trust: roster: %s has role %q, want %q", p.ID, p.Role, role)
		}
		pub, err := ParsePublicKey(p.PublicKey)
		if err != nil {
			return fmt.Errorf("trust: roster: %s: %w", p.ID, err)
		}
		if _, dup := r.byID[p.ID]; dup {
			return fmt.Errorf("trust: roster lists %s twice", p.ID)
		}
		if q, dup := r.byKey[p.PublicKey]; dup {
			return fmt.Errorf("trust: roster: %s and %s have the same public key; each participant needs its own", q.ID, p.ID)
		}
		p.index, p.pub = m, pub
		r.byID[p.ID] = p
		r.byKey[p.PublicKey] = p
	}
	if _, ok := r.byID[AggregatorID]; !ok {
		return errors.New("trust: roster has no aggregator")
	}
	seenAud := map[string]bool{}
	for i := range r.Auditors {
		a := &r.Auditors[i]
		if !IsAuditorID(a.ID) {
			return fmt.Errorf("trust: roster auditor %d: id %q: want %q or %q", i+1, clip(a.ID), AuditorID, AuditorID+"-NAME")
		}
		if a.Role == "" {
			a.Role = RoleAuditor
		}
		if a.Role != RoleAuditor || seenAud[a.ID] {
			return fmt.Errorf("trust: roster: auditor %s listed twice or with role %q", a.ID, a.Role)
		}
		seenAud[a.ID] = true
		pub, err := ParsePublicKey(a.PublicKey)
		if err != nil {
			return fmt.Errorf("trust: roster: %s: %w", a.ID, err)
		}
		if q, dup := r.byKey[a.PublicKey]; dup {
			return fmt.Errorf("trust: roster: %s and %s have the same public key; each needs its own", q.ID, a.ID)
		}
		a.pub, a.index = pub, -1
		r.byKey[a.PublicKey] = a
	}
	q := len(r.Participants) - 1
	if q < 1 {
		return errors.New("trust: roster has no party")
	}
	for m := 1; m <= q; m++ {
		if _, ok := r.byID[PartyID(m)]; !ok {
			return fmt.Errorf("trust: roster has %d parties but lacks %s (parties are numbered 1..Q)", q, PartyID(m))
		}
	}
	slices.SortFunc(r.Participants, func(a, b Participant) int { return a.index - b.index })
	// Pointers into the sorted slice.
	for i := range r.Participants {
		p := &r.Participants[i]
		r.byID[p.ID] = p
		r.byKey[p.PublicKey] = p
	}
	r.subjects = make(map[string]subjectInfo, 7*q+1)
	agg := r.byID[AggregatorID]
	r.subjects[schemas.Subject(r.Run, schemas.KindControl, 0)] = subjectInfo{agg, "ctl", true}
	for m := 1; m <= q; m++ {
		p := r.byID[PartyID(m)]
		r.subjects[schemas.Subject(r.Run, schemas.KindHello, m)] = subjectInfo{p, "join", true}
		r.subjects[schemas.Subject(r.Run, schemas.KindOutput, m)] = subjectInfo{p, "out", false}
		r.subjects[schemas.Subject(r.Run, schemas.KindEval, m)] = subjectInfo{p, "eval", false}
		r.subjects[ReceiptSubject(r.Run, m)] = subjectInfo{p, "rcpt", true}
		r.subjects[schemas.Subject(r.Run, schemas.KindReply, m)] = subjectInfo{agg, "reply", false}
		// Private entity alignment (package align): every message signed.
		r.subjects[schemas.AlignSubject(r.Run, m)] = subjectInfo{p, schemas.AlignToken, true}
		r.subjects[schemas.AlignHubSubject(r.Run, m)] = subjectInfo{agg, schemas.AlignHubToken, true}
		// Scoring with the saved models (package serve): chained and
		// signed at intervals, as outputs and replies are.
		r.subjects["asyrevel."+r.Run+"."+ScoredToken+"."+strconv.Itoa(m)] = subjectInfo{p, ScoredToken, false}
	}
	r.subjects["asyrevel."+r.Run+"."+ScoreToken] = subjectInfo{agg, ScoreToken, false}
	return nil
}

// Subject kinds of scoring (package serve): the aggregator asks on
// asyrevel.R.score, party m answers on asyrevel.R.scored.m.
const (
	ScoreToken  = "score"
	ScoredToken = "scored"
)

// GenerateRun makes a key for every participant of run (the aggregator and
// parties 1..parties) and their roster, for a run whose participants all
// start in one place (asyrevel keys --run, asyrevel train). keys[0] is the
// aggregator's, keys[m] party m's.
func GenerateRun(run string, parties int) (*Roster, []*Key, error) {
	if parties < 1 || parties > schemas.MaxParties {
		return nil, nil, fmt.Errorf("trust: %d parties, want 1..%d", parties, schemas.MaxParties)
	}
	keys := make([]*Key, parties+1)
	ps := make([]Participant, parties+1)
	for m := range keys {
		k, err := GenerateKey()
		if err != nil {
			return nil, nil, err
		}
		id := AggregatorID
		if m > 0 {
			id = PartyID(m)
		}
		keys[m], ps[m] = k, Participant{ID: id, PublicKey: k.PublicKey()}
	}
	r, err := NewRoster(run, ps)
	if err != nil {
		return nil, nil, err
	}
	return r, keys, nil
}

// ParseRoster reads a roster from its JSON form (as Marshal writes it).
// Unknown fields are refused.
func ParseRoster(data []byte) (*Roster, error) {
	if len(data) > maxRosterSize {
		return nil, fmt.Errorf("trust: roster of %d bytes, at most %d", len(data), maxRosterSize)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var r Roster
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("trust: roster: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trust: roster: data after the JSON object")
	}
	if err := r.index(); err != nil {
		return nil, err
	}
	return &r, nil
}

// ReadRoster reads a roster file.
func ReadRoster(path string) (*Roster, error) {
	data, err := readLimited(path, maxRosterSize)
	if err != nil {
		return nil, fmt.Errorf("trust: roster: %w", err)
	}
	r, err := ParseRoster(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// Marshal is the roster's JSON form, indented, with a final newline.
func (r *Roster) Marshal() []byte {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		panic(err) // strings and ints only
	}
	return append(b, '\n')
}

// WriteFile writes the roster to path (mode 0644: it holds no secrets),
// refusing to replace an existing file unless force is set.
func (r *Roster) WriteFile(path string, force bool) error {
	return writeFile(path, r.Marshal(), 0o644, force)
}

// Parties is the number of parties, Q.
func (r *Roster) Parties() int { return len(r.Participants) - 1 }

// Participant looks a participant up by id.
func (r *Roster) Participant(id string) (*Participant, bool) {
	p, ok := r.byID[id]
	return p, ok
}

// ByKey looks a participant up by public key.
func (r *Roster) ByKey(pub string) (*Participant, bool) {
	p, ok := r.byKey[pub]
	return p, ok
}

// Aggregator is the roster's aggregator.
func (r *Roster) Aggregator() *Participant { return r.byID[AggregatorID] }

// Party is party m (1..Q), or nil.
func (r *Roster) Party(m int) *Participant {
	if m < 1 || m >= len(r.Participants) {
		return nil
	}
	return &r.Participants[m]
}

// Owner is the one participant that may publish on subject, or nil for a
// subject that is not the run's.
func (r *Roster) Owner(subject string) *Participant {
	return r.subjects[subject].owner
}

// SubjectKind is subject's kind token (join, out, eval, rcpt, reply or
// ctl), or "" for a subject that is not the run's.
func (r *Roster) SubjectKind(subject string) string {
	return r.subjects[subject].kind
}

// EverySigned reports whether every message on subject must carry a
// signature: control messages, Hellos and receipts do; outputs, replies
// and evaluations are signed at intervals (Policy).
func (r *Roster) EverySigned(subject string) bool {
	return r.subjects[subject].mustSign
}

// Subjects lists the subjects participant id publishes on, sorted: for
// party m its join, out, eval, rcpt, psi (alignment) and scored (scoring)
// subjects; for the aggregator the control subject, every reply and psih
// subject and the score subject.
func (r *Roster) Subjects(id string) []string {
	var out []string
	for s, info := range r.subjects {
		if info.owner.ID == id {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// Inbound lists the subjects participant id receives, sorted: for party
// m its reply subject, the control subject and the hub's alignment
// subject to it (psih); for the aggregator every party's join, out, eval,
// rcpt and psi subjects.
func (r *Roster) Inbound(id string) []string {
	p, ok := r.byID[id]
	if !ok {
		return nil
	}
	if p.Role == RoleParty {
		return []string{
			schemas.Subject(r.Run, schemas.KindControl, 0),
			schemas.AlignHubSubject(r.Run, p.index),
			schemas.Subject(r.Run, schemas.KindReply, p.index),
		}
	}
	var out []string
	for s, info := range r.subjects {
		if info.owner.Role == RoleParty {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// AllSubjects lists every subject of the run, sorted.
func (r *Roster) AllSubjects() []string {
	out := make([]string, 0, len(r.subjects))
	for s := range r.subjects {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// Identify finds the participant whose public key is key's.
func (r *Roster) Identify(key *Key) (*Participant, error) {
	p, ok := r.byKey[key.PublicKey()]
	if !ok {
		return nil, fmt.Errorf("trust: key %s is not in the roster of run %s", key.PublicKey(), r.Run)
	}
	if p.Role == RoleAuditor {
		return nil, fmt.Errorf("trust: key %s is %s's: an auditor reads the run's log and takes no part in it", key.PublicKey(), p.ID)
	}
	return p, nil
}
