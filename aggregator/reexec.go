package aggregator

import (
	"context"
	"slices"

	"github.com/asyrevel/asyrevel/broker"
)

// Replayer drives an aggregator without a transport, for re-execution:
// the recorded messages of the parties go in, in log order, and what the
// aggregator publishes in answer comes out. Its clock-driven behaviour
// (periodic evaluations, the duration limit) does not run: nothing it
// computes for a reply depends on it.
type Replayer struct {
	a   *Aggregator
	cap *capture
}

// Published is one message the aggregator published (its Subject and
// Data set).
type Published = broker.Message

// NewReplayer builds a fresh aggregator from cfg for re-execution.
// cfg.Duration and cfg.EvalEvery are ignored; cfg.MaxSteps should be the
// number of replies of the recorded run, so that it stops where the run
// stopped.
func NewReplayer(cfg Config) (*Replayer, error) {
	cfg.Duration = 0
	a, err := New(cfg)
	if err != nil {
		return nil, err
	}
	c := &capture{}
	a.bus, a.ctx = c, context.Background()
	// The calls the parties answered were the recorded aggregator's.
	a.join.nonce, a.join.adoptCall = "", true
	return &Replayer{a: a, cap: c}, nil
}

// Deliver hands the aggregator one recorded message (subject and payload)
// and returns what it published in answer, valid until the next call.
func (r *Replayer) Deliver(subject string, data []byte) []Published {
	r.cap.out = r.cap.out[:0]
	r.a.mu.Lock()
	defer r.a.mu.Unlock()
	r.a.handleLocked(&replayDelivery{subject: subject, data: data}, true)
	return r.cap.out
}

// Result is the aggregator's result so far (rejections, steps, the
// defense's report).
func (r *Replayer) Result() *Result {
	r.a.mu.Lock()
	defer r.a.mu.Unlock()
	return r.a.result()
}

// Err is the error that failed the aggregator, if any.
func (r *Replayer) Err() error {
	r.a.mu.Lock()
	defer r.a.mu.Unlock()
	return r.a.err
}

// Rejected is the messages the aggregator rejected so far, by reason.
func (r *Replayer) Rejected() map[string]int64 { return r.Result().Rejected }

// Reexecutor is a Replayer built from Config when a re-execution starts:
// the aggregator that package replay's Reexecute drives (replay.Executor),
// so that replay needs no import of this package.
type Reexecutor struct {
	cfg Config
	*Replayer
}

// NewReexecutor returns a Reexecutor of cfg (the run's settings, seed,
// secret key and the aggregator's labels). Its aggregator is built by
// Start.
func NewReexecutor(cfg Config) *Reexecutor { return &Reexecutor{cfg: cfg} }

// Start builds a fresh aggregator for run (when cfg.Run is empty) that
// stops after replies replies, where the recorded run stopped.
func (x *Reexecutor) Start(run string, replies int) error {
	cfg := x.cfg
	cfg.MaxSteps = int64(replies)
	if cfg.Run == "" {
		cfg.Run = run
	}
	rp, err := NewReplayer(cfg)
	if err != nil {
		return err
	}
	x.Replayer = rp
	return nil
}

type replayDelivery struct {
	subject string
	data    []byte
}

func (d *replayDelivery) Subject() string      { return d.subject }
func (d *replayDelivery) Data() []byte         { return d.data }
func (d *replayDelivery) ID() string           { return "" }
func (d *replayDelivery) Header(string) string { return "" }
func (d *replayDelivery) Seq() uint64          { return 0 }
func (d *replayDelivery) Ack() error           { return nil }

// capture is a Bus that keeps what is published.
type capture struct {
	broker.Bus
	out []Published
}

func (c *capture) Publish(_ context.Context, m *broker.Message) error {
	c.out = append(c.out, Published{Subject: m.Subject, Data: slices.Clone(m.Data)})
	return nil
}
