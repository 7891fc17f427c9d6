package party

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/trust"
	"github.com/asyrevel/asyrevel/zoo"
)

// testKeys makes run's roster with q parties and returns it, party 2's
// key and the aggregator's publisher on party 2's reply subject.
func testKeys(t testing.TB, run string, q int) (*trust.Roster, *trust.Key, *trust.Publisher) {
	t.Helper()
	r, keys, err := trust.GenerateRun(run, q)
	if err != nil {
		t.Fatal(err)
	}
	out, err := trust.NewOutbox(r, keys[0], trust.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := out.Publisher(schemas.Subject(run, schemas.KindReply, 2))
	if err != nil {
		t.Fatal(err)
	}
	return r, keys[2], pub
}

// Replies that the trust layer refuses are counted by reason and leave
// the parameters alone; genuine replies after them still apply.
func TestTrustRejectsForgedReplies(t *testing.T) {
	r, key, agg := testKeys(t, "t", 2)
	_, other, err := trust.GenerateRun("t", 2) // keys of another roster: unknown to this one
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Config{Run: "t", ID: 2, Model: model.NewLinear(6, 1), Train: dense(50, 6), Dist: zoo.Gaussian,
		Mu: 1e-3, LR: zoo.Schedule{Eta0: 0.1}, Batch: 1, Window: 1, Seed: 7, Log: zerolog.Nop(), Key: key, Roster: r})
	if err != nil {
		t.Fatal(err)
	}
	s := &sink{}
	p.bus, p.ctx = s, context.Background()
	if err := p.request(); err != nil {
		t.Fatal(err)
	}
	c := schemas.NewCodec()
	subj := schemas.Subject("t", schemas.KindReply, 2)
	reply := func(seq uint64, hbar float64) []byte {
		b, err := c.Marshal(&schemas.Reply{Header: schemas.Header{Version: schemas.Version, Party: 2, Seq: seq},
			ReqSeq: p.ring[p.head].seq, H: []float64{0.5}, HBar: []float64{hbar}})
		if err != nil {
			t.Fatal(err)
		}
		return slices.Clone(b)
	}
	// A signature by key over (reply subject, seq, head of data).
	signWith := func(k *trust.Key, signer string, seq uint64, data []byte) string {
		ch := trust.NewChain("t", subj)
		ch.Reset(seq-1, agg.Head())
		sig := trust.SignHead(k, signer, "t", subj, seq, ch.Compute(seq, data))
		return sig.Header()
	}
	w := slices.Clone(p.w)
	for _, tc := range []struct {
		name   string
		d      func() *delivery
		reason string
	}{
		{"signed by another party", func() *delivery {
			data := reply(1, 0.7)
			return &delivery{subject: subj, data: data, sig: signWith(key, "party-2", 1, data)}
		}, "trust-wrong_signer"},
		{"unknown key", func() *delivery {
			data := reply(1, 0.7)
			return &delivery{subject: subj, data: data, sig: signWith(other[0], "aggregator", 1, data)}
		}, "trust-bad_signature"},
		{"malformed signature", func() *delivery {
			return &delivery{subject: subj, data: reply(1, 0.7), sig: "aggregator.xyz"}
		}, "trust-bad_signature"},
		{"gap, unsigned", func() *delivery { return &delivery{subject: subj, data: reply(5, 0.7)} }, "trust-gap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := p.Stats().Rejected[tc.reason]
			p.handle(context.Background(), tc.d())
			if got := p.Stats().Rejected[tc.reason] - before; got != 1 {
				t.Fatalf("rejected %v, want one %s", p.Stats().Rejected, tc.reason)
			}
			if !slices.Equal(p.w, w) || p.stats.Steps != 0 {
				t.Fatal("a rejected reply changed the parameters")
			}
		})
	}
	// The genuine reply, then a replay of it.
	data := reply(agg.Next(), 0.7)
	d := &delivery{subject: subj, data: data}
	d.sign(agg.Append(data, true))
	p.handle(context.Background(), d)
	if p.stats.Steps != 1 {
		t.Fatalf("the genuine reply was not applied: %v", p.Stats().Rejected)
	}
	p.handle(context.Background(), d)
	if got := p.Stats().Rejected["trust-replay"]; got != 1 || p.stats.Steps != 1 {
		t.Fatalf("replayed reply: rejected %v, %d steps", p.Stats().Rejected, p.stats.Steps)
	}
	// The party's own messages are chained and the hello signed.
	if v := s.n; v != 2 {
		t.Fatalf("%d messages published", v)
	}
}

// controlled is party 2 of a run with keys, publishing into a sink, with
// the aggregator's control publisher and a codec to write controls with.
func controlled(t *testing.T) (*Party, *sink, *trust.Publisher, *schemas.Codec) {
	t.Helper()
	r, keys, err := trust.GenerateRun("t", 2)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := trust.NewOutbox(r, keys[0], trust.Policy{})
	ctl, _ := out.Publisher(schemas.Subject("t", schemas.KindControl, 0))
	p, err := New(Config{Run: "t", ID: 2, Model: model.NewLinear(6, 1), Train: dense(50, 6), Dist: zoo.Gaussian,
		Mu: 1e-3, LR: zoo.Schedule{Eta0: 0.1}, Batch: 1, Window: 1, Seed: 7, Log: zerolog.Nop(), Key: keys[2], Roster: r})
	if err != nil {
		t.Fatal(err)
	}
	s := &sink{}
	p.bus, p.ctx = s, context.Background()
	c := schemas.NewCodec()
	return p, s, ctl, c
}

// A party joins after controls addressed to others: its first control
// has a sequence number above 1 and is accepted on its signature; an
// unsigned control is not.
func TestTrustLateControl(t *testing.T) {
	p, s, ctl, c := controlled(t)
	send := func(op schemas.ControlKind, signed bool) {
		b, err := c.Marshal(&schemas.Control{Header: schemas.Header{Version: schemas.Version, Seq: ctl.Next()}, Op: op, Round: 1, Splits: schemas.EvalTrain})
		if err != nil {
			t.Fatal(err)
		}
		d := &delivery{subject: ctl.Subject(), data: slices.Clone(b)}
		st := ctl.Append(d.data, false)
		if signed {
			d.sign(st)
		}
		p.handle(context.Background(), d)
	}
	ctl.Append([]byte("a control party 2 never saw"), false)
	ctl.Append([]byte("another"), false)
	send(schemas.CtlStart, true)
	if !p.started || s.n != 1 {
		t.Fatalf("the late start was not accepted: started %v, %d published, rejected %v", p.started, s.n, p.Stats().Rejected)
	}
	send(schemas.CtlEval, false)
	if got := p.Stats().Rejected["trust-unsigned"]; got != 1 || s.n != 1 {
		t.Fatalf("unsigned control: rejected %v, %d published", p.Stats().Rejected, s.n)
	}
}

// The party countersigns a checkpoint that matches what it sent and
// received, keeps the receipt and publishes it; it refuses one that
// claims another head for its own subject.
func TestTrustCheckpoints(t *testing.T) {
	r, keys, err := trust.GenerateRun("t", 2)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p, err := New(Config{Run: "t", ID: 2, Model: model.NewLinear(6, 1), Train: dense(50, 6), Dist: zoo.Gaussian,
		Mu: 1e-3, LR: zoo.Schedule{Eta0: 0.1}, Batch: 1, Window: 1, Seed: 7, Log: zerolog.Nop(), Key: keys[2], Roster: r, Receipts: dir})
	if err != nil {
		t.Fatal(err)
	}
	s := &sink{}
	p.bus, p.ctx = s, context.Background()
	if err := p.request(); err != nil { // out.2 seq 1
		t.Fatal(err)
	}
	agg, _ := trust.NewOutbox(r, keys[0], trust.Policy{})
	ctl, _ := agg.Publisher(schemas.Subject("t", schemas.KindControl, 0))
	c := schemas.NewCodec()
	outSubj := schemas.Subject("t", schemas.KindOutput, 2)
	head, _ := p.Outbox().HeadAt(outSubj, 1)
	seal := func(n uint64, h trust.Hash) {
		cp, err := trust.NewCheckpoint("t", n, false, time.Now(), 0, []trust.Entry{{Subject: outSubj, Seq: 1, Head: h}})
		if err != nil {
			t.Fatal(err)
		}
		if err := cp.Sign(keys[0], trust.AggregatorID); err != nil {
			t.Fatal(err)
		}
		hv, _ := trust.EncodeCheckpointHeader(cp)
		b, err := c.Marshal(&schemas.Control{Header: schemas.Header{Version: schemas.Version, Seq: ctl.Next()}, Op: schemas.CtlSeal,
			Round: uint32(n), Reason: cp.Digest().String()})
		if err != nil {
			t.Fatal(err)
		}
		d := &headerDelivery{delivery: delivery{subject: ctl.Subject(), data: slices.Clone(b)}, cp: hv}
		d.sign(ctl.Append(d.data, false))
		p.handle(context.Background(), d)
	}
	seal(1, trust.Hash{7}) // a lie about party 2's own output
	if st := p.Stats(); st.Receipts != 0 || st.Rejected["trust-checkpoint"] != 1 {
		t.Fatalf("a false checkpoint: %d receipts, rejected %v", st.Receipts, st.Rejected)
	}
	before := s.n
	seal(2, head)
	if st := p.Stats(); st.Receipts != 1 || s.n != before+1 {
		t.Fatalf("a true checkpoint: %d receipts, %d published, rejected %v", st.Receipts, s.n-before, st.Rejected)
	}
	rcs, err := trust.ReadReceipts(dir)
	if err != nil || len(rcs) != 1 || rcs[0].Verify(r) != nil || rcs[0].Checkpoint.Number != 2 {
		t.Fatalf("kept receipts %v: %v", rcs, err)
	}
}

// headerDelivery adds the checkpoint header to a signed delivery.
type headerDelivery struct {
	delivery
	cp string
}

func (d *headerDelivery) Header(k string) string {
	if k == trust.CheckpointHeader {
		return d.cp
	}
	return d.delivery.Header(k)
}

// msgSink keeps what a party publishes.
type msgSink struct {
	broker.Bus
	msgs []broker.Message
}

func (s *msgSink) Publish(_ context.Context, m *broker.Message) error {
	h := make(map[string]string, len(m.Header))
	for k, v := range m.Header {
		h[k] = v
	}
	s.msgs = append(s.msgs, broker.Message{Subject: m.Subject, Header: h, Data: slices.Clone(m.Data)})
	return nil
}

// A party with the trust layer on resumes from its checkpoint with its
// chains and its verifier's state: the aggregator's messages it had
// handled are skipped, the next reply is accepted and applied, and its
// next request continues its chain (the aggregator's verifier accepts
// it). A checkpoint written without the trust layer does not resume it.
func TestResumeWithTrust(t *testing.T) {
	r, keys, err := trust.GenerateRun("t", 2)
	if err != nil {
		t.Fatal(err)
	}
	aout, _ := trust.NewOutbox(r, keys[0], trust.Policy{})
	ctl, _ := aout.Publisher(schemas.Subject("t", schemas.KindControl, 0))
	rep, _ := aout.Publisher(schemas.Subject("t", schemas.KindReply, 2))
	av, _ := trust.NewVerifier(r, trust.VerifierOptions{Subjects: r.Inbound(trust.AggregatorID)})
	cfg := Config{Run: "t", ID: 2, Model: model.NewLinear(6, 1), Train: dense(50, 6), Dist: zoo.Gaussian,
		Mu: 1e-3, LR: zoo.Schedule{Eta0: 0.1}, Batch: 1, Window: 1, Seed: 7, Log: zerolog.Nop(), Key: keys[2], Roster: r}
	c := schemas.NewCodec()
	// check runs what p published since from through the aggregator's
	// verifier.
	check := func(s *msgSink, from int) {
		t.Helper()
		for _, m := range s.msgs[from:] {
			var o schemas.PartyOutput
			if err := c.Unmarshal(m.Data, &o); err != nil {
				t.Fatal(err)
			}
			if err := av.Verify(&trust.Msg{Subject: m.Subject, Seq: o.Seq, Payload: m.Data, Sig: m.Header[trust.SigHeader], Prev: m.Header[trust.PrevHeader]}); err != nil {
				t.Fatalf("the aggregator rejects party 2's request %d: %v", o.Seq, err)
			}
		}
	}
	send := func(p *Party, pub *trust.Publisher, msg schemas.Message) *delivery {
		msg.Head().Seq = pub.Next()
		b, err := c.Marshal(msg)
		if err != nil {
			t.Fatal(err)
		}
		d := &delivery{subject: pub.Subject(), data: slices.Clone(b)}
		d.sign(pub.Append(d.data, false))
		p.handle(context.Background(), d)
		return d
	}
	reply := func(p *Party) *schemas.Reply {
		return &schemas.Reply{Header: schemas.Header{Version: schemas.Version, Party: 2}, ReqSeq: p.ring[p.head].seq, H: []float64{0.5}, HBar: []float64{0.6}}
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := &msgSink{}
	p.bus, p.ctx = s, context.Background()
	send(p, ctl, &schemas.Control{Header: schemas.Header{Version: schemas.Version}, Op: schemas.CtlStart})
	var old []*delivery
	for range 3 {
		old = append(old, send(p, rep, reply(p)))
	}
	if p.Stats().Steps != 3 || len(s.msgs) != 4 {
		t.Fatalf("%d steps, %d requests: rejected %v", p.Stats().Steps, len(s.msgs), p.Stats().Rejected)
	}
	check(s, 0)
	var buf bytes.Buffer
	if err := p.Checkpoint().Encode(&buf); err != nil {
		t.Fatal(err)
	}
	ck, err := DecodeCheckpoint(&buf)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s2 := &msgSink{}
	p2.bus, p2.ctx = s2, context.Background()
	if err := p2.Resume(ck); err != nil {
		t.Fatalf("resume with the trust layer: %v", err)
	}
	for _, d := range old { // delivered again from the stream
		p2.handle(context.Background(), d)
	}
	if st := p2.Stats(); st.Skipped != 3 || len(st.Rejected) != 0 || len(s2.msgs) != 0 {
		t.Fatalf("handled replies again: %d skipped, rejected %v, %d published", st.Skipped, st.Rejected, len(s2.msgs))
	}
	send(p2, rep, reply(p2))
	if st := p2.Stats(); st.Steps != 4 || len(st.Rejected) != 0 || len(s2.msgs) != 1 {
		t.Fatalf("after the resume: %d steps, rejected %v, %d published", st.Steps, st.Rejected, len(s2.msgs))
	}
	check(s2, 0)
	if s2.msgs[0].Header[trust.SigHeader] == "" {
		t.Fatal("the first request after the resume is not signed")
	}

	plain := *ck
	plain.Trust, plain.TrustOut, plain.TrustIn = false, nil, nil
	p3, _ := New(cfg)
	if err := p3.Resume(&plain); !errors.Is(err, ErrResume) || !strings.Contains(err.Error(), "without the trust layer") {
		t.Fatalf("a checkpoint without the trust layer: %v", err)
	}
}

// A party with the trust layer on, resumed on a stream that lost the
// last requests its checkpoint counts as sent (a broker killed with -9
// that had confirmed them), sends them again from its outbox, and the
// aggregator's verifier accepts them and what follows.
func TestResumeWithTrustResendsLost(t *testing.T) {
	r, keys, err := trust.GenerateRun("t", 2)
	if err != nil {
		t.Fatal(err)
	}
	aout, _ := trust.NewOutbox(r, keys[0], trust.Policy{})
	ctl, _ := aout.Publisher(schemas.Subject("t", schemas.KindControl, 0))
	rep, _ := aout.Publisher(schemas.Subject("t", schemas.KindReply, 2))
	av, _ := trust.NewVerifier(r, trust.VerifierOptions{Subjects: r.Inbound(trust.AggregatorID)})
	cfg := Config{Run: "t", ID: 2, Model: model.NewLinear(6, 1), Train: dense(50, 6), Dist: zoo.Gaussian,
		Mu: 1e-3, LR: zoo.Schedule{Eta0: 0.1}, Batch: 1, Window: 1, Seed: 7, Log: zerolog.Nop(), Key: keys[2], Roster: r}
	c := schemas.NewCodec()
	verify := func(msgs []broker.Message) {
		t.Helper()
		for _, m := range msgs {
			var o schemas.PartyOutput
			if err := c.Unmarshal(m.Data, &o); err != nil {
				t.Fatal(err)
			}
			if err := av.Verify(&trust.Msg{Subject: m.Subject, Seq: o.Seq, Payload: m.Data, Sig: m.Header[trust.SigHeader], Prev: m.Header[trust.PrevHeader]}); err != nil {
				t.Fatalf("the aggregator rejects party 2's request %d: %v", o.Seq, err)
			}
		}
	}
	send := func(p *Party, pub *trust.Publisher, msg schemas.Message) {
		msg.Head().Seq = pub.Next()
		b, err := c.Marshal(msg)
		if err != nil {
			t.Fatal(err)
		}
		d := &delivery{subject: pub.Subject(), data: slices.Clone(b)}
		d.sign(pub.Append(d.data, false))
		p.handle(context.Background(), d)
	}
	reply := func(p *Party) *schemas.Reply {
		return &schemas.Reply{Header: schemas.Header{Version: schemas.Version, Party: 2}, ReqSeq: p.ring[p.head].seq, H: []float64{0.5}, HBar: []float64{0.6}}
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := &msgSink{}
	p.bus, p.ctx = s, context.Background()
	send(p, ctl, &schemas.Control{Header: schemas.Header{Version: schemas.Version}, Op: schemas.CtlStart})
	for range 3 {
		send(p, rep, reply(p))
	}
	if len(s.msgs) != 4 {
		t.Fatalf("%d requests", len(s.msgs))
	}
	ck := p.Checkpoint()
	// The stream kept requests 1 and 2 only; the aggregator saw those.
	verify(s.msgs[:2])
	p2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s2 := &msgSink{}
	p2.bus, p2.ctx = s2, context.Background()
	if err := p2.ResumeStream(ck, map[schemas.Kind][]uint64{schemas.KindOutput: {1, 2}}, nil); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if len(p2.recov.resend) != 2 || p2.recov.resend[0].Seq != 3 || p2.recov.resend[1].Seq != 4 {
		t.Fatalf("sends again %d requests (%v), want 3 and 4", len(p2.recov.resend), p2.recov.resend)
	}
	// Run sends them as they were kept (no headers); the next request,
	// signed, proves them.
	var again []broker.Message
	for _, r := range p2.recov.resend {
		again = append(again, broker.Message{Subject: r.Subject, Data: r.Data})
	}
	verify(again)
	send(p2, rep, reply(p2))
	p2.tr.seal = true // request 6 signed: its signature covers 3..6
	send(p2, rep, reply(p2))
	if st := p2.Stats(); st.Steps != 5 || len(st.Rejected) != 0 || len(s2.msgs) != 2 || s2.msgs[1].Header[trust.SigHeader] == "" {
		t.Fatalf("after the resume: %d steps, rejected %v, %d published", st.Steps, st.Rejected, len(s2.msgs))
	}
	verify(s2.msgs)
}

// A pause is a control like any other: unsigned (forged by whoever can
// publish) it is rejected and counted and the party goes on; signed by
// the aggregator it stops new requests; delivered again (replayed) it is
// rejected and counted.
func TestTrustPause(t *testing.T) {
	p, _, ctl, c := controlled(t)
	encode := func(op schemas.ControlKind) *delivery {
		b, err := c.Marshal(&schemas.Control{Header: schemas.Header{Version: schemas.Version, Seq: ctl.Next()}, Op: op})
		if err != nil {
			t.Fatal(err)
		}
		return &delivery{subject: ctl.Subject(), data: slices.Clone(b)}
	}
	// The aggregator's: appended to its chain and signed.
	signed := func(op schemas.ControlKind) *delivery {
		d := encode(op)
		d.sign(ctl.Append(d.data, false))
		return d
	}
	p.handle(context.Background(), signed(schemas.CtlStart))
	if !p.started {
		t.Fatalf("not started: rejected %v", p.Stats().Rejected)
	}
	// A forger's: the next number, no signature, not in the chain.
	p.handle(context.Background(), encode(schemas.CtlPause))
	if got := p.Stats().Rejected["trust-unsigned"]; got != 1 || p.stop.pausing {
		t.Fatalf("a forged pause: rejected %v, pausing %v", p.Stats().Rejected, p.stop.pausing)
	}
	pause := signed(schemas.CtlPause)
	p.handle(context.Background(), pause)
	if !p.stop.pausing || !p.Stats().Paused {
		t.Fatalf("the aggregator's pause was not taken: rejected %v", p.Stats().Rejected)
	}
	before := sum(p.Stats().Rejected)
	p.handle(context.Background(), pause)
	if got := sum(p.Stats().Rejected) - before; got != 1 {
		t.Fatalf("a replayed pause: %d more rejected (%v), want 1", got, p.Stats().Rejected)
	}
}

func sum(m map[string]int64) (n int64) {
	for _, v := range m {
		n += v
	}
	return n
}
