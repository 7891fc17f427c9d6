package party

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/zoo"
)

// A refusal addressed to this party (and this hello) stops it with the
// aggregator's reason; a refusal of another party, or of another process
// with the same id (another hello), does not; an abort stops every party.
func TestRefusal(t *testing.T) {
	c := schemas.NewCodec()
	refuse := func(seq uint64, party uint16, round uint32) []byte {
		b, err := c.Marshal(&schemas.Control{Header: schemas.Header{Version: schemas.Version, Party: party, Seq: seq},
			Op: schemas.CtlRefuse, Round: round, Reason: "party holds 2500 training samples, aggregator 2000"})
		if err != nil {
			t.Fatal(err)
		}
		return append([]byte(nil), b...)
	}
	subj := schemas.Subject("t", schemas.KindControl, 0)
	cases := []struct {
		name  string
		party uint16
		round uint32
		want  error
	}{
		{"this party, this hello", 2, 1, ErrRefused},
		{"this party, any hello", 2, 0, ErrRefused},
		{"this party, another process's hello", 2, 9, nil},
		{"another party", 3, 1, nil},
		{"everyone", 0, 0, ErrAborted},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := newTest(t, 1, 1, zoo.Gaussian)
			p.join.helloSeq = 1
			p.handle(context.Background(), &delivery{subject: subj, data: refuse(1, tc.party, tc.round)})
			if !errors.Is(p.err, tc.want) || tc.want == nil && p.err != nil {
				t.Fatalf("err = %v, want %v", p.err, tc.want)
			}
			if tc.want != nil && !strings.Contains(p.err.Error(), "2500 training samples") {
				t.Fatalf("the error does not carry the reason: %v", p.err)
			}
		})
	}
}

func waitParty(t *testing.T, join, wait time.Duration) *Party {
	p, err := New(Config{Run: "t", ID: 1, Model: model.NewLinear(6, 1), Train: dense(50, 6),
		Dist: zoo.Gaussian, Mu: 1e-3, LR: zoo.Schedule{Eta0: 0.1}, Batch: 1, Window: 2, Seed: 7,
		JoinWait: join, Wait: wait, Notice: 20 * time.Millisecond, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Without an aggregator, a party gives up after JoinWait and says what it
// waited for.
func TestNoStartDeadline(t *testing.T) {
	hub := broker.NewMemoryHub()
	p := waitParty(t, 150*time.Millisecond, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t0 := time.Now()
	err := p.Run(ctx, hub.Connect("p"))
	if !errors.Is(err, ErrNoProgress) || !strings.Contains(err.Error(), "no start") {
		t.Fatalf("after %v: %v", time.Since(t0), err)
	}
}

// After the start, a party whose requests get no reply gives up after Wait.
func TestNoReplyDeadline(t *testing.T) {
	hub := broker.NewMemoryHub()
	agg := hub.Connect("aggregator")
	p := waitParty(t, time.Minute, 150*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() {
		// The start, then silence.
		time.Sleep(50 * time.Millisecond)
		b, _ := schemas.NewCodec().Marshal(&schemas.Control{Header: schemas.Header{Version: schemas.Version, Seq: 1}, Op: schemas.CtlStart})
		agg.Publish(ctx, &broker.Message{Subject: schemas.Subject("t", schemas.KindControl, 0), Data: b})
	}()
	err := p.Run(ctx, hub.Connect("p"))
	if !errors.Is(err, ErrNoProgress) || !strings.Contains(err.Error(), "no reply") || !strings.Contains(err.Error(), "2 requests in flight") {
		t.Fatalf("%v", err)
	}
}

// flatModel is a linear model whose outputs are rounded to a grid far
// coarser than any perturbation of size mu: it is flat at that scale.
type flatModel struct{ *model.Linear }

func (f flatModel) Forward(w []float64, x *dataset.Matrix, rows []uint32, out []float64) {
	f.Linear.Forward(w, x, rows, out)
	for i := range out {
		out[i] = float64(int(out[i]))
	}
}

// A model that does not react to its perturbations is noticed.
func TestFlatModelNoticed(t *testing.T) {
	for _, tc := range []struct {
		m    model.Local
		flat bool
	}{{flatModel{model.NewLinear(6, 1)}, true}, {model.NewLinear(6, 1), false}} {
		p, err := New(Config{Run: "t", ID: 1, Model: tc.m, Train: dense(50, 6), Dist: zoo.Gaussian, Mu: 1e-3,
			LR: zoo.Schedule{Eta0: 0.1}, Batch: 4, Window: 1, Seed: 7, Log: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		p.bus, p.ctx = &sink{}, context.Background()
		for range 2 * flatProbes {
			if err := p.request(); err != nil {
				t.Fatal(err)
			}
			p.n = 0
		}
		st := p.Stats()
		if st.FlatProbes != flatProbes || (st.FlatOutputs == flatProbes) != tc.flat {
			t.Errorf("%T: %d of %d probes flat, want all: %v", tc.m, st.FlatOutputs, st.FlatProbes, tc.flat)
		}
	}
}

// sparse is n rows of d columns of which only every tenth row has values:
// the others are empty in this party's block (as a9a's one-hot rows are in
// most parties' blocks).
func sparse(n, d int) *dataset.Matrix {
	m := &dataset.Matrix{NRows: n, NCols: d, Indptr: make([]int64, n+1)}
	for i := 0; i < n; i++ {
		if i%10 == 0 {
			for j := 0; j < d; j++ {
				m.Indices = append(m.Indices, int32(j))
				m.Values = append(m.Values, 1)
			}
		}
		m.Indptr[i+1] = int64(len(m.Indices))
	}
	return m
}

// A working model on rows that are empty in the party's block gives equal
// outputs at w and w + mu u (both are 0): that says nothing about the model,
// so such probes do not count towards the flatness warning (a9a at batch 1
// set it off with the linear model).
func TestEmptyRowsAreNotFlatness(t *testing.T) {
	p, err := New(Config{Run: "t", ID: 1, Model: model.NewLinear(6, 1), Train: sparse(200, 6), Dist: zoo.Gaussian, Mu: 1e-3,
		LR: zoo.Schedule{Eta0: 0.1}, Batch: 1, Window: 1, Seed: 7, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	p.bus, p.ctx = &sink{}, context.Background()
	for range 40 * flatProbes {
		if err := p.request(); err != nil {
			t.Fatal(err)
		}
		p.n = 0
	}
	st := p.Stats()
	if st.FlatOutputs != 0 || st.FlatProbes == 0 {
		t.Errorf("%d of %d probes counted flat on a model that moves wherever its rows have values", st.FlatOutputs, st.FlatProbes)
	}
}
