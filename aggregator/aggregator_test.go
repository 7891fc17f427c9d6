package aggregator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/internal/ratelog"
	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/zoo"
)

// delivery is a broker.Delivery for driving the handler directly.
type delivery struct {
	subject string
	data    []byte
}

func (d *delivery) Subject() string      { return d.subject }
func (d *delivery) Data() []byte         { return d.data }
func (d *delivery) ID() string           { return "" }
func (d *delivery) Header(string) string { return "" }
func (d *delivery) Seq() uint64          { return 0 }
func (d *delivery) Ack() error           { return nil }
func (d *delivery) String() string       { return d.subject }

// sink is a Bus that keeps what is published.
type sink struct {
	broker.Bus
	n         int
	last      []byte
	onPublish func([]byte)
	onMessage func(*broker.Message)
}

func (s *sink) Publish(_ context.Context, m *broker.Message) error {
	s.n++
	s.last = append(s.last[:0], m.Data...)
	if s.onPublish != nil {
		s.onPublish(m.Data)
	}
	if s.onMessage != nil {
		s.onMessage(m)
	}
	return nil
}

func newTest(t testing.TB, q int, labels []int32, head model.Head) (*Aggregator, *sink) {
	a, err := New(Config{Run: "t", Parties: q, K: 1, Head: head, Labels: labels, Mu: 1e-3,
		LR: zoo.Schedule{Eta0: 0.01}, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	s := &sink{}
	a.bus, a.ctx = s, context.Background()
	return a, s
}

// train puts a into the training phase with the given table.
func train(a *Aggregator, table []float64) {
	copy(a.table, table)
	for m := 1; m <= a.q; m++ {
		a.hello[m] = true
	}
	a.phase = training
}

func softplus(x float64) float64 { return math.Log1p(math.Exp(x)) }

func TestAnswerUsesFreshOutputs(t *testing.T) {
	a, _ := newTest(t, 2, []int32{1, 0, 1}, model.NewLogistic(2))
	// Table rows (party 1, party 2) for samples 0..2.
	train(a, []float64{0.5, -1, 0.1, 0.2, 3, 4})
	out := &schemas.PartyOutput{Header: schemas.Header{Version: schemas.Version, Party: 1, Seq: 1},
		IDs: []uint32{0, 1}, C: []float64{2, -0.5}, CHat: []float64{2.5, -0.25}}
	a.answer(1, out)
	if a.table[0] != 2 || a.table[2] != -0.5 {
		t.Fatalf("fresh c not stored: table %v", a.table)
	}
	// y0 = +1: h = log(1+exp(-(2 + -1))); y1 = -1: h = log(1+exp(-0.5 + 0.2)).
	wantH := []float64{softplus(-(2 - 1)), softplus(-0.5 + 0.2)}
	wantHB := []float64{softplus(-(2.5 - 1)), softplus(-0.25 + 0.2)}
	for i := range wantH {
		if math.Abs(a.rep.H[i]-wantH[i]) > 1e-12 || math.Abs(a.rep.HBar[i]-wantHB[i]) > 1e-12 {
			t.Fatalf("sample %d: h=%v h_bar=%v, want %v %v", i, a.rep.H[i], a.rep.HBar[i], wantH[i], wantHB[i])
		}
	}
	if a.rep.ReqSeq != 1 || a.rep.Party != 1 {
		t.Fatalf("reply header %+v", a.rep.Header)
	}
}

func TestDeltaReply(t *testing.T) {
	a, _ := newTest(t, 2, []int32{1}, model.NewLogistic(2))
	a.def.cfg.Reply = ReplyDelta
	train(a, []float64{0, 0})
	a.answer(2, &schemas.PartyOutput{Header: schemas.Header{Version: schemas.Version, Party: 2, Seq: 1},
		IDs: []uint32{0}, C: []float64{1}, CHat: []float64{1.1}})
	if len(a.rep.H) != 0 || len(a.rep.Delta) != 1 {
		t.Fatalf("delta reply %+v", a.rep)
	}
	if want := softplus(-1.1) - softplus(-1); math.Abs(a.rep.Delta[0]-want) > 1e-12 {
		t.Fatalf("delta %v want %v", a.rep.Delta[0], want)
	}
}

func TestStaleness(t *testing.T) {
	a, _ := newTest(t, 3, []int32{1, 1}, model.NewLogistic(3))
	train(a, make([]float64, 6))
	req := func(m int, id uint32) uint32 {
		a.answer(m, &schemas.PartyOutput{Header: schemas.Header{Version: schemas.Version, Party: uint16(m), Seq: 1},
			IDs: []uint32{id}, C: []float64{0}, CHat: []float64{0}})
		return a.rep.Staleness
	}
	// Party 2 steps three times on sample 1; then party 1 on sample 0 sees
	// party 2's slot of sample 0 three updates behind.
	for range 3 {
		req(2, 1)
	}
	if s := req(1, 0); s != 3 {
		t.Fatalf("staleness %d, want 3", s)
	}
	// Party 2 now writes sample 0 with its model after 3 updates; once that
	// request is answered party 2 is at 4, so the slot is 1 behind. Party 3's
	// slot is at version 0 with party 3 at 0.
	req(2, 0)
	if s := req(1, 0); s != 1 {
		t.Fatalf("staleness %d, want 1", s)
	}
	if a.res.MaxStaleness != 3 {
		t.Fatalf("max staleness %d", a.res.MaxStaleness)
	}
}

func TestRejections(t *testing.T) {
	c := schemas.NewCodec()
	enc := func(m schemas.Message) []byte {
		b, err := c.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return append([]byte(nil), b...)
	}
	out := func(party uint16, seq uint64, ids []uint32, cs, chat []float64) []byte {
		return enc(&schemas.PartyOutput{Header: schemas.Header{Version: schemas.Version, Party: party, Seq: seq}, IDs: ids, C: cs, CHat: chat})
	}
	nan := math.NaN()
	cases := []struct {
		name, subject string
		data          []byte
		reason        string
	}{
		{"garbage", "asyrevel.t.out.1", []byte("not msgpack"), "decode"},
		{"truncated", "asyrevel.t.out.1", out(1, 5, []uint32{0}, []float64{1}, []float64{1})[:10], "decode"},
		{"wrong dims", "asyrevel.t.out.1", out(1, 5, []uint32{0, 1}, []float64{1}, []float64{1}), "shape"},
		{"nan", "asyrevel.t.out.1", out(1, 5, []uint32{0}, []float64{nan}, []float64{1}), "nonfinite"},
		{"id out of range", "asyrevel.t.out.1", out(1, 5, []uint32{7}, []float64{1}, []float64{1}), "range"},
		{"forged party", "asyrevel.t.out.1", out(2, 5, []uint32{0}, []float64{1}, []float64{1}), "party"},
		{"replay", "asyrevel.t.out.1", out(1, 1, []uint32{0}, []float64{1}, []float64{1}), "replay"},
		{"unknown party", "asyrevel.t.out.9", out(9, 5, []uint32{0}, []float64{1}, []float64{1}), "subject"},
		{"other run", "asyrevel.u.out.1", out(1, 5, []uint32{0}, []float64{1}, []float64{1}), "subject"},
		{"old version", "asyrevel.t.out.1", []byte{0x93, 0x00, 0x01, 0x05}, "version"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, s := newTest(t, 2, []int32{1, 0}, model.NewLogistic(2))
			train(a, []float64{1, 2, 3, 4})
			a.lastSeq[seqRequests][1] = 3
			before := append([]float64(nil), a.table...)
			a.handle(context.Background(), &delivery{tc.subject, tc.data})
			if got := a.res.Rejected[tc.reason]; got != 1 {
				t.Fatalf("rejected %v, want one %q", a.res.Rejected, tc.reason)
			}
			for i := range before {
				if a.table[i] != before[i] {
					t.Fatalf("rejected message changed the table: %v", a.table)
				}
			}
			if s.n != 0 || a.res.Steps != 0 {
				t.Fatalf("rejected message was answered")
			}
			// A good message afterwards is answered.
			a.handle(context.Background(), &delivery{"asyrevel.t.out.1", out(1, 9, []uint32{0}, []float64{1}, []float64{1})})
			if s.n != 1 || a.res.Steps != 1 {
				t.Fatalf("good message after a rejection not answered (rejected %v)", a.res.Rejected)
			}
		})
	}
}

func TestHeadStepDescends(t *testing.T) {
	// With a softmax head the aggregator takes its own ZO steps; on a fixed
	// table they must lower the loss.
	q, classes, n := 2, 3, 60
	labels := make([]int32, n)
	table := make([]float64, n*q)
	for i := range labels {
		labels[i] = int32(i % classes)
		table[i*q] = float64(labels[i]) - 1
		table[i*q+1] = 1 - float64(labels[i])
	}
	head := model.NewSoftmax(q, classes)
	a, _ := newTest(t, q, labels, head)
	a.cfg.LR = zoo.Schedule{Eta0: 0.05}
	train(a, table)
	before := a.meanLoss(a.table, labels)
	out := &schemas.PartyOutput{Header: schemas.Header{Version: schemas.Version, Party: 1}, IDs: make([]uint32, 8), C: make([]float64, 8), CHat: make([]float64, 8)}
	for step := range 3000 {
		for j := range out.IDs {
			i := (step*8 + j) % n
			out.IDs[j] = uint32(i)
			out.C[j] = table[i*q]
			out.CHat[j] = table[i*q]
		}
		a.answer(1, out)
	}
	if after := a.meanLoss(a.table, labels); after > 0.7*before {
		t.Fatalf("head loss %.4f -> %.4f: ZO head steps did not descend", before, after)
	}
}

func TestStepDoesNotAllocate(t *testing.T) {
	a, _ := newTest(t, 8, make([]int32, 1000), model.NewLogistic(8))
	train(a, make([]float64, 8000))
	c := schemas.NewCodec()
	ids := make([]uint32, 64)
	for i := range ids {
		ids[i] = uint32(i * 7)
	}
	data, _ := c.Marshal(&schemas.PartyOutput{Header: schemas.Header{Version: schemas.Version, Party: 3, Seq: 1},
		IDs: ids, C: make([]float64, 64), CHat: make([]float64, 64)})
	allocs := testing.AllocsPerRun(200, func() { step(a, 3, data) })
	if allocs != 0 {
		t.Fatalf("%v allocations per step, want 0", allocs)
	}
}

// step is the aggregator's hot path without the transport: decode,
// validate, answer, encode the reply.
func step(a *Aggregator, m int, data []byte) []byte {
	if err := a.wire.dec.Unmarshal(data, &a.out); err != nil {
		panic(err)
	}
	if err := a.out.Validate(a.limits(m)); err != nil {
		panic(err)
	}
	a.answer(m, &a.out)
	b, err := a.wire.enc.Marshal(&a.rep)
	if err != nil {
		panic(err)
	}
	return b
}

func BenchmarkStep(b *testing.B) {
	for _, tc := range []struct {
		name  string
		head  model.Head
		batch int
	}{
		{"logistic/batch=1", model.NewLogistic(8), 1},
		{"logistic/batch=64", model.NewLogistic(8), 64},
		{"softmax/batch=1", model.NewSoftmax(8, 10), 1},
		{"softmax/batch=64", model.NewSoftmax(8, 10), 64},
	} {
		b.Run(tc.name, func(b *testing.B) {
			n := 10000
			a, _ := newTest(b, 8, make([]int32, n), tc.head)
			train(a, make([]float64, n*8))
			c := schemas.NewCodec()
			ids := make([]uint32, tc.batch)
			for i := range ids {
				ids[i] = uint32(i * 97 % n)
			}
			data, _ := c.Marshal(&schemas.PartyOutput{Header: schemas.Header{Version: schemas.Version, Party: 3, Seq: 1},
				IDs: ids, C: make([]float64, tc.batch), CHat: make([]float64, tc.batch)})
			b.ReportAllocs()
			for b.Loop() {
				step(a, 3, data)
			}
		})
	}
}

// Sequences are checked per sender and per subscription: the requests and
// the other messages of one party travel on consumers that are not ordered
// with each other, but a replay within either is rejected.
func TestSequencePerSubscription(t *testing.T) {
	a, _ := newTest(t, 2, []int32{1, 0}, model.NewLogistic(2))
	for _, c := range []struct {
		sub  int
		seq  uint64
		okay bool
	}{
		{seqRequests, 10, true},
		{seqOther, 5, true}, // behind the requests: another consumer
		{seqOther, 5, false},
		{seqOther, 4, false},
		{seqRequests, 9, false},
		{seqRequests, 11, true},
		{seqOther, 6, true},
	} {
		err := a.seqOK(c.sub, 1, c.seq)
		if (err == nil) != c.okay || (err != nil && !errors.Is(err, schemas.ErrReplay)) {
			t.Errorf("subscription %d, seq %d: %v, want ok=%v", c.sub, c.seq, err, c.okay)
		}
	}
}

// After the final evaluation, requests still arriving on the requests
// subscription are counted as late, unanswered; after a failure they are
// ignored.
func TestLateRequestsAfterDone(t *testing.T) {
	c := schemas.NewCodec()
	out := func(seq uint64) []byte {
		b, err := c.Marshal(&schemas.PartyOutput{Header: schemas.Header{Version: schemas.Version, Party: 1, Seq: seq},
			IDs: []uint32{0}, C: []float64{1}, CHat: []float64{1}})
		if err != nil {
			t.Fatal(err)
		}
		return append([]byte(nil), b...)
	}
	a, s := newTest(t, 2, []int32{1, 0}, model.NewLogistic(2))
	train(a, []float64{1, 2, 3, 4})
	a.phase = done
	a.handleOutputs(context.Background(), &delivery{"asyrevel.t.out.1", out(1)})
	a.handleOutputs(context.Background(), &delivery{"asyrevel.t.out.1", out(1)}) // replayed
	if a.res.LateOutputs != 1 || a.res.Rejected["replay"] != 1 || s.n != 0 || a.outSeen != 2 {
		t.Fatalf("late %d, rejected %v, replies %d, seen %d", a.res.LateOutputs, a.res.Rejected, s.n, a.outSeen)
	}
	a.err = errors.New("failed")
	a.handleOutputs(context.Background(), &delivery{"asyrevel.t.out.1", out(2)})
	if a.res.LateOutputs != 1 || a.outSeen != 3 {
		t.Fatalf("after a failure: late %d, seen %d", a.res.LateOutputs, a.outSeen)
	}
}

// Two parties sending finite but huge outputs (c = 1e308) must be rejected
// and counted; the head's parameters and every later reply stay finite.
func TestHugeOutputsAreRejected(t *testing.T) {
	q, classes, n := 2, 3, 4
	a, s := newTest(t, q, []int32{0, 1, 2, 0}, model.NewSoftmax(q, classes))
	train(a, make([]float64, n*q))
	c := schemas.NewCodec()
	out := func(m int, seq uint64, v float64) []byte {
		b, err := c.Marshal(&schemas.PartyOutput{Header: schemas.Header{Version: schemas.Version, Party: uint16(m), Seq: seq},
			IDs: []uint32{0, 1}, C: []float64{v, v}, CHat: []float64{v, -v}})
		if err != nil {
			t.Fatal(err)
		}
		return append([]byte(nil), b...)
	}
	for m := 1; m <= q; m++ {
		a.handle(context.Background(), &delivery{schemas.Subject("t", schemas.KindOutput, m), out(m, 1, 1e308)})
	}
	if got := a.res.Rejected["range"]; got != int64(q) {
		t.Fatalf("rejected %v, want %d out of range", a.res.Rejected, q)
	}
	for m := 1; m <= q; m++ {
		a.handle(context.Background(), &delivery{schemas.Subject("t", schemas.KindOutput, m), out(m, 2, 0.5)})
	}
	if s.n != q {
		t.Fatalf("%d replies to the good outputs, want %d", s.n, q)
	}
	for _, w := range a.w0 {
		if math.IsNaN(w) || math.IsInf(w, 0) {
			t.Fatalf("head parameters not finite: %v", a.w0)
		}
	}
	var rep schemas.Reply
	if err := c.Unmarshal(s.last, &rep); err != nil {
		t.Fatal(err)
	}
	if err := rep.Validate(schemas.Limits{Party: q}); err != nil {
		t.Fatalf("last reply: %v", err)
	}
}

// handleLoop is the aggregator's hot loop as it runs: a request delivered
// to the subscription's handler is decoded, validated and answered, the
// head takes its step and the reply is published (on a Bus that keeps the
// last one).
func handleLoop(t testing.TB, batch int) (a *Aggregator, once func()) {
	n := 10000
	a, _ = newTest(t, 8, make([]int32, n), model.NewLogisticBias(8))
	train(a, make([]float64, n*8))
	c := schemas.NewCodec()
	out := &schemas.PartyOutput{Header: schemas.Header{Version: schemas.Version, Party: 3},
		IDs: make([]uint32, batch), C: make([]float64, batch), CHat: make([]float64, batch)}
	for i := range out.IDs {
		out.IDs[i] = uint32(i * 97 % n)
	}
	d := &delivery{subject: schemas.Subject("t", schemas.KindOutput, 3)}
	ctx := context.Background()
	return a, func() {
		out.Seq++
		d.data, _ = c.Marshal(out)
		a.handleOutputs(ctx, d)
	}
}

func BenchmarkHandle(b *testing.B) {
	for _, batch := range []int{1, 64} {
		b.Run(fmt.Sprintf("logistic/batch=%d", batch), func(b *testing.B) {
			a, once := handleLoop(b, batch)
			b.ReportAllocs()
			for b.Loop() {
				once()
			}
			if a.res.Steps != int64(b.N) {
				b.Fatalf("%d steps of %d: %v", a.res.Steps, b.N, a.res.Rejected)
			}
		})
	}
}

// The hot loop, publishing included, does not allocate.
func TestHandleDoesNotAllocate(t *testing.T) {
	for _, batch := range []int{1, 64} {
		a, once := handleLoop(t, batch)
		once()
		if n := testing.AllocsPerRun(200, once); n != 0 {
			t.Errorf("batch %d: %v allocations a step", batch, n)
		}
		if a.res.Steps != 202 {
			t.Fatalf("%d steps: %v", a.res.Steps, a.res.Rejected)
		}
	}
}

// A flood of rejected messages is counted in full but logged a bounded
// number of times: a client that can publish on a party's subject must not
// be able to turn each forged message into a log line (a disk, or a test's
// buffer, filled as fast as it publishes).
func TestRejectionFloodLogIsBounded(t *testing.T) {
	a, _ := newTest(t, 2, []int32{1, 0}, model.NewLogistic(2))
	var logs bytes.Buffer
	a.cfg.Log = zerolog.New(&logs)
	train(a, []float64{1, 2, 3, 4})
	const flood = 5000
	for range flood {
		a.handle(context.Background(), &delivery{"asyrevel.t.out.1", []byte("not msgpack")})
	}
	if got := a.res.Rejected["decode"]; got != flood {
		t.Fatalf("rejected %v, want %d decode", a.res.Rejected, flood)
	}
	lines := strings.Count(logs.String(), "rejected message")
	if lines == 0 || lines > ratelog.RejectBurst+1 {
		t.Fatalf("%d log lines for %d rejections in well under %v; want 1 to %d", lines, flood, ratelog.RejectPeriod, ratelog.RejectBurst+1)
	}
	// Another party's rejections are logged apart.
	a.handle(context.Background(), &delivery{"asyrevel.t.out.2", []byte("not msgpack")})
	if n := strings.Count(logs.String(), `"party":2`); n != 1 {
		t.Fatalf("party 2's rejection logged %d times, want 1", n)
	}
}
