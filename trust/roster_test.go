package trust

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseID(t *testing.T) {
	for _, tc := range []struct {
		id   string
		role Role
		m    int
	}{
		{"aggregator", RoleAggregator, 0},
		{"party-1", RoleParty, 1},
		{"party-1024", RoleParty, 1024},
	} {
		role, m, err := ParseID(tc.id)
		if err != nil || role != tc.role || m != tc.m {
			t.Errorf("%s: %v %d %v", tc.id, role, m, err)
		}
	}
	for _, bad := range []string{"", "party-0", "party-01", "party-1025", "party-+1", "party-", "Party-1", "agg", "party-1 ", "party--1", "party-9999"} {
		if _, _, err := ParseID(bad); !errors.Is(err, ErrID) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestRoster(t *testing.T) {
	tr := newTestRun(t, "r1", 3)
	r := tr.roster
	if r.Parties() != 3 || r.Aggregator().ID != AggregatorID || r.Party(2).ID != "party-2" || r.Party(4) != nil {
		t.Fatalf("roster %+v", r.Participants)
	}
	for _, tc := range []struct {
		subject, owner, kind string
		every                bool
	}{
		{"asyrevel.r1.out.2", "party-2", "out", false},
		{"asyrevel.r1.join.1", "party-1", "join", true},
		{"asyrevel.r1.eval.3", "party-3", "eval", false},
		{"asyrevel.r1.rcpt.3", "party-3", "rcpt", true},
		{"asyrevel.r1.reply.1", AggregatorID, "reply", false},
		{"asyrevel.r1.ctl", AggregatorID, "ctl", true},
	} {
		o := r.Owner(tc.subject)
		if o == nil || o.ID != tc.owner || r.SubjectKind(tc.subject) != tc.kind || r.EverySigned(tc.subject) != tc.every {
			t.Errorf("%s: owner %v kind %q", tc.subject, o, r.SubjectKind(tc.subject))
		}
	}
	for _, s := range []string{"asyrevel.r1.out.4", "asyrevel.r2.out.1", "asyrevel.r1.out.*", "asyrevel.r1.>", ""} {
		if r.Owner(s) != nil {
			t.Errorf("%q has an owner", s)
		}
	}
	if got := r.Subjects("party-2"); !slices.Equal(got, []string{"asyrevel.r1.eval.2", "asyrevel.r1.join.2", "asyrevel.r1.out.2", "asyrevel.r1.psi.2", "asyrevel.r1.rcpt.2", "asyrevel.r1.scored.2"}) {
		t.Errorf("party-2 publishes on %v", got)
	}
	if got := r.Inbound("party-2"); !slices.Equal(got, []string{"asyrevel.r1.ctl", "asyrevel.r1.psih.2", "asyrevel.r1.reply.2"}) {
		t.Errorf("party-2 receives %v", got)
	}
	if got := r.Inbound(AggregatorID); len(got) != 18 {
		t.Errorf("aggregator receives %v", got)
	}
	if got := r.Subjects(AggregatorID); len(got) != 8 {
		t.Errorf("aggregator publishes on %v", got)
	}
	if len(r.AllSubjects()) != 26 {
		t.Errorf("%d subjects", len(r.AllSubjects()))
	}

	// File round trip.
	path := filepath.Join(t.TempDir(), "roster.json")
	if err := r.WriteFile(path, false); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteFile(path, false); !errors.Is(err, ErrExists) {
		t.Fatalf("second write: %v", err)
	}
	back, err := ReadRoster(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(back.Marshal()) != string(r.Marshal()) {
		t.Fatalf("round trip changed the roster:\n%s\n%s", back.Marshal(), r.Marshal())
	}
	if p, err := back.Identify(tr.keys["party-3"]); err != nil || p.ID != "party-3" || p.Index() != 3 {
		t.Fatalf("identify: %v %v", p, err)
	}
	other, _ := GenerateKey()
	if _, err := back.Identify(other); err == nil {
		t.Fatal("a key outside the roster was identified")
	}
	for id, k := range tr.keys {
		if strings.Contains(string(r.Marshal()), string(k.Seed())) {
			t.Fatalf("roster holds the seed of %s", id)
		}
	}
}

func TestRosterRejects(t *testing.T) {
	keys := testKeys(t, 4)
	pk := func(i int) string { return keys[i].PublicKey() }
	p := func(id string, i int) Participant { return Participant{ID: id, PublicKey: pk(i)} }
	for _, tc := range []struct {
		name string
		run  string
		ps   []Participant
		want string
	}{
		{"bad run", "a.b", []Participant{p("aggregator", 0), p("party-1", 1)}, "run id"},
		{"no aggregator", "r", []Participant{p("party-1", 1), p("party-2", 2)}, "no aggregator"},
		{"no party", "r", []Participant{p("aggregator", 0)}, "no party"},
		{"hole", "r", []Participant{p("aggregator", 0), p("party-1", 1), p("party-3", 2)}, "lacks party-2"},
		{"duplicate id", "r", []Participant{p("aggregator", 0), p("party-1", 1), p("party-1", 2)}, "twice"},
		{"shared key", "r", []Participant{p("aggregator", 0), p("party-1", 1), p("party-2", 1)}, "same public key"},
		{"bad id", "r", []Participant{p("aggregator", 0), p("party-x", 1)}, "bad participant id"},
		{"wrong role", "r", []Participant{p("aggregator", 0), {ID: "party-1", Role: RoleAggregator, PublicKey: pk(1)}}, "role"},
		{"seed for key", "r", []Participant{p("aggregator", 0), {ID: "party-1", PublicKey: string(keys[1].Seed())}}, "secret seed"},
		{"bad key", "r", []Participant{p("aggregator", 0), {ID: "party-1", PublicKey: "UABC"}}, "not a valid"},
	} {
		_, err := NewRoster(tc.run, tc.ps)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error about %q", tc.name, err, tc.want)
		}
	}
	good := newTestRun(t, "r", 1).roster.Marshal()
	for _, tc := range []struct{ name, data, want string }{
		{"unknown field", strings.Replace(string(good), `"run"`, `"extra": 1, "run"`, 1), "unknown field"},
		{"version", strings.Replace(string(good), `"version": 1`, `"version": 2`, 1), "version"},
		{"trailing", string(good) + "{}", "after"},
		{"not json", "roster", "invalid"},
	} {
		_, err := ParseRoster([]byte(tc.data))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

func TestGenerateRun(t *testing.T) {
	r, keys, err := GenerateRun("g", 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 4 || r.Parties() != 3 {
		t.Fatalf("%d keys, %d parties", len(keys), r.Parties())
	}
	for m, k := range keys {
		p, err := r.Identify(k)
		if err != nil || p.Index() != m {
			t.Fatalf("key %d is %v (%v)", m, p, err)
		}
	}
	for _, q := range []int{0, -1, 1025} {
		if _, _, err := GenerateRun("g", q); err == nil {
			t.Errorf("%d parties accepted", q)
		}
	}
	if _, _, err := GenerateRun("a b", 1); err == nil {
		t.Error("bad run id accepted")
	}
}
