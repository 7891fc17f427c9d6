package experiment

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"time"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/zoo"
	"github.com/asyrevel/asyrevel/zoo/kernel"
)

// Spread is a measured cost: the median and a range (see where it is
// measured for which range).
type Spread struct {
	Median, Lo, Hi float64 // seconds
}

// PartyCost is one party's measured step.
type PartyCost struct {
	Params int     // its model's parameters
	NNZ    float64 // mean non-zeros a row of its block of features
	// Step is the CPU time of one step on its own block: the batch drawn,
	// the direction drawn, the two forward passes, the request encoded,
	// the reply decoded and the update (kernel.Probe, kernel.RegDiff,
	// kernel.MeanDiff, kernel.Update, the schemas codec): the median of
	// costRounds rounds, Lo and Hi their smallest and largest.
	Step Spread
}

// Fig4Cost is what one configuration (set, q) costs on this machine,
// measured by the experiment itself before it simulates.
type Fig4Cost struct {
	Set   string
	Q     int
	Batch int
	Party []PartyCost // party m at m-1
	// Agg is the aggregator's CPU time per answered request: the request
	// decoded, h and h_bar for the batch (kernel.Reply), the head's step
	// (kernel.Direction, kernel.HeadDiff, kernel.Update) and the reply
	// encoded. Median of costRounds rounds, Lo and Hi their extremes.
	Agg Spread
	// Latency is the one-way time of a message between two connections
	// through an embedded JetStream broker over TCP loopback, half of a
	// round trip of a request-sized message up and a reply-sized one down
	// (the default transport design): median, Lo and Hi the 10th and
	// 90th percentiles of latencyTrips round trips. Wall time: it
	// includes this machine's scheduling, which its load inflates.
	Latency Spread
	// CPU is true when the compute costs are the thread's CPU time (Linux),
	// false when they are wall time (elsewhere).
	CPU bool
}

// SlowestParty is the largest median step among the parties.
func (c Fig4Cost) SlowestParty() float64 {
	var s float64
	for _, p := range c.Party {
		s = max(s, p.Step.Median)
	}
	return s
}

const (
	costRounds   = 7                     // rounds of a compute measurement
	costRoundCPU = 20 * time.Millisecond // at least this much a round
	latencyTrips = 300                   // round trips of the latency measurement
)

// measureSteps times step: after a warm-up it finds how many calls take at
// least costRoundCPU, then times costRounds rounds of that many and
// returns the median and the extremes of the per-call cost, in seconds. It
// uses the thread's CPU time where it can (cpu true), wall time otherwise.
func measureSteps(step func()) (s Spread, cpu bool) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_, cpu = threadCPU()
	clock := func() time.Duration {
		if cpu {
			t, _ := threadCPU()
			return t
		}
		return time.Duration(time.Now().UnixNano())
	}
	for range 10 {
		step()
	}
	n := 1
	for {
		t0 := clock()
		for range n {
			step()
		}
		if clock()-t0 >= costRoundCPU || n >= 1<<20 {
			break
		}
		n *= 2
	}
	per := make([]float64, costRounds)
	for r := range per {
		t0 := clock()
		for range n {
			step()
		}
		per[r] = (clock() - t0).Seconds() / float64(n)
	}
	slices.Sort(per)
	return Spread{Median: per[len(per)/2], Lo: per[0], Hi: per[len(per)-1]}, cpu
}

// partyStep is one step of a party with local on block x: what the
// runtime's prepare and apply do, codec included. It does not allocate.
func partyStep(local model.Local, x *dataset.Matrix, batch int, dist zoo.Dist, mu, lambda float64, reg model.Regularizer, seed uint64) func() {
	k, np := local.OutDim(), local.NumParams()
	rng := rand.New(rand.NewPCG(seed, 1))
	w, wp, u := make([]float64, np), make([]float64, np), make([]float64, np)
	local.Init(w, rng)
	out := &schemas.PartyOutput{Header: schemas.Header{Version: schemas.Version, Party: 1}, IDs: make([]uint32, batch),
		C: make([]float64, batch*k), CHat: make([]float64, batch*k)}
	enc, dec := schemas.NewCodec(), schemas.NewCodec()
	h, hb := make([]float64, batch), make([]float64, batch)
	for i := range h {
		h[i], hb[i] = 0.5+0.01*rng.Float64(), 0.5+0.01*rng.Float64()
	}
	reply, err := schemas.NewCodec().Marshal(&schemas.Reply{Header: schemas.Header{Version: schemas.Version, Party: 1, Seq: 1}, ReqSeq: 1, H: h, HBar: hb})
	if err != nil {
		panic(err)
	}
	reply = slices.Clone(reply)
	var rep schemas.Reply
	phi := dist.Phi(np)
	return func() {
		for j := range out.IDs {
			out.IDs[j] = uint32(rng.IntN(x.NRows))
		}
		kernel.Probe(local, x, out.IDs, dist, rng, mu, w, wp, u, out.C, out.CHat)
		r := kernel.RegDiff(reg, lambda, w, wp)
		out.Seq++
		if _, err := enc.Marshal(out); err != nil {
			panic(err)
		}
		if err := dec.Unmarshal(reply, &rep); err != nil {
			panic(err)
		}
		// A step size of 0 keeps the model where it is: the cost is the
		// same, the measurement steady.
		kernel.Update(w, u, 0, phi, mu, kernel.MeanDiff(rep.H, rep.HBar)+r)
	}
}

// aggStep is the aggregator's answer to one request of party 1 on a table
// of n samples and q parties with k outputs each: the request decoded,
// h and h_bar, the head's step and the reply encoded.
func aggStep(head model.Head, q, k, n, batch int, dist zoo.Dist, mu float64, seed uint64) func() {
	rng := rand.New(rand.NewPCG(seed, 2))
	width := q * k
	table := make([]float64, n*width)
	for i := range table {
		table[i] = 0.1 * rng.NormFloat64()
	}
	y := make([]int32, n)
	for i := range y {
		y[i] = int32(rng.IntN(max(head.Classes(), 2)))
	}
	w0 := make([]float64, head.NumParams())
	w0p, u0 := make([]float64, len(w0)), make([]float64, len(w0))
	head.Init(w0, rng)
	var phi0 float64
	if len(w0) > 0 {
		phi0 = dist.Phi(len(w0))
	}
	o := &schemas.PartyOutput{Header: schemas.Header{Version: schemas.Version, Party: 1, Seq: 1}, IDs: make([]uint32, batch),
		C: make([]float64, batch*k), CHat: make([]float64, batch*k)}
	for j := range o.IDs {
		o.IDs[j] = uint32(rng.IntN(n))
	}
	for i := range o.C {
		o.C[i] = 0.1 * rng.NormFloat64()
		o.CHat[i] = o.C[i] + 1e-3*rng.NormFloat64()
	}
	req, err := schemas.NewCodec().Marshal(o)
	if err != nil {
		panic(err)
	}
	req = slices.Clone(req)
	enc, dec := schemas.NewCodec(), schemas.NewCodec()
	var in schemas.PartyOutput
	rep := &schemas.Reply{Header: schemas.Header{Version: schemas.Version}, H: make([]float64, batch), HBar: make([]float64, batch)}
	return func() {
		if err := dec.Unmarshal(req, &in); err != nil {
			panic(err)
		}
		rep.H, rep.HBar = rep.H[:len(in.IDs)], rep.HBar[:len(in.IDs)]
		kernel.Reply(head, w0, table, width, 0, in.IDs, in.C, in.CHat, y, rep.H, rep.HBar)
		if len(w0) > 0 {
			kernel.Direction(dist, rng, mu, w0, w0p, u0)
			kernel.Update(w0, u0, 0, phi0, mu, kernel.HeadDiff(head, w0p, table, width, in.IDs, y, rep.H, nil))
		}
		rep.Seq++
		rep.ReqSeq = in.Seq
		if _, err := enc.Marshal(rep); err != nil {
			panic(err)
		}
	}
}

// messageSizes are the encoded sizes of a request and a reply of batch
// samples with k outputs each, of a training set of n rows.
func messageSizes(batch, k, n int) (up, down int) {
	c := schemas.NewCodec()
	b, _ := c.Marshal(&schemas.PartyOutput{Header: schemas.Header{Version: schemas.Version, Party: 1, Seq: 1},
		IDs: sampleIDs(batch, n), C: make([]float64, batch*k), CHat: make([]float64, batch*k)})
	up = len(b)
	b, _ = c.Marshal(&schemas.Reply{Header: schemas.Header{Version: schemas.Version, Party: 1, Seq: 1}, ReqSeq: 1,
		H: make([]float64, batch), HBar: make([]float64, batch)})
	return up, len(b)
}

// measureLatency is the one-way message time through an embedded
// JetStream broker over TCP loopback: latencyTrips round trips of an
// up-byte message from a party's connection, answered with a down-byte
// one from the aggregator's, each way half of the round trip.
func measureLatency(ctx context.Context, up, down int) (Spread, error) {
	dir, err := os.MkdirTemp("", "asyrevel-fig4-latency-")
	if err != nil {
		return Spread{}, err
	}
	defer os.RemoveAll(dir)
	srv, err := broker.StartServer(ctx, broker.ServerConfig{Dir: dir})
	if err != nil {
		return Spread{}, err
	}
	defer srv.Shutdown()
	const runName = "fig4latency"
	connect := func(name string) (*broker.JetStream, error) {
		return broker.ConnectJetStream(ctx, broker.JetStreamConfig{Server: srv, Run: runName, Name: name})
	}
	party, err := connect("party-1")
	if err != nil {
		return Spread{}, err
	}
	defer party.Close()
	agg, err := connect("aggregator")
	if err != nil {
		return Spread{}, err
	}
	defer agg.Close()
	replySubj := schemas.Subject(runName, schemas.KindReply, 1)
	reply := &broker.Message{Subject: replySubj, Data: make([]byte, down)}
	asub, err := agg.Subscribe(ctx, []string{schemas.Subject(runName, schemas.KindOutput, 1)}, broker.SubscribeOptions{Durable: "aggregator"},
		func(ctx context.Context, d broker.Delivery) {
			_ = agg.Publish(ctx, reply)
			_ = d.Ack()
		})
	if err != nil {
		return Spread{}, err
	}
	defer asub.Close()
	got := make(chan struct{}, 1)
	psub, err := party.Subscribe(ctx, []string{replySubj}, broker.SubscribeOptions{Durable: "party-1"},
		func(_ context.Context, d broker.Delivery) {
			_ = d.Ack()
			got <- struct{}{}
		})
	if err != nil {
		return Spread{}, err
	}
	defer psub.Close()
	req := &broker.Message{Subject: schemas.Subject(runName, schemas.KindOutput, 1), Data: make([]byte, up)}
	var rtt []float64
	for i := range latencyTrips + 20 {
		t0 := time.Now()
		if err := party.Publish(ctx, req); err != nil {
			return Spread{}, err
		}
		select {
		case <-got:
		case <-time.After(10 * time.Second):
			return Spread{}, fmt.Errorf("latency: no reply to round trip %d within 10 s", i)
		case <-ctx.Done():
			return Spread{}, ctx.Err()
		}
		if i >= 20 { // the first are warm-up
			rtt = append(rtt, time.Since(t0).Seconds()/2)
		}
	}
	slices.Sort(rtt)
	pct := func(p float64) float64 { return rtt[int(math.Round(p*float64(len(rtt)-1)))] }
	return Spread{Median: pct(0.5), Lo: pct(0.1), Hi: pct(0.9)}, nil
}
