package aggregator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/logread"
	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/trust"
	"github.com/asyrevel/asyrevel/zoo"
)

// signedDelivery is a delivery with the trust layer's headers.
type signedDelivery struct {
	delivery
	sig, prev string
}

func (d *signedDelivery) Header(k string) string {
	switch k {
	case trust.SigHeader:
		return d.sig
	case trust.PrevHeader:
		return d.prev
	}
	return ""
}

// sign sets the delivery's headers from the sender's stamp.
func (d *signedDelivery) sign(st trust.Stamp) {
	d.sig, d.prev = "", ""
	if st.Signed {
		d.sig, d.prev = st.SigHeader(), string(st.AppendPrevHeader(nil))
	}
}

// trustTest is an aggregator with the trust layer on, q parties, k = 1,
// and every party's outbox.
func trustTest(t testing.TB, q, n int) (*Aggregator, *sink, []*trust.Outbox, []*trust.Key) {
	t.Helper()
	r, keys, err := trust.GenerateRun("t", q)
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{Run: "t", Parties: q, K: 1, Head: model.NewLogisticBias(q), Labels: make([]int32, n), Mu: 1e-3,
		LR: zoo.Schedule{Eta0: 0.01}, Log: zerolog.Nop(), Key: keys[0], Roster: r})
	if err != nil {
		t.Fatal(err)
	}
	s := &sink{}
	a.bus, a.ctx = s, context.Background()
	outs := make([]*trust.Outbox, q+1)
	for m := 1; m <= q; m++ {
		if outs[m], err = trust.NewOutbox(r, keys[m], trust.Policy{}); err != nil {
			t.Fatal(err)
		}
	}
	return a, s, outs, keys
}

// signedLoop is handleLoop with the trust layer on: party 3's requests
// come chained and signed, the aggregator verifies them and chains and
// signs its replies.
func signedLoop(t testing.TB, batch int) (*Aggregator, func()) {
	n := 10000
	a, _, outs, _ := trustTest(t, 8, n)
	train(a, make([]float64, n*8))
	pub, err := outs[3].Publisher(schemas.Subject("t", schemas.KindOutput, 3))
	if err != nil {
		t.Fatal(err)
	}
	c := schemas.NewCodec()
	out := &schemas.PartyOutput{Header: schemas.Header{Version: schemas.Version, Party: 3},
		IDs: make([]uint32, batch), C: make([]float64, batch), CHat: make([]float64, batch)}
	for i := range out.IDs {
		out.IDs[i] = uint32(i * 97 % n)
	}
	d := &signedDelivery{delivery: delivery{subject: pub.Subject()}}
	return a, func() {
		out.Seq = pub.Next()
		d.data, _ = c.Marshal(out)
		d.sign(pub.Append(d.data, false))
		a.handleOutputs(context.Background(), d)
	}
}

// The hot loop with the trust layer on: the request verified, the reply
// chained and signed, without allocating.
func TestHandleDoesNotAllocateSigned(t *testing.T) {
	for _, batch := range []int{1, 64} {
		a, once := signedLoop(t, batch)
		once()
		if n := testing.AllocsPerRun(200, once); n != 0 {
			t.Errorf("batch %d: %v allocations a step", batch, n)
		}
		if a.res.Steps != 202 || len(a.res.Rejected) != 0 {
			t.Fatalf("%d steps: %v", a.res.Steps, a.res.Rejected)
		}
		if u := a.Verifier().Accepted(); u != 202 {
			t.Fatalf("%d messages accepted by the verifier", u)
		}
	}
}

// BenchmarkHandleSigned is BenchmarkHandle with the trust layer on (the
// party's chaining and signing of the requests included).
func BenchmarkHandleSigned(b *testing.B) {
	for _, batch := range []int{1, 64} {
		b.Run(fmt.Sprintf("logistic/batch=%d", batch), func(b *testing.B) {
			a, once := signedLoop(b, batch)
			b.ReportAllocs()
			for b.Loop() {
				once()
			}
			if a.res.Steps != int64(b.N) {
				b.Fatalf("%d steps of %d: %v", a.res.Steps, b.N, a.res.Rejected)
			}
		})
	}
}

// Party messages the trust layer refuses are counted by reason and change
// nothing: a request signed by another party, a forged hello, a replay,
// an unsigned gap.
func TestTrustRejectsForgedRequests(t *testing.T) {
	n := 100
	a, s, outs, keys := trustTest(t, 2, n)
	train(a, make([]float64, n*2))
	c := schemas.NewCodec()
	outSubj := schemas.Subject("t", schemas.KindOutput, 1)
	pub, _ := outs[1].Publisher(outSubj)
	request := func(seq uint64) []byte {
		b, err := c.Marshal(&schemas.PartyOutput{Header: schemas.Header{Version: schemas.Version, Party: 1, Seq: seq},
			IDs: []uint32{3}, C: []float64{0.5}, CHat: []float64{0.6}})
		if err != nil {
			t.Fatal(err)
		}
		return slices.Clone(b)
	}
	// party 2's key signing a message on party 1's subject.
	forged := func(seq uint64) *signedDelivery {
		data := request(seq)
		ch := trust.NewChain("t", outSubj)
		ch.Reset(seq-1, pub.Head())
		sig := trust.SignHead(keys[2], "party-2", "t", outSubj, seq, ch.Compute(seq, data))
		return &signedDelivery{delivery: delivery{subject: outSubj, data: data}, sig: sig.Header()}
	}
	w0 := slices.Clone(a.w0)
	for _, tc := range []struct {
		name   string
		d      func() *signedDelivery
		reason string
	}{
		{"signed by party 2", func() *signedDelivery { return forged(1) }, "trust-wrong_signer"},
		{"gap, unsigned", func() *signedDelivery {
			return &signedDelivery{delivery: delivery{subject: outSubj, data: request(9)}}
		}, "trust-gap"},
		{"bad signature", func() *signedDelivery {
			d := forged(1)
			d.sig = "party-1" + d.sig[len("party-2"):]
			return d
		}, "trust-bad_signature"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := a.res.Rejected[tc.reason]
			a.handleOutputs(context.Background(), tc.d())
			if got := a.res.Rejected[tc.reason] - before; got != 1 {
				t.Fatalf("rejected %v, want one %s", a.res.Rejected, tc.reason)
			}
			if s.n != 0 || !slices.Equal(a.w0, w0) {
				t.Fatal("a rejected request was answered or moved the head")
			}
		})
	}
	d := &signedDelivery{delivery: delivery{subject: outSubj, data: request(pub.Next())}}
	d.sign(pub.Append(d.data, false))
	a.handleOutputs(context.Background(), d)
	if s.n != 1 {
		t.Fatalf("the genuine request was not answered: %v", a.res.Rejected)
	}
	a.handleOutputs(context.Background(), d)
	if a.res.Rejected["trust-replay"] != 1 || s.n != 1 {
		t.Fatalf("replayed request: %v, %d replies", a.res.Rejected, s.n)
	}
	// The reply is numbered on its subject and chained by the aggregator.
	var rep schemas.Reply
	if err := c.Unmarshal(s.last, &rep); err != nil || rep.Seq != 1 {
		t.Fatalf("reply seq %d: %v", rep.Seq, err)
	}
	if seq := a.Outbox().LastSeq(schemas.Subject("t", schemas.KindReply, 1)); seq != 1 {
		t.Fatalf("reply chain at %d", seq)
	}
}

// An aggregator with the trust layer on resumes from its checkpoint with
// its chains and its verifier's state: a party's next request is
// accepted and answered, the reply continues the aggregator's chain (the
// party's verifier accepts it), and a request it had applied is a replay.
func TestResumeWithTrust(t *testing.T) {
	const n = 50
	a, s, outs, keys := trustTest(t, 2, n)
	train(a, make([]float64, n*2))
	r := a.cfg.Roster
	pv, err := trust.NewVerifier(r, trust.VerifierOptions{Subjects: r.Inbound("party-1"), Late: r.Inbound("party-1")})
	if err != nil {
		t.Fatal(err)
	}
	var replies int
	onMessage := func(m *broker.Message) {
		var rep schemas.Reply
		if schemas.NewCodec().Unmarshal(m.Data, &rep) != nil || m.Subject != schemas.Subject("t", schemas.KindReply, 1) {
			return
		}
		if err := pv.Verify(&trust.Msg{Subject: m.Subject, Seq: rep.Seq, Payload: m.Data, Sig: m.Header[trust.SigHeader], Prev: m.Header[trust.PrevHeader]}); err != nil {
			t.Errorf("party 1 rejects reply %d: %v", rep.Seq, err)
		}
		replies++
	}
	s.onMessage = onMessage
	c := schemas.NewCodec()
	pub, _ := outs[1].Publisher(schemas.Subject("t", schemas.KindOutput, 1))
	var sent []*signedDelivery
	request := func(b *Aggregator) {
		out := &schemas.PartyOutput{Header: schemas.Header{Version: schemas.Version, Party: 1, Seq: pub.Next()},
			IDs: []uint32{uint32(pub.Next() % n)}, C: []float64{0.5}, CHat: []float64{0.6}}
		data, _ := c.Marshal(out)
		d := &signedDelivery{delivery: delivery{subject: pub.Subject(), data: slices.Clone(data)}}
		d.sign(pub.Append(d.data, false))
		sent = append(sent, d)
		b.handleOutputs(context.Background(), d)
	}
	for range 5 {
		request(a)
	}
	var buf bytes.Buffer
	if err := a.Checkpoint().Encode(&buf); err != nil {
		t.Fatal(err)
	}
	ck, err := DecodeCheckpoint(&buf)
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(a.cfg)
	if err != nil {
		t.Fatal(err)
	}
	s2 := &sink{onMessage: onMessage}
	b.bus, b.ctx = s2, context.Background()
	if err := b.Resume(ck); err != nil {
		t.Fatalf("resume with the trust layer: %v", err)
	}
	b.handleOutputs(context.Background(), sent[4]) // applied before the checkpoint
	if s2.n != 0 || b.res.Rejected["trust-replay"] != 1 {
		t.Fatalf("an applied request again: %d replies, rejected %v", s2.n, b.res.Rejected)
	}
	request(b)
	if s2.n != 1 || replies != 6 || b.res.Steps != 6 {
		t.Fatalf("after the resume: %d replies (%d verified by the party), %d steps, rejected %v", s2.n, replies, b.res.Steps, b.res.Rejected)
	}
	if got, want := b.Outbox().LastSeq(schemas.Subject("t", schemas.KindReply, 1)), uint64(6); got != want {
		t.Fatalf("reply chain at %d, want %d", got, want)
	}

	// A checkpoint written without the trust layer does not resume an
	// aggregator with it (nor the other way round).
	plain := *ck
	plain.Trust, plain.TrustOut, plain.TrustIn = false, nil, nil
	c2, _ := New(a.cfg)
	if err := c2.Resume(&plain); !errors.Is(err, ErrResume) || !strings.Contains(err.Error(), "without the trust layer") {
		t.Fatalf("a checkpoint without the trust layer: %v", err)
	}
	cfg := a.cfg
	cfg.Key, cfg.Roster = nil, nil
	c3, _ := New(cfg)
	if err := c3.Resume(ck); !errors.Is(err, ErrResume) {
		t.Fatalf("a trust checkpoint without a key: %v", err)
	}
	_ = keys
}

// seqDelivery is a signed delivery with a stream sequence.
type seqDelivery struct {
	signedDelivery
	seq uint64
}

func (d *seqDelivery) Seq() uint64 { return d.seq }

// requestLog is an aggregator's in-memory stream and party 1's publisher
// of signed requests on it (storedRequests).
type requestLog struct {
	hub *broker.MemoryHub
	bus *broker.MemoryBus
	pub *trust.Publisher
}

// storedRequests puts a on an in-memory hub's bus and returns it and a
// function that publishes party 1's next signed request (from its outbox
// out) on it and returns it as the delivery the aggregator's subscription
// would hand over, with its stream sequence.
func storedRequests(t *testing.T, a *Aggregator, out *trust.Outbox, n int) (requestLog, func() *seqDelivery) {
	t.Helper()
	hub := broker.NewMemoryHub()
	bus := hub.Connect("aggregator")
	a.bus = bus
	c := schemas.NewCodec()
	pub, _ := out.Publisher(schemas.Subject("t", schemas.KindOutput, 1))
	return requestLog{hub, bus, pub}, func() *seqDelivery {
		out := &schemas.PartyOutput{Header: schemas.Header{Version: schemas.Version, Party: 1, Seq: pub.Next()},
			IDs: []uint32{uint32(pub.Next() % uint64(n))}, C: []float64{0.5}, CHat: []float64{0.4}}
		data, _ := c.Marshal(out)
		d := &seqDelivery{signedDelivery: signedDelivery{delivery: delivery{subject: pub.Subject(), data: slices.Clone(data)}}}
		d.sign(pub.Append(d.data, false))
		m := &broker.Message{Subject: d.subject, Data: d.data, Header: map[string]string{}}
		if d.sig != "" {
			m.Header[trust.SigHeader], m.Header[trust.PrevHeader] = d.sig, d.prev
		}
		if err := bus.Publish(context.Background(), m); err != nil {
			t.Fatal(err)
		}
		d.seq = hub.Len()
		return d
	}
}

// A resumed aggregator reads the stream after its checkpoint through its
// restored verifier: the requests it had answered are applied again with
// the recorded replies' numbers, a forged request the broker stored is
// rejected and never applied, and when the live subscription delivers the
// stream again only the very request recovery verified is answered. Its
// next reply continues its chain for the party.
func TestRecoverWithTrust(t *testing.T) {
	const n = 50
	a, _, outs, keys := trustTest(t, 2, n)
	train(a, make([]float64, n*2))
	lg, request := storedRequests(t, a, outs[1], n)
	hub, bus, pub, c := lg.hub, lg.bus, lg.pub, schemas.NewCodec()
	ctx := context.Background()
	var ck *Checkpoint
	for i := range 5 {
		a.handleOutputs(ctx, request())
		if i == 2 {
			ck = a.Checkpoint()
		}
	}
	inFlight := request() // stored, never answered: the aggregator died
	// A request the broker stored under party 1's next number, signed by
	// party 2 (a broker that forges).
	var fo schemas.PartyOutput
	c.Unmarshal(inFlight.data, &fo)
	fo.Seq, fo.C[0] = pub.Next(), 1e3
	forgedData, _ := c.Marshal(&fo)
	forgedData = slices.Clone(forgedData)
	ch := trust.NewChain("t", pub.Subject())
	ch.Reset(pub.Seq(), pub.Head())
	forgedSig := trust.SignHead(keys[2], "party-2", "t", pub.Subject(), fo.Seq, ch.Compute(fo.Seq, forgedData))
	bus.Publish(ctx, &broker.Message{Subject: pub.Subject(), Data: forgedData, Header: map[string]string{trust.SigHeader: forgedSig.Header()}})
	forged := &seqDelivery{signedDelivery: signedDelivery{delivery: delivery{subject: pub.Subject(), data: forgedData}, sig: forgedSig.Header()}, seq: hub.Len()}

	b, err := New(a.cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.bus, b.ctx = bus, ctx
	if err := b.Resume(ck); err != nil {
		t.Fatal(err)
	}
	if err := b.recover(ctx, bus); err != nil {
		t.Fatal(err)
	}
	r := b.resumed
	if r.Reapplied != 2 || r.Mismatched != 0 || r.Missing != 0 || b.res.Rejected["trust-wrong_signer"] != 1 {
		t.Fatalf("recovery %+v, rejected %v", r, b.res.Rejected)
	}
	before := hub.Len()
	// The live subscription delivers the stream again: a changed copy of
	// the request in flight and the forged one are skipped, the request
	// in flight itself is answered once.
	changed := *inFlight
	changed.data = slices.Clone(inFlight.data)
	changed.data[len(changed.data)-1] ^= 1
	for _, d := range []*seqDelivery{&changed, forged, inFlight, inFlight} {
		b.handleOutputs(ctx, d)
	}
	if got := hub.Len() - before; got != 1 || b.res.Steps != 6 {
		t.Fatalf("%d replies published, %d steps (recovery %+v, rejected %v)", got, b.res.Steps, r, b.res.Rejected)
	}
	// Party 1 verifies every reply of the stream, in order.
	pv, _ := trust.NewVerifier(a.cfg.Roster, trust.VerifierOptions{Subjects: a.cfg.Roster.Inbound("party-1")})
	var replies int
	_, err = logread.Deliveries(ctx, bus, []string{schemas.Subject("t", schemas.KindReply, 1)}, func(d broker.Delivery) {
		var rep schemas.Reply
		c.Unmarshal(d.Data(), &rep)
		m := trust.Msg{StreamSeq: d.Seq(), Subject: d.Subject(), Seq: rep.Seq, Payload: d.Data(), Sig: d.Header(trust.SigHeader), Prev: d.Header(trust.PrevHeader)}
		if err := pv.Verify(&m); err != nil {
			t.Errorf("party 1 rejects reply %d: %v", rep.Seq, err)
		}
		replies++
	})
	if err != nil || replies != 6 {
		t.Fatalf("%d replies: %v", replies, err)
	}
}
