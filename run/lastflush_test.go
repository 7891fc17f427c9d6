package run

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/broker"
)

// signalOnFlush is a Bus whose Flush first ends the run's context, as a
// signal that comes during the aggregator's last flush does.
type signalOnFlush struct {
	broker.Bus
	signal  func()
	flushes atomic.Int64
}

func (b *signalOnFlush) Flush(ctx context.Context) error {
	b.flushes.Add(1)
	b.signal()
	return b.Bus.Flush(ctx)
}

// A signal (SIGTERM, Ctrl-C) that comes while a finished run's aggregator
// flushes its last messages to the broker does not fail the run: its
// result is the finished run's. Before, the flush was cut short
// ("aggregator: flush: broker: messages lost: ... context canceled"),
// and the finished run exited 1.
func TestSignalInTheLastFlushFinishesTheRun(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	const runID = "lastflush"
	c := New(func(c *Config) {
		c.Synthetic = small()
		c.Parties = 2
		c.Batch = 16
		c.Window = 2
		c.Seed = 1
		c.MaxSteps = 1500
		c.Run = runID
		c.Privacy = "off"
		c.EvalEvery = 200 * time.Millisecond
		c.Patience = -1
	})
	cfg := &job{Config: c, hooks: Hooks{Log: testLog(t)}}
	if err := cfg.prepare(); err != nil {
		t.Fatal(err)
	}
	data, err := loadData(cfg, RoleAll)
	if err != nil {
		t.Fatal(err)
	}
	agg, err := newAggregator(cfg, data, nil)
	if err != nil {
		t.Fatal(err)
	}
	setup, cancelSetup := context.WithTimeout(context.Background(), time.Minute)
	defer cancelSetup()
	srv, err := broker.StartServer(setup, broker.ServerConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	connect := func(name string) broker.Bus {
		b, err := broker.ConnectJetStream(setup, broker.JetStreamConfig{Server: srv, Run: runID, Name: name})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	aggBus := &signalOnFlush{Bus: connect("aggregator"), signal: func() { cancel(errors.New("interrupt signal received")) }}
	// The parties are not signalled: only the aggregator's end is looked at.
	pctx, stop := context.WithCancel(context.Background())
	defer stop()
	for m := 1; m <= cfg.Parties; m++ {
		p, closeModel, err := newParty(pctx, cfg, data, m, 0, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer closeModel()
		bus := connect(fmt.Sprintf("party-%d", m))
		go func() { _ = p.Run(pctx, bus) }()
	}
	res, err := agg.Run(ctx, aggBus)
	if aggBus.flushes.Load() == 0 {
		t.Fatal("the aggregator flushed nothing: the signal never came")
	}
	if err != nil || res == nil || !res.Final.Final || res.Steps < cfg.MaxSteps {
		t.Fatalf("a signal in the last flush: final %v, err %v; want the finished run's result", res != nil && res.Final.Final, err)
	}
}
