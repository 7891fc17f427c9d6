package broker

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// A delivery of a durable subscription (DesignAcked) or of an ordered
// one (DesignOrdered) lost on the way (sent while the
// connection was down, as when a cluster node dies) is delivered again,
// in its order, before the ones after it: the later one's Ack (AckAll)
// would otherwise acknowledge the lost one too, and the broker would
// never send it again (a party stalled so after a broker node's kill -9,
// KILL="broker party" make compose-test).
func TestLostDeliveryComesAgain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := StartServer(ctx, ServerConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	for _, c := range []struct {
		design  Design
		durable string
		named   bool
	}{
		{DesignAcked, "d", false},
		{DesignOrdered, "", false},
		{DesignOrdered, "", true},
	} {
		t.Run(fmt.Sprintf("%s-%s-%v", c.design, c.durable, c.named), func(t *testing.T) {
			lostDeliveryComesAgain(ctx, t, srv, c.design, c.durable, c.named)
		})
	}
}

func lostDeliveryComesAgain(ctx context.Context, t *testing.T, srv *Server, design Design, durable string, named bool) {
	var once sync.Once
	loseDelivery = func(dseq uint64) bool {
		lost := false
		if dseq == 5 {
			once.Do(func() { lost = true })
		}
		return lost
	}
	defer func() { loseDelivery = nil }()
	run := fmt.Sprintf("gap%s%v", design, named)
	cfg := JetStreamConfig{Server: srv, Run: run, Name: "sub", Design: design}
	if named {
		cfg.ConsumerName = func([]string) string { return "party-1-reply" }
	}
	b, err := ConnectJetStream(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	subj := SubjectPrefix(run) + ".reply.1"
	var (
		mu  sync.Mutex
		got []string
	)
	sub, err := b.Subscribe(ctx, []string{subj}, SubscribeOptions{Durable: durable, Deliver: DeliverAll}, func(_ context.Context, d Delivery) {
		mu.Lock()
		got = append(got, string(d.Data()))
		mu.Unlock()
		if err := d.Ack(); err != nil {
			t.Error(err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	const n = 20
	for i := range n {
		if err := b.Publish(ctx, &Message{Subject: subj, ID: fmt.Sprint(i), Data: fmt.Append(nil, i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Less than AckWait (30 s), after which the broker would send an
	// unacknowledged one again anyway (behind later ones). A reset takes
	// milliseconds; on a loaded host (the whole suite in parallel) one
	// once took more than 5 s, the bound before.
	t0 := time.Now()
	deadline := t0.Add(20 * time.Second)
	for {
		mu.Lock()
		k := len(got)
		mu.Unlock()
		if k >= n || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	want := make([]string, n)
	for i := range want {
		want[i] = fmt.Sprint(i)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("delivered %v after %v, want %v", got, time.Since(t0).Round(time.Millisecond), want)
	}
}
