package trust

import (
	"errors"
	"strings"
	"testing"
)

func TestParseSignature(t *testing.T) {
	tr := newTestRun(t, "r", 2)
	s := SignHead(tr.keys["party-2"], "party-2", "r", subj("r", "out", 2), 7, Hash{9})
	text := s.Header()
	if len(text) != SigHeaderLen("party-2") || !strings.HasPrefix(text, "party-2.") {
		t.Fatalf("header %q", text)
	}
	got, err := ParseSignature(text)
	if err != nil || got != s {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	if n := testing.AllocsPerRun(100, func() { ParseSignature(text) }); n != 0 {
		t.Fatalf("%v allocations per parse", n)
	}
	head, sig := text[len("party-2."):len("party-2.")+43], text[len("party-2.")+44:]
	for _, bad := range []string{
		"",
		".",
		"party-2",
		"party-2." + head,
		"party-2." + head + "." + sig + "A",
		"party-2." + head + "." + sig[:85],
		"party-2." + head + "x" + sig,
		"party-2." + head + "." + sig[:85] + "=",
		"party-02." + head + "." + sig,
		"bob." + head + "." + sig,
		"." + head + "." + sig,
		"party-2." + head[:42] + "B." + sig, // non-canonical trailing bits
		"party-2." + head + "." + sig[:85] + "B",
		"party-2." + head + "." + sig[:40] + "\n" + sig[41:],
		"party-2." + head + "." + sig[:40] + "+" + sig[41:],
		"party-2.party-2." + head + "." + sig,
	} {
		if _, err := ParseSignature(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestVerifyHead(t *testing.T) {
	tr := newTestRun(t, "r", 2)
	s := subj("r", "out", 1)
	good := SignHead(tr.keys["party-1"], "party-1", "r", s, 3, Hash{1})
	if err := VerifyHead(tr.roster, s, 3, &good); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		subject string
		seq     uint64
		sig     Signature
		want    error
	}{
		{"other seq", s, 4, good, ErrBadSignature},
		{"other subject", subj("r", "out", 2), 3, good, ErrBadSignature},
		{"other head", s, 3, Signature{Signer: "party-1", Head: Hash{2}, Sig: good.Sig}, ErrBadSignature},
		{"other run", s, 3, SignHead(tr.keys["party-1"], "party-1", "r2", s, 3, Hash{1}), ErrBadSignature},
		{"foreign signer", s, 3, SignHead(tr.keys["party-2"], "party-2", "r", s, 3, Hash{1}), ErrWrongSigner},
		{"foreign key, owner named", s, 3, SignHead(tr.keys["party-2"], "party-1", "r", s, 3, Hash{1}), ErrBadSignature},
		{"unknown signer", s, 3, Signature{Signer: "party-3", Head: Hash{1}, Sig: good.Sig}, ErrUnknownKey},
		{"unknown subject", "asyrevel.r.x", 3, good, ErrUnknownSubject},
	} {
		if err := VerifyHead(tr.roster, tc.subject, tc.seq, &tc.sig); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}
