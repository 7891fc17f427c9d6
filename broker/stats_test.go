package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/broker/bustest"
)

func TestStats(t *testing.T) {
	srv := startServer(t)
	hub := broker.NewMemoryHub()
	for _, tc := range []struct {
		name    string
		connect func(run, name string) broker.Bus
		prefix  func(run string) string
		wire    bool
	}{
		{"memory", func(_, name string) broker.Bus { return hub.Connect(name) }, func(run string) string { return "asyrevel." + run }, false},
		{"jetstream-tcp", func(run, name string) broker.Bus { return connectJS(t, srv, false, run, name) }, broker.SubjectPrefix, true},
		{"jetstream-inproc", func(run, name string) broker.Bus { return connectJS(t, srv, true, run, name) }, broker.SubjectPrefix, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			run := newRun()
			pub, sub := tc.connect(run, "pub"), tc.connect(run, "sub")
			defer pub.Close()
			defer sub.Close()
			subj := tc.prefix(run) + ".s"
			var n int
			done := make(chan struct{})
			s, err := sub.Subscribe(ctx, []string{subj}, broker.SubscribeOptions{Durable: "d"}, func(_ context.Context, d broker.Delivery) {
				d.Ack()
				if n++; n == 3 {
					close(done)
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for i := range 3 {
				m := &broker.Message{Subject: subj, ID: run + "." + string(rune('a'+i)), Data: make([]byte, 10*(i+1)),
					Header: map[string]string{"Sig": "0123456789"}}
				if err := pub.Publish(ctx, m); err != nil {
					t.Fatal(err)
				}
			}
			if err := pub.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case <-done:
			case <-time.After(bustest.Timeout):
				t.Fatal("not delivered")
			}
			ps, ok := broker.BusStats(pub)
			if !ok {
				t.Fatal("no stats")
			}
			ss, _ := broker.BusStats(sub)
			if ps.MsgsOut != 3 || ps.BytesOut != 60 || ps.MsgsIn != 0 || ps.BytesIn != 0 {
				t.Errorf("publisher %+v", ps)
			}
			if ss.MsgsIn != 3 || ss.BytesIn != 60 || ss.MsgsOut != 0 || ss.BytesOut != 0 {
				t.Errorf("subscriber %+v", ss)
			}
			if !tc.wire {
				if ps.WireOut != 0 || ps.WireIn != 0 || ss.WireOut != 0 || ss.WireIn != 0 {
					t.Errorf("wire counts without a wire: %+v %+v", ps, ss)
				}
				return
			}
			// Each message carries its subject, ID and Sig header on the
			// wire, both ways.
			least := uint64(60 + 3*(len(subj)+10))
			if ps.WireOut < least || ps.WireIn == 0 || ss.WireIn < least || ss.WireOut == 0 {
				t.Errorf("wire: publisher %+v subscriber %+v", ps, ss)
			}
			if sum := ps.Add(ss); sum.MsgsOut != 3 || sum.MsgsIn != 3 || sum.WireIn != ps.WireIn+ss.WireIn {
				t.Errorf("sum %+v", sum)
			}
		})
	}
}
