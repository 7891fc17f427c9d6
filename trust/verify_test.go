package trust

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
)

// resign replaces m's signature by one over the same head made with
// signer's key, naming named.
func resign(tr *testRun, m Msg, signer, named string) Msg {
	sig, err := ParseSignature(m.Sig)
	if err != nil {
		panic(err)
	}
	s := SignHead(tr.keys[signer], named, tr.roster.Run, m.Subject, m.Seq, sig.Head)
	m.Sig = s.Header()
	return m
}

// flipByte changes one payload byte of m (in a copy).
func flipByte(m Msg, i int) Msg {
	m.Payload = slices.Clone(m.Payload)
	m.Payload[i] ^= 0x40
	return m
}

func TestVerifierFailures(t *testing.T) {
	tr := newTestRun(t, "r", 3)
	const every = 4
	p := tr.publisher(t, "party-1", subj("r", "out", 1), Policy{Every: every, MaxDelay: -1})
	orig := publish(p, 12, 30, true, 1) // signed: 4, 8, 12
	ok := error(nil)
	// After a message is rejected, the chain waits: later messages are gaps
	// until the next signed one (seq 8), which is rejected too but
	// resynchronises the chain at its signed head.
	cases := []struct {
		name     string
		mutate   func(ms []Msg) []Msg
		want     []error // per message fed
		unsigned int     // accepted messages left uncovered
	}{
		{"intact", nil, []error{ok, ok, ok, ok, ok, ok, ok, ok, ok, ok, ok, ok}, 0},
		{"byte changed in an unsigned message", func(ms []Msg) []Msg {
			ms[1] = flipByte(ms[1], 3)
			return ms
		}, []error{ok, ok, ok, ErrBrokenChain, ok, ok, ok, ok, ok, ok, ok, ok}, 0},
		{"byte changed in a signed message", func(ms []Msg) []Msg {
			ms[7] = flipByte(ms[7], 0)
			return ms
		}, []error{ok, ok, ok, ok, ok, ok, ok, ErrBrokenChain, ok, ok, ok, ok}, 0},
		{"message removed", func(ms []Msg) []Msg {
			return slices.Delete(ms, 1, 2)
		}, []error{ok, ErrGap, ErrGap, ok, ok, ok, ok, ok, ok, ok, ok}, 0},
		{"two swapped", func(ms []Msg) []Msg {
			ms[1], ms[2] = ms[2], ms[1]
			return ms
		}, []error{ok, ErrGap, ok, ErrGap, ok, ok, ok, ok, ok, ok, ok, ok}, 0},
		{"replay", func(ms []Msg) []Msg {
			return slices.Insert(ms, 6, ms[4])
		}, []error{ok, ok, ok, ok, ok, ok, ErrReplay, ok, ok, ok, ok, ok, ok}, 0},
		{"replay of a signed message", func(ms []Msg) []Msg {
			return append(ms, ms[11])
		}, []error{ok, ok, ok, ok, ok, ok, ok, ok, ok, ok, ok, ok, ErrReplay}, 0},
		{"tail truncated", func(ms []Msg) []Msg {
			return ms[:10]
		}, []error{ok, ok, ok, ok, ok, ok, ok, ok, ok, ok}, 2},
		{"re-signed with another participant's key, naming it", func(ms []Msg) []Msg {
			ms[3] = resign(tr, ms[3], "party-2", "party-2")
			return ms
		}, []error{ok, ok, ok, ErrWrongSigner, ErrGap, ErrGap, ErrGap, ErrGap, ok, ok, ok, ok}, 0},
		{"re-signed by the aggregator", func(ms []Msg) []Msg {
			ms[3] = resign(tr, ms[3], AggregatorID, AggregatorID)
			return ms
		}, []error{ok, ok, ok, ErrWrongSigner, ErrGap, ErrGap, ErrGap, ErrGap, ok, ok, ok, ok}, 0},
		{"re-signed with another participant's key, naming the owner", func(ms []Msg) []Msg {
			ms[3] = resign(tr, ms[3], "party-2", "party-1")
			return ms
		}, []error{ok, ok, ok, ErrBadSignature, ErrGap, ErrGap, ErrGap, ErrGap, ok, ok, ok, ok}, 0},
		{"signature stripped", func(ms []Msg) []Msg {
			ms[3].Sig = ""
			return ms
		}, []error{ok, ok, ok, ErrUnsigned, ErrGap, ErrGap, ErrGap, ErrGap, ok, ok, ok, ok}, 0},
		{"signature corrupted", func(ms []Msg) []Msg {
			b := []byte(ms[3].Sig)
			b[len(b)-10] ^= 1
			ms[3].Sig = string(b)
			return ms
		}, []error{ok, ok, ok, ErrBadSignature, ErrGap, ErrGap, ErrGap, ErrGap, ok, ok, ok, ok}, 0},
		{"malformed signature header", func(ms []Msg) []Msg {
			ms[3].Sig = "party-1." + strings.Repeat("A", 10)
			return ms
		}, []error{ok, ok, ok, ErrMalformed, ErrGap, ErrGap, ErrGap, ErrGap, ok, ok, ok, ok}, 0},
		{"signer not in the roster", func(ms []Msg) []Msg {
			ms[3].Sig = "party-9" + ms[3].Sig[len("party-1"):]
			return ms
		}, []error{ok, ok, ok, ErrUnknownKey, ErrGap, ErrGap, ErrGap, ErrGap, ok, ok, ok, ok}, 0},
		{"sequence 0", func(ms []Msg) []Msg {
			m := ms[0]
			m.Seq = 0
			return append([]Msg{m}, ms...)
		}, []error{ErrReplay, ok, ok, ok, ok, ok, ok, ok, ok, ok, ok, ok, ok}, 0},
		{"unknown and foreign subjects", func(ms []Msg) []Msg {
			a, b := ms[0], ms[0]
			a.Subject, b.Subject = "asyrevel.r.out.9", subj("r", "reply", 1)
			return append([]Msg{a, b}, ms...)
		}, []error{ErrUnknownSubject, ErrUnknownSubject, ok, ok, ok, ok, ok, ok, ok, ok, ok, ok, ok, ok}, 0},
		{"message moved to another subject", func(ms []Msg) []Msg {
			m := ms[0]
			m.Subject = subj("r", "out", 2)
			m.Sig = ms[3].Sig
			m.Seq = 1
			return append([]Msg{m}, ms...)
		}, []error{ErrBadSignature, ok, ok, ok, ok, ok, ok, ok, ok, ok, ok, ok, ok}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ms := slices.Clone(orig)
			if tc.mutate != nil {
				ms = tc.mutate(ms)
			}
			if len(ms) != len(tc.want) {
				t.Fatalf("test table: %d messages, %d expectations", len(ms), len(tc.want))
			}
			v, err := NewVerifier(tr.roster, VerifierOptions{Subjects: tr.roster.Inbound(AggregatorID), Every: every})
			if err != nil {
				t.Fatal(err)
			}
			wantCounts := map[string]uint64{}
			var accepted uint64
			for i := range ms {
				err := v.Verify(&ms[i])
				if (err == nil) != (tc.want[i] == nil) || err != nil && !errors.Is(err, tc.want[i]) {
					t.Fatalf("message %d (seq %d): %v, want %v", i+1, ms[i].Seq, err, tc.want[i])
				}
				if err != nil {
					wantCounts[Reason(err)]++
				} else {
					accepted++
				}
			}
			if got := v.Rejected(); fmt.Sprint(got) != fmt.Sprint(wantCounts) {
				t.Errorf("counts %v, want %v", got, wantCounts)
			}
			if v.Accepted() != accepted {
				t.Errorf("accepted %d, want %d", v.Accepted(), accepted)
			}
			if v.Unsigned() != tc.unsigned || v.UnsignedOn(p.Subject()) != tc.unsigned {
				t.Errorf("unsigned %d, want %d", v.Unsigned(), tc.unsigned)
			}
		})
	}
}

func TestVerifierEverySignedSubjects(t *testing.T) {
	tr := newTestRun(t, "r", 1)
	v, _ := NewVerifier(tr.roster, VerifierOptions{Subjects: tr.roster.Inbound("party-1")})
	ctl := tr.publisher(t, AggregatorID, subj("r", "ctl", 0), Policy{})
	ms := publish(ctl, 2, 10, false, 1)
	if err := v.Verify(&ms[0]); err != nil {
		t.Fatal(err)
	}
	ms[1].Sig = ""
	if err := v.Verify(&ms[1]); !errors.Is(err, ErrUnsigned) {
		t.Fatalf("unsigned control message: %v", err)
	}
	// The party's verifier does not take another party's replies.
	rep := tr.publisher(t, AggregatorID, subj("r", "reply", 1), Policy{})
	m := publish(rep, 1, 10, true, 3)[0]
	if err := v.Verify(&m); err != nil {
		t.Fatal(err)
	}
	seq, head, ok := v.Head(m.Subject)
	if !ok || seq != 1 || head != rep.Head() {
		t.Fatalf("head %d %v", seq, ok)
	}
	if h, ok := v.HeadAt(m.Subject, 1); !ok || h != head {
		t.Fatal("HeadAt")
	}
	if e := v.Entries(); len(e) != 2 || e[1].Subject != m.Subject || e[1].StreamSeq != 3 {
		t.Fatalf("entries %+v", e)
	}
	if _, err := NewVerifier(tr.roster, VerifierOptions{Subjects: []string{"asyrevel.x.out.1"}}); err == nil {
		t.Fatal("verifier for a subject outside the run")
	}
}

func TestVerifierLate(t *testing.T) {
	tr := newTestRun(t, "r", 1)
	ctlSubj := subj("r", "ctl", 0)
	ctl := tr.publisher(t, AggregatorID, ctlSubj, Policy{})
	ms := publish(ctl, 5, 10, false, 1)
	tests := []struct {
		name string
		late bool
		edit func(m *Msg)
		want error
	}{
		{"late, intact", true, func(*Msg) {}, nil},
		{"not late", false, func(*Msg) {}, ErrGap},
		{"late, no previous head", true, func(m *Msg) { m.Prev = "" }, ErrGap},
		{"late, payload altered", true, func(m *Msg) { m.Payload = append([]byte("x"), m.Payload[1:]...) }, ErrBrokenChain},
		{"late, previous head altered", true, func(m *Msg) { m.Prev = ms[0].Prev }, ErrBrokenChain},
		{"late, malformed previous head", true, func(m *Msg) { m.Prev = "!" }, ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var late []string
			if tc.late {
				late = []string{ctlSubj}
			}
			v, _ := NewVerifier(tr.roster, VerifierOptions{Subjects: tr.roster.Inbound("party-1"), Late: late})
			m := ms[2]
			tc.edit(&m)
			err := v.Verify(&m)
			if !errors.Is(err, tc.want) && (tc.want != nil || err != nil) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if tc.want != nil {
				return
			}
			for _, m := range ms[3:] {
				if err := v.Verify(&m); err != nil {
					t.Fatalf("seq %d after a late start: %v", m.Seq, err)
				}
			}
			if err := v.Verify(&ms[1]); !errors.Is(err, ErrReplay) {
				t.Fatalf("an earlier message after a late start: %v", err)
			}
		})
	}
}

func TestVerifierDoesNotAllocate(t *testing.T) {
	tr := newTestRun(t, "r", 1)
	p := tr.publisher(t, "party-1", subj("r", "out", 1), Policy{Every: 8, MaxDelay: -1})
	ms := publish(p, 800, 66, false, 1)
	v, _ := NewVerifier(tr.roster, VerifierOptions{Every: 8})
	i := 0
	n := testing.AllocsPerRun(len(ms)-1, func() {
		m := Msg{Subject: ms[i].Subject, Seq: ms[i].Seq, Payload: ms[i].Payload, Sig: ms[i].Sig} // on the stack
		if err := v.Verify(&m); err != nil {
			t.Fatal(err)
		}
		i++
	})
	if n != 0 {
		t.Fatalf("%v allocations per message", n)
	}
	q := tr.publisher(t, "party-1", subj("r", "eval", 1), Policy{Every: 8, MaxDelay: -1})
	pl := payload(1, 66)
	if n := testing.AllocsPerRun(800, func() { q.Append(pl, false) }); n != 0 {
		t.Fatalf("%v allocations per append", n)
	}
}

// TestVerifierConcurrent feeds several subjects from several goroutines
// (run with -race).
func TestVerifierConcurrent(t *testing.T) {
	tr := newTestRun(t, "r", 4)
	v, _ := NewVerifier(tr.roster, VerifierOptions{Every: 5})
	var wg sync.WaitGroup
	for m := 1; m <= 4; m++ {
		p := tr.publisher(t, PartyID(m), subj("r", "out", m), Policy{Every: 5})
		ms := publish(p, 200, 40, true, 1)
		wg.Go(func() {
			for i := range ms {
				if err := v.Verify(&ms[i]); err != nil {
					t.Error(err)
					return
				}
				if i%50 == 0 {
					v.Unsigned()
					v.Entries()
				}
			}
		})
	}
	wg.Wait()
	if v.Accepted() != 800 || v.Unsigned() != 0 {
		t.Fatalf("accepted %d, unsigned %d", v.Accepted(), v.Unsigned())
	}
}

func TestReason(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("x: %w", ErrGap), "gap"},
		{fmt.Errorf("%w: %w", ErrBadSignature, ErrMalformed), "bad_signature"},
		{fmt.Errorf("%w: and %w", ErrGap, ErrBadSignature), "gap"},
		{errors.New("other"), "other"},
		{ErrWrongSigner, "wrong_signer"},
		{ErrUnknownKey, "unknown_key"},
		{ErrBrokenChain, "broken_chain"},
		{ErrUnsigned, "unsigned"},
		{ErrReplay, "replay"},
		{ErrUnknownSubject, "unknown_subject"},
	} {
		if got := Reason(tc.err); got != tc.want {
			t.Errorf("Reason(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
