package aggregator

import (
	"context"
	"slices"
	"testing"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/schemas"
)

// After a broker lost the tail of the stream (a crash, a full stream),
// the resumed aggregator sends again the replies its checkpoint counts
// as sent. A reply whose request the stream lost too waits for its party
// to send that request again: sent at once, it landed before its
// request, and the audit found "causal_order: an effect before its
// cause" (seen once in TestRosterBrokerRaisesBound). A reply whose
// request the stream holds goes at once.
func TestResendHoldsReplyUntilItsRequest(t *testing.T) {
	a, s := newTest(t, 2, []int32{1, 0}, model.NewLogistic(2))
	var sent []string
	s.onMessage = func(m *broker.Message) { sent = append(sent, m.Subject) }
	a.resumed = &Recovery{}
	enc := schemas.NewCodec()
	reply := func(party int, seq, req uint64) Sent {
		data, err := enc.Marshal(&schemas.Reply{Header: schemas.Header{Version: schemas.Version, Party: uint16(party), Seq: seq},
			ReqSeq: req, H: []float64{0.1}, HBar: []float64{0.2}})
		if err != nil {
			t.Fatal(err)
		}
		return Sent{Seq: seq, Subject: schemas.Subject(a.cfg.Run, schemas.KindReply, party), Data: slices.Clone(data)}
	}
	a.recov.resumeOutbox = []Sent{reply(1, 5, 7), reply(2, 3, 4), reply(1, 6, 8)}
	r := &recovery{a: a, ctx: context.Background(), bus: s, run: a.cfg.Run,
		ckSeq: []uint64{0, 6, 3}, streamSeq: []uint64{0, 4, 2}, minKept: []uint64{1, 5, 3},
		have: map[[2]uint64]bool{}, inStream: map[[2]uint64]bool{{2, 4}: true}, dec: schemas.NewCodec()}
	if err := r.resend(); err != nil {
		t.Fatal(err)
	}
	if len(sent) != 1 || sent[0] != reply(2, 3, 4).Subject {
		t.Fatalf("sent at once: %v, want party 2's reply alone", sent)
	}
	a.releaseHeld(2, 4)
	a.releaseHeld(1, 6)
	if len(sent) != 1 {
		t.Fatalf("a reply went out for a request that did not come: %v", sent)
	}
	a.releaseHeld(1, 7)
	if len(sent) != 2 || len(a.recov.held) != 1 {
		t.Fatalf("after party 1's request 7 came again: sent %v, held %d", sent, len(a.recov.held))
	}
	a.releaseAllHeld()
	if len(sent) != 3 || len(a.recov.held) != 0 || a.resumed.Resent != 3 {
		t.Fatalf("after the wait: sent %v, held %d, resent %d", sent, len(a.recov.held), a.resumed.Resent)
	}
}
