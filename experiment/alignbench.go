package experiment

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/cloudflare/circl/group"
	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/align"
	"github.com/asyrevel/asyrevel/trust"
)

// GroupCosts are the library's costs of one group operation on this
// machine, one core, in seconds of the thread's CPU time (so that other
// work on a shared machine does not inflate them).
type GroupCosts struct {
	Hash, Mult, Encode, Decode float64
}

// benchEpoch is where threadSeconds counts wall time from.
var benchEpoch = time.Now()

// threadSeconds is the calling thread's CPU time in seconds, wall time
// where that is not at hand.
func threadSeconds() float64 {
	if t, ok := threadCPU(); ok {
		return t.Seconds()
	}
	return time.Since(benchEpoch).Seconds()
}

// MeasureGroupCosts times n of each operation of package align's group
// (ristretto255) on one locked thread.
func MeasureGroupCosts(n int) GroupCosts {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	grp := group.Ristretto255
	k := grp.RandomNonZeroScalar(nil)
	dst := []byte("asyrevel-align-bench")
	e := grp.NewElement()
	var buf []byte
	t0 := threadSeconds()
	for i := range n {
		h := grp.HashToElement(strconv.AppendInt(buf[:0], int64(i), 10), dst)
		e.Set(h)
	}
	var c GroupCosts
	c.Hash = (threadSeconds() - t0) / float64(n)
	out := grp.NewElement()
	t0 = threadSeconds()
	for range n {
		out.Mul(e, k)
	}
	c.Mult = (threadSeconds() - t0) / float64(n)
	t0 = threadSeconds()
	var enc []byte
	for range n {
		enc, _ = out.MarshalBinaryCompress()
	}
	c.Encode = (threadSeconds() - t0) / float64(n)
	t0 = threadSeconds()
	for range n {
		_ = e.UnmarshalBinary(enc)
	}
	c.Decode = (threadSeconds() - t0) / float64(n)
	return c
}

// Bound is the lower bound on an alignment's time from the group
// arithmetic alone, on cores cores: every id hashed once and raised by
// its owner, the hub's set raised by every party and every party's set by
// the hub (for two organisations: each id hashed once and multiplied
// twice).
func (c GroupCosts) Bound(sizes []int, cores int) float64 {
	hashes, mults := 0, 0
	for m, n := range sizes {
		hashes += n
		mults += n // its owner
		if m > 0 {
			mults += n + sizes[0] // the hub raises it; it raises the hub's
		}
	}
	return (float64(hashes)*c.Hash + float64(mults)*c.Mult) / float64(cores)
}

// AlignBenchConfig is one synthetic alignment of the align experiment.
type AlignBenchConfig struct {
	Orgs    int     // q + 1
	IDs     int     // ids per organisation
	Overlap float64 // share of each organisation's ids that all hold
	Seed    uint64
	Dir     string // the embedded broker's store
	Log     zerolog.Logger
	// Progress, if set, gets a line every few seconds.
	Progress func(string)
}

// AlignBenchResult is what the experiment measures of one alignment.
type AlignBenchResult struct {
	Orgs, IDs        int
	Overlap          float64
	Intersection     int
	Seconds          float64 // wall time of the protocol (all organisations)
	WireBytes        int64   // sent by all organisations: payload, subject, headers
	Messages         int64
	PlainJoinSeconds float64 // the same intersection as a hashed join in the clear
	Correct          bool    // every organisation's rows are the plain intersection, in one order
	// CPUSeconds is the process's CPU time (user and system) during the
	// protocol alone.
	CPUSeconds float64
	// IdleShare is the share of the Go scheduler's processor time
	// (GOMAXPROCS x wall) during the protocol in which no goroutine was
	// ready to run (runtime/metrics /cpu/classes/idle): the code's own
	// want of parallelism, which the machine's load does not change (a
	// busy processor whose thread the kernel has put aside still counts
	// as busy).
	IdleShare float64
	// GCShare is the share of that time spent in the garbage collector.
	GCShare float64
	// Costs are the group costs measured in this process just before and
	// just after the protocol (the mean): the machine's contention then,
	// which inflates CPU times as well, is in them too.
	Costs GroupCosts
}

// schedTimes reads the Go scheduler's processor time classes: total, idle
// and garbage collection, in seconds, as of the last collection.
func schedTimes() (total, idle, gc float64) {
	s := []metrics.Sample{{Name: "/cpu/classes/total:cpu-seconds"}, {Name: "/cpu/classes/idle:cpu-seconds"}, {Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(s)
	v := func(i int) float64 {
		if s[i].Value.Kind() == metrics.KindFloat64 {
			return s[i].Value.Float64()
		}
		return 0
	}
	return v(0), v(1), v(2)
}

// AlignBenchSets draws the organisations' id sets: a core of Overlap*IDs ids
// that all hold, the rest of each drawn from a pool of 2*IDs others (so
// pairs overlap at random beyond the core).
func AlignBenchSets(c AlignBenchConfig) [][]string {
	r := rand.New(rand.NewPCG(c.Seed, 0xa119))
	core := int(c.Overlap * float64(c.IDs))
	poolN := 2 * c.IDs
	id := func(i int) string { return "cust-" + strconv.Itoa(1_000_000_000+i) }
	sets := make([][]string, c.Orgs)
	for m := range sets {
		s := make([]string, 0, c.IDs)
		for i := range core {
			s = append(s, id(i))
		}
		seen := map[int]bool{}
		for len(s) < c.IDs {
			j := core + r.IntN(poolN)
			if !seen[j] {
				seen[j] = true
				s = append(s, id(j))
			}
		}
		r.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
		sets[m] = s
	}
	return sets
}

// PlainJoin is the intersection in the clear (no privacy: the speed of
// light): a hash set of the hub's keys probed with every party's, in the
// hub's order.
func PlainJoin(sets [][]string) []string {
	count := make(map[string]int, len(sets[0]))
	for _, k := range sets[0] {
		count[k] = 1
	}
	for m := 1; m < len(sets); m++ {
		for _, k := range sets[m] {
			if c, ok := count[k]; ok && c == m {
				count[k] = m + 1
			}
		}
	}
	var out []string
	for _, k := range sets[0] {
		if count[k] == len(sets) {
			out = append(out, k)
		}
	}
	return out
}

// AlignBench runs one synthetic alignment over an embedded broker (every
// organisation in this process, each on its own connection) and checks it
// against the plain join.
func AlignBench(ctx context.Context, c AlignBenchConfig) (*AlignBenchResult, error) {
	sets := AlignBenchSets(c)
	t0 := time.Now()
	plain := PlainJoin(sets)
	res := &AlignBenchResult{Orgs: c.Orgs, IDs: c.IDs, Overlap: c.Overlap, PlainJoinSeconds: time.Since(t0).Seconds()}
	run := "bench"
	l, err := align.StartLocal(ctx, run, c.Orgs-1, c.Dir)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	spec := align.Spec(1, align.Normalization{})
	out := make([]*align.Result, c.Orgs)
	errs := make([]error, c.Orgs)
	ps := make([]*align.Progress, c.Orgs)
	var wg sync.WaitGroup
	before := MeasureGroupCosts(1000)
	runtime.GC()
	cpu0 := selfCPU().Seconds()
	tot0, idle0, gc0 := schedTimes()
	t0 = time.Now()
	for m := range sets {
		ps[m] = new(align.Progress)
		cfg := align.Config{Run: run, ID: m, Parties: c.Orgs - 1, Bus: l.Bus(m), Roster: l.Roster, Key: l.Keys[m],
			Spec: spec, Width: 1, Log: c.Log, Progress: ps[m]}
		wg.Add(1)
		go func() { defer wg.Done(); out[m], errs[m] = align.Run(ctx, cfg, sets[m]) }()
	}
	done := make(chan struct{})
	if c.Progress != nil {
		go func() {
			t := time.NewTicker(10 * time.Second)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
					var h, k int64
					for _, p := range ps {
						h += p.Hashed.Load()
						k += p.Masked.Load()
					}
					c.Progress(fmt.Sprintf("%.0fs: %d of %d ids hashed, %d peer elements raised", time.Since(t0).Seconds(), h, c.Orgs*c.IDs, k))
				}
			}
		}()
	}
	wg.Wait()
	close(done)
	res.Seconds = time.Since(t0).Seconds()
	res.CPUSeconds = selfCPU().Seconds() - cpu0
	runtime.GC() // the scheduler's times are snapshots taken by the collector
	if tot1, idle1, gc1 := schedTimes(); tot1 > tot0 {
		res.IdleShare, res.GCShare = (idle1-idle0)/(tot1-tot0), (gc1-gc0)/(tot1-tot0)
	}
	after := MeasureGroupCosts(1000)
	res.Costs = GroupCosts{Hash: (before.Hash + after.Hash) / 2, Mult: (before.Mult + after.Mult) / 2,
		Encode: (before.Encode + after.Encode) / 2, Decode: (before.Decode + after.Decode) / 2}
	for m, err := range errs {
		if err != nil {
			name := trust.AggregatorID
			if m > 0 {
				name = trust.PartyID(m)
			}
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	for _, r := range out {
		res.WireBytes += r.Stats.BytesSent
		res.Messages += r.Stats.MessagesSent
	}
	res.Intersection = len(out[0].Rows)
	// Correct: the hub's rows are the plain intersection, and every
	// party's rows name the same keys in the same order.
	hub := make([]string, len(out[0].Rows))
	for k, row := range out[0].Rows {
		hub[k] = sets[0][row]
	}
	res.Correct = len(hub) == len(plain) && slices.Equal(slices.Sorted(slices.Values(hub)), slices.Sorted(slices.Values(plain)))
	for m := 1; m < c.Orgs && res.Correct; m++ {
		for k, row := range out[m].Rows {
			if sets[m][row] != hub[k] {
				res.Correct = false
				break
			}
		}
		res.Correct = res.Correct && len(out[m].Rows) == len(hub)
	}
	return res, nil
}

// AlignTempDir is a scratch folder for an alignment bench's store.
func AlignTempDir() (string, error) { return os.MkdirTemp("", "asyrevel-align-bench-") }
