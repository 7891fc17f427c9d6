package broker_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/asyrevel/asyrevel/broker"
)

// A party's subscription as a roster's broker has it (one named ordered
// consumer per filter) on a node that survives, while the node that leads
// the stream (and holds the consumers) stops: every message of both
// filters is delivered, each filter in order.
func TestClusterSplitFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster in -short mode")
	}
	c := startCluster(t)
	run := newRun()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	urls := c.URLs()
	mk := connectNode(t, c.Servers()[0], false, run, "make")
	js, _ := jetstream.New(mk.Conn())
	st, err := js.Stream(ctx, broker.StreamName(run))
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leader := -1
	for i, s := range c.Servers() {
		if s.NATS().Name() == info.Cluster.Leader {
			leader = i
		}
	}
	// The subscriber's and the publisher's home: a node that stays.
	home := (leader + 1) % 3
	list := strings.Join([]string{urls[home], urls[(home+1)%3], urls[(home+2)%3]}, ",")
	pub, err := broker.ConnectJetStream(ctx, broker.JetStreamConfig{URL: list, Run: run, Name: "pub", Design: broker.DesignOrdered})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	sub, err := broker.ConnectJetStream(ctx, broker.JetStreamConfig{URL: list, Run: run, Name: "sub", Design: broker.DesignOrdered, SplitFilters: true,
		ConsumerName: func(filters []string) string {
			return "sub-" + strings.ReplaceAll(strings.Join(filters, "-")[len(broker.SubjectPrefix(run))+1:], ".", "-")
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	busy, sparse := broker.SubjectPrefix(run)+".reply.1", broker.SubjectPrefix(run)+".ctl"
	var (
		mu  sync.Mutex
		got []string
	)
	s, err := sub.Subscribe(ctx, []string{busy, sparse}, broker.SubscribeOptions{}, func(_ context.Context, d broker.Delivery) {
		mu.Lock()
		got = append(got, string(d.Data()))
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var want []string
	publish := func(round int) {
		for i := range 200 {
			data := fmt.Sprintf("r%d-%d", round, i)
			want = append(want, data)
			if err := pub.Publish(ctx, &broker.Message{Subject: busy, ID: run + "." + data, Data: []byte(data)}); err != nil {
				t.Fatal(err)
			}
		}
		data := fmt.Sprintf("c%d", round)
		want = append(want, data)
		if err := pub.Publish(ctx, &broker.Message{Subject: sparse, ID: run + "." + data, Data: []byte(data)}); err != nil {
			t.Fatal(err)
		}
	}
	wait := func(n int, d time.Duration) {
		t.Helper()
		deadline := time.Now().Add(d)
		for {
			mu.Lock()
			k := len(got)
			mu.Unlock()
			if k >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d delivered", k, n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	publish(0)
	wait(len(want), 3*time.Minute)
	c.Servers()[leader].Shutdown()
	stopped := time.Now()
	for round := 1; round <= 3; round++ {
		publish(round)
	}
	if err := pub.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	wait(len(want), 3*time.Minute)
	t.Logf("%d messages delivered, the last %v after the stream leader %s stopped", len(want), time.Since(stopped).Round(time.Millisecond), info.Cluster.Leader)
	mu.Lock()
	defer mu.Unlock()
	var replies, ctls []string
	for _, g := range got {
		if g[0] == 'c' {
			ctls = append(ctls, g)
		} else {
			replies = append(replies, g)
		}
	}
	var wantReplies []string
	for _, w := range want {
		if w[0] == 'r' {
			wantReplies = append(wantReplies, w)
		}
	}
	if fmt.Sprint(ctls) != "[c0 c1 c2 c3]" || fmt.Sprint(replies) != fmt.Sprint(wantReplies) {
		t.Fatalf("delivered %d controls %v and %d replies, want 4 and %d", len(ctls), ctls, len(replies), len(wantReplies))
	}
}
