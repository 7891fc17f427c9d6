package party

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/broker/bustest"
	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/trust"
	"github.com/asyrevel/asyrevel/zoo"
)

// A resumed party reads the replies to it and the controls back from the
// stream at once, each on a consumer of its own: the read of the replies
// does not wait for the controls' to end, nor the other way round. Before,
// it read one subject, then the other: their round trips to the broker
// added up in a party's return after a broker outage (issue 35). The
// replies' count waits here until the controls are counted, which a read
// one after the other never does (the context's deadline only catches
// that hang). On a real broker.
func TestCatchUpReadsBothSubjectsAtOnce(t *testing.T) {
	r, keys, err := trust.GenerateRun("t", 2)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := bustest.Embedded(t, "t", "party-2")
	// The aggregator's start, signed, in the stream.
	aout, _ := trust.NewOutbox(r, keys[0], trust.Policy{})
	c := schemas.NewCodec()
	for _, msg := range []schemas.Message{
		&schemas.Control{Header: schemas.Header{Version: schemas.Version}, Op: schemas.CtlStart},
	} {
		subj := schemas.Subject("t", schemas.KindControl, 0)
		pub, _ := aout.Publisher(subj)
		msg.Head().Seq = pub.Next()
		data, _ := c.Marshal(msg)
		hdr := map[string]string{}
		if st := pub.Append(data, false); st.Signed {
			hdr[trust.SigHeader], hdr[trust.PrevHeader] = st.SigHeader(), string(st.AppendPrevHeader(nil))
		}
		if err := js.Publish(ctx, &broker.Message{Subject: subj, Data: data, Header: hdr}); err != nil {
			t.Fatal(err)
		}
	}
	if err := js.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	cfg := Config{Run: "t", ID: 2, Model: model.NewLinear(6, 1), Train: dense(50, 6), Dist: zoo.Gaussian,
		Mu: 1e-3, LR: zoo.Schedule{Eta0: 0.1}, Batch: 1, Window: 1, Seed: 7, Log: zerolog.Nop(), Key: keys[2], Roster: r}
	p0, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ck := p0.Checkpoint()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := &msgSink{}
	p.bus, p.ctx = s, ctx
	if err := p.Resume(ck); err != nil {
		t.Fatal(err)
	}
	bus := bustest.NewCountsAtOnce(js, schemas.Subject("t", schemas.KindReply, 2), schemas.Subject("t", schemas.KindControl, 0))
	if err := p.catchUp(ctx, bus); err != nil {
		t.Fatalf("catching up: %v", err)
	}
	p.mu.Lock()
	started := p.started
	p.mu.Unlock()
	if !started || len(p.Stats().Rejected) != 0 {
		t.Fatalf("the start in the stream was not applied: started %v, rejected %v", started, p.Stats().Rejected)
	}
}
