package trust

import (
	"bytes"
	"crypto/ed25519"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
)

// A decoded signature header encodes back to the same text: exactly one
// text per signature.
func FuzzParseSignature(f *testing.F) {
	k := testKeys(f, 1)[0]
	good := SignHead(k, "party-3", "r", "asyrevel.r.out.3", 9, Hash{7})
	f.Add(good.Header())
	f.Add(good.Header()[:50])
	f.Add("aggregator." + good.Header()[len("party-3."):])
	f.Add("")
	f.Add("...")
	f.Fuzz(func(t *testing.T, v string) {
		s, err := ParseSignature(v)
		if err != nil {
			return
		}
		if got := s.Header(); got != v {
			t.Fatalf("%q decodes and encodes to %q", v, got)
		}
		if _, _, err := ParseID(s.Signer); err != nil {
			t.Fatalf("accepted signer %q: %v", s.Signer, err)
		}
	})
}

// A decoded hash encodes back to the same text.
func FuzzParseHash(f *testing.F) {
	f.Add(GenesisHead("r", "s").String())
	f.Add("")
	f.Add("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAB")
	f.Fuzz(func(t *testing.T, v string) {
		h, err := ParseHash(v)
		if err != nil {
			return
		}
		if h.String() != v {
			t.Fatalf("%q decodes and encodes to %q", v, h.String())
		}
	})
}

// fuzzCheckpoint is a signed checkpoint and receipt to seed the corpus.
var fuzzCheckpoint = sync.OnceValues(func() (*Checkpoint, *Receipt) {
	keys := make([]*Key, 3)
	for i := range keys {
		keys[i], _ = GenerateKey()
	}
	cp, err := NewCheckpoint("run-1", 7, true, time.Unix(1700000000, 5), 1234, []Entry{
		{Subject: "asyrevel.run-1.out.1", Seq: 10, Head: Hash{1}, StreamSeq: 1200},
		{Subject: "asyrevel.run-1.ctl", Seq: 3, Head: Hash{2}},
		{Subject: "asyrevel.run-1.reply.1", Seq: 10, Head: Hash{3}, StreamSeq: 1201},
	})
	if err != nil {
		panic(err)
	}
	cp.Sign(keys[0], AggregatorID)
	return cp, Countersign(cp, keys[1], "party-1")
})

// A decoded checkpoint encodes back to the same bytes and is valid.
func FuzzUnmarshalCheckpoint(f *testing.F) {
	cp, _ := fuzzCheckpoint()
	b, _ := cp.MarshalBinary()
	f.Add(b)
	f.Add(b[:len(b)/2])
	f.Add([]byte(checkpointMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := UnmarshalCheckpoint(data)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("decoded an invalid checkpoint: %v", err)
		}
		back, err := c.MarshalBinary()
		if err != nil || !bytes.Equal(back, data) {
			t.Fatalf("not canonical: %v", err)
		}
	})
}

// A decoded receipt encodes back to the same bytes.
func FuzzUnmarshalReceipt(f *testing.F) {
	_, rc := fuzzCheckpoint()
	b, _ := rc.MarshalBinary()
	f.Add(b)
	f.Add(b[:len(b)-1])
	f.Add(append(slices.Clone(b), 0))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := UnmarshalReceipt(data)
		if err != nil {
			return
		}
		back, err := r.MarshalBinary()
		if err != nil || !bytes.Equal(back, data) {
			t.Fatalf("not canonical: %v", err)
		}
	})
}

// A receipt file that decodes re-encodes to an equal receipt, whose binary
// form round-trips too.
func FuzzParseReceiptJSON(f *testing.F) {
	_, rc := fuzzCheckpoint()
	j, _ := rc.MarshalJSON()
	f.Add(j)
	f.Add([]byte(`{"version":1}`))
	f.Add([]byte(`{"version":1,"run":"r","checkpoint":1,"signer":"aggregator","party":"party-1","entries":[{"subject":"a","seq":1,"head":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseReceiptJSON(data)
		if err != nil {
			return
		}
		j, err := r.MarshalJSON()
		if err != nil {
			t.Fatalf("decoded receipt does not encode: %v", err)
		}
		r2, err := ParseReceiptJSON(j)
		if err != nil || !reflect.DeepEqual(r, r2) {
			t.Fatalf("JSON round trip: %v", err)
		}
		b, err := r.MarshalBinary()
		if err != nil {
			t.Fatalf("decoded receipt has no binary form: %v", err)
		}
		r3, err := UnmarshalReceipt(b)
		if err != nil || !reflect.DeepEqual(r, r3) {
			t.Fatalf("binary round trip: %v", err)
		}
	})
}

// A roster that parses has one aggregator, parties 1..Q with distinct
// valid keys, and survives a round trip.
func FuzzParseRoster(f *testing.F) {
	tr := newTestRun(f, "r", 2)
	f.Add(tr.roster.Marshal())
	f.Add([]byte(`{"version":1,"run":"r","participants":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseRoster(data)
		if err != nil {
			return
		}
		if r.Aggregator() == nil || r.Parties() < 1 {
			t.Fatal("roster without aggregator or parties")
		}
		keys := map[string]bool{}
		for m := 1; m <= r.Parties(); m++ {
			p := r.Party(m)
			if p == nil || p.Index() != m || keys[p.PublicKey] {
				t.Fatalf("party %d: %+v", m, p)
			}
			keys[p.PublicKey] = true
			if !nkeys.IsValidPublicUserKey(p.PublicKey) {
				t.Fatalf("invalid key %q", p.PublicKey)
			}
		}
		r2, err := ParseRoster(r.Marshal())
		if err != nil || !bytes.Equal(r2.Marshal(), r.Marshal()) {
			t.Fatalf("round trip: %v", err)
		}
	})
}

// A seed that parses gives a user key that signs what its public key
// verifies.
func FuzzParseKey(f *testing.F) {
	k := testKeys(f, 1)[0]
	f.Add(k.Seed())
	f.Add(append([]byte("-----BEGIN USER NKEY SEED-----\n"), append(k.Seed(), "\n------END USER NKEY SEED------\n"...)...))
	f.Add([]byte(k.PublicKey()))
	f.Fuzz(func(t *testing.T, data []byte) {
		k, err := ParseKey(data)
		if err != nil {
			return
		}
		pub, err := ParsePublicKey(k.PublicKey())
		if err != nil {
			t.Fatalf("parsed key has a bad public key: %v", err)
		}
		sig := k.Sign([]byte("m"))
		if !ed25519.Verify(pub, []byte("m"), sig[:]) {
			t.Fatal("signature does not verify")
		}
	})
}

// Any change of one payload byte anywhere in a log is reported.
func FuzzAuditTamper(f *testing.F) {
	f.Add(uint16(0), uint16(0), byte(1))
	f.Add(uint16(7), uint16(3), byte(0x80))
	f.Add(uint16(41), uint16(19), byte(0xff))
	tr := newTestRun(f, "fz", 2)
	orig := testLog(f, tr, 10, 4)
	f.Fuzz(func(t *testing.T, msg, at uint16, xor byte) {
		if xor == 0 {
			return
		}
		log := slices.Clone(orig)
		i := int(msg) % len(log)
		log[i] = flipByte(log[i], 0) // a copy to change
		log[i].Payload[0] ^= 0x40    // undo flipByte's change
		log[i].Payload[int(at)%len(log[i].Payload)] ^= xor
		rep, _ := CheckLog(tr.roster, slices.Values(ptrs(log)), nil, AuditOptions{Every: 4})
		if rep.Intact() {
			t.Fatalf("byte %d of message %d (%s seq %d) changed, audit says intact", at, i, log[i].Subject, log[i].Seq)
		}
	})
}

// With a receipt of the whole log, removing any one message is reported.
func FuzzAuditDelete(f *testing.F) {
	f.Add(uint16(0))
	f.Add(uint16(41))
	tr := newTestRun(f, "fz", 2)
	orig := testLog(f, tr, 10, 4)
	rc := receiptAt(f, tr, orig, len(orig), "party-2")
	f.Fuzz(func(t *testing.T, msg uint16) {
		i := int(msg) % len(orig)
		log := slices.Delete(slices.Clone(orig), i, i+1)
		for k := range log {
			log[k].StreamSeq = uint64(k + 1) // hide the hole in the stream
		}
		rep, _ := CheckLog(tr.roster, slices.Values(ptrs(log)), []*Receipt{rc}, AuditOptions{Every: 4})
		if rep.Intact() {
			t.Fatalf("message %d (%s seq %d) removed, audit says intact", i, orig[i].Subject, orig[i].Seq)
		}
	})
}
