package sim

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/asyrevel/asyrevel/aggregator"
	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/party"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/zoo"
)

// orderBus records, in the order the aggregator handles them, which party
// sent each request it is delivered.
type orderBus struct {
	broker.Bus
	party map[string]int // request subject -> party
	mu    sync.Mutex
	order []int
}

func (b *orderBus) Subscribe(ctx context.Context, filters []string, opts broker.SubscribeOptions, h broker.Handler) (broker.Subscription, error) {
	return b.Bus.Subscribe(ctx, filters, opts, func(ctx context.Context, d broker.Delivery) {
		if m, ok := b.party[d.Subject()]; ok {
			b.mu.Lock()
			b.order = append(b.order, m)
			b.mu.Unlock()
		}
		h(ctx, d)
	})
}

// runtimeRun trains with the real party and aggregator runtimes over the
// in-memory bus, one request in flight per party, and returns the
// aggregator's result, the parties' final parameters and the order in which
// the aggregator handled the requests.
func runtimeRun(t *testing.T, cfg SimConfig, steps int64) (*aggregator.Result, [][]float64, []int) {
	t.Helper()
	data := smallData(t, cfg.Parties)
	q, run := cfg.Parties, "kernel"
	agg, err := aggregator.New(aggregator.Config{Run: run, Parties: q, K: cfg.Head.InDim() / q, Head: cfg.Head,
		Labels: data.TrainY, Mu: cfg.Mu, LR: cfg.HeadLR, Dist: cfg.Dist, Seed: cfg.Seed, MaxBatch: cfg.Batch, Sync: cfg.Sync,
		MaxSteps: steps, EvalEvery: time.Hour, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	hub := broker.NewMemoryHub()
	ob := &orderBus{Bus: hub.Connect("aggregator"), party: map[string]int{}}
	parties := make([]*party.Party, q)
	for m := 1; m <= q; m++ {
		ob.party[schemas.Subject(run, schemas.KindOutput, m)] = m
		// The simulator's generator for party m is the one run.NewParty
		// gives it: seed*1000003 + m.
		parties[m-1], err = party.New(party.Config{Run: run, ID: m, Model: cfg.NewLocal(m, data.Blocks[m-1].Len()),
			Train: data.PartTrain[m-1], Reg: cfg.Reg, Lambda: cfg.Lambda, Dist: cfg.Dist, Mu: cfg.Mu, LR: cfg.LR,
			Batch: cfg.Batch, Window: 1, Seed: cfg.Seed*1000003 + uint64(m), Log: zerolog.Nop(),
			Sync: cfg.Sync, SampleSeed: cfg.Seed,
			// Steps of unequal length, so that the parties interleave.
			StepCost: time.Duration(m) * 50 * time.Microsecond})
		if err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	var res *aggregator.Result
	g.Go(func() (err error) {
		res, err = agg.Run(gctx, ob)
		return err
	})
	for m, p := range parties {
		g.Go(func() error { return p.Run(gctx, hub.Connect(fmt.Sprintf("party-%d", m+1))) })
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	ps := make([][]float64, q)
	for m, p := range parties {
		ps[m] = p.Params()
		if st := p.Stats(); len(st.Rejected) > 0 {
			t.Fatalf("party %d rejected %v", m+1, st.Rejected)
		}
	}
	if len(res.Rejected) > 0 {
		t.Fatalf("aggregator rejected %v", res.Rejected)
	}
	ob.mu.Lock()
	defer ob.mu.Unlock()
	if int64(len(ob.order)) < res.Steps {
		t.Fatalf("%d requests seen, %d answered", len(ob.order), res.Steps)
	}
	return res, ps, ob.order[:res.Steps]
}

// TestKernelSimulatorMatchesRuntime: for the order of arrivals of a real
// run (party and aggregator runtimes on the in-memory bus, messages encoded
// and decoded), the simulator ends with the same parameters, bit for bit,
// for every party and the head. Both call package zoo/kernel; a change to
// the arithmetic of either side alone (or to the order in which they draw
// from their generators) fails it.
func TestKernelSimulatorMatchesRuntime(t *testing.T) {
	for _, tc := range []struct {
		name  string
		dist  zoo.Dist
		q     int
		batch int
	}{
		{"gau-q3-b8", zoo.Gaussian, 3, 8},
		{"uni-q2-b1", zoo.Sphere, 2, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := SimConfig{Parties: tc.q, Dist: tc.dist, Batch: tc.batch,
				LR: zoo.Schedule{Eta0: 0.02, T0: 100}, HeadLR: zoo.Schedule{Eta0: 0.05, T0: 300},
				Mu: 1e-3, Lambda: 1e-4, Reg: model.Nonconvex{}, Seed: 7, Budget: 1, EvalEvery: 1,
				NewLocal: func(m, d int) model.Local { return model.NewLinear(d, 1) }, Head: model.NewLogisticBias(tc.q)}
			res, params, order := runtimeRun(t, cfg, 300)
			cfg.Order = order
			sim, err := Simulate(context.Background(), smallData(t, tc.q), cfg)
			if err != nil {
				t.Fatal(err)
			}
			moved := false
			same := func(what string, got, want []float64) {
				if len(got) != len(want) {
					t.Fatalf("%s: %d parameters, want %d", what, len(got), len(want))
				}
				for i := range got {
					if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
						t.Fatalf("%s[%d]: simulator %v, runtime %v (after %d answers)", what, i, got[i], want[i], len(order))
					}
				}
			}
			for m := range tc.q {
				same(fmt.Sprintf("party %d", m+1), sim.Params[m], params[m])
				moved = moved || sim.Params[m][0] != 0
			}
			same("head", sim.Head, res.Params)
			if !moved || sim.Steps != res.Steps {
				t.Fatalf("nothing to compare: %d answers, parties moved %v", sim.Steps, moved)
			}
			counts, switches := make([]int, tc.q+1), 0
			for i, m := range order {
				counts[m]++
				if i > 0 && m != order[i-1] {
					switches++
				}
			}
			t.Logf("%d answers (per party %v, %d changes of party): parties and head equal bit for bit", len(order), counts[1:], switches)
			if switches < 2 {
				t.Fatalf("the runtimes' order %v interleaves no parties: nothing asynchronous to compare", order)
			}
			// A negative control: another order of the same answers gives
			// other parameters.
			i := 1
			for order[i] == order[i-1] {
				i++
			}
			swapped := append([]int(nil), order...)
			swapped[i-1], swapped[i] = swapped[i], swapped[i-1]
			cfg.Order = swapped
			other, err := Simulate(context.Background(), smallData(t, tc.q), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if slicesEqualBits(other.Head, res.Params) {
				t.Fatalf("swapping answers %d and %d left the head's parameters unchanged: the check cannot fail", i-1, i)
			}
		})
	}
}

func slicesEqualBits(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float64bits(a[i]) != math.Float64bits(b[i]) {
			return false
		}
	}
	return true
}

// TestKernelSimulatorMatchesRuntimeSync: SynREVEL has no order to replay
// (a round waits for every party); the simulator's rounds and the
// runtimes' end with the same parameters bit for bit.
func TestKernelSimulatorMatchesRuntimeSync(t *testing.T) {
	const q = 3
	cfg := SimConfig{Parties: q, Sync: true, Dist: zoo.Gaussian, Batch: 8,
		LR: zoo.Schedule{Eta0: 0.02, T0: 100}, HeadLR: zoo.Schedule{Eta0: 0.05, T0: 300},
		Mu: 1e-3, Lambda: 1e-4, Reg: model.Nonconvex{}, Seed: 5, Budget: 1e9, EvalEvery: 1e9, MaxSteps: 300,
		StepCost: func(int) float64 { return 1e-3 }, NewLocal: func(m, d int) model.Local { return model.NewLinear(d, 1) },
		Head: model.NewLogisticBias(q)}
	res, params, _ := runtimeRun(t, cfg, 300)
	sim, err := Simulate(context.Background(), smallData(t, q), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if sim.Steps != res.Steps || res.Steps != 300 {
		t.Fatalf("simulator %d answers, runtime %d", sim.Steps, res.Steps)
	}
	for m := range q {
		if !slicesEqualBits(sim.Params[m], params[m]) {
			t.Fatalf("party %d: simulator %v, runtime %v", m+1, sim.Params[m][:3], params[m][:3])
		}
	}
	if !slicesEqualBits(sim.Head, res.Params) {
		t.Fatalf("head: simulator %v, runtime %v", sim.Head, res.Params)
	}
	// A negative control: another regularisation weight, other parameters.
	cfg.Lambda = 2e-4
	other, err := Simulate(context.Background(), smallData(t, q), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if slicesEqualBits(other.Params[0], params[0]) {
		t.Fatal("a different lambda gave the same parameters: the check cannot fail")
	}
}
