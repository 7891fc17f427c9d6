package aggregator

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/broker/bustest"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/trust"
)

// embeddedBus starts an embedded nats-server with JetStream on a free
// loopback port and connects to run "t" on it over TCP.
func embeddedBus(t *testing.T) *broker.JetStream {
	return bustest.Embedded(t, "t", "aggregator")
}

// brokerRequests puts a on bus and returns a function that publishes
// party 1's next signed request (from its outbox out) there and returns
// it as the requests subscription would hand it over, with its stream
// sequence: what a published before it is stored first (one connection),
// and the stream's count after a flush is the request's sequence.
func brokerRequests(t *testing.T, a *Aggregator, bus broker.Bus, out *trust.Outbox, n int) func() *seqDelivery {
	t.Helper()
	a.bus = bus
	ctx := context.Background()
	c := schemas.NewCodec()
	pub, _ := out.Publisher(schemas.Subject("t", schemas.KindOutput, 1))
	return func() *seqDelivery {
		o := &schemas.PartyOutput{Header: schemas.Header{Version: schemas.Version, Party: 1, Seq: pub.Next()},
			IDs: []uint32{uint32(pub.Next() % uint64(n))}, C: []float64{0.5}, CHat: []float64{0.4}}
		data, _ := c.Marshal(o)
		d := &seqDelivery{signedDelivery: signedDelivery{delivery: delivery{subject: pub.Subject(), data: slices.Clone(data)}}}
		d.sign(pub.Append(d.data, false))
		m := &broker.Message{Subject: d.subject, Data: d.data, Header: map[string]string{}}
		if d.sig != "" {
			m.Header[trust.SigHeader], m.Header[trust.PrevHeader] = d.sig, d.prev
		}
		if err := bus.Publish(ctx, m); err != nil {
			t.Fatal(err)
		}
		if err := bus.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		seq, err := bus.Count(ctx, schemas.All("t"))
		if err != nil {
			t.Fatal(err)
		}
		d.seq = seq
		return d
	}
}

// floorRig is the setting of the floor tests: an aggregator of 2 parties
// and n samples with the trust layer, trained a step, checkpoints kept
// in memory, on an embedded broker; request publishes party 1's next
// signed request there, and answer(k) has the aggregator answer k more.
func floorRig(t *testing.T, n int) (a *Aggregator, bus *broker.JetStream, outs []*trust.Outbox, request func() *seqDelivery, answer func(k int)) {
	t.Helper()
	a, _, outs, _ = trustTest(t, 2, n)
	train(a, make([]float64, n*2))
	a.cfg.OnCheckpoint = func(*Checkpoint) error { return nil }
	bus = embeddedBus(t)
	request = brokerRequests(t, a, bus, outs[1], n)
	answer = func(k int) {
		for range k {
			a.handleOutputs(context.Background(), request())
		}
	}
	return a, bus, outs, request, answer
}

// resumedOn is a new aggregator of cfg resumed from ck on bus, its
// recovery from the stream done.
func resumedOn(t *testing.T, cfg Config, bus broker.Bus, ck *Checkpoint) *Aggregator {
	t.Helper()
	ctx := context.Background()
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.bus, b.ctx = bus, ctx
	if err := b.Resume(ck); err != nil {
		t.Fatal(err)
	}
	if err := b.recover(ctx, bus); err != nil {
		t.Fatal(err)
	}
	return b
}

// A checkpoint's near floor (Checkpoint.NearFloor) lies where the stream
// was counted between saves, not at the count after the save before: a
// resume reads the requests, replies and controls from there, so it
// reads a fraction of a checkpoint period before the checkpoint rather
// than a whole one, and still applies again exactly what was answered
// after the checkpoint and answers the rest live. Before, every resume
// read from the count taken after the previous save (issue 35: 0.4 to
// 0.8 s of a9a's return after a broker outage). On a real broker: the
// floor is a stream sequence.
func TestResumeReadsFromTheNearFloor(t *testing.T) {
	a, bus, _, request, answer := floorRig(t, 50)
	ctx := context.Background()
	answer(5)
	a.saveCheckpoint(ctx) // its count: the next checkpoint's StreamFloor
	a.mu.Lock()
	saved := a.recov.probe
	a.mu.Unlock()
	if saved == 0 {
		t.Fatal("no count after the save")
	}
	answer(20)
	a.nearProbe(ctx, 0) // a count between saves
	// More replies than the outbox keeps: all of its messages are
	// published after that count.
	answer(outboxSize + 20)
	ck := a.Checkpoint()
	answer(4) // answered after the checkpoint: applied again
	first := request()
	request() // stored, never answered: the aggregator lost its broker
	if err := bus.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	b := resumedOn(t, a.cfg, bus, ck)
	r := b.resumed
	if r.Reapplied != 4 || r.Mismatched != 0 || r.Missing != 0 || r.FromStart != "" || r.Resent != 0 {
		t.Fatalf("recovery %+v, want 4 requests applied again from the checkpoint's floor, nothing resent", r)
	}
	if r.ReadFrom <= saved {
		t.Errorf("read the requests and replies from stream sequence %d, the count after the save before the checkpoint (%d): want a floor between saves, nearer the checkpoint", r.ReadFrom, saved)
	}
	if b.recov.reqFrom != first.seq {
		t.Errorf("the live requests go on at stream sequence %d, want %d (the first request not answered)", b.recov.reqFrom, first.seq)
	}
}

// A count of the stream below which a request was stored that the
// aggregator had not handled yet (it waited in its subscription) is not
// a checkpoint's near floor: the resume reads that request, and it is
// answered live. Were it the floor, the request would lie below what the
// resume reads, never answered, and its party would wait for ever.
func TestNearFloorLiesBelowRequestsNotHandled(t *testing.T) {
	a, bus, _, request, answer := floorRig(t, 50)
	ctx := context.Background()
	answer(5)
	a.saveCheckpoint(ctx)
	answer(outboxSize + 20)
	a.nearProbe(ctx, 0) // below every request: a near floor
	answer(outboxSize + 20)
	waiting := request() // stored, not handed to the aggregator yet
	a.nearProbe(ctx, 0)  // above it: not a near floor while it waits
	ck := a.Checkpoint()
	if ck.NearFloor == 0 || ck.NearFloor > waiting.seq {
		t.Fatalf("near floor %d with a request not handled at stream sequence %d: want one at or below it", ck.NearFloor, waiting.seq)
	}

	b := resumedOn(t, a.cfg, bus, ck)
	if r := b.resumed; r.Reapplied != 0 || r.Missing != 0 || r.FromStart != "" || r.ReadFrom != ck.NearFloor {
		t.Fatalf("recovery %+v, want it read from the near floor %d", r, ck.NearFloor)
	}
	if b.recov.reqFrom != waiting.seq {
		t.Errorf("the live requests go on at stream sequence %d, want %d (the request the checkpoint had not handled)", b.recov.reqFrom, waiting.seq)
	}
}

// holdingBus holds the delivery of stream sequence hold to the requests'
// reads until until says yes (or a minute passes: a guard, not a time
// the test measures).
type holdingBus struct {
	broker.Bus
	filter string
	hold   uint64
	until  func() bool
	held   bool // the delivery was held until until said yes
}

func (b *holdingBus) Subscribe(ctx context.Context, filters []string, opts broker.SubscribeOptions, h broker.Handler) (broker.Subscription, error) {
	if len(filters) != 1 || filters[0] != b.filter {
		return b.Bus.Subscribe(ctx, filters, opts, h)
	}
	return b.Bus.Subscribe(ctx, filters, opts, func(hctx context.Context, d broker.Delivery) {
		if d.Seq() == b.hold {
			guard := time.Now().Add(time.Minute)
			for !b.until() && time.Now().Before(guard) && hctx.Err() == nil {
				time.Sleep(time.Millisecond)
			}
			b.held = b.until()
		}
		h(hctx, d)
	})
}

// A resumed aggregator applies its recorded replies again while it
// still reads the parties' requests: each once the requests' read has
// passed it. Before, it applied them only once every read had ended, up
// to a third of its return after a broker outage on a9a (issue 35). The
// last request's delivery is held here until a reply was applied again,
// which never happens while recovery waits for the reads to end.
func TestRecoveryAppliesAgainWhileReading(t *testing.T) {
	const n = 50
	a, _, outs, _ := trustTest(t, 2, n)
	train(a, make([]float64, n*2))
	a.cfg.OnCheckpoint = func(*Checkpoint) error { return nil }
	js := embeddedBus(t)
	request := brokerRequests(t, a, js, outs[1], n)
	ctx := context.Background()
	for range 5 {
		a.handleOutputs(ctx, request())
	}
	ck := a.Checkpoint()
	for range 6 {
		a.handleOutputs(ctx, request()) // answered after the checkpoint
	}
	last := request() // stored, never answered
	if err := js.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	b, err := New(a.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Resume(ck); err != nil {
		t.Fatal(err)
	}
	bus := &holdingBus{Bus: js, filter: schemas.Filter("t", schemas.KindOutput), hold: last.seq, until: func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.resumed.Reapplied > 0
	}}
	b.bus, b.ctx = bus, ctx
	if err := b.recover(ctx, bus); err != nil {
		t.Fatal(err)
	}
	if r := b.resumed; r.Reapplied != 6 || r.Mismatched != 0 || r.Missing != 0 {
		t.Fatalf("recovery %+v, want 6 requests applied again", r)
	}
	if !bus.held {
		t.Error("no reply was applied again before the requests' read ended")
	}
	if b.recov.reqFrom != last.seq {
		t.Errorf("the live requests go on at stream sequence %d, want %d", b.recov.reqFrom, last.seq)
	}
}

// orderBus holds the count of filter first until one of then has been
// counted (or ctx ends).
type orderBus struct {
	broker.Bus
	first   string
	then    []string
	once    sync.Once
	counted chan struct{}
}

func (b *orderBus) Count(ctx context.Context, filter string) (uint64, error) {
	switch {
	case slices.Contains(b.then, filter):
		b.once.Do(func() { close(b.counted) })
	case filter == b.first:
		select {
		case <-b.counted:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return b.Bus.Count(ctx, filter)
}

// A resumed aggregator with the trust layer reads the parties' hellos
// and evaluations beside their requests, not after them: on a9a the
// hellos and evaluations (read from the earlier floor) were the longest
// part of a return once the rest had been cut (issue 35). The requests'
// count waits here until the hellos or evaluations are counted, which a
// read one after the other never does (the context's deadline only
// catches that hang).
func TestRecoveryReadsHellosBesideRequests(t *testing.T) {
	const n = 50
	a, _, outs, _ := trustTest(t, 2, n)
	train(a, make([]float64, n*2))
	js := embeddedBus(t)
	request := brokerRequests(t, a, js, outs[1], n)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range 3 {
		a.handleOutputs(ctx, request())
	}
	ck := a.Checkpoint()
	a.handleOutputs(ctx, request())
	b, err := New(a.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Resume(ck); err != nil {
		t.Fatal(err)
	}
	bus := &orderBus{Bus: js, first: schemas.Filter("t", schemas.KindOutput),
		then: []string{schemas.Filter("t", schemas.KindHello), schemas.Filter("t", schemas.KindEval)}, counted: make(chan struct{})}
	b.bus, b.ctx = bus, ctx
	if err := b.recover(ctx, bus); err != nil {
		t.Fatalf("recovery: %v", err)
	}
	if r := b.resumed; r.Reapplied != 1 || r.Mismatched != 0 || r.Missing != 0 {
		t.Fatalf("recovery %+v, want 1 request applied again", r)
	}
}

// A checkpoint's floor above the stream's count (a count taken before
// the broker lost messages it had confirmed) is not read from: what is
// published from now on is numbered from below it. Here the stream lost
// nothing of the parties' requests the checkpoint had not handled, so
// the count rule of floorHolds holds, and before, the resume read from
// the floor and the live requests started there: the requests the
// parties send next (below it) were never delivered, and they waited
// for ever. Now the resume reads from the start, and the live requests
// start at or below the next message.
func TestFloorAboveTheStreamIsNotReadFrom(t *testing.T) {
	const n = 50
	a, _, outs, _ := trustTest(t, 2, n)
	train(a, make([]float64, n*2))
	a.cfg.OnCheckpoint = func(*Checkpoint) error { return nil }
	js := embeddedBus(t)
	request := brokerRequests(t, a, js, outs[1], n)
	ctx := context.Background()
	for range 5 {
		a.handleOutputs(ctx, request())
	}
	a.saveCheckpoint(ctx)
	a.handleOutputs(ctx, request())
	ck := a.Checkpoint()
	if err := js.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	count, err := js.Count(ctx, schemas.All("t"))
	if err != nil {
		t.Fatal(err)
	}
	ck.StreamFloor = count + 10 // counted before the stream lost its tail

	b, err := New(a.cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.bus, b.ctx = js, ctx
	if err := b.Resume(ck); err != nil {
		t.Fatal(err)
	}
	if err := b.recover(ctx, js); err != nil {
		t.Fatal(err)
	}
	r := b.resumed
	if r.Reapplied != 0 || r.Missing != 0 || r.Mismatched != 0 {
		t.Fatalf("recovery %+v", r)
	}
	live := b.recov.reqFrom // where the live requests start (Run)
	if live == 0 {
		live = r.ReadFrom
	}
	if live > count+1 {
		t.Errorf("the live requests start at stream sequence %d, above the next message (%d): the parties' next requests are never delivered", live, count+1)
	}
}
