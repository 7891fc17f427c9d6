package party

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/zoo"
)

// recSink keeps what the party publishes.
type recSink struct {
	broker.Bus
	msgs []*broker.Message
}

func (s *recSink) Publish(_ context.Context, m *broker.Message) error {
	c := *m
	c.Data = append([]byte(nil), m.Data...)
	s.msgs = append(s.msgs, &c)
	return nil
}

// hellos decodes the hellos published.
func (s *recSink) hellos(t *testing.T) []schemas.Hello {
	var hs []schemas.Hello
	c := schemas.NewCodec()
	for _, m := range s.msgs {
		if m.Subject != schemas.Subject("t", schemas.KindHello, 2) {
			continue
		}
		var h schemas.Hello
		if err := c.Unmarshal(m.Data, &h); err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	return hs
}

// A called party keeps aside what the aggregator's call names: one given
// no hold-out takes it (its rows split again before it answers, so its
// hello counts the aggregator's rows); one given another refuses, naming
// both and the fix; a call of an earlier revision (no hold-out) changes
// nothing; a call with a share that is no share is a counted rejection.
func TestCallHoldOut(t *testing.T) {
	type resplit struct {
		calls []schemas.HoldOut
	}
	setup := func(t *testing.T, h HoldOut, rs *resplit) (*Party, *recSink) {
		h.Resplit = func(got schemas.HoldOut) (Rows, error) {
			rs.calls = append(rs.calls, got)
			return Rows{Train: dense(45, 6), Test: dense(5, 6), HeldOut: 5, LR: zoo.Schedule{Eta0: 0.1, T0: 3}}, nil
		}
		p, err := New(Config{Run: "t", ID: 2, Model: model.NewLinear(6, 1), Train: dense(50, 6), Dist: zoo.Gaussian, Mu: 1e-3,
			LR: zoo.Schedule{Eta0: 0.1}, Seed: 7, HoldOut: h, Log: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		s := &recSink{}
		p.bus, p.ctx = s, context.Background()
		p.mu.Lock()
		if err := p.hello(schemas.CallAsked); err != nil {
			t.Fatal(err)
		}
		p.join.helloSeq = p.seq
		p.mu.Unlock()
		return p, s
	}
	c := schemas.NewCodec()
	call := func(p *Party, seq uint64, h *schemas.HoldOut) {
		b, err := c.Marshal(&schemas.Control{Header: schemas.Header{Version: schemas.Version, Party: 2, Seq: seq}, Op: schemas.CtlCall,
			Round: uint32(p.join.helloSeq), Reason: "bm9uY2U", HoldOut: h})
		if err != nil {
			t.Fatal(err)
		}
		p.handle(context.Background(), &delivery{subject: schemas.Subject("t", schemas.KindControl, 0), data: append([]byte(nil), b...)})
	}
	agg := &schemas.HoldOut{Share: 0.1, Seed: 1}

	t.Run("taken", func(t *testing.T) {
		var rs resplit
		p, s := setup(t, HoldOut{}, &rs)
		call(p, 1, agg)
		hs := s.hellos(t)
		if p.err != nil || len(rs.calls) != 1 || rs.calls[0] != *agg {
			t.Fatalf("err %v, re-split %v", p.err, rs.calls)
		}
		if len(hs) != 2 || hs[1].Call != "bm9uY2U" || hs[1].NTrain != 45 || hs[1].NTest != 5 {
			t.Fatalf("hellos %+v, want an answer counting 45 training and 5 test rows", hs)
		}
		if st := p.Stats(); st.HoldOut != *agg || st.HeldOut != 5 || p.cfg.LR.T0 != 3 {
			t.Errorf("stats hold-out %+v (%d rows), step sizes %v", st.HoldOut, st.HeldOut, p.cfg.LR)
		}
		// Its checkpoint records the hold-out; a party whose rows keep
		// none aside does not resume from it.
		ck := p.Checkpoint()
		if !ck.HoldOutKnown || ck.HoldOut != *agg {
			t.Fatalf("checkpoint hold-out %+v known %v", ck.HoldOut, ck.HoldOutKnown)
		}
		q, _ := setup(t, HoldOut{}, &resplit{})
		if err := q.Resume(ck); !errors.Is(err, ErrResume) || !strings.Contains(err.Error(), "--holdout 0.1 --seed 1") {
			t.Errorf("resume of a split party's checkpoint on unsplit rows: %v", err)
		}
	})
	t.Run("the party's own disagrees", func(t *testing.T) {
		var rs resplit
		p, s := setup(t, HoldOut{HoldOut: schemas.HoldOut{Share: 0.2, Seed: 1}, HeldOut: 10, Given: true, Flags: "--holdout 0.2 --seed 1"}, &rs)
		call(p, 1, agg)
		if !errors.Is(p.err, ErrHoldOut) || len(rs.calls) != 0 || len(s.hellos(t)) != 1 {
			t.Fatalf("err %v, re-split %v, %d hellos", p.err, rs.calls, len(s.hellos(t)))
		}
		for _, w := range []string{"0.1 of the training rows aside, chosen with seed 1", "was given --holdout 0.2 --seed 1", "same --holdout and --seed", "(--holdout 0.1 --seed 1)"} {
			if !strings.Contains(p.err.Error(), w) {
				t.Errorf("%q lacks %q", p.err, w)
			}
		}
	})
	t.Run("the party's own agrees", func(t *testing.T) {
		var rs resplit
		p, s := setup(t, HoldOut{HoldOut: *agg, HeldOut: 5, Given: true}, &rs)
		call(p, 1, agg)
		if hs := s.hellos(t); p.err != nil || len(rs.calls) != 0 || len(hs) != 2 || hs[1].NTrain != 50 {
			t.Fatalf("err %v, re-split %v, hellos %+v", p.err, rs.calls, hs)
		}
	})
	t.Run("an earlier revision's call", func(t *testing.T) {
		var rs resplit
		p, s := setup(t, HoldOut{}, &rs)
		call(p, 1, nil)
		if hs := s.hellos(t); p.err != nil || len(rs.calls) != 0 || len(hs) != 2 || hs[1].NTrain != 50 {
			t.Fatalf("err %v, re-split %v, hellos %+v", p.err, rs.calls, hs)
		}
	})
	t.Run("hostile share", func(t *testing.T) {
		var rs resplit
		p, s := setup(t, HoldOut{}, &rs)
		for i, share := range []float64{math.NaN(), -0.5, 1, math.Inf(1), 1e300} {
			call(p, uint64(i+1), &schemas.HoldOut{Share: share, Seed: 1})
		}
		if p.err != nil || len(rs.calls) != 0 || len(s.hellos(t)) != 1 || p.Stats().Rejected["range"] != 5 {
			t.Fatalf("err %v, re-split %v, %d hellos, rejected %v", p.err, rs.calls, len(s.hellos(t)), p.Stats().Rejected)
		}
	})
}
