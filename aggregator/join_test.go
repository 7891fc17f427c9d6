package aggregator

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/zoo"
)

// A hello that does not fit the run refuses that party alone, addressed to
// it and to the hello's sequence number; the run goes on waiting for it.
// Before, a wrong id fingerprint ended the whole run, and an empty one was
// not checked at all.
func TestHelloRefusals(t *testing.T) {
	good := func() *schemas.Hello {
		return &schemas.Hello{Header: schemas.Header{Version: schemas.Version, Party: 2, Seq: 4}, Model: "linear",
			InDim: 3, OutDim: 1, NTrain: 3, IDHash: "abc"}
	}
	cases := []struct {
		name   string
		edit   func(h *schemas.Hello)
		refuse string // "" = accepted
	}{
		{"fits", func(*schemas.Hello) {}, ""},
		{"other ids", func(h *schemas.Hello) { h.IDHash = "def" }, "fingerprint def"},
		{"no ids", func(h *schemas.Hello) { h.IDHash = "" }, "no sample ids"},
		{"samples", func(h *schemas.Hello) { h.NTrain = 4 }, "4 training samples"},
		{"k", func(h *schemas.Hello) { h.OutDim = 2 }, "k=2"},
		{"version", func(h *schemas.Hello) { h.Version = schemas.Version + 1 }, "different asyrevel versions"},
	}
	c := schemas.NewCodec()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, s := newTest(t, 2, []int32{1, 0, 1}, model.NewLogistic(2))
			a.cfg.IDHash = "abc"
			h := good()
			tc.edit(h)
			b, _ := c.Marshal(h)
			a.handle(context.Background(), &delivery{schemas.Subject("t", schemas.KindHello, 2), append([]byte(nil), b...)})
			if a.err != nil || a.phase != joining {
				t.Fatalf("the run ended: %v", a.err)
			}
			if tc.refuse == "" {
				if !a.hello[2] || s.n != 0 {
					t.Fatalf("a fitting hello: joined %v, %d messages published", a.hello[2], s.n)
				}
				return
			}
			var ctl schemas.Control
			round := uint32(4)
			if tc.name == "version" {
				round = 0 // another version's header is not read
			}
			if s.n != 1 || c.Unmarshal(s.last, &ctl) != nil || ctl.Op != schemas.CtlRefuse || ctl.Party != 2 || ctl.Round != round ||
				!strings.Contains(ctl.Reason, tc.refuse) || a.hello[2] {
				t.Fatalf("want a refusal of party 2's hello 4 saying %q; published %d: %+v", tc.refuse, s.n, ctl)
			}
			// The party comes back with the right data, numbering on.
			h = good()
			h.Seq = 9
			b, _ = c.Marshal(h)
			a.handle(context.Background(), &delivery{schemas.Subject("t", schemas.KindHello, 2), append([]byte(nil), b...)})
			if !a.hello[2] || a.join.refused[2] != "" {
				t.Fatalf("the party could not join again: %v", a.join.refused[2])
			}
			if a.res.Refused[2] == "" {
				t.Error("the refusal is not in the result")
			}
		})
	}
}

// A second process with the id of a party that has joined is refused
// (addressed to its hello), and the party that joined stays.
func TestSecondProcessRefused(t *testing.T) {
	a, s := newTest(t, 2, []int32{1, 0, 1}, model.NewLogistic(2))
	c := schemas.NewCodec()
	for _, seq := range []uint64{1, 7} {
		b, _ := c.Marshal(&schemas.Hello{Header: schemas.Header{Version: schemas.Version, Party: 1, Seq: seq}, InDim: 3, OutDim: 1, NTrain: 3})
		a.handle(context.Background(), &delivery{schemas.Subject("t", schemas.KindHello, 1), append([]byte(nil), b...)})
	}
	var ctl schemas.Control
	if s.n != 1 || c.Unmarshal(s.last, &ctl) != nil || ctl.Op != schemas.CtlRefuse || ctl.Round != 7 || !strings.Contains(ctl.Reason, "already joined") || !a.hello[1] {
		t.Fatalf("published %d: %+v", s.n, ctl)
	}
}

// A join phase without progress ends after JoinWait with the reason, and
// the parties are told (an abort addressed to all).
func TestJoinWait(t *testing.T) {
	a, err := New(Config{Run: "t", Parties: 2, K: 1, Head: model.NewLogistic(2), Labels: []int32{1, 0, 1}, Mu: 1e-3,
		LR: zoo.Schedule{Eta0: 0.01}, JoinWait: 200 * time.Millisecond, Notice: 50 * time.Millisecond, MaxSteps: 10, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	hub := broker.NewMemoryHub()
	watch := hub.Connect("party")
	got := make(chan schemas.Control, 4)
	sub, err := watch.Subscribe(context.Background(), []string{schemas.Subject("t", schemas.KindControl, 0)}, broker.SubscribeOptions{},
		func(_ context.Context, d broker.Delivery) {
			var c schemas.Control
			if schemas.NewCodec().Unmarshal(d.Data(), &c) == nil {
				got <- c
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	t0 := time.Now()
	_, err = a.Run(context.Background(), hub.Connect("aggregator"))
	if !errors.Is(err, ErrNoProgress) || !strings.Contains(err.Error(), "party 1: no hello") || !strings.Contains(err.Error(), "party 2: no hello") {
		t.Fatalf("after %v: %v", time.Since(t0), err)
	}
	select {
	case c := <-got:
		if c.Op != schemas.CtlRefuse || c.Party != 0 || !strings.Contains(c.Reason, "no hello") {
			t.Fatalf("the parties were told %+v", c)
		}
	case <-time.After(time.Minute): // a bound on a hang, not on speed
		t.Fatal("the parties were not told")
	}
}

// Interrupted, Run returns what the run has so far.
func TestInterruptedResult(t *testing.T) {
	a, _ := newTest(t, 2, []int32{1, 0, 1}, model.NewLogistic(2))
	hub := broker.NewMemoryHub()
	ctx, cancel := context.WithCancelCause(context.Background())
	// Interrupted once Run waits for the parties, not 100 ms after the
	// start: a cancel before its subscriptions fails them instead
	// ("aggregator: subscribe: context canceled").
	go func() {
		for {
			a.mu.Lock()
			waiting := !a.join.progress.IsZero()
			a.mu.Unlock()
			if waiting {
				cancel(errors.New("interrupt signal received"))
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	res, err := a.Run(ctx, hub.Connect("aggregator"))
	if !errors.Is(err, ErrInterrupted) || res == nil || res.Interrupted != "interrupt signal received" {
		t.Fatalf("res %+v, err %v", res, err)
	}
}
