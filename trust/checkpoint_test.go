package trust

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// exchange runs a small exchange between the aggregator and two parties
// and returns everyone's state.
type exchange struct {
	tr        *testRun
	agg       *Outbox
	aggV      *Verifier
	party     [3]*Outbox
	partyV    [3]*Verifier
	streamSeq uint64
}

func newExchange(t *testing.T, steps int) *exchange {
	t.Helper()
	tr := newTestRun(t, "r", 2)
	x := &exchange{tr: tr, agg: tr.outbox(t, AggregatorID, Policy{Every: 4, MaxDelay: -1})}
	var err error
	if x.aggV, err = NewVerifier(tr.roster, VerifierOptions{Subjects: tr.roster.Inbound(AggregatorID), Every: 4}); err != nil {
		t.Fatal(err)
	}
	for m := 1; m <= 2; m++ {
		x.party[m] = tr.outbox(t, PartyID(m), Policy{Every: 4, MaxDelay: -1})
		if x.partyV[m], err = NewVerifier(tr.roster, VerifierOptions{Subjects: tr.roster.Inbound(PartyID(m)), Every: 4}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < steps; i++ {
		for m := 1; m <= 2; m++ {
			x.send(t, x.party[m], subj("r", "out", m), payload(uint64(i), 30), x.aggV)
			x.send(t, x.agg, subj("r", "reply", m), payload(uint64(i), 20), x.partyV[m])
		}
	}
	return x
}

func (x *exchange) send(t *testing.T, o *Outbox, subject string, pl []byte, to ...*Verifier) {
	t.Helper()
	p, err := o.Publisher(subject)
	if err != nil {
		t.Fatal(err)
	}
	st := p.Append(pl, false)
	x.streamSeq++
	m := Msg{StreamSeq: x.streamSeq, Subject: subject, Seq: st.Seq, Payload: pl, Sig: st.SigHeader()}
	for _, v := range to {
		if err := v.Verify(&m); err != nil {
			t.Fatal(err)
		}
	}
}

// checkpoint makes the aggregator's checkpoint of its current view.
func (x *exchange) checkpoint(t *testing.T, n uint64, final bool) *Checkpoint {
	t.Helper()
	entries := append(x.agg.Entries(), x.aggV.Entries()...)
	cp, err := NewCheckpoint("r", n, final, time.Unix(1700000000, 123), x.streamSeq, entries)
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.Sign(x.tr.keys[AggregatorID], AggregatorID); err != nil {
		t.Fatal(err)
	}
	return cp
}

func (x *exchange) views(m int) []View {
	id := PartyID(m)
	return []View{
		{Source: x.party[m], Subjects: x.tr.roster.Subjects(id), Own: true},
		{Source: x.partyV[m], Subjects: x.tr.roster.Inbound(id)},
	}
}

func TestCheckpointAndReceipt(t *testing.T) {
	x := newExchange(t, 10)
	x.send(t, x.agg, subj("r", "ctl", 0), []byte("eval"), x.partyV[1], x.partyV[2])
	cp := x.checkpoint(t, 1, false)
	if err := cp.Verify(x.tr.roster); err != nil {
		t.Fatal(err)
	}
	if len(cp.Entries) != 5 { // ctl, out.1, out.2, reply.1, reply.2
		t.Fatalf("entries %+v", cp.Entries)
	}
	for m := 1; m <= 2; m++ {
		res := CheckCheckpoint(cp, x.views(m)...)
		if !res.OK() || len(res.Pending) > 0 || res.Matched != 3 {
			t.Fatalf("party %d: %+v", m, res)
		}
	}
	rc := Countersign(cp, x.tr.keys["party-1"], "party-1")
	if err := rc.Verify(x.tr.roster); err != nil {
		t.Fatal(err)
	}

	// Binary round trips are exact.
	b, err := rc.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	back, err := UnmarshalReceipt(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, rc) || back.Verify(x.tr.roster) != nil {
		t.Fatal("binary round trip changed the receipt")
	}
	cb, _ := cp.MarshalBinary()
	cback, err := UnmarshalCheckpoint(cb)
	if err != nil || !reflect.DeepEqual(cback, cp) {
		t.Fatalf("checkpoint round trip: %v", err)
	}
	// Every truncation fails.
	for i := range len(b) {
		if _, err := UnmarshalReceipt(b[:i]); err == nil {
			t.Fatalf("receipt truncated to %d bytes decoded", i)
		}
	}

	// File round trip.
	dir := filepath.Join(t.TempDir(), "receipts")
	path, err := WriteReceipt(dir, rc)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(path) != rc.Checkpoint.Run+"."+rc.Party+".checkpoint-000001.json" {
		t.Fatal(path)
	}
	if _, err := WriteReceipt(dir, rc); err != nil {
		t.Fatalf("rewriting the same receipt: %v", err)
	}
	other := Countersign(x.checkpoint(t, 1, true), x.tr.keys["party-1"], "party-1")
	if _, err := WriteReceipt(dir, other); !errors.Is(err, ErrExists) {
		t.Fatalf("another receipt under the same number: %v", err)
	}
	rc2 := Countersign(x.checkpoint(t, 2, true), x.tr.keys["party-1"], "party-1")
	if _, err := WriteReceipt(dir, rc2); err != nil {
		t.Fatal(err)
	}
	all, err := ReadReceipts(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || !reflect.DeepEqual(all[0], rc) || !reflect.DeepEqual(all[1], rc2) {
		t.Fatalf("read back %d receipts", len(all))
	}
	for _, r := range all {
		if err := r.Verify(x.tr.roster); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ReadReceipts(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("missing folder read")
	}
	os.WriteFile(filepath.Join(dir, "junk.json"), []byte("{}"), 0o644)
	if _, err := ReadReceipts(dir); err == nil || !strings.Contains(err.Error(), "junk.json") {
		t.Fatalf("junk file: %v", err)
	}
}

func TestCheckpointTampering(t *testing.T) {
	x := newExchange(t, 5)
	cp := x.checkpoint(t, 3, false)
	rc := Countersign(cp, x.tr.keys["party-2"], "party-2")
	for _, tc := range []struct {
		name   string
		change func(rc *Receipt)
		want   error
	}{
		{"run", func(rc *Receipt) { rc.Checkpoint.Run = "r2" }, ErrBadSignature},
		{"number", func(rc *Receipt) { rc.Checkpoint.Number++ }, ErrBadSignature},
		{"final", func(rc *Receipt) { rc.Checkpoint.Final = true }, ErrBadSignature},
		{"time", func(rc *Receipt) { rc.Checkpoint.UnixNano++ }, ErrBadSignature},
		{"stream seq", func(rc *Receipt) { rc.Checkpoint.StreamSeq-- }, ErrBadSignature},
		{"entry seq", func(rc *Receipt) { rc.Checkpoint.Entries[1].Seq-- }, ErrBadSignature},
		{"entry head", func(rc *Receipt) { rc.Checkpoint.Entries[2].Head[5] ^= 1 }, ErrBadSignature},
		{"entry stream seq", func(rc *Receipt) { rc.Checkpoint.Entries[0].StreamSeq++ }, ErrBadSignature},
		{"entry removed", func(rc *Receipt) { rc.Checkpoint.Entries = rc.Checkpoint.Entries[1:] }, ErrBadSignature},
		{"signature", func(rc *Receipt) { rc.Checkpoint.Sig[0] ^= 1 }, ErrBadSignature},
		{"signer", func(rc *Receipt) { rc.Checkpoint.Signer = "party-1" }, ErrWrongSigner},
		{"countersignature", func(rc *Receipt) { rc.PartySig[63] ^= 1 }, ErrBadSignature},
		{"party", func(rc *Receipt) { rc.Party = "party-1" }, ErrBadSignature},
		{"party outside roster", func(rc *Receipt) { rc.Party = "party-7" }, ErrUnknownKey},
		{"countersigned by the aggregator", func(rc *Receipt) {
			*rc = *Countersign(&rc.Checkpoint, x.tr.keys[AggregatorID], AggregatorID)
		}, ErrWrongSigner},
		{"signed by a party", func(rc *Receipt) {
			rc.Checkpoint.Sign(x.tr.keys["party-1"], AggregatorID)
			*rc = *Countersign(&rc.Checkpoint, x.tr.keys["party-2"], "party-2")
		}, ErrBadSignature},
		{"entries unsorted", func(rc *Receipt) {
			e := rc.Checkpoint.Entries
			e[0], e[1] = e[1], e[0]
		}, ErrMalformed},
		{"foreign subject", func(rc *Receipt) {
			rc.Checkpoint.Entries = append(rc.Checkpoint.Entries, Entry{Subject: "zzz", Seq: 1})
			rc.Checkpoint.Sign(x.tr.keys[AggregatorID], AggregatorID)
			*rc = *Countersign(&rc.Checkpoint, x.tr.keys["party-2"], "party-2")
		}, ErrUnknownSubject},
	} {
		c := *rc
		c.Checkpoint.Entries = append([]Entry(nil), rc.Checkpoint.Entries...)
		tc.change(&c)
		if err := c.Verify(x.tr.roster); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if err := rc.Verify(x.tr.roster); err != nil {
		t.Fatalf("the original was changed: %v", err)
	}
}

func TestCheckCheckpoint(t *testing.T) {
	x := newExchange(t, 6)
	cp := x.checkpoint(t, 1, false)
	out1, reply1 := subj("r", "out", 1), subj("r", "reply", 1)
	set := func(subject string, f func(e *Entry)) *Checkpoint {
		c := *cp
		c.Entries = append([]Entry(nil), cp.Entries...)
		for i := range c.Entries {
			if c.Entries[i].Subject == subject {
				f(&c.Entries[i])
			}
		}
		return &c
	}
	for _, tc := range []struct {
		name                                 string
		cp                                   *Checkpoint
		matched, mismatched, pending, unchkd int
	}{
		{"agreed", cp, 2, 0, 0, 0},
		{"own head differs", set(out1, func(e *Entry) { e.Head[0] ^= 1 }), 1, 1, 0, 0},
		{"own messages invented", set(out1, func(e *Entry) { e.Seq += 3 }), 1, 1, 0, 0},
		{"received head differs", set(reply1, func(e *Entry) { e.Head[0] ^= 1 }), 1, 1, 0, 0},
		{"received not yet", set(reply1, func(e *Entry) { e.Seq++ }), 1, 0, 1, 0},
		{"own, behind", set(out1, func(e *Entry) { e.Seq = 3; e.Head, _ = x.party[1].HeadAt(out1, 3) }), 2, 0, 0, 0},
		{"own, behind with another head", set(out1, func(e *Entry) { e.Seq = 3 }), 1, 1, 0, 0},
	} {
		res := CheckCheckpoint(tc.cp, x.views(1)...)
		if res.Matched != tc.matched || len(res.Mismatched) != tc.mismatched || len(res.Pending) != tc.pending || len(res.Unchecked) != tc.unchkd {
			t.Errorf("%s: %+v", tc.name, res)
		}
		if res.OK() != (tc.mismatched == 0) {
			t.Errorf("%s: OK %v", tc.name, res.OK())
		}
	}
	// With a short history, an old entry cannot be checked.
	short := x.tr.outbox(t, "party-1", Policy{History: 2})
	p, _ := short.Publisher(out1)
	publish(p, 5, 10, false, 1)
	c := *cp
	c.Entries = []Entry{{Subject: out1, Seq: 1}}
	res := CheckCheckpoint(&c, View{Source: short, Subjects: []string{out1}, Own: true})
	if len(res.Unchecked) != 1 || !res.OK() {
		t.Fatalf("short history: %+v", res)
	}
}

func TestReceiptJSON(t *testing.T) {
	x := newExchange(t, 3)
	rc := Countersign(x.checkpoint(t, 4, true), x.tr.keys["party-1"], "party-1")
	data, err := json.Marshal(rc)
	if err != nil {
		t.Fatal(err)
	}
	var back Receipt
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&back, rc) {
		t.Fatal("JSON round trip changed the receipt")
	}
	for _, field := range []string{`"run"`, `"checkpoint"`, `"final"`, `"unix_nano"`, `"stream_seq"`, `"signer"`, `"signature"`, `"party"`, `"party_signature"`, `"entries"`, `"head"`} {
		if !bytes.Contains(data, []byte(field)) {
			t.Errorf("receipt file lacks %s", field)
		}
	}
	for _, tc := range []struct{ name, from, to string }{
		{"unknown field", `"run"`, `"extra": 0, "run"`},
		{"version", `"version":1`, `"version":2`},
		{"short signature", `"signature":"`, `"signature":"AA`},
		{"bad party", `"party":"party-1"`, `"party":"party-01"`},
		{"bad head", `"head":"`, `"head":"x`},
	} {
		bad := strings.Replace(string(data), tc.from, tc.to, 1)
		if bad == string(data) {
			t.Fatalf("%s: test did not change the file", tc.name)
		}
		if _, err := ParseReceiptJSON([]byte(bad)); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}
