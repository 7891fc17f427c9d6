package broker_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/asyrevel/asyrevel/broker"
)

// BenchmarkClusterDelivery compares, on one server with an R1 stream
// (single-) and on the 3-node cluster with a stream on all three nodes,
// how a subscriber on another node than the publisher gets each stored
// message: an ordered consumer without acks (what the ordered design and
// a cluster's participants use; consumers8: one per subject, on the
// nodes in turn, as the parties' reply consumers), the stream's
// RePublish to a core subject (each message sent once by the leader
// after it is stored, with its sequence: a live delivery whose gaps can
// be found), and a core subscription on the published subject (live,
// before the stream has it: the capture design). One op is one
// 1,200-byte message on one of 8 subjects, published asynchronously with
// 8 or 256 unacknowledged, and delivered; cpu-us/op is the whole
// process's CPU (the nodes and the clients).
//
//	go test ./broker -run '^$' -bench ClusterDelivery -benchtime 20000x
func BenchmarkClusterDelivery(b *testing.B) {
	for _, inFlight := range []int{8, 256} {
		for _, mode := range []string{"single-consumer", "single-consumers8", "single-live", "consumer", "consumers8", "republish", "live"} {
			b.Run(fmt.Sprintf("%s/in-flight-%d", mode, inFlight), func(b *testing.B) { benchDelivery(b, mode, inFlight) })
		}
	}
}

func benchDelivery(b *testing.B, mode string, inFlight int) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	replicas := 3
	var srvs []*broker.Server
	if m, ok := strings.CutPrefix(mode, "single-"); ok {
		mode, replicas = m, 1
		srv := startServer(b)
		srvs = []*broker.Server{srv, srv}
	} else {
		srvs = startCluster(b).Servers()
	}
	pubNC, err := nats.Connect(srvs[0].URL())
	if err != nil {
		b.Fatal(err)
	}
	defer pubNC.Close()
	subNC, err := nats.Connect(srvs[1].URL())
	if err != nil {
		b.Fatal(err)
	}
	defer subNC.Close()
	js, _ := jetstream.New(pubNC, jetstream.WithPublishAsyncMaxPending(inFlight))
	cfg := jetstream.StreamConfig{Name: "BENCH", Subjects: []string{"bench.>"}, Replicas: replicas, Storage: jetstream.FileStorage}
	if mode == "republish" {
		cfg.RePublish = &jetstream.RePublish{Source: "bench.>", Destination: "rp.>"}
	}
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		b.Fatal(err)
	}
	var got atomic.Int64
	done := make(chan struct{})
	n := int64(b.N)
	count := func() {
		if got.Add(1) == n {
			close(done)
		}
	}
	subjects := []string{"bench.a", "bench.b", "bench.c", "bench.d", "bench.e", "bench.f", "bench.g", "bench.h"}
	consume := func(nc *nats.Conn, filter string) {
		sjs, _ := jetstream.New(nc)
		cons, err := sjs.OrderedConsumer(ctx, "BENCH", jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
		if err != nil {
			b.Fatal(err)
		}
		cc, err := cons.Consume(func(jetstream.Msg) { count() })
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(cc.Stop)
	}
	switch mode {
	case "consumer":
		consume(subNC, "bench.>")
	case "consumers8":
		// One consumer per subject, as each party has one for its
		// replies, on the nodes in turn.
		for i, subj := range subjects {
			nc, err := nats.Connect(srvs[i%len(srvs)].URL())
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(nc.Close)
			consume(nc, subj)
		}
	case "republish":
		if _, err := subNC.Subscribe("rp.>", func(*nats.Msg) { count() }); err != nil {
			b.Fatal(err)
		}
	case "live":
		if _, err := subNC.Subscribe("bench.>", func(*nats.Msg) { count() }); err != nil {
			b.Fatal(err)
		}
	}
	if err := subNC.Flush(); err != nil {
		b.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the subscription's interest reaches every node
	payload := bytes.Repeat([]byte{7}, 1200)
	cpu0 := cpuTime()
	b.ResetTimer()
	for i := range b.N {
		if _, err := js.PublishAsync(subjects[i%len(subjects)], payload, jetstream.WithRetryAttempts(0)); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		b.Fatal("publishes not acknowledged")
	}
	select {
	case <-done:
	case <-ctx.Done():
		b.Fatalf("%d of %d delivered", got.Load(), b.N)
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
}
