package broker

import (
	"fmt"
	"hash/maphash"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// The hand-over from the stream to the live feed skips the live copies of
// what the stream delivered, exactly once each, whatever order the live
// feed has them in: a rogue publishing on a party's subject is interleaved
// with the owner differently on the live feed and in the stream. (The
// hand-over used to expect the stream's order and, at the first
// difference, delivered every later live copy a second time.)
func TestHandoffSkipsLiveCopiesInAnyOrder(t *testing.T) {
	msg := func(subj, data string) *nats.Msg {
		return &nats.Msg{Subject: subj, Data: []byte(data), Header: nats.Header{"Asy-Seq": []string{data}}}
	}
	const subj, other = "run.out.2", "run.out.3"
	for _, tc := range []struct {
		name   string
		stream []*nats.Msg // delivered by the catch-up, in stream order
		live   []*nats.Msg // then the live feed, in its order
		want   []string    // delivered live (not skipped)
	}{
		{"same order", []*nats.Msg{msg(subj, "a"), msg(subj, "b")},
			[]*nats.Msg{msg(subj, "a"), msg(subj, "b"), msg(subj, "c")}, []string{"c"}},
		{"rogue interleaved differently",
			[]*nats.Msg{msg(subj, "a"), msg(subj, "rogue1"), msg(subj, "b"), msg(subj, "rogue2"), msg(subj, "c")},
			[]*nats.Msg{msg(subj, "a"), msg(subj, "b"), msg(subj, "rogue1"), msg(subj, "c"), msg(subj, "rogue2"), msg(subj, "d")},
			[]string{"d"}},
		{"published before the subscription (no live copy)",
			[]*nats.Msg{msg(subj, "old"), msg(subj, "a")},
			[]*nats.Msg{msg(subj, "a"), msg(subj, "b")}, []string{"b"}},
		{"a byte-identical replay beyond the stream's copies is delivered",
			[]*nats.Msg{msg(subj, "a")},
			[]*nats.Msg{msg(subj, "a"), msg(subj, "a")}, []string{"a"}},
		{"two identical copies in the stream, two live",
			[]*nats.Msg{msg(subj, "a"), msg(subj, "a")},
			[]*nats.Msg{msg(subj, "a"), msg(subj, "a"), msg(subj, "b")}, []string{"b"}},
		{"subjects apart", []*nats.Msg{msg(subj, "a"), msg(other, "x")},
			[]*nats.Msg{msg(other, "a"), msg(subj, "x"), msg(other, "x"), msg(subj, "a")}, []string{"a", "x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &coreSub{seed: maphash.MakeSeed(), rec: map[string]handoff{}, since: time.Now()}
			for _, m := range tc.stream {
				r := s.rec[m.Subject]
				if r == nil {
					r = handoff{}
					s.rec[m.Subject] = r
				}
				r[s.hash(m.Subject, m.Header, m.Data)]++
			}
			var got []string
			for _, m := range tc.live {
				if !s.handoffDup(m) {
					got = append(got, string(m.Data))
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("delivered live %v, want %v", got, tc.want)
			}
		})
	}
}

// After handoffKeep nothing is compared any more.
func TestHandoffExpires(t *testing.T) {
	s := &coreSub{seed: maphash.MakeSeed(), rec: map[string]handoff{}, since: time.Now().Add(-handoffKeep - time.Second)}
	m := &nats.Msg{Subject: "s", Data: []byte("a")}
	s.rec["s"] = handoff{s.hash(m.Subject, m.Header, m.Data): 1}
	if s.handoffDup(m) {
		t.Error("a live message skipped after the hand-over window")
	}
	if s.rec != nil {
		t.Error("records kept after the hand-over window")
	}
}

// Comparing a live message with the stream's copies allocates nothing.
func TestHandoffDoesNotAllocate(t *testing.T) {
	s := &coreSub{seed: maphash.MakeSeed(), rec: map[string]handoff{}, since: time.Now()}
	m := &nats.Msg{Subject: "s", Data: []byte("live"), Header: nats.Header{"Asy-Seq": []string{"7"}, "Asy-Sig": []string{"x"}, "Nats-Msg-Id": []string{"id"}}}
	s.rec["s"] = handoff{s.hash("s", nil, []byte("other")): 1}
	if n := testing.AllocsPerRun(100, func() { s.handoffDup(m) }); n != 0 {
		t.Errorf("%.1f allocations a live message", n)
	}
}
