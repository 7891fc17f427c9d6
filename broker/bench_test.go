package broker_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/broker"
)

// Benchmarks of the transports (in-memory, JetStream in-process and over
// TCP, a 3-node JetStream cluster):
//
//	go test ./broker -run '^$' -bench . -benchtime 2s
//	go test ./broker -run '^$' -bench Steps -benchtime 30000x
//
// Messages of Publish, RoundTrip and Consume carry an 88-byte signature
// header. Each NATS backend runs with each transport design
// (BENCH_DESIGNS=capture,acked narrows the list). Knobs for experiments
// (environment):
//
//	BENCH_ID=1       messages carry a dedupe ID (Nats-Msg-Id)
//	BENCH_DUP=10s    the stream's dedupe window (JetStreamConfig.Duplicates)
//	BENCH_CR=1       durable consumer replicas on the cluster (ConsumerReplicas)
//	BENCH_W=N        requests in flight per party in Steps (default 8)
//	BENCH_SINGLE=1   Steps with one filter per subscription (out.* for the
//	                 aggregator, reply.m for a party): what several
//	                 filters cost the broker

// benchBackend connects participants to a fresh log per benchmark run.
type benchBackend struct {
	name string
	// fresh returns a connect function for a new, isolated log and its
	// subject prefix.
	fresh func(b *testing.B) (connect func(name string) broker.Bus, prefix string)
}

// benchConfig is a JetStream configuration with the knobs applied.
func benchConfig(srv *broker.Server, inProcess bool, run, name string, replicas int, d broker.Design) broker.JetStreamConfig {
	cfg := broker.JetStreamConfig{Server: srv, InProcess: inProcess, Run: run, Name: name, Replicas: replicas, Design: d}
	if d, err := time.ParseDuration(os.Getenv("BENCH_DUP")); err == nil {
		cfg.Duplicates = d
	}
	if n, err := strconv.Atoi(os.Getenv("BENCH_CR")); err == nil && replicas > 1 {
		cfg.ConsumerReplicas = n
	}
	return cfg
}

// benchDesigns are the NATS designs benchmarked (BENCH_DESIGNS).
func benchDesigns() []broker.Design {
	ds := []broker.Design{broker.DesignCapture, broker.DesignCore, broker.DesignOrdered, broker.DesignAcked}
	if v := os.Getenv("BENCH_DESIGNS"); v != "" {
		ds = nil
		for _, n := range strings.Split(v, ",") {
			ds = append(ds, broker.Design(n))
		}
	}
	return ds
}

func benchBackends(b *testing.B) []benchBackend {
	// Each benchmark run gets its own server: streams and consumers left
	// by earlier runs would otherwise load the server and the heap.
	js := func(inProcess bool, d broker.Design) func(b *testing.B) (func(string) broker.Bus, string) {
		return func(rb *testing.B) (func(string) broker.Bus, string) {
			s := startServer(rb)
			run := newRun()
			return func(name string) broker.Bus {
				return connectJSConfig(rb, benchConfig(s, inProcess, run, name, 1, d))
			}, broker.SubjectPrefix(run)
		}
	}
	bes := []benchBackend{
		{"memory", func(rb *testing.B) (func(string) broker.Bus, string) {
			hub := broker.NewMemoryHub()
			return func(name string) broker.Bus {
				bus := hub.Connect(name)
				rb.Cleanup(func() { bus.Close() })
				return bus
			}, "asyrevel.bench"
		}},
	}
	for _, d := range benchDesigns() {
		bes = append(bes,
			benchBackend{"inproc-" + string(d), js(true, d)},
			benchBackend{"tcp-" + string(d), js(false, d)},
			benchBackend{"cluster3-" + string(d), func(rb *testing.B) (func(string) broker.Bus, string) {
				// Stream R3; participants over TCP to the nodes in turn.
				c := startCluster(rb)
				run := newRun()
				var n int
				return func(name string) broker.Bus {
					n++
					return connectJSConfig(rb, benchConfig(c.Servers()[n%3], false, run, name, 3, d))
				}, broker.SubjectPrefix(run)
			}})
	}
	return bes
}

var benchSizes = []int{64, 1024}

var benchSig = strings.Repeat("s", 88) // base64 of an Ed25519 signature

func benchMessage(prefix, tail string, size int) *broker.Message {
	return &broker.Message{
		Subject: prefix + "." + tail,
		Header:  map[string]string{"Sig": benchSig},
		Data:    make([]byte, size),
	}
}

// BenchmarkPublish measures publish throughput of one publisher,
// including the final Flush.
func BenchmarkPublish(b *testing.B) {
	for _, be := range benchBackends(b) {
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("%s/%dB", be.name, size), func(b *testing.B) {
				ctx := context.Background()
				connect, prefix := be.fresh(b)
				bus := connect("party-1")
				m := benchMessage(prefix, "out.1", size)
				idPrefix := prefix + ".1."
				b.SetBytes(int64(size))
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if be.name == "memory" && i > 0 && i%(1<<20) == 0 {
						// Keep the benchmark's memory bounded: a fresh hub
						// every million messages.
						b.StopTimer()
						connect, _ = be.fresh(b)
						bus = connect("party-1")
						b.StartTimer()
					}
					if benchIDs {
						m.ID = idPrefix + strconv.Itoa(i)
					}
					if err := bus.Publish(ctx, m); err != nil {
						b.Fatal(err)
					}
				}
				if err := bus.Flush(ctx); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			})
		}
	}
}

// BenchmarkRoundTrip measures request/reply pairs party -> aggregator ->
// party with W requests in flight: the party publishes on out.1, the
// aggregator (durable, acking) replies on reply.1, the party (durable,
// acking) counts the replies. One op is one round trip (two messages).
func BenchmarkRoundTrip(b *testing.B) {
	for _, be := range benchBackends(b) {
		for _, size := range benchSizes {
			for _, w := range []int{1, 8} {
				b.Run(fmt.Sprintf("%s/%dB/W=%d", be.name, size, w), func(b *testing.B) {
					benchRoundTrip(b, be, size, w)
				})
			}
		}
	}
}

func benchRoundTrip(b *testing.B, be benchBackend, size, w int) {
	ctx := context.Background()
	connect, prefix := be.fresh(b)
	party, agg := connect("party-1"), connect("aggregator")

	reply := benchMessage(prefix, "reply.1", size)
	rid := prefix + ".0."
	var nreply int
	asub, err := agg.Subscribe(ctx, []string{prefix + ".out.*"}, broker.SubscribeOptions{Durable: "aggregator"},
		func(ctx context.Context, d broker.Delivery) {
			nreply++
			if benchIDs {
				reply.ID = rid + strconv.Itoa(nreply)
			}
			if err := agg.Publish(ctx, reply); err != nil {
				b.Error(err)
			}
			d.Ack()
		})
	if err != nil {
		b.Fatal(err)
	}
	defer asub.Close()

	tokens := make(chan struct{}, w)
	for range w {
		tokens <- struct{}{}
	}
	var got atomic.Int64
	done := make(chan struct{})
	target := int64(b.N)
	psub, err := party.Subscribe(ctx, []string{prefix + ".reply.1"}, broker.SubscribeOptions{Durable: "party-1"},
		func(_ context.Context, d broker.Delivery) {
			d.Ack()
			if got.Add(1) == target {
				close(done)
			}
			tokens <- struct{}{}
		})
	if err != nil {
		b.Fatal(err)
	}
	defer psub.Close()

	m := benchMessage(prefix, "out.1", size)
	idPrefix := prefix + ".1."
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		<-tokens
		if benchIDs {
			m.ID = idPrefix + strconv.Itoa(i)
		}
		if err := party.Publish(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		b.Fatalf("%d of %d replies", got.Load(), b.N)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rt/s")
	b.ReportMetric(2*float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkConsume measures delivery throughput: stored messages read by
// new durable subscriptions that ack each. At most consumeRound messages
// are published (not timed); each round of reading is a new durable
// reading them from the start.
func BenchmarkConsume(b *testing.B) {
	const consumeRound = 1 << 16
	for _, be := range benchBackends(b) {
		if strings.HasSuffix(be.name, "-core") {
			continue // no log to read
		}
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("%s/%dB", be.name, size), func(b *testing.B) {
				ctx := context.Background()
				connect, prefix := be.fresh(b)
				pub, sub := connect("party-1"), connect("aggregator")
				n := min(b.N, consumeRound)
				m := benchMessage(prefix, "out.1", size)
				for i := range n {
					if benchIDs {
						m.ID = prefix + ".1." + strconv.Itoa(i)
					}
					if err := pub.Publish(ctx, m); err != nil {
						b.Fatal(err)
					}
				}
				if err := pub.Flush(ctx); err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(size))
				b.ReportAllocs()
				b.ResetTimer()
				for round, left := 0, b.N; left > 0; round, left = round+1, left-n {
					benchConsumeRound(b, sub, prefix, "c"+strconv.Itoa(round), min(left, n))
				}
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			})
		}
	}
}

// benchConsumeRound reads k messages with a new durable subscription.
func benchConsumeRound(b *testing.B, bus broker.Bus, prefix, durable string, k int) {
	var got atomic.Int64
	done := make(chan struct{})
	s, err := bus.Subscribe(context.Background(), []string{prefix + ".out.*"}, broker.SubscribeOptions{Durable: durable},
		func(_ context.Context, d broker.Delivery) {
			d.Ack()
			if got.Add(1) == int64(k) {
				close(done)
			}
		})
	if err != nil {
		b.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		b.Fatalf("%d of %d delivered", got.Load(), k)
	}
	b.StopTimer()
	s.Close()
	b.StartTimer()
}

// stepShape is the message sizes of one training step: the party's output
// and the aggregator's reply (measured on a9a: batch 1 and batch 64).
type stepShape struct {
	name       string
	out, reply int
}

var stepShapes = []stepShape{{"batch1", 40, 36}, {"batch64", 1500, 1040}}

// BenchmarkSteps mimics the training pipeline's message pattern: 8
// parties, each with W requests in flight, publish on out.m; one
// aggregator (durable on join.*, out.*, eval.*) answers each on reply.m;
// each party (durable on reply.m and ctl) acks the reply and publishes its
// next request from the handler. One op is one step. Besides steps/s it
// reports the process CPU time per step (cpu-us/step), which drifts less
// than throughput on a shared machine.
//
//	go test ./broker -run '^$' -bench Steps -benchtime 100000x
func BenchmarkSteps(b *testing.B) {
	for _, be := range benchBackends(b) {
		for _, sh := range stepShapes {
			w := 8
			if v, err := strconv.Atoi(os.Getenv("BENCH_W")); err == nil {
				w = v
			}
			b.Run(fmt.Sprintf("%s/%s/W=%d", be.name, sh.name, w), func(b *testing.B) {
				benchSteps(b, be, sh, 8, w)
			})
		}
	}
}

func benchSteps(b *testing.B, be benchBackend, sh stepShape, parties, w int) {
	ctx := context.Background()
	connect, prefix := be.fresh(b)
	agg := connect("aggregator")
	pbus := make([]broker.Bus, parties+1)
	for m := 1; m <= parties; m++ {
		pbus[m] = connect("party-" + strconv.Itoa(m))
	}
	replySubj := make([]string, parties+1)
	outSubj := make([]string, parties+1)
	for m := 1; m <= parties; m++ {
		replySubj[m] = prefix + ".reply." + strconv.Itoa(m)
		outSubj[m] = prefix + ".out." + strconv.Itoa(m)
	}
	run := strings.TrimPrefix(prefix, "asyrevel.")

	// The aggregator.
	var nreply int
	rmsg := &broker.Message{Data: make([]byte, sh.reply)}
	aggFilters := []string{prefix + ".join.*", prefix + ".out.*", prefix + ".eval.*"}
	if os.Getenv("BENCH_SINGLE") != "" {
		aggFilters = []string{prefix + ".out.*"}
	}
	asub, err := agg.Subscribe(ctx, aggFilters,
		broker.SubscribeOptions{Durable: "aggregator"},
		func(ctx context.Context, d broker.Delivery) {
			s := d.Subject()
			m, err := strconv.Atoi(s[strings.LastIndexByte(s, '.')+1:])
			if err != nil || m < 1 || m > parties {
				b.Errorf("subject %q", s)
				return
			}
			nreply++
			rmsg.Subject = replySubj[m]
			if benchIDs {
				rmsg.ID = run + ".0." + strconv.Itoa(nreply)
			}
			if err := agg.Publish(ctx, rmsg); err != nil {
				b.Error(err)
			}
			d.Ack()
		})
	if err != nil {
		b.Fatal(err)
	}
	defer asub.Close()

	var issued, got atomic.Int64
	target := int64(b.N)
	done := make(chan struct{})
	type party struct {
		mu  sync.Mutex // the handler and the initial requests both publish
		bus broker.Bus
		msg broker.Message
		seq int
	}
	ps := make([]*party, parties+1)
	publish := func(p *party, m int) {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.seq++
		if benchIDs {
			p.msg.ID = run + "." + strconv.Itoa(m) + "." + strconv.Itoa(p.seq)
		}
		if err := p.bus.Publish(ctx, &p.msg); err != nil {
			b.Error(err)
		}
	}
	for m := 1; m <= parties; m++ {
		p := &party{bus: pbus[m], msg: broker.Message{Subject: outSubj[m], Data: make([]byte, sh.out)}}
		ps[m] = p
		pf := []string{replySubj[m], prefix + ".ctl"}
		if os.Getenv("BENCH_SINGLE") != "" {
			pf = pf[:1]
		}
		sub, err := p.bus.Subscribe(ctx, pf,
			broker.SubscribeOptions{Durable: "party-" + strconv.Itoa(m)},
			func(_ context.Context, d broker.Delivery) {
				d.Ack()
				if got.Add(1) == target {
					close(done)
				}
				if issued.Add(1) <= target {
					publish(p, m)
				}
			})
		if err != nil {
			b.Fatal(err)
		}
		defer sub.Close()
	}
	b.ReportAllocs()
	all := append([]broker.Bus{agg}, pbus[1:]...)
	wire0 := benchWire(all)
	cpu0 := cpuTime()
	b.ResetTimer()
	for i := 0; i < w; i++ {
		for m := 1; m <= parties; m++ {
			if issued.Add(1) <= target {
				publish(ps[m], m)
			}
		}
	}
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		for m, bus := range append([]broker.Bus{agg}, pbus[1:]...) {
			if err := bus.Flush(fctx); err != nil {
				b.Errorf("flush %d: %v", m, err)
			}
		}
		nout, err1 := agg.Count(fctx, prefix+".out.*")
		nrep, err2 := agg.Count(fctx, prefix+".reply.*")
		b.Fatalf("%d of %d replies; issued %d; stored %d outputs (%v), %d replies (%v); aggregator answered %d", got.Load(), b.N, issued.Load(), nout, err1, nrep, err2, nreply)
	}
	b.StopTimer()
	cpu := cpuTime() - cpu0
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "steps/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/step")
	if w := benchWire(all) - wire0; w > 0 {
		b.ReportMetric(float64(w)/float64(b.N), "wire-B/step")
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MB")
}

var benchIDs = os.Getenv("BENCH_ID") != ""

// benchWire sums the wire bytes of the buses' connections.
func benchWire(buses []broker.Bus) uint64 {
	var n uint64
	for _, b := range buses {
		if st, ok := broker.BusStats(b); ok {
			n += st.WireIn + st.WireOut
		}
	}
	return n
}
