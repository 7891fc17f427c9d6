package trust

import (
	"bytes"
	"errors"
	"slices"
	"testing"
)

// A sender that lost its chain (a refused party's new process) restarts
// it: the receiver that saw the first attempt accepts the restart, and
// the auditor finds the log intact. Nobody else can restart a chain, and
// a restart is no way to replay or replace what was accepted.
func TestRestart(t *testing.T) {
	tr := newTestRun(t, "rs", 2)
	s := subj("rs", "join", 1)
	first := publish(tr.publisher(t, "party-1", s, Policy{Every: 4}), 3, 40, true, 1)
	p2 := tr.publisher(t, "party-1", s, Policy{Every: 4})
	p2.Restart(3)
	if p2.Next() != 4 {
		t.Fatalf("restarted at %d, want 4", p2.Next())
	}
	second := publish(p2, 5, 40, true, 4)
	if second[0].Sig == "" || second[0].Prev != RestartHead("rs", s, 3).String() {
		t.Fatalf("the restart is not signed with the restart head: %+v", second[0])
	}
	v, _ := NewVerifier(tr.roster, VerifierOptions{Every: 4})
	for _, m := range slices.Concat(first, second) {
		if err := v.Verify(&m); err != nil {
			t.Fatalf("seq %d: %v", m.Seq, err)
		}
	}
	if v.Restarts() != 1 || v.LastSeq(s) != 8 {
		t.Fatalf("%d restarts, at seq %d", v.Restarts(), v.LastSeq(s))
	}
	for _, opts := range []AuditOptions{{Every: 4}, {Every: 4, AsReceiver: true}} {
		rep, err := CheckLog(tr.roster, slices.Values(ptrs(slices.Concat(first, second))), nil, opts)
		if err != nil || !rep.Intact() || rep.Restarts != 1 {
			t.Fatalf("audit %+v: %v %+v", opts, err, rep)
		}
	}

	// Refused: a replay of the restart, a restart signed by another
	// party, a restart at or below the last accepted seq, and a restart
	// whose payload was changed.
	v2, _ := NewVerifier(tr.roster, VerifierOptions{Every: 4})
	for _, m := range first {
		v2.Verify(&m)
	}
	// party-2's key on party-1's subject, as a forger would.
	forged := func() Msg {
		p := &Publisher{o: tr.outbox(t, "party-2", Policy{Every: 4}), subject: s, hist: newRing(0)}
		p.Restart(3)
		return publish(p, 1, 40, true, 9)[0]
	}
	p3 := tr.publisher(t, "party-1", s, Policy{Every: 4})
	p3.Restart(2)
	low := publish(p3, 1, 40, true, 10)[0]
	changed := slices.Clone(second[0].Payload)
	changed[0] ^= 1
	for _, tc := range []struct {
		name string
		m    Msg
		want error
	}{
		{"signed by another party", forged(), ErrWrongSigner},
		{"at an accepted seq", low, ErrReplay},
		{"payload changed", Msg{StreamSeq: 4, Subject: s, Seq: 4, Payload: changed, Sig: second[0].Sig, Prev: second[0].Prev}, ErrBrokenChain},
	} {
		if err := v2.Verify(&tc.m); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if v2.LastSeq(s) != 3 || v2.Restarts() != 0 {
		t.Fatalf("a refused restart moved the chain to %d", v2.LastSeq(s))
	}
	if err := v.Verify(&second[0]); !errors.Is(err, ErrReplay) {
		t.Fatalf("the restart replayed: %v", err)
	}
}

// A restart after unsigned messages leaves them unproven: the auditor
// says so.
func TestRestartUnsealedTail(t *testing.T) {
	tr := newTestRun(t, "rs", 1)
	s := subj("rs", "out", 1)
	first := publish(tr.publisher(t, "party-1", s, Policy{Every: 8, MaxDelay: -1}), 3, 40, false, 1)
	p2 := tr.publisher(t, "party-1", s, Policy{Every: 8, MaxDelay: -1})
	p2.Restart(3)
	second := publish(p2, 2, 40, true, 4)
	rep, err := CheckLog(tr.roster, slices.Values(ptrs(slices.Concat(first, second))), nil, AuditOptions{Every: 8})
	if err != nil || rep.Intact() || rep.Counts[string(ProblemUnsealedTail)] != 1 || rep.Restarts != 1 {
		t.Fatalf("audit: %v %+v", err, rep)
	}
}

// A verifier restored from a saved state goes on where the saved one
// was: the next messages are accepted, the earlier ones are replays.
func TestVerifierRestore(t *testing.T) {
	tr := newTestRun(t, "rs", 1)
	s := subj("rs", "out", 1)
	msgs := publish(tr.publisher(t, "party-1", s, Policy{Every: 4, MaxDelay: -1}), 10, 30, true, 1)
	v, _ := NewVerifier(tr.roster, VerifierOptions{Every: 4})
	for _, m := range msgs[:6] {
		if err := v.Verify(&m); err != nil {
			t.Fatal(err)
		}
	}
	saved := v.State()
	if len(saved) != 1 || saved[0].Seq != 6 || saved[0].Unsigned != v.UnsignedOn(s) || saved[0].StreamSeq != 6 {
		t.Fatalf("state %+v", saved)
	}
	v2, _ := NewVerifier(tr.roster, VerifierOptions{Every: 4})
	if err := v2.Restore(saved); err != nil {
		t.Fatal(err)
	}
	if err := v2.Verify(&msgs[5]); !errors.Is(err, ErrReplay) {
		t.Fatalf("an accepted message again: %v", err)
	}
	for _, m := range msgs[6:] {
		if err := v2.Verify(&m); err != nil {
			t.Fatalf("seq %d after the restore: %v", m.Seq, err)
		}
	}
	for _, bad := range [][]ChainState{
		{{Entry: Entry{Subject: "asyrevel.rs.nope.1", Seq: 1}}},
		{{Entry: Entry{Subject: s, Seq: 0}}},
		{{Entry: Entry{Subject: s, Seq: 2}, Unsigned: 4}},
	} {
		v3, _ := NewVerifier(tr.roster, VerifierOptions{Every: 4})
		if err := v3.Restore(bad); err == nil {
			t.Errorf("restored %+v", bad)
		}
	}
}

// A sealed state opens only with its owner's key, for its run and owner,
// and not after any change.
func TestSealState(t *testing.T) {
	tr := newTestRun(t, "rs", 1)
	k := tr.keys["party-1"]
	data := []byte("the party's checkpoint")
	file := SealState(k, "rs", "party-1", data)
	opensWhole(t, k, file, data)
	for name, err := range map[string]error{
		"other key":   second(OpenState(tr.keys["aggregator"], "rs", "party-1", file)),
		"other run":   second(OpenState(k, "rs2", "party-1", file)),
		"other owner": second(OpenState(k, "rs", "party-2", file)),
		"truncated":   second(OpenState(k, "rs", "party-1", file[:len(file)-1])),
		"unsealed":    second(OpenState(k, "rs", "party-1", data)),
	} {
		if !errors.Is(err, ErrState) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func second[T any](_ T, err error) error { return err }

// opensWhole checks that file, party-1's sealed state of run rs, opens to
// data with k and that no change of a byte of it opens.
func opensWhole(t *testing.T, k *Key, file, data []byte) {
	t.Helper()
	got, err := OpenState(k, "rs", "party-1", file)
	if err != nil || string(got) != string(data) {
		t.Fatalf("open: %q %v", got, err)
	}
	for i := range file {
		bad := slices.Clone(file)
		bad[i] ^= 0x20
		if _, err := OpenState(k, "rs", "party-1", bad); !errors.Is(err, ErrState) {
			t.Fatalf("byte %d changed: %v", i, err)
		}
	}
}

// sealState1 is SealState of format 1, the earlier builds': the signature
// over everything it covers.
func sealState1(key *Key, run, owner string, data []byte) []byte {
	b := append([]byte(stateMagic1), appendString16(appendString16(nil, run), owner)...)
	b = append(b, data...)
	sig := key.Sign(append([]byte(stateDomain1), b...))
	return append(b, sig[:]...)
}

// A state sealed by an earlier build (format 1) still opens, and only as
// a state of format 2 does: with its owner's key, for its run and owner,
// not after any change. The seal of format 2 signs a digest of the state,
// not all of it (SealState).
func TestSealStateFormat1Opens(t *testing.T) {
	tr := newTestRun(t, "rs", 1)
	k := tr.keys["party-1"]
	data := []byte("the party's checkpoint")
	file := sealState1(k, "rs", "party-1", data)
	if !IsSealedState(file) {
		t.Fatal("a seal of format 1 is not a sealed state")
	}
	opensWhole(t, k, file, data)
	if err := second(OpenState(tr.keys["aggregator"], "rs", "party-1", file)); !errors.Is(err, ErrState) {
		t.Errorf("other key: %v", err)
	}
	// Its signature does not make a seal of format 2 of the same state.
	v2 := slices.Clone(file)
	v2[len(stateMagic)-1] = stateMagic[len(stateMagic)-1]
	if err := second(OpenState(k, "rs", "party-1", v2)); !errors.Is(err, ErrState) {
		t.Errorf("format 1's signature taken for format 2's: %v", err)
	}
	if new := SealState(k, "rs", "party-1", data); bytes.Equal(new[:len(stateMagic)], file[:len(stateMagic)]) {
		t.Error("SealState writes format 1")
	}
}

// FuzzOpenState: OpenState never panics, and whatever it opens is exactly
// what SealState makes of the data it returns (Ed25519 signatures are
// deterministic): no other file opens.
func FuzzOpenState(f *testing.F) {
	tr := newTestRun(f, "rs", 1)
	k := tr.keys["party-1"]
	good := SealState(k, "rs", "party-1", []byte("state"))
	f.Add(good)
	f.Add(good[:len(good)-1])
	f.Add([]byte(stateMagic))
	f.Add(sealState1(k, "rs", "party-1", []byte("state")))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, file []byte) {
		data, err := OpenState(k, "rs", "party-1", file)
		if err != nil {
			if !errors.Is(err, ErrState) {
				t.Fatalf("error without ErrState: %v", err)
			}
			return
		}
		want := SealState(k, "rs", "party-1", data)
		if bytes.HasPrefix(file, []byte(stateMagic1)) {
			want = sealState1(k, "rs", "party-1", data)
		}
		if !slices.Equal(want, file) {
			t.Fatalf("opened a file that is not the seal of its data")
		}
	})
}
