package broker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// TestStreamSilenceIsOutage: while the run's stream answers none of a
// participant's publishes over a connection that stays up (a cluster's
// stream between leaders), the broker is unreachable for the runtimes,
// and that time is outage once the stream answers again. Before, Outage
// counted only time without a connection: an evaluation round that
// spanned a fail-over was charged the fail-over as its cost and spaced
// the next rounds out by nine times it. The stream's silence is played in
// its place (an election cannot be called up on demand); the cluster,
// the connection and the publisher are real.
func TestStreamSilenceIsOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := StartCluster(ctx, ClusterConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()
	l := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)
	b, err := ConnectJetStream(ctx, JetStreamConfig{URL: strings.Join(c.URLs(), ","), Run: "silence", Name: "pub",
		Replicas: 3, Design: DesignOrdered, Retry: true, Logger: &l})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	p := b.batchPub.Load()
	if p == nil {
		t.Fatal("no batch publisher on a 3-node cluster")
	}
	const silent = 3 // sends of "b" left unanswered
	sends := 0
	var during time.Time // Unreachable while the stream was silent
	p.mu.Lock()
	p.answer = func(batch []*nats.Msg) (error, bool) {
		if len(batch) != 1 || string(batch[0].Data) != "b" {
			return nil, false
		}
		sends++
		if sends == silent {
			during = b.Unreachable()
		}
		if sends <= silent {
			return jetstream.ErrNoStreamResponse, true
		}
		return nil, false
	}
	p.mu.Unlock()
	subject := SubjectPrefix("silence") + ".out.1"
	var flushed time.Duration
	for _, d := range []string{"a", "b", "c"} {
		if d == "b" && b.Outage() != 0 {
			t.Fatalf("outage %v before the stream fell silent", b.Outage())
		}
		t0 := time.Now()
		if err := b.Publish(ctx, &Message{Subject: subject, Data: []byte(d)}); err != nil {
			t.Fatal(err)
		}
		if err := b.Flush(ctx); err != nil {
			t.Fatalf("flush after %q: %v", d, err)
		}
		if d == "b" {
			flushed = time.Since(t0)
		}
	}
	if sends != silent+1 {
		t.Fatalf("%q was sent %d times, want %d", "b", sends, silent+1)
	}
	if during.IsZero() {
		t.Error("the broker was reachable for the runtimes while the stream answered no publish")
	}
	if u := b.Unreachable(); !u.IsZero() {
		t.Errorf("still unreachable since %v after the stream answered", u)
	}
	// The silence lasted from the first unanswered send to the answer:
	// at least the publisher's pauses between its sends, at most the
	// time "b" took to be flushed.
	if o := b.Outage(); o < (silent-1)*retryPause || o > flushed {
		t.Errorf("outage %v, want the stream's silence: between %v and %v", o, (silent-1)*retryPause, flushed)
	}
}

// TestOutageSince: the part of an outage after a time is what lies after
// it, whenever the outage became known. A stream's silence is recorded
// when a publish sent before it gets no answer (5 s later, for a timeout):
// a round requested meanwhile was charged the whole silence, its cost came
// out 0 and the spacing of the rounds after it lost its floor.
func TestOutageSince(t *testing.T) {
	b := &JetStream{}
	start := time.Now()
	b.streamSilent(start.Add(-3 * time.Second)) // a publish sent 3 s ago, unanswered
	mid := start.Add(-time.Second)              // a round requested 1 s ago
	if got := b.OutageSince(mid); got < time.Second || got > time.Second+time.Since(start) {
		t.Errorf("during the silence: OutageSince(1 s ago) = %v, want 1 s", got)
	}
	b.streamAnswered()
	end := time.Now()
	if got := b.OutageSince(mid); got < time.Second || got > time.Second+end.Sub(start) {
		t.Errorf("after it: OutageSince(1 s ago) = %v, want 1 s", got)
	}
	if got, all := b.OutageSince(start.Add(-time.Hour)), b.Outage(); got != all || all < 3*time.Second {
		t.Errorf("OutageSince(an hour ago) = %v, Outage %v: want both the whole silence (3 s)", got, all)
	}
	if got := b.OutageSince(end); got != 0 {
		t.Errorf("OutageSince(its end) = %v, want 0", got)
	}
	// The ring keeps the latest outages.
	for range outageSpans + 4 {
		b.streamSilent(time.Now().Add(-time.Millisecond))
		b.streamAnswered()
	}
	if got := b.OutageSince(mid); got >= time.Second {
		t.Errorf("OutageSince(1 s ago) = %v after %d more outages: the oldest should be forgotten", got, outageSpans+4)
	}
}
