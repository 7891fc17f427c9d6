package broker_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/asyrevel/asyrevel/broker"
)

// BenchmarkClusterAck measures where a cluster's time goes for a
// publisher that waits for each acknowledgement (the fail-over
// publisher, one message in flight on its subject): one op is one
// 1,200-byte message published and acknowledged.
//
//	go test ./broker -run '^$' -bench ClusterAck -benchtime 2000x
//
// single: one server, R1 stream; cluster-R1: a 3-node cluster, the
// stream on the client's node; R3-leader: the stream on three nodes, the
// client on its leader's node; R3-follower: on another node (one route
// hop more each way); R3-follower-8subjects: eight subjects in flight at
// once (the fail-over publisher's order: one per subject).
func BenchmarkClusterAck(b *testing.B) {
	ctx := context.Background()
	single := startServer(b)
	c := startCluster(b)
	type tc struct {
		name     string
		replicas int
		node     func(leader string) *broker.Server
		subjects int
		srv      *broker.Server
	}
	byName := func(name string, other bool) *broker.Server {
		for _, s := range c.Servers() {
			if (s.NATS().Name() == name) != other {
				return s
			}
		}
		return nil
	}
	for _, t := range []tc{
		{name: "single", replicas: 1, srv: single, subjects: 1},
		{name: "cluster-R1", replicas: 1, node: func(l string) *broker.Server { return byName(l, false) }, subjects: 1},
		{name: "R3-leader", replicas: 3, node: func(l string) *broker.Server { return byName(l, false) }, subjects: 1},
		{name: "R3-follower", replicas: 3, node: func(l string) *broker.Server { return byName(l, true) }, subjects: 1},
		{name: "R3-follower-8subjects", replicas: 3, node: func(l string) *broker.Server { return byName(l, true) }, subjects: 8},
	} {
		b.Run(t.name, func(b *testing.B) {
			run := newRun()
			srv := t.srv
			if srv == nil {
				// Make the stream, then connect where the case says.
				mk := connectNodeR(b, c.Servers()[0], false, run, "make", 0)
				js, _ := jetstream.New(mk.Conn())
				st, err := js.Stream(ctx, broker.StreamName(run))
				if err != nil {
					b.Fatal(err)
				}
				if t.replicas == 1 {
					// connectNodeR makes R3: this case wants one copy.
					cfg := st.CachedInfo().Config
					cfg.Replicas = 1
					if _, err := js.UpdateStream(ctx, cfg); err != nil {
						b.Fatal(err)
					}
					time.Sleep(time.Second)
				}
				info, err := st.Info(ctx)
				if err != nil || info.Cluster == nil {
					b.Fatal(err)
				}
				srv = t.node(info.Cluster.Leader)
			}
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			bus, err := broker.ConnectJetStream(cctx, broker.JetStreamConfig{Server: srv, Run: run, Name: "pub", Replicas: t.replicas,
				Design: broker.DesignOrdered, Retry: true})
			if err != nil {
				b.Fatal(err)
			}
			defer bus.Close()
			prefix := broker.SubjectPrefix(run)
			data := make([]byte, 1200)
			subjects := make([]string, t.subjects)
			for i := range subjects {
				subjects[i] = prefix + ".out." + strconv.Itoa(i+1)
				// First message of each subject (its barrier) out of the timing.
				if err := bus.Publish(ctx, &broker.Message{Subject: subjects[i], Data: data}); err != nil {
					b.Fatal(err)
				}
			}
			if err := bus.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := bus.Publish(ctx, &broker.Message{Subject: subjects[i%len(subjects)], Data: data}); err != nil {
					b.Fatal(err)
				}
				if len(subjects) == 1 {
					if err := bus.Flush(ctx); err != nil {
						b.Fatal(err)
					}
				}
			}
			if err := bus.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "us/msg")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
