package experiment

import (
	"container/heap"
	"context"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/run"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/zoo"
	"github.com/asyrevel/asyrevel/zoo/kernel"
)

// SimConfig configures Simulate: AsyREVEL or SynREVEL on q machines in
// virtual time.
type SimConfig struct {
	Parties int
	Sync    bool // SynREVEL rounds; otherwise AsyREVEL with one request in flight per party
	Dist    zoo.Dist
	Batch   int
	LR      zoo.Schedule // parties, by their own step count
	HeadLR  zoo.Schedule // head, by answered requests
	Mu      float64
	Lambda  float64
	Reg     model.Regularizer
	Seed    uint64
	// StepCost is the compute time of one step of party m (1..q), in
	// seconds: its two forward passes and direction draw, and the update.
	StepCost func(m int) float64
	// Latency is the one-way time of a message (party to aggregator or
	// back), AggCost the aggregator's compute per answered request.
	Latency, AggCost float64
	Budget           float64 // virtual seconds
	MaxSteps         int64   // answered requests (0 = no limit)
	EvalEvery        float64 // virtual seconds between evaluations of the objective (at least)
	// EvalGrowth > 0 spaces the evaluations geometrically as well: the
	// next comes max(EvalEvery, EvalGrowth*t) after the one at t, so a
	// time to target is known to a relative EvalGrowth whatever the scale
	// (a run of 10 s and one of 10,000 s alike).
	EvalGrowth float64
	Target     float64 // stop once the objective is at most this (0 = run the budget)
	// Order, if not nil, replaces the cost model's timing (asynchronous
	// runs only): the aggregator answers requests in this order of parties
	// (1..q), one request in flight per party, and the run ends after the
	// last. It replays the order of arrivals of a real run, for checking
	// that the simulator computes what the runtimes compute.
	Order    []int
	NewLocal func(m, d int) model.Local
	Head     model.Head
	// Quota, if not nil, limits party m (1..q) as a CFS bandwidth quota
	// does (cgroup v1 cpu.cfs_quota_us over cpu.cfs_period_us):
	// StepCost(m) is then its CPU a step, which runs at full speed until
	// share x period of CPU is spent in a period and waits for the next
	// period after that (a share of 1 or more, or not positive: no
	// limit). Nil: StepCost(m) is the step's duration.
	Quota func(m int) (share, period float64)
}

// cfsQuota is one party's CPU under a CFS bandwidth quota, its periods
// starting at virtual time 0.
type cfsQuota struct {
	share, period float64
	cur           int64   // the current period's number
	used          float64 // the CPU spent in it
}

// run returns when cpu seconds of work that start at t end. Each turn
// of its loop ends the work or moves to the next period.
func (c *cfsQuota) run(t, cpu float64) float64 {
	budget := c.share * c.period
	k := int64(math.Floor(t / c.period))
	if float64(k+1)*c.period <= t {
		k++
	}
	for cpu > 0 {
		if k != c.cur {
			c.cur, c.used = k, 0
		}
		if avail, end := budget-c.used, float64(k+1)*c.period; avail > 0 && end > t {
			d := min(cpu, avail, end-t)
			t += d
			cpu -= d
			c.used += d
			if cpu <= 0 {
				break
			}
		}
		// Throttled, or at the period's end: the next period.
		k++
		t = max(t, float64(k)*c.period)
	}
	return t
}

// stepEnd is when party m's step that starts at t ends.
func (s *sim) stepEnd(m int, t float64) float64 {
	p := s.parties[m]
	if p.quota == nil {
		return t + p.cost
	}
	return p.quota.run(t, p.cost)
}

// SimPoint is one evaluation of the objective in virtual time.
type SimPoint struct {
	Seconds   float64 // virtual
	Steps     int64   // answered requests
	Objective float64 // mean head loss over the training set + lambda sum g(w_m)
}

// SimResult is what Simulate reports.
type SimResult struct {
	Curve   []SimPoint
	Reached bool
	Seconds float64 // virtual time at the target (the end if not reached)
	Steps   int64
	// PartySteps counts each party's updates.
	PartySteps []int64
	// Params are the parties' parameters at the end, Head the head's.
	Params [][]float64
	Head   []float64
}

// Simulate runs AsyREVEL (or SynREVEL) on data as q machines would, in
// virtual time: the same steps as the runtimes (fresh outputs stored before
// h is computed, the parties' and the head's zeroth-order steps, the same
// step sizes), ordered by when they would happen if party m's step took
// StepCost(m) seconds of compute and a message Latency seconds. It is
// deterministic for a seed and independent of this machine's cores: the
// compute is done for real, the time is the model's.
//
// Asynchronous: a party sends a request, waits for its reply (one request in
// flight, the paper's algorithm), applies it and computes the next; the
// aggregator answers requests in the order they arrive, one at a time.
// Synchronous: every party computes its request for the round's shared
// batch; the aggregator answers when the last arrives; the next round
// starts when the replies are back.
//
// It stops early, with ctx's error, once ctx is done (checked at each
// evaluation of the objective).
func Simulate(ctx context.Context, data *run.Data, cfg SimConfig) (*SimResult, error) {
	q := cfg.Parties
	if cfg.Order != nil && cfg.StepCost == nil {
		cfg.StepCost = func(int) float64 { return 0 }
	}
	for _, m := range cfg.Order {
		if m < 1 || m > q || cfg.Sync {
			return nil, fmt.Errorf("%w: simulation: order names party %d of %d (sync %v)", run.ErrConfig, m, q, cfg.Sync)
		}
	}
	if q != len(data.PartTrain) || cfg.Batch < 1 || cfg.Mu <= 0 || cfg.Budget <= 0 || cfg.EvalEvery <= 0 || cfg.StepCost == nil {
		return nil, fmt.Errorf("%w: simulation: parties %d (data in %d), batch %d, mu %g, budget %g, eval every %g",
			run.ErrConfig, q, len(data.PartTrain), cfg.Batch, cfg.Mu, cfg.Budget, cfg.EvalEvery)
	}
	s := newSim(data, cfg)
	s.ctx = ctx
	switch {
	case cfg.Order != nil:
		s.runOrder()
	case cfg.Sync:
		s.runSync()
	default:
		s.runAsync()
	}
	if err := ctx.Err(); err != nil {
		return s.res, fmt.Errorf("simulation stopped at %d answered requests: %w", s.answers, err)
	}
	return s.res, nil
}

type simParty struct {
	local    model.Local
	x        *dataset.Matrix
	w, wp, u []float64
	c, ch    []float64
	ids      []uint32
	rng      *rand.Rand
	phi      float64
	steps    int
	regDiff  float64
	diff     float64 // mean(h_bar - h) of the reply
	cost     float64
	quota    *cfsQuota // nil: cost is the step's duration
}

type sim struct {
	ctx     context.Context
	cfg     SimConfig
	data    *run.Data
	q, k, n int
	width   int
	parties []*simParty
	head    model.Head
	w0, w0p []float64
	u0      []float64
	phi0    float64
	table   []float64
	evTable []float64 // the objective's outputs: evaluating does not touch the training table
	hh, hb  []float64
	wh, whb []float64  // the reply's losses as the party decodes them
	rng     *rand.Rand // head directions
	sampler *rand.Rand // SynREVEL's shared batches
	answers int64
	nextEv  float64
	res     *SimResult
	all     []uint32
	out     []float64
	done    bool
}

func newSim(data *run.Data, cfg SimConfig) *sim {
	q := cfg.Parties
	head := cfg.Head
	s := &sim{cfg: cfg, data: data, q: q, k: head.InDim() / q, n: data.NTrain, head: head,
		rng: rand.New(rand.NewPCG(cfg.Seed, 0)), sampler: rand.New(rand.NewPCG(cfg.Seed, 0x5e1ec7)), res: &SimResult{}}
	s.width = q * s.k
	s.w0 = make([]float64, head.NumParams())
	s.w0p, s.u0 = make([]float64, len(s.w0)), make([]float64, len(s.w0))
	head.Init(s.w0, s.rng)
	if len(s.w0) > 0 {
		s.phi0 = cfg.Dist.Phi(len(s.w0))
	}
	s.table = make([]float64, s.n*s.width)
	s.hh, s.hb = make([]float64, cfg.Batch), make([]float64, cfg.Batch)
	s.evTable = make([]float64, len(s.table))
	s.all = make([]uint32, s.n)
	for i := range s.all {
		s.all[i] = uint32(i)
	}
	s.out = make([]float64, s.n*s.k)
	for m := 1; m <= q; m++ {
		l := cfg.NewLocal(m, data.Blocks[m-1].Len())
		np := l.NumParams()
		p := &simParty{local: l, x: data.PartTrain[m-1], w: make([]float64, np), wp: make([]float64, np), u: make([]float64, np),
			c: make([]float64, cfg.Batch*s.k), ch: make([]float64, cfg.Batch*s.k), ids: make([]uint32, cfg.Batch),
			rng: rand.New(rand.NewPCG(cfg.Seed*1000003+uint64(m), uint64(m))), phi: cfg.Dist.Phi(np), cost: cfg.StepCost(m)}
		if cfg.Quota != nil {
			// A share of a processor or more does not slow a step (one
			// thread); a share or period that is not positive is none.
			if sh, per := cfg.Quota(m); sh > 0 && sh < 1 && per > 0 {
				p.quota = &cfsQuota{share: sh, period: per, cur: -1}
			}
		}
		l.Init(p.w, p.rng)
		s.parties = append(s.parties, p)
	}
	for m := range q {
		s.fill(s.table, m)
	}
	return s
}

// fill writes party m's (0-based) outputs on every training sample into
// table t.
func (s *sim) fill(t []float64, m int) {
	p := s.parties[m]
	p.local.Forward(p.w, p.x, s.all, s.out)
	schemas.WireVector(s.out) // training-set outputs travel as float32
	kernel.Store(t, s.width, m*s.k, s.all, s.out)
}

// objective is f at the parties' current models, from fresh outputs in a
// table of its own, as an evaluation round of the runtime does: the
// training table keeps its stale slots.
func (s *sim) objective() float64 {
	var f float64
	for m := range s.q {
		s.fill(s.evTable, m)
		if s.cfg.Reg != nil {
			f += s.cfg.Lambda * s.cfg.Reg.Value(s.parties[m].w)
		}
	}
	var l float64
	for i, y := range s.data.TrainY {
		l += s.head.Loss(s.w0, s.evTable[i*s.width:(i+1)*s.width], y)
	}
	return f + l/float64(s.n)
}

// evaluate records the objective at every evaluation time up to t and
// reports whether the simulation should stop.
func (s *sim) evaluate(t float64) bool {
	if s.cfg.MaxSteps > 0 && s.answers >= s.cfg.MaxSteps && s.nextEv > t {
		s.nextEv = t // the cap is reached: the last evaluation is now
	}
	for !s.done && s.nextEv <= t {
		if s.ctx.Err() != nil {
			s.done = true
			break
		}
		f := s.objective()
		pt := SimPoint{Seconds: s.nextEv, Steps: s.answers, Objective: f}
		s.res.Curve = append(s.res.Curve, pt)
		s.res.Seconds, s.res.Steps = pt.Seconds, pt.Steps
		if s.cfg.Target > 0 && f <= s.cfg.Target {
			s.res.Reached, s.done = true, true
		}
		if s.nextEv >= s.cfg.Budget || math.IsNaN(f) || (s.cfg.MaxSteps > 0 && s.answers >= s.cfg.MaxSteps) {
			s.done = true
		}
		s.nextEv += max(s.cfg.EvalEvery, s.cfg.EvalGrowth*s.nextEv)
	}
	return s.done
}

// prepare computes party m's next request (0-based m): batch, direction,
// c and c_hat.
func (s *sim) prepare(m int, ids []uint32) {
	p := s.parties[m]
	if ids == nil {
		for j := range p.ids {
			p.ids[j] = uint32(p.rng.IntN(s.n))
		}
	} else {
		copy(p.ids, ids)
	}
	kernel.Probe(p.local, p.x, p.ids, s.cfg.Dist, p.rng, s.cfg.Mu, p.w, p.wp, p.u, p.c, p.ch)
	schemas.WirePair(p.c, p.ch) // what the aggregator decodes
	p.regDiff = kernel.RegDiff(s.cfg.Reg, s.cfg.Lambda, p.w, p.wp)
}

// store puts party m's fresh outputs for its batch into the table.
func (s *sim) store(m int) {
	p := s.parties[m]
	kernel.Store(s.table, s.width, m*s.k, p.ids, p.c)
}

// reply is the aggregator's answer to party m's request: it stores the
// fresh outputs, writes the losses h into s.hh and mean(h_bar - h) into
// p.diff.
func (s *sim) reply(m int) {
	p := s.parties[m]
	kernel.Reply(s.head, s.w0, s.table, s.width, m*s.k, p.ids, p.c, p.ch, s.data.TrainY, s.hh, s.hb)
	// The party computes with the reply as it decodes it; the head with
	// its own losses.
	s.wh, s.whb = append(s.wh[:0], s.hh...), append(s.whb[:0], s.hb...)
	schemas.WirePair(s.wh, s.whb)
	p.diff = kernel.MeanDiff(s.wh, s.whb)
}

// stepHead is the head's own ZO step on ids.
func (s *sim) stepHead(ids []uint32) {
	if len(s.w0) == 0 {
		return
	}
	kernel.Direction(s.cfg.Dist, s.rng, s.cfg.Mu, s.w0, s.w0p, s.u0)
	d := kernel.HeadDiff(s.head, s.w0p, s.table, s.width, ids, s.data.TrainY, s.hh, nil)
	kernel.Update(s.w0, s.u0, s.cfg.HeadLR.At(int(s.answers)), s.phi0, s.cfg.Mu, d)
}

// apply is party m's update on its reply.
func (s *sim) apply(m int) {
	p := s.parties[m]
	kernel.Update(p.w, p.u, s.cfg.LR.At(p.steps), p.phi, s.cfg.Mu, p.diff+p.regDiff)
	p.steps++
}

func (s *sim) finish() {
	for _, p := range s.parties {
		s.res.PartySteps = append(s.res.PartySteps, int64(p.steps))
		s.res.Params = append(s.res.Params, append([]float64(nil), p.w...))
	}
	s.res.Head = append([]float64(nil), s.w0...)
}

type event struct {
	t     float64
	m     int
	reply bool // a reply reaching party m; otherwise its request reaching the aggregator
	seq   int64
}

type events []event

func (e events) Len() int { return len(e) }
func (e events) Less(i, j int) bool {
	if e[i].t != e[j].t {
		return e[i].t < e[j].t
	}
	return e[i].seq < e[j].seq
}
func (e events) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)   { *e = append(*e, x.(event)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

func (s *sim) runAsync() {
	cfg := s.cfg
	var q events
	var seq int64
	push := func(t float64, m int, reply bool) {
		seq++
		heap.Push(&q, event{t: t, m: m, reply: reply, seq: seq})
	}
	for m := range s.q {
		s.prepare(m, nil)
		push(s.stepEnd(m, 0)+cfg.Latency, m, false)
	}
	aggFree := 0.0
	s.evaluate(0)
	for q.Len() > 0 && !s.done {
		ev := heap.Pop(&q).(event)
		if s.evaluate(ev.t) {
			break
		}
		if !ev.reply {
			// The aggregator answers in arrival order, one at a time.
			start := math.Max(ev.t, aggFree)
			aggFree = start + cfg.AggCost
			s.reply(ev.m)
			s.stepHead(s.parties[ev.m].ids)
			s.answers++
			push(aggFree+cfg.Latency, ev.m, true)
			continue
		}
		s.apply(ev.m)
		s.prepare(ev.m, nil)
		push(s.stepEnd(ev.m, ev.t)+cfg.Latency, ev.m, false)
	}
	s.finish()
}

// runOrder answers the requests in cfg.Order: every party has one request
// in flight; the aggregator answers party m's, m applies the reply and
// sends its next. The objective is evaluated at the start and the end.
func (s *sim) runOrder() {
	for m := range s.q {
		s.prepare(m, nil)
	}
	s.evaluate(0)
	for _, m := range s.cfg.Order {
		m--
		s.reply(m)
		s.stepHead(s.parties[m].ids)
		s.answers++
		s.apply(m)
		s.prepare(m, nil)
	}
	s.nextEv = 0
	s.done = false
	s.evaluate(0)
	s.finish()
}

func (s *sim) runSync() {
	cfg := s.cfg
	ids := make([]uint32, cfg.Batch)
	t := 0.0
	s.evaluate(0)
	for !s.done {
		for j := range ids {
			ids[j] = uint32(s.sampler.IntN(s.n))
		}
		var last float64
		for m := range s.q {
			s.prepare(m, ids)
			last = math.Max(last, s.stepEnd(m, t)-t)
		}
		// The round is answered when the slowest request has arrived.
		answered := t + last + cfg.Latency + float64(s.q)*cfg.AggCost
		if s.evaluate(answered) {
			break
		}
		for m := range s.q {
			s.store(m)
		}
		for m := range s.q {
			s.reply(m) // h is the same for every party: s.hh holds it
		}
		s.stepHead(ids)
		s.answers += int64(s.q)
		t = answered + cfg.Latency
		for m := range s.q {
			s.apply(m)
		}
	}
	s.finish()
}
