package broker_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/trust"
)

// The names of an ordered subscription's consumers are the ones a
// roster's broker grants.
func TestOrderedLivesGranted(t *testing.T) {
	if broker.OrderedLives != trust.DefaultOrderedResets {
		t.Fatalf("the broker cycles through %d consumer names, a roster grants %d", broker.OrderedLives, trust.DefaultOrderedResets)
	}
}

// consumerNames lists the run's consumers.
func consumerNames(t *testing.T, b *broker.JetStream) []string {
	t.Helper()
	js, err := jetstream.New(b.Conn())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, broker.StreamName(b.Run()))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	l := st.ConsumerNames(ctx)
	for n := range l.Name() {
		names = append(names, n)
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	return names
}

// A named ordered subscription made again (a reconnect; in a cluster, its
// consumer's node died) creates its consumer under a new name, never the
// one it replaces: in a cluster a kill -9'd node's consumer keeps its name
// for minutes, and a create under it is an update only that node would
// answer (experiment faults, cluster-node, stalled in 2 of 4 runs). A
// consumer some other left under the first name does not stop a new
// subscription either. Deliveries go on in order, none twice.
func TestOrderedRestartNewName(t *testing.T) {
	srv := startServer(t)
	run := newRun()
	b := connectJSConfig(t, broker.JetStreamConfig{Server: srv, Run: run, Name: "sub", Design: broker.DesignOrdered,
		ConsumerName: func([]string) string { return "party-1-reply" }})
	ctx := context.Background()
	subj := broker.SubjectPrefix(run) + ".reply.1"
	publish := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			if err := b.Publish(ctx, &broker.Message{Subject: subj, ID: fmt.Sprint(i), Data: fmt.Append(nil, i)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu  sync.Mutex
		got []string
	)
	wait := func(n int) {
		t.Helper()
		deadline := time.Now().Add(3 * time.Minute) // a bound on a hang, not on speed
		for {
			mu.Lock()
			k := len(got)
			mu.Unlock()
			if k >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d delivered; consumers %v", k, n, consumerNames(t, b))
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// A consumer an earlier process left under the first name, starting
	// elsewhere.
	js, _ := jetstream.New(b.Conn())
	if _, err := js.CreateConsumer(ctx, broker.StreamName(run), jetstream.ConsumerConfig{Name: "party-1-reply_1", FilterSubject: subj,
		AckPolicy: jetstream.AckNonePolicy, MemoryStorage: true, DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: 99}); err != nil {
		t.Fatal(err)
	}
	publish(0, 50)
	sub, err := b.Subscribe(ctx, []string{subj}, broker.SubscribeOptions{Deliver: broker.DeliverAll}, func(_ context.Context, d broker.Delivery) {
		mu.Lock()
		got = append(got, string(d.Data()))
		mu.Unlock()
	})
	if err != nil {
		t.Fatalf("subscribe beside a consumer named party-1-reply_1: %v", err)
	}
	defer sub.Close()
	wait(50)
	seen := map[string]bool{}
	for _, n := range consumerNames(t, b) {
		seen[n] = true
	}
	for round := range 3 {
		before := consumerNames(t, b)
		broker.RestartOrdered(sub)
		// The replacement appears and the replaced one goes.
		var now []string
		for deadline := time.Now().Add(3 * time.Minute); ; { // a bound on a hang, not on speed
			now = consumerNames(t, b)
			if !slices.Equal(now, before) && len(now) == len(before) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: consumers %v, before the restart %v", round, now, before)
			}
			time.Sleep(5 * time.Millisecond)
		}
		for _, n := range now {
			if !strings.HasPrefix(n, "party-1-reply_") {
				t.Fatalf("consumer %q is not a granted name", n)
			}
			if !slices.Contains(before, n) && seen[n] {
				t.Fatalf("round %d: the restarted consumer took the name %s again (consumers before %v)", round, n, before)
			}
			seen[n] = true
		}
		publish(50*(round+1), 50*(round+2))
		wait(50 * (round + 2))
	}
	mu.Lock()
	defer mu.Unlock()
	for i, g := range got {
		if g != fmt.Sprint(i) {
			t.Fatalf("delivery %d is %s: %v", i, g, got)
		}
	}
	if len(got) != 200 {
		t.Fatalf("%d delivered, want 200", len(got))
	}
}
