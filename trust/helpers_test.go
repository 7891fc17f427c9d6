package trust

import (
	"fmt"
	"testing"
)

// testRun holds a roster and the keys of its participants.
type testRun struct {
	roster *Roster
	keys   map[string]*Key // by participant id
}

// keyCache makes key generation once per test binary: keys are only
// secret within a test.
var keyCache []*Key

func testKeys(t testing.TB, n int) []*Key {
	t.Helper()
	for len(keyCache) < n {
		k, err := GenerateKey()
		if err != nil {
			t.Fatal(err)
		}
		keyCache = append(keyCache, k)
	}
	return keyCache[:n]
}

func newTestRun(t testing.TB, run string, parties int) *testRun {
	t.Helper()
	keys := testKeys(t, parties+1)
	tr := &testRun{keys: make(map[string]*Key)}
	var ps []Participant
	for i := 0; i <= parties; i++ {
		id := AggregatorID
		if i > 0 {
			id = PartyID(i)
		}
		ps = append(ps, Participant{ID: id, PublicKey: keys[i].PublicKey()})
		tr.keys[id] = keys[i]
	}
	r, err := NewRoster(run, ps)
	if err != nil {
		t.Fatal(err)
	}
	tr.roster = r
	return tr
}

func (tr *testRun) outbox(t testing.TB, id string, pol Policy) *Outbox {
	t.Helper()
	o, err := NewOutbox(tr.roster, tr.keys[id], pol)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func (tr *testRun) publisher(t testing.TB, id, subject string, pol Policy) *Publisher {
	t.Helper()
	p, err := tr.outbox(t, id, pol).Publisher(subject)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// payload is a deterministic payload of n bytes for message seq.
func payload(seq uint64, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(seq*131 + uint64(i)*7)
	}
	return b
}

// publish makes n messages on subject from publisher p with payloads of
// size bytes; sealLast signs the last one.
func publish(p *Publisher, n, size int, sealLast bool, streamStart uint64) []Msg {
	out := make([]Msg, 0, n)
	for i := 0; i < n; i++ {
		pl := payload(uint64(i+1), size)
		st := p.Append(pl, sealLast && i == n-1)
		out = append(out, Msg{StreamSeq: streamStart + uint64(i), Subject: p.Subject(), Seq: st.Seq, Payload: pl, Sig: st.SigHeader(),
			Prev: string(st.AppendPrevHeader(nil))})
	}
	return out
}

func subj(run, kind string, m int) string {
	if kind == "ctl" {
		return "asyrevel." + run + ".ctl"
	}
	return fmt.Sprintf("asyrevel.%s.%s.%d", run, kind, m)
}
