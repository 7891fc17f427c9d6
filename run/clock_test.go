package run

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/aggregator"
	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/internal/freeport"
)

// An aggregator that resumes by itself after its broker went down goes
// on with the run's training time, not its checkpoint's: the curve's
// times after the resume are at least the last one before it. Before,
// the clock went back to the checkpoint's time (issue 35: "elapsed
// restarts from zero"; the only checkpoint here is the first, saved at
// 0 s of training). The broker is stopped once an evaluation has come
// after 1.5 s of training (a point of progress, not a time of the
// machine's) and started again at once on its store; the run ends after
// a few more steps.
func TestResumedClockGoesOn(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	ports, err := freeport.Pick("127.0.0.1", 1)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := broker.StartServer(ctx, broker.ServerConfig{Dir: dir, Port: ports[0]})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu             sync.Mutex
		before, after  []float64 // the points' times before the broker was stopped, and after
		stopped, asked bool
	)
	stop := make(chan struct{})
	cfg := New(func(c *Config) {
		c.Synthetic = small()
		c.Parties = 2
		c.Batch = 16
		c.Window = 2
		c.Seed = 1
		c.Run = "clock"
		c.NATS = fmt.Sprintf("nats://127.0.0.1:%d", ports[0])
		c.BrokerWait = time.Minute
		c.Trust.Off = true
		c.EvalEvery = 100 * time.Millisecond
		c.CheckpointEvery = time.Hour // the first checkpoint only, at 0 s
		c.Out = filepath.Join(t.TempDir(), "out")
	})
	cfg.MaxSteps = 1 << 40 // a bounded run (no rows held out); StopWhen ends it
	pcfg := cfg
	hooks := Hooks{Log: testLog(t)}
	hooks.OnPoint = func(pt aggregator.Point) {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			after = append(after, pt.Seconds)
			return
		}
		before = append(before, pt.Seconds)
		if pt.Seconds >= 1.5 && !asked {
			asked = true
			close(stop)
		}
	}
	hooks.StopWhen = func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(after) >= 3
	}
	type outcome struct {
		s   *Summary
		err error
	}
	agg := make(chan outcome, 1)
	go func() {
		s, err := Aggregate(ctx, cfg, hooks)
		agg <- outcome{s, err}
	}()
	var wg sync.WaitGroup
	for m := 1; m <= pcfg.Parties; m++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := Participate(ctx, pcfg, m, Hooks{Log: testLog(t)}); err != nil {
				t.Errorf("party %d: %v", m, err)
			}
		}()
	}
	select {
	case <-stop:
	case r := <-agg:
		t.Fatalf("the run ended before 1.5 s of training: %v", r.err)
	}
	mu.Lock()
	stopped = true
	mu.Unlock()
	srv.Shutdown()
	srv2, err := broker.StartServer(ctx, broker.ServerConfig{Dir: dir, Port: ports[0]})
	if err != nil {
		t.Fatal(err)
	}
	defer srv2.Shutdown()
	r := <-agg
	wg.Wait()
	if r.err != nil {
		t.Fatalf("aggregator: %v", r.err)
	}
	if r.s.BrokerResumes != 1 {
		t.Fatalf("the aggregator resumed %d times, want 1", r.s.BrokerResumes)
	}
	mu.Lock()
	defer mu.Unlock()
	last := before[len(before)-1]
	t.Logf("points before the outage %v, after %v", before, after)
	for _, s := range after {
		if s < last {
			t.Errorf("a point at %.3f s of training after the resume, before the last one before it (%.3f s)", s, last)
		}
	}
}
