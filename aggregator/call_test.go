package aggregator

import (
	"context"
	"testing"

	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/schemas"
)

// A party joins by answering the aggregator's call of its hello: a hello
// that a dead process left (called, never answered), its initial pass,
// and a hello answering another aggregator's call are no join and no
// rejection; the live process's answer joins, and its initial pass fills
// the table. A hello of an earlier revision (no call field) joins as it
// is. A replayer takes the call answered in the log as its own.
func TestJoinByCall(t *testing.T) {
	c := schemas.NewCodec()
	hello := func(seq uint64, call string) *delivery {
		b, _ := c.Marshal(&schemas.Hello{Header: schemas.Header{Version: schemas.Version, Party: 1, Seq: seq}, Model: "linear",
			InDim: 3, OutDim: 1, NTrain: 3, Call: call})
		return &delivery{schemas.Subject("t", schemas.KindHello, 1), append([]byte(nil), b...)}
	}
	initPass := func(seq uint64) *delivery {
		b, _ := c.Marshal(&schemas.EvalOutput{Header: schemas.Header{Version: schemas.Version, Party: 1, Seq: seq}, Split: schemas.SplitInit,
			First: 0, Total: 3, C: []float64{0.1, 0.2, 0.3}})
		return &delivery{schemas.Subject("t", schemas.KindEval, 1), append([]byte(nil), b...)}
	}
	var calls []schemas.Control
	a, s := newTest(t, 2, []int32{1, 0, 1}, model.NewLogistic(2))
	s.onPublish = func(b []byte) {
		var ctl schemas.Control
		if c.Unmarshal(b, &ctl) == nil && ctl.Op == schemas.CtlCall {
			calls = append(calls, ctl)
		}
	}
	ctx := context.Background()
	// A dead process: its hello is called, its initial pass skipped.
	a.handle(ctx, hello(1, schemas.CallAsked))
	a.handle(ctx, initPass(1))
	if a.hello[1] || a.join.initAt[1] != 0 || len(calls) != 1 || calls[0].Party != 1 || calls[0].Round != 1 || calls[0].Reason != a.join.nonce {
		t.Fatalf("the dead process's hello: joined %v, initial pass at %d, calls %+v", a.hello[1], a.join.initAt[1], calls)
	}
	// The live process: asks, is called, answers, sends its pass.
	a.handle(ctx, hello(5, schemas.CallAsked))
	a.handle(ctx, hello(6, "another aggregator's"))
	if a.hello[1] || len(calls) != 2 || calls[1].Round != 5 {
		t.Fatalf("before its answer: joined %v, calls %+v", a.hello[1], calls)
	}
	a.handle(ctx, hello(7, a.join.nonce))
	a.handle(ctx, initPass(2))
	if !a.hello[1] || a.join.initAt[1] != 3 {
		t.Fatalf("the answer: joined %v, initial pass at %d", a.hello[1], a.join.initAt[1])
	}
	if len(a.res.Rejected) != 0 || a.err != nil {
		t.Errorf("an earlier attempt counted as rejected: %v %v", a.res.Rejected, a.err)
	}
	// A hello of an earlier revision joins by itself.
	b, _ := c.Marshal(&schemas.Hello{Header: schemas.Header{Version: schemas.Version, Party: 2, Seq: 1}, Model: "linear", InDim: 3, OutDim: 1, NTrain: 3})
	a.handle(ctx, &delivery{schemas.Subject("t", schemas.KindHello, 2), append([]byte(nil), b...)})
	if !a.hello[2] {
		t.Error("a hello of an earlier revision did not join")
	}
	// Re-execution: the log's answer is the recorded aggregator's call.
	rp, err := NewReplayer(a.cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []*delivery{hello(1, schemas.CallAsked), initPass(1), hello(5, schemas.CallAsked), hello(7, "recorded"), initPass(2)} {
		rp.Deliver(d.subject, d.data)
	}
	if !rp.a.hello[1] || rp.a.join.initAt[1] != 3 {
		t.Errorf("the replayer: joined %v, initial pass at %d", rp.a.hello[1], rp.a.join.initAt[1])
	}
}
