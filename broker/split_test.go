package broker_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/broker"
)

// A subscription split into one consumer per filter (SplitFilters, for
// broker permissions) names each consumer for its one filter, and a
// delivery of the later filter comes after every earlier message of the
// first filter in the stream: a party's control after the replies before
// it.
func TestSplitFilters(t *testing.T) {
	srv := startServer(t)
	for _, d := range []broker.Design{broker.DesignOrdered, broker.DesignAcked} {
		for _, durable := range []string{"", "sub"} {
			t.Run(fmt.Sprintf("%s/durable=%q", d, durable), func(t *testing.T) {
				run := newRun()
				pub := connectJSConfig(t, broker.JetStreamConfig{Server: srv, Run: run, Name: "pub", Design: d})
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				busy, sparse := broker.SubjectPrefix(run)+".reply.1", broker.SubjectPrefix(run)+".ctl"
				var want []string
				for round := range 3 {
					for i := range 300 {
						data := fmt.Sprintf("r%d-%d", round, i)
						want = append(want, data)
						if err := pub.Publish(ctx, &broker.Message{Subject: busy, Data: []byte(data)}); err != nil {
							t.Fatal(err)
						}
					}
					data := fmt.Sprintf("c%d", round)
					want = append(want, data)
					if err := pub.Publish(ctx, &broker.Message{Subject: sparse, Data: []byte(data)}); err != nil {
						t.Fatal(err)
					}
				}
				if err := pub.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				var (
					mu    sync.Mutex
					names []string
				)
				sub := connectJSConfig(t, broker.JetStreamConfig{Server: srv, Run: run, Name: "sub", Design: d, SplitFilters: true,
					ConsumerName: func(filters []string) string {
						mu.Lock()
						defer mu.Unlock()
						names = append(names, fmt.Sprint(filters))
						return fmt.Sprintf("c%d", len(names))
					}})
				var got []string
				done := make(chan struct{})
				s, err := sub.Subscribe(ctx, []string{busy, sparse}, broker.SubscribeOptions{Durable: durable}, func(_ context.Context, dl broker.Delivery) {
					mu.Lock()
					defer mu.Unlock()
					got = append(got, string(dl.Data()))
					dl.Ack()
					if len(got) == len(want) {
						close(done)
					}
				})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				select {
				case <-done:
				case <-ctx.Done():
					t.Fatalf("%d of %d delivered", len(got), len(want))
				}
				mu.Lock()
				defer mu.Unlock()
				// Each filter in its order; a control never before a reply
				// that precedes it in the stream (it may come after later
				// ones).
				var replies, ctls []string
				for i, g := range got {
					if g[0] == 'c' {
						ctls = append(ctls, g)
						if r := fmt.Sprintf("r%s-299", g[1:]); !slices.Contains(got[:i], r) {
							t.Errorf("%s delivered before %s", g, r)
						}
					} else {
						replies = append(replies, g)
					}
				}
				if !slices.Equal(ctls, []string{"c0", "c1", "c2"}) || len(replies) != 900 || !slices.IsSortedFunc(replies, func(a, b string) int {
					return slices.Index(want, a) - slices.Index(want, b)
				}) {
					t.Fatalf("deliveries out of each filter's order: %q", got)
				}
				if durable == "" || d == broker.DesignOrdered {
					// Ordered consumers, each named for its one filter.
					if len(names) != 2 || names[0] != "["+busy+"]" || names[1] != "["+sparse+"]" {
						t.Fatalf("consumers named for %q, want one per filter", names)
					}
				}
			})
		}
	}
}
