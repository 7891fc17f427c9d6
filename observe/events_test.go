package observe

import (
	"strings"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/aggregator"
)

// Each change between two samples of the aggregator is one event of its
// kind, about its party; nothing else makes one.
func TestEventsFromSamples(t *testing.T) {
	base := func() *aggregator.Snapshot {
		return &aggregator.Snapshot{Phase: "training", Parties: make([]aggregator.PartySnapshot, 3), Rejected: map[string]int64{"trust-bad_signature": 2}}
	}
	cases := []struct {
		name  string
		edit  func(s *aggregator.Snapshot)
		kind  string
		party int
		text  string
	}{
		{"nothing", func(s *aggregator.Snapshot) {}, "", 0, ""},
		{"departed", func(s *aggregator.Snapshot) { s.Parties[2].Departed, s.Parties[2].Why = true, "no answer" }, "departed", 3, "party 3 departed: no answer"},
		{"refused", func(s *aggregator.Snapshot) { s.Parties[0].Refused = "wrong file" }, "refused", 1, "party 1 refused: wrong file"},
		{"broker", func(s *aggregator.Snapshot) { s.Unreachable = time.Now() }, "broker", 0, "unreachable"},
		{"stopping", func(s *aggregator.Snapshot) { s.Phase, s.StopReason = "stopping", "duration reached" }, "phase", 0, "duration reached"},
		{"rejected", func(s *aggregator.Snapshot) { s.Rejected["trust-bad_signature"] = 5 }, "rejected", 0, "3 trust-bad_signature"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := New(Info{})
			p := base()
			w.prevRejects = map[string]int64{"trust-bad_signature": 2}
			cur := base()
			c.edit(cur)
			w.diff(p, cur)
			if c.kind == "" {
				if len(w.events) != 0 {
					t.Fatalf("events %+v, want none", w.events)
				}
				return
			}
			if len(w.events) != 1 || w.events[0].Kind != c.kind || w.events[0].Party != c.party || !strings.Contains(w.events[0].Text, c.text) {
				t.Fatalf("events %+v, want one %s about party %d saying %q", w.events, c.kind, c.party, c.text)
			}
		})
	}
	// Back: a departed party that sends again.
	w := New(Info{})
	w.prevRejects = map[string]int64{"trust-bad_signature": 2}
	p, cur := base(), base()
	p.Parties[1].Departed = true
	w.diff(p, cur)
	if len(w.events) != 1 || w.events[0].Kind != "returned" || w.events[0].Party != 2 {
		t.Fatalf("events %+v, want party 2 returned", w.events)
	}
}
