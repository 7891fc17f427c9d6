package broker

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// A restart of an ordered consumer asked for while another restart's
// attempts fail (its node died; the watch finds the old consumer gone
// again) is not made once a later attempt has made the new consumer: the
// ask was about the consumer replaced already. Before, every participant
// of a cluster whose node was killed replaced the consumer it had just
// made (experiment faults, cluster-node), and a split subscription's
// control waited for the replies' new consumer again. An ask made after
// the new consumer was made still restarts it.
func TestRestartAskedDuringAttemptsNotMadeTwice(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := StartServer(ctx, ServerConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	b, err := ConnectJetStream(ctx, JetStreamConfig{Server: srv, Run: "restarts", Name: "sub", Design: DesignOrdered})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	subj := SubjectPrefix("restarts") + ".reply.1"
	sub, err := b.Subscribe(ctx, []string{subj}, SubscribeOptions{Deliver: DeliverAll}, func(context.Context, Delivery) {})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	s := sub.(*orderedSub)

	var made atomic.Int32 // attempts let through to a create
	var failed atomic.Bool
	asked := make(chan struct{})
	beforeCreate = func(attempt int) error {
		if attempt == 0 && !failed.Swap(true) {
			// The old consumer is found gone again while the first
			// attempt fails: a restart is asked for meanwhile.
			go func() { s.restart(); close(asked) }()
			<-asked
			return errors.New("no answer: the cluster elects")
		}
		made.Add(1)
		return nil
	}
	defer func() { beforeCreate = nil }()
	s.restart()
	if n := made.Load(); n != 1 {
		t.Fatalf("%d consumers made for one restart (a restart asked for during its failed attempt made another)", n)
	}
	// Asked for after the new consumer was made: made.
	beforeCreate = func(int) error { made.Add(1); return nil }
	s.restart()
	if n := made.Load(); n != 2 {
		t.Fatalf("a restart asked for after the consumer was made: %d consumers made in all, want 2", n)
	}
}
