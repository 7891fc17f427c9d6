package trust

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// testLog is a run's log as the stream holds it, in stream order: a
// start control, steps of out.m and reply.m for two parties, each sender's
// last message sealed, and a stop control.
func testLog(t testing.TB, tr *testRun, steps, every int) []Msg {
	t.Helper()
	pol := Policy{Every: every, MaxDelay: -1}
	agg := tr.outbox(t, AggregatorID, pol)
	var log []Msg
	add := func(o *Outbox, subject string, pl []byte, seal bool) {
		p, err := o.Publisher(subject)
		if err != nil {
			t.Fatal(err)
		}
		st := p.Append(pl, seal)
		log = append(log, Msg{StreamSeq: uint64(len(log) + 1), Subject: subject, Seq: st.Seq, Payload: pl, Sig: st.SigHeader()})
	}
	parties := []*Outbox{nil, tr.outbox(t, "party-1", pol), tr.outbox(t, "party-2", pol)}
	add(agg, subj(tr.roster.Run, "ctl", 0), []byte("start"), false)
	for i := 0; i < steps; i++ {
		last := i == steps-1
		for m := 1; m <= 2; m++ {
			add(parties[m], subj(tr.roster.Run, "out", m), payload(uint64(10*i+m), 30+i%7), last)
			add(agg, subj(tr.roster.Run, "reply", m), payload(uint64(100*i+m), 20), last)
		}
	}
	add(agg, subj(tr.roster.Run, "ctl", 0), []byte("stop"), false)
	return log
}

// receiptAt is party's receipt of a checkpoint of log[:n] (the aggregator
// saw everything up to stream seq n).
func receiptAt(t testing.TB, tr *testRun, log []Msg, n int, party string) *Receipt {
	t.Helper()
	v, err := NewVerifier(tr.roster, VerifierOptions{Every: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	for i := range log[:n] {
		if err := v.Verify(&log[i]); err != nil {
			t.Fatalf("receipt of a log that does not verify: %v", err)
		}
	}
	cp, err := NewCheckpoint(tr.roster.Run, uint64(n), false, time.Unix(0, 0), uint64(n), v.Entries())
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.Sign(tr.keys[AggregatorID], AggregatorID); err != nil {
		t.Fatal(err)
	}
	return Countersign(cp, tr.keys[party], party)
}

// find is the index in log of subject's message seq.
func find(log []Msg, subject string, seq uint64) int {
	for i, m := range log {
		if m.Subject == subject && m.Seq == seq {
			return i
		}
	}
	panic(fmt.Sprintf("no %s seq %d", subject, seq))
}

func TestAuditor(t *testing.T) {
	tr := newTestRun(t, "r", 2)
	const every = 4
	orig := testLog(t, tr, 12, every) // 50 messages; out.m and reply.m have 12 each
	out1, reply2 := subj("r", "out", 1), subj("r", "reply", 2)
	// swapContent swaps two stored messages' contents, keeping the stream
	// sequence of each place.
	swapContent := func(log []Msg, i, j int) {
		log[i], log[j] = log[j], log[i]
		log[i].StreamSeq, log[j].StreamSeq = log[j].StreamSeq, log[i].StreamSeq
	}
	renumber := func(log []Msg) []Msg {
		for i := range log {
			log[i].StreamSeq = uint64(i + 1)
		}
		return log
	}
	type want map[ProblemKind]int
	cases := []struct {
		name     string
		mutate   func(log []Msg) []Msg
		receipts func(log []Msg) []*Receipt // made from the original log
		want     want
	}{
		{"intact", nil, nil, want{}},
		{"intact, with receipts", nil, func(log []Msg) []*Receipt {
			return []*Receipt{receiptAt(t, tr, log, 20, "party-1"), receiptAt(t, tr, log, 50, "party-2")}
		}, want{}},
		{"byte changed in an unsigned message", func(log []Msg) []Msg {
			i := find(log, out1, 2)
			log[i] = flipByte(log[i], 5)
			return log
		}, nil, want{ProblemBrokenChain: 1}},
		{"byte changed in a signed message", func(log []Msg) []Msg {
			i := find(log, out1, 4)
			log[i] = flipByte(log[i], 0)
			return log
		}, nil, want{ProblemBrokenChain: 1}},
		{"byte changed in the last message", func(log []Msg) []Msg {
			i := find(log, reply2, 12)
			log[i] = flipByte(log[i], 19)
			return log
		}, nil, want{ProblemBrokenChain: 1}},
		{"message removed", func(log []Msg) []Msg {
			i := find(log, out1, 6)
			return slices.Delete(log, i, i+1)
		}, nil, want{ProblemGap: 1, ProblemStreamGap: 1, ProblemUnsealedTail: 1}},
		{"message removed and the stream renumbered", func(log []Msg) []Msg {
			i := find(log, out1, 6)
			return renumber(slices.Delete(log, i, i+1))
		}, nil, want{ProblemGap: 1, ProblemUnsealedTail: 1}},
		{"two swapped", func(log []Msg) []Msg {
			swapContent(log, find(log, out1, 6), find(log, out1, 7))
			return log
		}, nil, want{ProblemReorder: 1}},
		{"two of different subjects swapped", func(log []Msg) []Msg {
			swapContent(log, find(log, out1, 6), find(log, reply2, 6))
			return log
		}, nil, want{}}, // each subject's own order holds: only the order within a subject is chained
		{"tail truncated", func(log []Msg) []Msg {
			return log[:len(log)-6]
		}, nil, want{ProblemUnsealedTail: 4}}, // out.1, out.2, reply.1, reply.2; ctl's last is signed
		{"tail truncated, with a receipt", func(log []Msg) []Msg {
			return log[:len(log)-6]
		}, func(log []Msg) []*Receipt { return []*Receipt{receiptAt(t, tr, log, 50, "party-1")} },
			want{ProblemUnsealedTail: 4, ProblemTruncated: 6}}, // 5 subjects and the stream
		{"tail cut after signed messages, with a receipt", func(log []Msg) []Msg {
			return log[:find(log, reply2, 8)+1] // every subject's last message is signed
		}, func(log []Msg) []*Receipt { return []*Receipt{receiptAt(t, tr, log, 45, "party-2")} },
			want{ProblemTruncated: 5}}, // out.1, out.2, reply.1, reply.2 and the stream; ctl was at seq 1
		// The limit the package documentation names: a log cut right after
		// signed messages, before any receipt covers the rest, looks like a
		// run that ended early.
		{"tail cut after signed messages, no receipt", func(log []Msg) []Msg {
			return log[:find(log, reply2, 8)+1]
		}, nil, want{}},
		{"re-signed with another participant's key, naming it", func(log []Msg) []Msg {
			i := find(log, out1, 8)
			log[i] = resign(tr, log[i], "party-2", "party-2")
			return log
		}, nil, want{ProblemWrongSigner: 1}},
		{"re-signed with another participant's key, naming the owner", func(log []Msg) []Msg {
			i := find(log, out1, 8)
			log[i] = resign(tr, log[i], "party-2", "party-1")
			return log
		}, nil, want{ProblemWrongSigner: 1}},
		{"altered and re-signed by another participant", func(log []Msg) []Msg {
			i := find(log, out1, 8)
			m := flipByte(log[i], 1)
			prev, _ := ParseSignature(log[find(log, out1, 4)].Sig)
			c := NewChain("r", out1)
			c.Reset(4, prev.Head)
			for s := uint64(5); s < 8; s++ {
				c.Append(log[find(log, out1, s)].Payload)
			}
			_, h := c.Append(m.Payload)
			sig := SignHead(tr.keys["party-2"], "party-2", "r", out1, 8, h)
			m.Sig = sig.Header()
			log[i] = m
			return log
		}, nil, want{ProblemWrongSigner: 1, ProblemBrokenChain: 1}},
		{"replay: a copy stored again", func(log []Msg) []Msg {
			m := log[find(log, out1, 9)]
			m.StreamSeq = uint64(len(log) + 1)
			return append(log, m)
		}, nil, want{ProblemDuplicate: 1}},
		{"replay with other content", func(log []Msg) []Msg {
			m := flipByte(log[find(log, out1, 11)], 2)
			m.StreamSeq = uint64(len(log) + 1)
			return append(log, m)
		}, nil, want{ProblemReplay: 1}},
		{"stream head removed (limit changed)", func(log []Msg) []Msg {
			return log[10:]
		}, nil, want{ProblemStreamGap: 1, ProblemGap: 5}},
		{"message on a foreign subject", func(log []Msg) []Msg {
			// Listed apart (AuditReport.Foreign), not against the verdict.
			return append(log, Msg{StreamSeq: uint64(len(log) + 1), Subject: "asyrevel.r.out.7", Seq: 1, Payload: []byte("x")})
		}, nil, want{}},
		{"an answer stored before what it answers", func(log []Msg) []Msg {
			i, j := find(log, out1, 3), find(log, out1, 9)
			log[i].ID = []byte("request-3")
			log[j].Cites = []byte("request-3")
			log[i].Cites, log[j].ID = []byte("request-9"), []byte("request-9")
			return log
		}, nil, want{ProblemCausal: 1}},
		{"an answer to what the log does not hold", func(log []Msg) []Msg {
			i, j := find(log, out1, 3), find(log, out1, 9)
			log[i].ID = []byte("request-3")
			log[j].Cites = []byte("request-3")
			log[j+1].Cites = []byte("request-x")
			return log
		}, nil, want{ProblemCausal: 1}},
		{"undecodable message", func(log []Msg) []Msg {
			m := Msg{StreamSeq: uint64(len(log) + 1), Subject: out1, Payload: []byte{0xc1}}
			return append(log, m)
		}, nil, want{ProblemUndecodable: 1}},
		{"unsigned control message", func(log []Msg) []Msg {
			log[len(log)-1].Sig = ""
			return log
		}, nil, want{ProblemUnsigned: 1, ProblemUnsealedTail: 1}},
		{"rewritten after a checkpoint", func(log []Msg) []Msg {
			i := find(log, out1, 5)
			log[i] = flipByte(log[i], 0)
			return log
		}, func(log []Msg) []*Receipt { return []*Receipt{receiptAt(t, tr, log, find(log, out1, 5)+1, "party-2")} },
			want{ProblemRewritten: 1, ProblemBrokenChain: 1}},
		{"forged receipt", nil, func(log []Msg) []*Receipt {
			rc := receiptAt(t, tr, log, 30, "party-1")
			rc.Checkpoint.Entries[0].Seq++
			return []*Receipt{rc}
		}, want{ProblemBadReceipt: 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			log := slices.Clone(orig)
			var receipts []*Receipt
			if tc.receipts != nil {
				receipts = tc.receipts(orig)
			}
			if tc.mutate != nil {
				log = tc.mutate(log)
			}
			rep, err := CheckLog(tr.roster, slices.Values(ptrs(log)), receipts, AuditOptions{Every: every})
			if (err != nil) != (tc.want[ProblemBadReceipt] > 0) {
				t.Errorf("receipt error: %v", err)
			}
			got := want{}
			for k, n := range rep.Counts {
				got[ProblemKind(k)] = int(n)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) || rep.Intact() != (len(tc.want) == 0) {
				var b bytes.Buffer
				rep.WriteText(&b)
				t.Fatalf("problems %v, want %v\n%s", got, tc.want, b.String())
			}
			for _, p := range rep.Problems {
				if p.Kind != ProblemBadReceipt && p.Kind != ProblemTruncated && p.StreamSeq == 0 {
					t.Errorf("problem without stream seq: %v", p)
				}
			}
			if tc.name == "intact" {
				if rep.Messages != 50 || rep.FirstSeq != 1 || rep.LastSeq != 50 || len(rep.Senders) != 4 {
					t.Errorf("summary %+v", rep)
				}
			}
		})
	}
}

func ptrs(log []Msg) []*Msg {
	out := make([]*Msg, len(log))
	for i := range log {
		out[i] = &log[i]
	}
	return out
}

func TestAuditReport(t *testing.T) {
	tr := newTestRun(t, "r", 2)
	log := testLog(t, tr, 5, 4)
	i := find(log, subj("r", "out", 2), 2)
	log[i] = flipByte(log[i], 0)
	rep, err := CheckLog(tr.roster, slices.Values(ptrs(log)), nil, AuditOptions{Every: 4})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	for _, want := range []string{"run r: 22 messages", "party-2", "broken_chain 1", "verdict: NOT intact", "stream seq"} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q:\n%s", want, text)
		}
	}
	raw, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back AuditReport
	if err := json.Unmarshal(raw, &back); err != nil || back.Intact() || len(back.Problems) != 1 {
		t.Fatalf("JSON: %v %s", err, raw)
	}
	// Evidence must come first.
	a, _ := NewAuditor(tr.roster, AuditOptions{})
	a.Add(&log[0])
	if err := a.AddReceipt(receiptAt(t, tr, log, 5, "party-1"), "late"); err == nil {
		t.Fatal("receipt accepted after the first message")
	}
}

func TestAuditorTolerateDuplicates(t *testing.T) {
	tr := newTestRun(t, "r", 2)
	log := testLog(t, tr, 5, 4)
	m := log[3]
	m.StreamSeq = uint64(len(log) + 1)
	log = append(log, m)
	for _, tolerate := range []bool{false, true} {
		rep, _ := CheckLog(tr.roster, slices.Values(ptrs(log)), nil, AuditOptions{Every: 4, TolerateDuplicates: tolerate})
		if rep.Counts[string(ProblemDuplicate)] != 1 || rep.Intact() != tolerate {
			t.Errorf("tolerate %v: %+v", tolerate, rep.Counts)
		}
	}
}

func TestAuditorReorderWindow(t *testing.T) {
	tr := newTestRun(t, "r", 2)
	log := testLog(t, tr, 12, 4)
	out1 := subj("r", "out", 1)
	// out.1 seq 3 stored after seq 9: within a window of 8 it is a
	// reordering, with a window of 2 a gap and a late message.
	i := find(log, out1, 3)
	m := log[i]
	log = slices.Delete(log, i, i+1)
	j := find(log, out1, 9)
	log = slices.Insert(log, j+1, m)
	for k := range log {
		log[k].StreamSeq = uint64(k + 1)
	}
	for _, tc := range []struct {
		window int
		want   string
	}{
		{8, "map[reorder:1]"},
		{2, "map[gap:1 reorder:1 unsealed_tail:1]"},
	} {
		rep, _ := CheckLog(tr.roster, slices.Values(ptrs(log)), nil, AuditOptions{Every: 4, ReorderWindow: tc.window})
		if fmt.Sprint(rep.Counts) != tc.want {
			var b bytes.Buffer
			rep.WriteText(&b)
			t.Errorf("window %d: %v, want %s\n%s", tc.window, rep.Counts, tc.want, b.String())
		}
	}
}

// With AsReceiver, messages the receiver rejects without changing its
// state (a rogue's replays, forged signatures, unsigned jumps, junk) are
// counted apart and do not fail an intact log; a genuine message removed
// still does.
func TestAuditAsReceiver(t *testing.T) {
	tr := newTestRun(t, "r", 2)
	p := tr.publisher(t, "party-1", subj("r", "out", 1), Policy{Every: 8, MaxDelay: -1})
	genuine := publish(p, 20, 40, true, 1)
	forged := genuine[6] // the next sequence number after genuine[5], signed with party 2's key
	forged.Payload = []byte("forged payload")
	fsig := SignHead(tr.keys["party-2"], "party-2", "r", forged.Subject, forged.Seq, Hash{1})
	forged.Sig = fsig.Header()
	junk := Msg{Subject: genuine[0].Subject, Seq: 1 << 40, Payload: []byte("junk")}
	undecodable := Msg{Subject: genuine[0].Subject, Payload: []byte{0xc1}}
	var log []Msg
	for i, m := range genuine {
		log = append(log, m)
		if i == 5 {
			log = append(log, genuine[2], forged, junk, undecodable) // a replay, a wrong signer, a jump, junk
		}
	}
	for i := range log {
		log[i].StreamSeq = uint64(i + 1)
	}
	audit := func(log []Msg) *AuditReport {
		rep, err := CheckLog(tr.roster, slices.Values(ptrs(log)), nil, AuditOptions{Every: 8, AsReceiver: true})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	rep := audit(log)
	if !rep.Intact() || rep.Rejected["replay"] != 1 || rep.Rejected["wrong_signer"] != 1 || rep.Rejected["gap"] != 1 || rep.Rejected["undecodable"] != 1 {
		t.Fatalf("intact %v, problems %v, rejected %v", rep.Intact(), rep.Counts, rep.Rejected)
	}
	// A genuine message removed: the receiver rejects what follows (a
	// gap), and the auditor fails the log.
	cut := slices.Delete(slices.Clone(log), 10, 11)
	for i := range cut {
		cut[i].StreamSeq = uint64(i + 1)
	}
	if rep := audit(cut); rep.Intact() {
		t.Fatalf("a removed genuine message passed: rejected %v", rep.Rejected)
	}
}

// A party that leaves for good stops without signing its last messages:
// the aggregator's checkpoint (countersigned by another party) states it
// received them, so the log is intact with a note; the same log cut
// before the end the checkpoint states is not.
func TestAuditDepartedTail(t *testing.T) {
	tr := newTestRun(t, "r", 2)
	orig := testLog(t, tr, 12, 4)
	out2 := subj("r", "out", 2)
	// Party 2 is gone before its last, sealing message: what the
	// aggregator received ends at seq 11, unsigned since seq 9.
	gone := slices.DeleteFunc(slices.Clone(orig), func(m Msg) bool { return m.Subject == out2 && m.Seq == 12 })
	for i := range gone {
		gone[i].StreamSeq = uint64(i + 1)
	}
	rc := receiptAt(t, tr, gone, len(gone), "party-1")
	rep, err := CheckLog(tr.roster, slices.Values(ptrs(gone)), []*Receipt{rc}, AuditOptions{Every: 4})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Intact() || len(rep.Notes) != 1 || rep.Notes[0].Kind != ProblemDeparted || rep.Notes[0].Subject != out2 {
		t.Fatalf("departed tail: intact %v, problems %v, notes %v", rep.Intact(), rep.Problems, rep.Notes)
	}
	// Without the checkpoint, nothing vouches for the tail.
	rep, _ = CheckLog(tr.roster, slices.Values(ptrs(gone)), nil, AuditOptions{Every: 4})
	if rep.Intact() || rep.Counts[string(ProblemUnsealedTail)] != 1 {
		t.Fatalf("an unsealed tail without a checkpoint: intact %v, %v", rep.Intact(), rep.Counts)
	}
	// Cut before party 2's last message: the checkpoint shows it.
	// (The stream sequences keep their hole.)
	cut := slices.DeleteFunc(slices.Clone(gone), func(m Msg) bool { return m.Subject == out2 && m.Seq == 11 })
	rep, _ = CheckLog(tr.roster, slices.Values(ptrs(cut)), []*Receipt{rc}, AuditOptions{Every: 4})
	if rep.Intact() {
		t.Fatalf("a cut departed tail reported intact: notes %v", rep.Notes)
	}
}
