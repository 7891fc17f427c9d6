package aggregator

import (
	"context"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/zoo"
)

// The call carries the aggregator's hold-out. A first hello that counts
// the party's rows before the hold-out (its rows in all match) is called;
// the hello answering the call must count them as the aggregator does,
// and a party of an earlier revision, which answers with all its rows, is
// refused with words naming the hold-out and the fix. A first hello whose
// rows add up to another count is refused as before.
func TestCallCarriesHoldOut(t *testing.T) {
	// 4 training rows, 1 of them held out (the first test label), 2 test rows.
	a, err := New(Config{Run: "t", Parties: 1, K: 1, Head: model.NewLogistic(1), Labels: []int32{1, 0, 1}, TestLabels: []int32{0, 1, 0},
		HeldOut: 1, HoldOut: schemas.HoldOut{Share: 0.25, Seed: 7}, HoldOutRows: 1, Mu: 1e-3, LR: zoo.Schedule{Eta0: 0.01}, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	s := &sink{}
	a.bus, a.ctx = s, context.Background()
	c := schemas.NewCodec()
	var ctls []schemas.Control
	s.onPublish = func(b []byte) {
		var ctl schemas.Control
		if c.Unmarshal(b, &ctl) == nil {
			ctls = append(ctls, ctl)
		}
	}
	hello := func(seq uint64, call string, nTrain, nTest uint32) *delivery {
		b, _ := c.Marshal(&schemas.Hello{Header: schemas.Header{Version: schemas.Version, Party: 1, Seq: seq}, Model: "linear",
			InDim: 3, OutDim: 1, NTrain: nTrain, NTest: nTest, Call: call})
		return &delivery{schemas.Subject("t", schemas.KindHello, 1), append([]byte(nil), b...)}
	}
	ctx := context.Background()
	a.handle(ctx, hello(1, schemas.CallAsked, 4, 2)) // before the hold-out
	if len(ctls) != 1 || ctls[0].Op != schemas.CtlCall || ctls[0].HoldOut == nil || *ctls[0].HoldOut != (schemas.HoldOut{Share: 0.25, Seed: 7}) {
		t.Fatalf("a first hello of all the rows: controls %+v", ctls)
	}
	// An earlier revision answers the call with all its rows.
	a.handle(ctx, hello(2, a.join.nonce, 4, 2))
	if a.hello[1] || len(ctls) != 2 || ctls[1].Op != schemas.CtlRefuse {
		t.Fatalf("an answer of all the rows: joined %v, controls %+v", a.hello[1], ctls)
	}
	for _, w := range []string{"party holds 4 training samples, aggregator 3", "keeps 1 of the training rows aside (--holdout 0.25 --seed 7), party 1 keeps 0",
		"earlier revision", "give party 1 --holdout 0.25 --seed 7"} {
		if !strings.Contains(ctls[1].Reason, w) {
			t.Errorf("refusal %q lacks %q", ctls[1].Reason, w)
		}
	}
	// Rows that add up to another count: refused at once, as before.
	a.handle(ctx, hello(3, schemas.CallAsked, 5, 2))
	if len(ctls) != 3 || ctls[2].Op != schemas.CtlRefuse || !strings.Contains(ctls[2].Reason, "5 training samples") {
		t.Fatalf("a first hello of other rows: controls %+v", ctls)
	}
	// This revision: asks with its rows split, answers, joins.
	a.handle(ctx, hello(4, schemas.CallAsked, 3, 3))
	a.handle(ctx, hello(5, a.join.nonce, 3, 3))
	if !a.hello[1] {
		t.Fatalf("the answer of the split rows did not join: controls %+v", ctls[3:])
	}
	// A config whose hold-out rows and share disagree is refused.
	if _, err := New(Config{Run: "t", Parties: 1, K: 1, Head: model.NewLogistic(1), Labels: []int32{1}, TestLabels: []int32{0},
		HoldOutRows: 1, Mu: 1e-3, LR: zoo.Schedule{Eta0: 0.01}, Log: zerolog.Nop()}); err == nil {
		t.Error("a hold-out of 1 row without a share was accepted")
	}
}
