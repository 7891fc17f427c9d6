package party

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/internal/ratelog"
	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/trust"
	"github.com/asyrevel/asyrevel/zoo"
)

type sink struct {
	broker.Bus
	n int
}

func (s *sink) Publish(context.Context, *broker.Message) error { s.n++; return nil }

// dense builds an n x d CSR matrix with entries i+j+1.
func dense(n, d int) *dataset.Matrix {
	m := &dataset.Matrix{NRows: n, NCols: d, Indptr: make([]int64, n+1)}
	for i := 0; i < n; i++ {
		for j := 0; j < d; j++ {
			m.Indices = append(m.Indices, int32(j))
			m.Values = append(m.Values, float32((i+j)%5)/5)
		}
		m.Indptr[i+1] = int64(len(m.Indices))
	}
	return m
}

func newTest(t testing.TB, batch, window int, dist zoo.Dist) (*Party, *sink) {
	p, err := New(Config{Run: "t", ID: 2, Model: model.NewLinear(6, 1), Train: dense(50, 6),
		Reg: model.Nonconvex{}, Lambda: 1e-2, Dist: dist, Mu: 1e-3, LR: zoo.Schedule{Eta0: 0.1},
		Batch: batch, Window: window, Seed: 7, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	s := &sink{}
	p.bus, p.ctx = s, context.Background()
	return p, s
}

func TestApplyIsTheZOStep(t *testing.T) {
	for _, dist := range []zoo.Dist{zoo.Gaussian, zoo.Sphere} {
		t.Run(dist.String(), func(t *testing.T) {
			p, _ := newTest(t, 3, 1, dist)
			copy(p.w, []float64{0.1, -0.2, 0.3, 0, 0.5, -1})
			if err := p.request(); err != nil {
				t.Fatal(err)
			}
			w0 := append([]float64(nil), p.w...)
			u := append([]float64(nil), p.ring[0].u...)
			// c_hat - c must be mu * u^T x for a linear model.
			for j, id := range p.out.IDs {
				idx, val := p.cfg.Train.Row(int(id))
				var ux float64
				for t, c := range idx {
					ux += u[c] * float64(val[t])
				}
				if d := p.out.CHat[j] - p.out.C[j]; math.Abs(d-1e-3*ux) > 1e-12 {
					t.Fatalf("c_hat - c = %v, want mu u.x = %v", d, 1e-3*ux)
				}
			}
			rep := &schemas.Reply{Header: schemas.Header{Version: schemas.Version, Party: 2, Seq: 1}, ReqSeq: p.ring[0].seq,
				H: []float64{0.5, 0.6, 0.7}, HBar: []float64{0.501, 0.598, 0.7}}
			if err := p.apply(rep); err != nil {
				t.Fatal(err)
			}
			wp := make([]float64, len(w0))
			zoo.Perturb(wp, w0, u, 1e-3)
			reg := model.Nonconvex{}
			diff := (0.001-0.002+0)/3 + 1e-2*(reg.Value(wp)-reg.Value(w0))
			coef := 0.1 * dist.Phi(len(w0)) / 1e-3 * diff
			for j := range w0 {
				if want := w0[j] - coef*u[j]; math.Abs(p.w[j]-want) > 1e-12 {
					t.Fatalf("w[%d] = %v, want %v", j, p.w[j], want)
				}
			}
			if p.t != 1 || p.n != 0 {
				t.Fatalf("t=%d in flight=%d", p.t, p.n)
			}
		})
	}
}

func TestApplyRejects(t *testing.T) {
	p, _ := newTest(t, 2, 2, zoo.Gaussian)
	for range 2 {
		if err := p.request(); err != nil {
			t.Fatal(err)
		}
	}
	first, second := p.ring[0].seq, p.ring[1].seq
	h := schemas.Header{Version: schemas.Version, Party: 2, Seq: 1}
	cases := []struct {
		name string
		r    schemas.Reply
		want error
	}{
		{"out of order", schemas.Reply{Header: h, ReqSeq: second, Delta: []float64{0, 0}}, schemas.ErrReplay},
		{"unknown", schemas.Reply{Header: h, ReqSeq: 999, Delta: []float64{0, 0}}, schemas.ErrReplay},
		{"wrong batch", schemas.Reply{Header: h, ReqSeq: first, Delta: []float64{0}}, schemas.ErrShape},
		{"nan", schemas.Reply{Header: h, ReqSeq: first, Delta: []float64{0, math.NaN()}}, schemas.ErrNonFinite},
		{"other party", schemas.Reply{Header: schemas.Header{Version: schemas.Version, Party: 3, Seq: 1}, ReqSeq: first, Delta: []float64{0, 0}}, schemas.ErrParty},
	}
	w := append([]float64(nil), p.w...)
	for _, tc := range cases {
		if err := p.apply(&tc.r); !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
	for j := range w {
		if p.w[j] != w[j] {
			t.Fatal("a rejected reply changed the parameters")
		}
	}
	if err := p.apply(&schemas.Reply{Header: h, ReqSeq: first, Delta: []float64{0.1, 0.1}}); err != nil {
		t.Fatal(err)
	}
	if err := p.apply(&schemas.Reply{Header: h, ReqSeq: second, Delta: []float64{0.1, 0.1}}); err != nil {
		t.Fatal(err)
	}
	if err := p.apply(&schemas.Reply{Header: h, ReqSeq: second + 1, Delta: []float64{0.1, 0.1}}); !errors.Is(err, schemas.ErrState) {
		t.Fatalf("reply with nothing in flight: %v", err)
	}
}

func TestConfigErrors(t *testing.T) {
	good := Config{Run: "t", ID: 1, Model: model.NewLinear(6, 1), Train: dense(5, 6), Mu: 1e-3, LR: zoo.Schedule{Eta0: 1}}
	cases := map[string]func(c *Config){
		"bad run":     func(c *Config) { c.Run = "a.b" },
		"id 0":        func(c *Config) { c.ID = 0 },
		"no model":    func(c *Config) { c.Model = nil },
		"wrong width": func(c *Config) { c.Model = model.NewLinear(5, 1) },
		"mu 0":        func(c *Config) { c.Mu = 0 },
		"bad params":  func(c *Config) { c.Params = []float64{1} },
		"neg batch":   func(c *Config) { c.Batch = -1 },
		"wrong test":  func(c *Config) { c.Test = dense(3, 4) },
		"neg lambda":  func(c *Config) { c.Lambda = -1 },
		"ema 1":       func(c *Config) { c.EMA = 1 },
		"ema NaN":     func(c *Config) { c.EMA = math.NaN() },
		"empty train": func(c *Config) { c.Train = &dataset.Matrix{NCols: 6, Indptr: []int64{0}} },
	}
	if _, err := New(good); err != nil {
		t.Fatal(err)
	}
	for name, mod := range cases {
		c := good
		mod(&c)
		if _, err := New(c); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: got %v, want ErrConfig", name, err)
		}
	}
}

func TestStepDoesNotAllocate(t *testing.T) {
	p, _ := newTest(t, 16, 1, zoo.Gaussian)
	c := schemas.NewCodec()
	rep := &schemas.Reply{Header: schemas.Header{Version: schemas.Version, Party: 2, Seq: 1}, Delta: make([]float64, 16)}
	allocs := testing.AllocsPerRun(200, func() { step(p, c, rep) })
	if allocs != 0 {
		t.Fatalf("%v allocations per step, want 0", allocs)
	}
}

// step is the party's hot path without the transport: prepare a request,
// encode it, then decode and apply its reply.
func step(p *Party, c *schemas.Codec, rep *schemas.Reply) {
	slot := p.prepare()
	p.seq++
	p.out.Seq = p.seq
	if _, err := p.wire.enc.Marshal(&p.out); err != nil {
		panic(err)
	}
	slot.seq = p.seq
	p.n++
	rep.ReqSeq = p.seq
	data, _ := c.Marshal(rep)
	if err := p.wire.dec.Unmarshal(data, &p.wire.rep); err != nil {
		panic(err)
	}
	if err := p.apply(&p.wire.rep); err != nil {
		panic(err)
	}
}

func BenchmarkStep(b *testing.B) {
	for _, tc := range []struct {
		name  string
		m     model.Local
		d     int
		batch int
	}{
		{"linear-d16/batch=1", model.NewLinear(16, 1), 16, 1},
		{"linear-d16/batch=64", model.NewLinear(16, 1), 16, 64},
		{"mlp-d98/batch=1", model.NewMLP(98, 128, 1), 98, 1},
		{"mlp-d98/batch=64", model.NewMLP(98, 128, 1), 98, 64},
	} {
		b.Run(tc.name, func(b *testing.B) {
			p, err := New(Config{Run: "t", ID: 2, Model: tc.m, Train: dense(1000, tc.d), Reg: model.Nonconvex{}, Lambda: 1e-4,
				Mu: 1e-3, LR: zoo.Schedule{Eta0: 1e-3}, Batch: tc.batch, Seed: 1, Log: zerolog.Nop()})
			if err != nil {
				b.Fatal(err)
			}
			c := schemas.NewCodec()
			rep := &schemas.Reply{Header: schemas.Header{Version: schemas.Version, Party: 2, Seq: 1}, Delta: make([]float64, tc.batch)}
			b.ReportAllocs()
			for b.Loop() {
				step(p, c, rep)
			}
		})
	}
}

// handleLoop is the party's hot loop as it runs: a reply delivered to the
// subscription's handler is decoded and applied, and the next request is
// prepared and published (on a Bus that keeps nothing).
// With signed, the trust layer is on: the party chains and signs what it
// publishes, and the replies come chained and signed by the aggregator.
func handleLoop(t testing.TB, batch int, signed bool) (p *Party, once func()) {
	cfg := Config{Run: "t", ID: 2, Model: model.NewLinear(16, 1), Train: dense(1000, 16), Reg: model.Nonconvex{}, Lambda: 1e-4,
		Mu: 1e-3, LR: zoo.Schedule{Eta0: 1e-3}, Batch: batch, Window: 8, Seed: 1, Log: zerolog.Nop()}
	var agg *trust.Publisher
	if signed {
		cfg.Roster, cfg.Key, agg = testKeys(t, "t", 2)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.bus, p.ctx = &sink{}, context.Background()
	p.control(&schemas.Control{Op: schemas.CtlStart})
	c := schemas.NewCodec()
	rep := &schemas.Reply{Header: schemas.Header{Version: schemas.Version, Party: 2}, Delta: make([]float64, batch)}
	d := &delivery{subject: schemas.Subject("t", schemas.KindReply, 2)}
	ctx := context.Background()
	return p, func() {
		rep.Seq++
		rep.ReqSeq = p.ring[p.head].seq
		d.data, _ = c.Marshal(rep)
		if agg != nil {
			d.sign(agg.Append(d.data, false))
		}
		p.handle(ctx, d)
	}
}

// BenchmarkHandle measures the hot loop without and with the trust layer
// (signed: chained, signed and verified as in a run).
func BenchmarkHandle(b *testing.B) {
	for _, tc := range []struct {
		batch  int
		signed bool
	}{{1, false}, {1, true}, {64, false}, {64, true}} {
		batch := tc.batch
		b.Run(fmt.Sprintf("linear-d16/batch=%d/signed=%v", batch, tc.signed), func(b *testing.B) {
			p, once := handleLoop(b, batch, tc.signed)
			b.ReportAllocs()
			for b.Loop() {
				once()
			}
			if p.err != nil || p.stats.Steps != int64(b.N) {
				b.Fatalf("%d steps of %d: %v %v", p.stats.Steps, b.N, p.err, p.stats.Rejected)
			}
		})
	}
}

// The hot loop, publishing included, does not allocate.
// With the trust layer on (signing, chaining and verifying), too.
func TestHandleDoesNotAllocate(t *testing.T) {
	for _, signed := range []bool{false, true} {
		for _, batch := range []int{1, 64} {
			p, once := handleLoop(t, batch, signed)
			once()
			if n := testing.AllocsPerRun(200, once); n != 0 {
				t.Errorf("signed %v, batch %d: %v allocations a step", signed, batch, n)
			}
			if p.err != nil || p.stats.Steps != 202 {
				t.Fatalf("signed %v: %d steps: %v %v", signed, p.stats.Steps, p.err, p.stats.Rejected)
			}
		}
	}
}

// delivery is a broker.Delivery for driving the handler directly.
type delivery struct {
	subject   string
	data      []byte
	sig, prev string // trust headers
}

// sign sets the delivery's trust headers from the sender's stamp.
func (d *delivery) sign(st trust.Stamp) {
	d.sig, d.prev = "", ""
	if st.Signed {
		d.sig, d.prev = st.SigHeader(), string(st.AppendPrevHeader(nil))
	}
}

func (d *delivery) Subject() string { return d.subject }
func (d *delivery) Data() []byte    { return d.data }
func (d *delivery) ID() string      { return "" }
func (d *delivery) Header(k string) string {
	switch k {
	case trust.SigHeader:
		return d.sig
	case trust.PrevHeader:
		return d.prev
	}
	return ""
}
func (d *delivery) Seq() uint64 { return 0 }
func (d *delivery) Ack() error  { return nil }

// A replayed control (the same evaluation request delivered twice) must be
// rejected as a replay, not run twice; so must a control that goes back in
// the aggregator's sequence.
func TestReplayedControlIsRejected(t *testing.T) {
	p, s := newTest(t, 1, 1, zoo.Gaussian)
	c := schemas.NewCodec()
	ctl := func(seq uint64, op schemas.ControlKind) []byte {
		b, err := c.Marshal(&schemas.Control{Header: schemas.Header{Version: schemas.Version, Seq: seq}, Op: op, Round: 1, Splits: schemas.EvalTrain})
		if err != nil {
			t.Fatal(err)
		}
		return append([]byte(nil), b...)
	}
	subj := schemas.Subject("t", schemas.KindControl, 0)
	eval := ctl(5, schemas.CtlEval)
	p.handle(context.Background(), &delivery{subject: subj, data: eval})
	if s.n != 1 {
		t.Fatalf("first evaluation request published %d messages, want 1", s.n)
	}
	p.handle(context.Background(), &delivery{subject: subj, data: eval})
	p.handle(context.Background(), &delivery{subject: subj, data: ctl(4, schemas.CtlEval)})
	if s.n != 1 {
		t.Fatalf("replayed evaluation requests ran again: %d messages published", s.n)
	}
	if got := p.Stats().Rejected["replay"]; got != 2 {
		t.Fatalf("rejected %v, want 2 replays", p.Stats().Rejected)
	}
	p.handle(context.Background(), &delivery{subject: subj, data: ctl(6, schemas.CtlEval)})
	if s.n != 2 {
		t.Fatalf("a new evaluation request after the replays was not answered (%d)", s.n)
	}
}

// A reply whose values are finite but huge (a forged h_bar = 1e300) must be
// rejected, not applied: it would blow the parameters up to Inf.
func TestHugeReplyIsRejected(t *testing.T) {
	p, _ := newTest(t, 1, 1, zoo.Gaussian)
	if err := p.request(); err != nil {
		t.Fatal(err)
	}
	w := append([]float64(nil), p.w...)
	c := schemas.NewCodec()
	b, err := c.Marshal(&schemas.Reply{Header: schemas.Header{Version: schemas.Version, Party: 2, Seq: 3}, ReqSeq: p.ring[0].seq, H: []float64{0.5}, HBar: []float64{1e300}})
	if err != nil {
		t.Fatal(err)
	}
	p.handle(context.Background(), &delivery{subject: schemas.Subject("t", schemas.KindReply, 2), data: append([]byte(nil), b...)})
	if got := p.Stats().Rejected["range"]; got != 1 {
		t.Fatalf("rejected %v, want one range", p.Stats().Rejected)
	}
	for j := range w {
		if p.w[j] != w[j] {
			t.Fatal("a rejected reply changed the parameters")
		}
	}
}

// A flood of forged replies is counted in full but logged a bounded number
// of times.
func TestRejectionFloodLogIsBounded(t *testing.T) {
	p, _ := newTest(t, 1, 1, zoo.Gaussian)
	var logs bytes.Buffer
	p.cfg.Log = zerolog.New(&logs)
	const flood = 5000
	for range flood {
		p.handle(context.Background(), &delivery{subject: schemas.Subject("t", schemas.KindReply, 2), data: []byte("not msgpack")})
	}
	if got := p.Stats().Rejected["decode"]; got != flood {
		t.Fatalf("rejected %v, want %d decode", p.Stats().Rejected, flood)
	}
	if lines := strings.Count(logs.String(), "rejected message"); lines == 0 || lines > ratelog.RejectBurst+1 {
		t.Fatalf("%d log lines for %d rejections; want 1 to %d", lines, flood, ratelog.RejectBurst+1)
	}
}

// A step that overflows stops the party with ErrModel and leaves its
// parameters finite (the kernel refuses the step), rather than skipping
// steps in silence.
func TestNonFiniteStepStops(t *testing.T) {
	p, _ := newTest(t, 1, 1, zoo.Gaussian)
	p.cfg.LR = zoo.Schedule{Eta0: math.MaxFloat64}
	p.control(&schemas.Control{Op: schemas.CtlStart})
	rep := &schemas.Reply{Header: schemas.Header{Version: schemas.Version, Party: 2, Seq: 1}, ReqSeq: p.ring[p.head].seq,
		H: []float64{0}, HBar: []float64{1e6}}
	before := p.Params()
	if err := p.apply(rep); !errors.Is(err, ErrModel) {
		t.Fatalf("apply = %v, want ErrModel", err)
	}
	if p.err == nil || !errors.Is(p.err, ErrModel) {
		t.Errorf("party not stopped: %v", p.err)
	}
	for i, v := range p.Params() {
		if v != before[i] {
			t.Fatalf("parameters changed by a refused step: %v -> %v", before, p.Params())
		}
	}
}

// With Config.EMA the model evaluated is the warmed-up moving average of
// the iterates, and training follows the iterate unchanged.
func TestEMAIsEvaluated(t *testing.T) {
	const decay = 0.9
	p, _ := newTest(t, 3, 1, zoo.Gaussian)
	q, _ := newTest(t, 3, 1, zoo.Gaussian)
	q.cfg.EMA = decay
	w0 := slices.Clone(p.w)
	if !slices.Equal(q.evalW(), w0) {
		t.Fatal("before any step the model evaluated is not the iterate")
	}
	for _, x := range []*Party{p, q} {
		if err := x.request(); err != nil {
			t.Fatal(err)
		}
		rep := &schemas.Reply{Header: schemas.Header{Version: schemas.Version, Party: 2, Seq: 1}, ReqSeq: x.ring[0].seq,
			H: []float64{0.5, 0.6, 0.7}, HBar: []float64{0.501, 0.598, 0.7}}
		if err := x.apply(rep); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(p.w, q.w) {
		t.Fatal("the average changed training")
	}
	b := 2.0 / 11
	moved := false
	for k, v := range q.evalW() {
		if want := b*w0[k] + (1-b)*q.w[k]; math.Abs(v-want) > 1e-12 {
			t.Fatalf("average[%d] = %g, want %g", k, v, want)
		}
		moved = moved || q.w[k] != w0[k]
	}
	if !moved {
		t.Fatal("the step did not move the model")
	}
}
