package logread_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/logread"
	"github.com/asyrevel/asyrevel/schemas"
)

// buses returns a fresh bus of run for each transport: the in-memory bus
// and a JetStream connection over loopback TCP to an embedded server.
func buses(t *testing.T, run string) map[string]broker.Bus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := broker.StartServer(ctx, broker.ServerConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	js, err := broker.ConnectJetStream(ctx, broker.JetStreamConfig{Server: srv, Run: run, Name: "logread-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { js.Close() })
	mem := broker.NewMemoryHub().Connect("logread-test")
	t.Cleanup(func() { mem.Close() })
	return map[string]broker.Bus{"memory": mem, "jetstream": js}
}

// Every stored message on the filters is read, once, in stream order per
// subject, and nothing on the other subjects; an empty filter reads
// nothing; a cancelled context fails the read.
func TestRead(t *testing.T) {
	const run = "lr"
	for name, bus := range buses(t, run) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			out1, out2 := schemas.Subject(run, schemas.KindOutput, 1), schemas.Subject(run, schemas.KindOutput, 2)
			reply1 := schemas.Subject(run, schemas.KindReply, 1)
			want := map[string][]string{}
			for i := range 30 {
				subj := []string{out1, out2, reply1}[i%3]
				data := fmt.Sprintf("m%d", i)
				if err := bus.Publish(ctx, &broker.Message{Subject: subj, Data: []byte(data)}); err != nil {
					t.Fatal(err)
				}
				want[subj] = append(want[subj], data)
			}
			if err := bus.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct {
				name    string
				filters []string
				opts    logread.Options
				subject []string // subjects whose messages must be read
			}{
				{"one subject", []string{out1}, logread.Options{}, []string{out1}},
				{"wildcard", []string{schemas.Filter(run, schemas.KindOutput)}, logread.Options{}, []string{out1, out2}},
				{"two filters", []string{out2, reply1}, logread.Options{}, []string{out2, reply1}},
				{"live", []string{reply1}, logread.Options{Live: true}, []string{reply1}},
				{"nothing stored", []string{schemas.Subject(run, schemas.KindEval, 1)}, logread.Options{}, nil},
			} {
				got := map[string][]string{}
				var seqs []uint64
				n, err := logread.Read(ctx, bus, tc.filters, tc.opts, func(d broker.Delivery) {
					got[d.Subject()] = append(got[d.Subject()], string(d.Data()))
					seqs = append(seqs, d.Seq())
				})
				if err != nil {
					t.Fatalf("%s: %v", tc.name, err)
				}
				total := 0
				for _, s := range tc.subject {
					total += len(want[s])
					if !slices.Equal(got[s], want[s]) {
						t.Errorf("%s: %s read %v, want %v", tc.name, s, got[s], want[s])
					}
				}
				if int(n) != total || len(got) != len(tc.subject) {
					t.Errorf("%s: read %d messages on %d subjects, want %d on %d", tc.name, n, len(got), total, len(tc.subject))
				}
				if len(tc.filters) == 1 && !slices.IsSorted(seqs) {
					t.Errorf("%s: stream sequences out of order: %v", tc.name, seqs)
				}
			}
			var subjects []string
			if _, err := logread.Messages(ctx, bus, []string{out1}, func(s string, _ []byte) { subjects = append(subjects, s) }); err != nil || len(subjects) != len(want[out1]) {
				t.Errorf("Messages: %d read (%v), want %d", len(subjects), err, len(want[out1]))
			}
			cctx, ccancel := context.WithCancel(ctx)
			ccancel()
			if _, err := logread.Deliveries(cctx, bus, []string{out1}, func(broker.Delivery) {}); !errors.Is(err, context.Canceled) {
				t.Errorf("cancelled context: %v, want context.Canceled", err)
			}
		})
	}
}

// A read of the stream, as a resume makes it.
func ExampleDeliveries() {
	ctx := context.Background()
	bus := broker.NewMemoryHub().Connect("example")
	defer bus.Close()
	for i := range 3 {
		bus.Publish(ctx, &broker.Message{Subject: schemas.Subject("ex", schemas.KindReply, 1), Data: fmt.Appendf(nil, "reply %d", i)})
	}
	n, err := logread.Deliveries(ctx, bus, []string{schemas.Filter("ex", schemas.KindReply)}, func(d broker.Delivery) {
		fmt.Println(d.Seq(), string(d.Data()))
	})
	fmt.Println(n, err)
	// Output:
	// 1 reply 0
	// 2 reply 1
	// 3 reply 2
	// 3 <nil>
}

// A read from a stream position delivers exactly the stored messages on
// the filter from there on, once each, and ends by itself (the
// subscription's own count), on both transports; past the end it reads
// nothing, and more than one filter is refused with ErrNoCount.
func TestReadFrom(t *testing.T) {
	const run = "lrf"
	for name, bus := range buses(t, run) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			out1, out2 := schemas.Subject(run, schemas.KindOutput, 1), schemas.Subject(run, schemas.KindOutput, 2)
			reply1 := schemas.Subject(run, schemas.KindReply, 1)
			subjects := []string{out1, out2, reply1}
			for i := range 30 { // stream sequence i+1
				if err := bus.Publish(ctx, &broker.Message{Subject: subjects[i%3], Data: fmt.Appendf(nil, "m%d", i+1)}); err != nil {
					t.Fatal(err)
				}
			}
			if err := bus.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			for _, from := range []uint64{1, 10, 29, 31} {
				var want, got []string
				for seq := from; seq <= 30; seq++ {
					if subjects[(seq-1)%3] != reply1 {
						want = append(want, fmt.Sprintf("m%d", seq))
					}
				}
				n, err := logread.Read(ctx, bus, []string{schemas.Filter(run, schemas.KindOutput)}, logread.Options{StartSeq: from},
					func(d broker.Delivery) { got = append(got, string(d.Data())) })
				if err != nil {
					t.Fatalf("from %d: %v", from, err)
				}
				slices.Sort(want)
				slices.Sort(got)
				if int(n) != len(want) || !slices.Equal(got, want) {
					t.Errorf("from %d: read %d %v, want %v", from, n, got, want)
				}
				c, err := logread.CountFrom(ctx, bus, schemas.Filter(run, schemas.KindOutput), from)
				if err != nil || int(c) != len(want) {
					t.Errorf("CountFrom %d: %d, %v; want %d", from, c, err, len(want))
				}
			}
			// Two filters: a prefix of both in stream order.
			var got []uint64
			n, err := logread.Read(ctx, bus, []string{out1, reply1}, logread.Options{StartSeq: 20}, func(d broker.Delivery) { got = append(got, d.Seq()) })
			if err != nil || n != 7 || !slices.Equal(got, []uint64{21, 22, 24, 25, 27, 28, 30}) {
				t.Errorf("two filters from 20: %d %v, %v", n, got, err)
			}
		})
	}
}
