package aggregator

import (
	"context"
	"slices"
	"testing"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/trust"
)

// A resume reads the parties' hellos and evaluations from the
// checkpoint's near floor when none of them below it is one the
// checkpoint's verifier had not accepted (the count rule, checked at the
// resume), not from its earlier floor a whole checkpoint period before
// it: the evaluations are large, and their read from the earlier floor
// was the longest of a resume's reads after a broker outage on a9a (160
// to 543 ms, issue 35).
func TestResumeReadsOthersFromTheNearFloor(t *testing.T) {
	a, bus, _, _, answer := floorRig(t, 50)
	ctx := context.Background()
	answer(5)
	a.saveCheckpoint(ctx) // its count: the next checkpoint's StreamFloor
	ck := nearAbove(ctx, t, a, answer)
	answer(4)
	if err := bus.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	b := resumedOn(t, a.cfg, bus, ck)
	r := b.resumed
	if r.Reapplied != 4 || r.FromStart != "" || r.ReadFrom != ck.NearFloor {
		t.Fatalf("recovery %+v, want 4 requests applied again, read from the near floor %d", r, ck.NearFloor)
	}
	if r.OthersFrom != ck.NearFloor {
		t.Errorf("hellos and evaluations read from stream sequence %d, want the near floor %d (the earlier floor is %d)", r.OthersFrom, ck.NearFloor, ck.StreamFloor)
	}
}

// An evaluation stored below the near floor that the checkpoint's
// verifier had not accepted (it waited in its subscription) fails the
// count rule there: the resume reads the hellos and evaluations from the
// earlier floor, and its verifier accepts that evaluation, so the live
// subscription takes the party's next one.
func TestOthersBelowTheNearFloorReadFromEarlier(t *testing.T) {
	const n = 50
	a, bus, outs, _, answer := floorRig(t, n)
	ctx := context.Background()
	answer(5)
	a.saveCheckpoint(ctx)
	// Party 1's evaluation, stored and never handed to the aggregator.
	pub, err := outs[1].Publisher(schemas.Subject("t", schemas.KindEval, 1))
	if err != nil {
		t.Fatal(err)
	}
	ev := &schemas.EvalOutput{Header: schemas.Header{Version: schemas.Version, Party: 1, Seq: pub.Next()}, Round: 1,
		Split: schemas.SplitTrain, Total: n, C: make([]float64, n)}
	data, err := schemas.NewCodec().Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	data = slices.Clone(data)
	m := &broker.Message{Subject: pub.Subject(), Data: data, Header: map[string]string{}}
	if st := pub.Append(data, false); st.Signed {
		m.Header[trust.SigHeader], m.Header[trust.PrevHeader] = st.SigHeader(), string(st.AppendPrevHeader(nil))
	}
	if err := bus.Publish(ctx, m); err != nil {
		t.Fatal(err)
	}
	ck := nearAbove(ctx, t, a, answer)
	b := resumedOn(t, a.cfg, bus, ck)
	if r := b.resumed; r.OthersFrom != ck.StreamFloor || r.ReadFrom != ck.NearFloor {
		t.Fatalf("hellos and evaluations read from %d, requests from %d: want the earlier floor %d and the near floor %d", r.OthersFrom, r.ReadFrom, ck.StreamFloor, ck.NearFloor)
	}
	if got := b.tr.ver.LastSeq(pub.Subject()); got != ev.Seq {
		t.Errorf("the verifier is at %d on party 1's evaluations, want %d (the one stored below the near floor)", got, ev.Seq)
	}
}

// nearAbove answers 20 requests, counts a near floor, answers more than
// the outbox keeps and returns the checkpoint, whose near floor must lie
// above its earlier floor.
func nearAbove(ctx context.Context, t *testing.T, a *Aggregator, answer func(int)) *Checkpoint {
	t.Helper()
	answer(20)
	a.nearProbe(ctx, 0)
	answer(outboxSize + 20)
	ck := a.Checkpoint()
	if ck.NearFloor <= ck.StreamFloor {
		t.Fatalf("near floor %d, earlier floor %d: want a near floor above it", ck.NearFloor, ck.StreamFloor)
	}
	return ck
}
