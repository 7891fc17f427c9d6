package trust

import (
	"errors"
	"testing"
	"time"
)

func TestPublisherPolicy(t *testing.T) {
	tr := newTestRun(t, "r", 2)
	const delay = 30 * time.Millisecond
	p := tr.publisher(t, "party-1", subj("r", "out", 1), Policy{Every: 4, MaxDelay: delay})
	signed := func(seal bool) bool {
		st := p.Append([]byte("x"), seal)
		return st.Signed
	}
	// Every 4th message, counting from the last signature.
	var got []bool
	var start time.Time // just before message 9, whose wait the timer counts
	for i := range 9 {
		if i == 8 {
			start = time.Now()
		}
		got = append(got, signed(false))
	}
	want := []bool{false, false, false, true, false, false, false, true, false}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("message %d signed %v, want %v (all %v)", i+1, got[i], want[i], got)
		}
	}
	// Message 10 comes when the oldest unsigned one (9) is MaxDelay old.
	// The clock starts before message 9 is appended: a start taken after
	// it (and after the checks above) let a preempted test see the timer
	// fire "early".
	for !p.due.Load() {
		if time.Since(start) > 3*time.Minute { // a bound on a hang, not on speed
			t.Fatal("MaxDelay timer never fired")
		}
		time.Sleep(time.Millisecond)
	}
	if time.Since(start) < delay*9/10 {
		t.Fatalf("timer fired after %v, before MaxDelay", time.Since(start))
	}
	if !signed(false) {
		t.Fatal("MaxDelay did not sign")
	}
	// A first unsigned message is not signed however late it comes: no
	// timer runs while nothing is unsigned.
	time.Sleep(2 * delay)
	if p.due.Load() || signed(false) {
		t.Fatal("signed with nothing unsigned before it")
	}
	if !signed(true) {
		t.Fatal("seal did not sign")
	}
	if p.Unsigned() != 0 || p.Seq() != 12 || p.Next() != 13 {
		t.Fatalf("unsigned %d seq %d next %d", p.Unsigned(), p.Seq(), p.Next())
	}
	// Every = 1 signs every message.
	q := tr.publisher(t, "party-2", subj("r", "out", 2), Policy{Every: 1, MaxDelay: -1})
	for range 3 {
		if st := q.Append([]byte("y"), false); !st.Signed {
			t.Fatal("Every=1 left a message unsigned")
		}
	}
	// MaxDelay < 0: no timer, only Every.
	r := tr.publisher(t, "party-2", subj("r", "eval", 2), Policy{Every: 100, MaxDelay: -1})
	r.Append([]byte("z"), false)
	if r.timer != nil {
		t.Fatal("a timer with MaxDelay < 0")
	}
}

func TestPublisherEverySignedSubjects(t *testing.T) {
	tr := newTestRun(t, "r", 1)
	o := tr.outbox(t, AggregatorID, Policy{Every: 100, MaxDelay: -1})
	ctl, err := o.Publisher(subj("r", "ctl", 0))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if st := ctl.Append([]byte("c"), false); !st.Signed {
			t.Fatal("a control message went unsigned")
		}
	}
	po := tr.outbox(t, "party-1", Policy{Every: 100, MaxDelay: -1})
	for _, s := range []string{subj("r", "join", 1), subj("r", "rcpt", 1)} {
		p, err := po.Publisher(s)
		if err != nil {
			t.Fatal(err)
		}
		if st := p.Append([]byte("h"), false); !st.Signed {
			t.Fatalf("%s message unsigned", s)
		}
	}
}

func TestPublisherOwnership(t *testing.T) {
	tr := newTestRun(t, "r", 2)
	o := tr.outbox(t, "party-1", Policy{})
	if o.Self().ID != "party-1" {
		t.Fatal(o.Self().ID)
	}
	for _, s := range []string{subj("r", "out", 2), subj("r", "reply", 1), subj("r", "ctl", 0)} {
		if _, err := o.Publisher(s); !errors.Is(err, ErrNotOwner) {
			t.Errorf("%s: %v", s, err)
		}
	}
	if _, err := o.Publisher("asyrevel.r.out.9"); !errors.Is(err, ErrUnknownSubject) {
		t.Errorf("unknown subject: %v", err)
	}
	p1, _ := o.Publisher(subj("r", "out", 1))
	p2, _ := o.Publisher(subj("r", "out", 1))
	if p1 != p2 {
		t.Fatal("two publishers for one subject")
	}
	stranger, _ := GenerateKey()
	if _, err := NewOutbox(tr.roster, stranger, Policy{}); err == nil {
		t.Fatal("outbox for a key outside the roster")
	}
	if _, err := NewOutbox(tr.roster, tr.keys["party-1"], Policy{Every: -1}); err == nil {
		t.Fatal("negative Every accepted")
	}
}

func TestStampHeaderVerifies(t *testing.T) {
	tr := newTestRun(t, "r", 1)
	p := tr.publisher(t, "party-1", subj("r", "out", 1), Policy{Every: 1})
	st := p.Append([]byte("payload"), false)
	sig, err := ParseSignature(st.SigHeader())
	if err != nil {
		t.Fatal(err)
	}
	if sig != st.Sig || sig.Head != NextHead(GenesisHead("r", p.Subject()), 1, []byte("payload")) {
		t.Fatal("header does not carry the stamp's signature and head")
	}
	if err := VerifyHead(tr.roster, p.Subject(), 1, &sig); err != nil {
		t.Fatal(err)
	}
	if err := VerifyHead(tr.roster, p.Subject(), 2, &sig); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("signature verified for another seq: %v", err)
	}
	if len(st.SigHeader()) != SigHeaderLen("party-1") {
		t.Fatalf("header of %d bytes, SigHeaderLen says %d", len(st.SigHeader()), SigHeaderLen("party-1"))
	}
	var unsigned Stamp
	if unsigned.SigHeader() != "" || len(unsigned.AppendSigHeader(nil)) != 0 || unsigned.MsgID() != "" {
		t.Fatal("an unsigned stamp has a header or an id")
	}
}

func TestDedupeIDs(t *testing.T) {
	tr := newTestRun(t, "r", 2)
	mk := func(id, subject string) *Publisher {
		return tr.publisher(t, id, subject, Policy{DedupeIDs: true})
	}
	a := mk("party-1", subj("r", "out", 1))
	b := mk("party-1", subj("r", "out", 1)) // same key, same chain: a resend gets the same id
	c := mk("party-2", subj("r", "out", 2))
	ids := map[string]bool{}
	for i := range 50 {
		pl := payload(uint64(i), 10)
		sa, sb, sc := a.Append(pl, false), b.Append(pl, false), c.Append(pl, false)
		if sa.MsgID() != sb.MsgID() {
			t.Fatal("the same message got two ids")
		}
		if len(sa.MsgID()) != 22 || ids[sa.MsgID()] || ids[sc.MsgID()] || sa.MsgID() == sc.MsgID() {
			t.Fatalf("id %q repeats or has the wrong length", sa.MsgID())
		}
		if string(sa.AppendMsgID(nil)) != sa.MsgID() {
			t.Fatal("AppendMsgID differs from MsgID")
		}
		ids[sa.MsgID()], ids[sc.MsgID()] = true, true
	}
	// Another content under the same sequence number gets another id.
	d := mk("party-1", subj("r", "eval", 1))
	e := mk("party-1", subj("r", "eval", 1))
	sd, se := d.Append([]byte("a"), false), e.Append([]byte("b"), false)
	if sd.MsgID() == se.MsgID() {
		t.Fatal("ids do not depend on the content")
	}
	// Without the option there are none.
	if st := tr.publisher(t, "party-2", subj("r", "eval", 2), Policy{}).Append(nil, false); (&st).MsgID() != "" {
		t.Fatal("id without DedupeIDs")
	}
}

func TestPublisherResumeAndHistory(t *testing.T) {
	tr := newTestRun(t, "r", 1)
	o := tr.outbox(t, "party-1", Policy{Every: 3, History: 4})
	p, _ := o.Publisher(subj("r", "out", 1))
	msgs := publish(p, 10, 20, false, 1)
	ref := NewChain("r", p.Subject())
	for seq := uint64(1); seq <= 10; seq++ {
		_, want := ref.Append(msgs[seq-1].Payload)
		h, ok := o.HeadAt(p.Subject(), seq)
		if ok != (seq >= 7) || ok && h != want {
			t.Fatalf("seq %d: remembered %v, head right %v", seq, ok, h == want)
		}
	}
	none := tr.outbox(t, "party-1", Policy{History: -1})
	pn, _ := none.Publisher(p.Subject())
	publish(pn, 3, 20, false, 1)
	if _, ok := pn.HeadAt(2); ok {
		t.Fatal("History -1 remembers heads")
	}
	if e := o.Entries(); len(e) != 1 || e[0].Seq != 10 || e[0].Head != p.Head() {
		t.Fatalf("entries %+v", e)
	}
	// A restarted sender resumes its chain: a verifier that saw the first
	// ten messages accepts the next ones.
	v, _ := NewVerifier(tr.roster, VerifierOptions{Every: 3})
	for i := range msgs {
		if err := v.Verify(&msgs[i]); err != nil {
			t.Fatal(err)
		}
	}
	o2 := tr.outbox(t, "party-1", Policy{Every: 3})
	p2, _ := o2.Publisher(p.Subject())
	p2.Resume(p.Seq(), p.Head())
	for _, m := range publish(p2, 4, 20, true, 11) {
		if err := v.Verify(&m); err != nil {
			t.Fatalf("after resume: %v", err)
		}
	}
}
