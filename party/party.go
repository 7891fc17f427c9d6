package party

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/internal/ckpt"
	"github.com/asyrevel/asyrevel/internal/ratelog"
	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/trust"
	"github.com/asyrevel/asyrevel/zoo"
	"github.com/asyrevel/asyrevel/zoo/kernel"
)

// ErrConfig reports an unusable Config.
var ErrConfig = errors.New("party: bad config")

// Errors Run returns when the run ends without this party.
var (
	// ErrRefused: the aggregator refused this party (wrong data, version,
	// ...); the error carries the aggregator's reason.
	ErrRefused = errors.New("refused by the aggregator")
	// ErrAborted: the aggregator aborted the run for everyone; the error
	// carries its reason.
	ErrAborted = errors.New("the aggregator aborted the run")
	// ErrNoProgress: nothing came from the aggregator within a deadline
	// (Config.JoinWait before the start, Config.Wait after it).
	ErrNoProgress = errors.New("no word from the aggregator")
	// ErrInterrupted: Run's context was cancelled (a signal); the party
	// saved a checkpoint if it keeps them.
	ErrInterrupted = errors.New("interrupted")
)

// Default waits; see Config.
const (
	DefaultJoinWait = 10 * time.Minute
	DefaultWait     = 2 * time.Minute
	DefaultNotice   = 30 * time.Second
)

// DefaultChunk is the number of samples per EvalOutput.
const DefaultChunk = 2048

// DefaultReplyBound is the default Config.ReplyBound.
const DefaultReplyBound = 1e9

// Config is everything a party holds: its slice of the data, its private
// model and the zeroth-order step settings. Nothing here leaves the party
// except through the outputs of Model.Forward.
type Config struct {
	Run string
	ID  int // party id, 1..q
	// IgnoreEvals is a fault to inject (tests, experiment faults): the
	// party trains but never answers evaluation requests.
	IgnoreEvals bool
	Model       model.Local     // black box: only Forward is called
	Train       *dataset.Matrix // this party's columns of the training samples
	Test        *dataset.Matrix // this party's columns of the test samples; may be nil
	Params      []float64       // initial parameters; nil = Model.Init
	// EMA, in [0, 1), makes the outputs the party sends for evaluation
	// those of an exponential moving average of its parameters with this
	// decay (warmed up as min(EMA, (1+t)/(10+t)) over its t steps): it
	// averages the noise of a defended run's replies out of the model
	// evaluated. Its training is unchanged (0: the iterate).
	EMA float64

	Reg    model.Regularizer // g; nil = none
	Lambda float64
	Dist   zoo.Dist
	Mu     float64
	LR     zoo.Schedule // step size by the party's own step count
	Batch  int          // samples per request (default 1)
	Window int          // requests in flight (default 1, the paper's algorithm)
	Seed   uint64       // private RNG seed (directions and sampling)
	Chunk  int          // samples per EvalOutput (default DefaultChunk)
	IDHash string       // fingerprint of the training sample ids, sent in Hello
	// ReplyBound rejects replies with a loss value larger than this in
	// magnitude (default DefaultReplyBound): a finite but huge h_bar
	// would throw the parameters to Inf.
	ReplyBound float64
	// SeqBase: the party's sequence numbers start after it. A new attempt
	// of a party in a run that holds an earlier attempt's messages (a
	// refused party that joins again) numbers after them, so that no
	// message id repeats. Each subject is numbered on its own (1, 2, ...
	// after SeqBase). Ignored with Key: see ChainBases.
	SeqBase uint64
	// ChainBases, with Key, is the new attempt's SeqBase per subject (its
	// own subjects: the number of the earlier attempt's messages there):
	// the party restarts each such chain after it (trust.Publisher.
	// Restart), its next message there signed, which the aggregator's
	// verifier accepts as its owner's restart.
	ChainBases map[string]uint64

	// Key and Roster turn the trust layer on (package trust, trust.go):
	// every message the party publishes is numbered per subject, chained
	// and signed with Key (Sign says how often), and every reply and
	// control is verified against Roster before it acts; rejected ones
	// are counted by reason ("trust-bad_signature", ...). Both or
	// neither.
	Key    *trust.Key
	Roster *trust.Roster
	Sign   trust.Policy
	// Receipts, if set, is the folder where the party writes its
	// receipts: the aggregator's checkpoints it checked and countersigned
	// (needs Key).
	Receipts string

	// JoinWait bounds the wait for the start once the initial pass is sent
	// (default DefaultJoinWait; the aggregator waits for every party);
	// Wait bounds the silence of the aggregator after the start while
	// requests are in flight (default DefaultWait). Notice is how often a
	// wait is reported in the log (default DefaultNotice).
	JoinWait, Wait, Notice time.Duration

	// LabelFree makes the party a label-free run's (the privacy switch's
	// label-free profile): its model is fitted to its own rows without a
	// label (a model.Fitter, before the initial pass), it sends its codes
	// in the initial pass and the evaluations, and no request.
	LabelFree bool

	// Adversary, if set, makes this party an attacker (attack experiments
	// only; see batching.go).
	Adversary Adversary

	// The other algorithms of the pipeline (zero values: AsyREVEL); see
	// alt.go and tig.go.
	Sync       bool   // SynREVEL: batches drawn from SampleSeed, shared by all parties; Window 1
	SampleSeed uint64 // Sync: the run's shared sampling seed
	FirstOrder bool   // TIG: send c only and back-propagate the replied dF_0/dc (Model must be a model.WhiteBox)

	// Simulated compute (see alt.go): each step is made to last
	// Slowdown times (its measured compute + StepCost). Zero values: real
	// compute only.
	Slowdown float64       // a straggler's factor (>= 1; 0 means 1)
	StepCost time.Duration // simulated compute per step on top of the real one

	Log zerolog.Logger

	// HoldOut is what Train keeps aside of the party's training rows (in
	// Test, before its own test rows) and whether the party takes the
	// hold-out the aggregator's call names instead (holdout.go).
	HoldOut HoldOut

	// OnCheckpoint, if set, is given the party's state (checkpoint.go) at
	// the start, every CheckpointEvery, when the aggregator asks
	// (CtlCheckpoint) and when Run is interrupted; c is valid only during
	// the call. CheckpointEvery 0 (the default) is adaptive (ckpt.Every:
	// 50 times the last save's cost, 250ms to 10s); negative: no
	// periodic saves.
	OnCheckpoint    func(c *Checkpoint) error
	CheckpointEvery time.Duration
}

// Stats counts what a party did.
type Stats struct {
	Steps       int64            // updates applied
	Requests    int64            // PartyOutputs published
	MessagesUp  int64            // every message published
	BytesUp     int64            // payload bytes published
	Replies     int64            // replies accepted
	MessagesIn  int64            // deliveries received (replies and controls)
	BytesIn     int64            // payload bytes received
	Rejected    map[string]int64 // rejected deliveries by reason
	MaxDelay    int              // most own updates between a request and its reply
	LastRequest time.Time
	StopReason  string // the aggregator's reason for the stop
	Paused      bool   // the run paused (CtlPause): Run saved the state and returned
	// Started: training had started (the aggregator's start came, or the
	// party resumed from a checkpoint). A party stopped before it has no
	// state to save.
	Started bool
	// Joined: the party answered the aggregator's call (its join and
	// initial pass sent); the aggregator holds it as joined.
	Joined bool
	// FlatProbes of the first requests were probed, FlatOutputs of them
	// had c_hat == c exactly: a model flat at the scale mu (quantised)
	// gives steps without signal.
	FlatProbes, FlatOutputs int
	// After a resume: Skipped deliveries the checkpoint had applied,
	// Recomputed messages computed again that the stream held already
	// (not sent again).
	Skipped, Recomputed int64
	// RepliesFrom is the stream sequence a resume read the replies from
	// (trust layer; 1: the stream's start, 0: no such read).
	RepliesFrom uint64
	// EvalsFrom is the stream sequence a resume read the party's own
	// evaluation outputs from (1: the stream's start, 0: no such read);
	// EvalChunksLost the evaluation chunks the checkpoint counts as sent
	// that the stream lacked (a broker crash): their rounds went on
	// without this party.
	EvalsFrom      uint64
	EvalChunksLost int
	// Receipts counts the aggregator's checkpoints the party checked,
	// countersigned and published (with Config.Key).
	Receipts int
	// InFlight is the requests in flight when the snapshot was taken (at
	// most Config.Window).
	InFlight int
	// KeptRound is the evaluation round whose parameters the party kept
	// as its final model at the stop (keep.go; 0: its last ones).
	KeptRound uint32
	// HoldOut is what the party's rows kept aside (Config.HoldOut, or the
	// aggregator's, taken from its call), HeldOut how many rows.
	HoldOut schemas.HoldOut
	HeldOut int
}

type pending struct {
	seq     uint64
	ids     []uint32
	u       []float64
	regDiff float64
}

// Party is one party's runtime. Create it with New, then Run it.
type Party struct {
	cfg Config
	k   int

	mu   sync.Mutex // guards everything below; held by the handler and by Run's setup
	w    []float64
	step stepState // the zeroth-order step's scratch, generator and moving average
	keep kept      // copies of the parameters evaluated in rounds (keep.go)
	seq  uint64    // last sequence number published

	rejectLog *ratelog.Limiter

	seqs [schemas.KindControl + 1]uint64 // last sequence number by kind, without trust
	tr   *partyTrust                     // nil without Config.Key
	// aggSeq is the aggregator's last accepted sequence number of replies
	// and of controls: each subject comes in the aggregator's order, so
	// a number that does not increase is a replay.
	aggSeq [2]uint64
	t      int // steps taken
	ring   []pending
	head   int // oldest pending request
	n      int // requests in flight
	out    schemas.PartyOutput
	wire   wireState // codecs and the buffers of the other messages
	alt    alt       // state of the other algorithms and of simulated compute

	subjects [schemas.KindControl + 1]string // this party's subject of each kind

	stats   Stats
	started bool
	stop    stopState // the stop and a pause
	join    joinState // its hello and the call it answered
	lastAct time.Time // the last delivery handled or step taken
	done    chan struct{}
	err     error
	bus     broker.Bus
	ctx     context.Context

	// requests counts the requests prepared; batchSeed, if not 0, is the
	// aggregator's: it draws the batches (Control.BatchSeed on start).
	requests  uint64
	batchSeed uint64

	recov  recovState // checkpoints and resume (checkpoint.go)
	outbox broker.SentRing
}

// New checks cfg and prepares a party.
func New(cfg Config) (*Party, error) {
	if err := schemas.CheckRun(cfg.Run); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if cfg.ID < 1 || cfg.ID > schemas.MaxParties {
		return nil, fmt.Errorf("%w: party id %d not in 1..%d", ErrConfig, cfg.ID, schemas.MaxParties)
	}
	if cfg.Model == nil || cfg.Train == nil || cfg.Train.NRows == 0 {
		return nil, fmt.Errorf("%w: party %d needs a model and training rows", ErrConfig, cfg.ID)
	}
	if cfg.Train.NCols != cfg.Model.InDim() || (cfg.Test != nil && cfg.Test.NCols != cfg.Model.InDim()) {
		return nil, fmt.Errorf("%w: party %d: data has %d columns, model takes %d", ErrConfig, cfg.ID, cfg.Train.NCols, cfg.Model.InDim())
	}
	if !(cfg.EMA >= 0 && cfg.EMA < 1) {
		return nil, fmt.Errorf("%w: parameter EMA %g not in [0, 1)", ErrConfig, cfg.EMA)
	}
	if cfg.Mu <= 0 || cfg.LR.Eta0 <= 0 || cfg.LR.T0 < 0 || cfg.Lambda < 0 {
		return nil, fmt.Errorf("%w: mu=%g lr=%g t0=%g lambda=%g", ErrConfig, cfg.Mu, cfg.LR.Eta0, cfg.LR.T0, cfg.Lambda)
	}
	if cfg.Batch == 0 {
		cfg.Batch = 1
	}
	if cfg.Window == 0 {
		cfg.Window = 1
	}
	if cfg.Chunk == 0 {
		cfg.Chunk = DefaultChunk
	}
	if cfg.ReplyBound == 0 {
		cfg.ReplyBound = DefaultReplyBound
	}
	if cfg.JoinWait <= 0 {
		cfg.JoinWait = DefaultJoinWait
	}
	if cfg.Wait <= 0 {
		cfg.Wait = DefaultWait
	}
	if cfg.Notice <= 0 {
		cfg.Notice = DefaultNotice
	}
	if cfg.Batch < 0 || cfg.Window < 0 || cfg.Chunk < 0 {
		return nil, fmt.Errorf("%w: batch %d, window %d, chunk %d", ErrConfig, cfg.Batch, cfg.Window, cfg.Chunk)
	}
	if err := checkAlt(&cfg); err != nil {
		return nil, err
	}
	if err := cfg.HoldOut.Check(); err != nil || cfg.HoldOut.HeldOut < 0 {
		return nil, fmt.Errorf("%w: party %d: a hold-out of %d rows (%v)", ErrConfig, cfg.ID, cfg.HoldOut.HeldOut, err)
	}
	np := cfg.Model.NumParams()
	pcg := rand.NewPCG(cfg.Seed, uint64(cfg.ID))
	p := &Party{
		step:   stepState{pcg: pcg, rng: rand.New(pcg), phi: cfg.Dist.Phi(np), wp: make([]float64, np)},
		outbox: broker.SentRing{Size: outboxSize},
		cfg:    cfg,
		k:      cfg.Model.OutDim(),
		w:      make([]float64, np),
		ring:   make([]pending, cfg.Window),
		wire:   wireState{enc: schemas.NewCodec(), dec: schemas.NewCodec()},
		done:   make(chan struct{}),
	}
	for k := range p.seqs {
		p.seqs[k] = cfg.SeqBase
	}
	if cfg.Params != nil {
		if len(cfg.Params) != np {
			return nil, fmt.Errorf("%w: %d initial parameters, model has %d", ErrConfig, len(cfg.Params), np)
		}
		copy(p.w, cfg.Params)
	} else {
		cfg.Model.Init(p.w, p.step.rng)
		if f, ok := cfg.Model.(model.Fitter); ok {
			if err := f.Fit(p.w, cfg.Train, p.step.rng); err != nil {
				return nil, fmt.Errorf("%w: party %d: %w", ErrModel, cfg.ID, err)
			}
		}
	}
	if cfg.LabelFree && cfg.Model.NumParams() > 0 {
		if _, ok := cfg.Model.(model.Fitter); !ok {
			return nil, fmt.Errorf("%w: party %d: a label-free party's model is fitted without labels (a codebook), not %T", ErrConfig, cfg.ID, cfg.Model)
		}
	}
	for i := range p.ring {
		p.ring[i].ids = make([]uint32, cfg.Batch)
		p.ring[i].u = make([]float64, np)
	}
	p.out.Version, p.out.Party = schemas.Version, uint16(cfg.ID)
	p.out.C = make([]float64, cfg.Batch*p.k)
	p.out.CHat = make([]float64, cfg.Batch*p.k)
	p.wire.ev.Version, p.wire.ev.Party = schemas.Version, uint16(cfg.ID)
	p.wire.ev.C = make([]float64, cfg.Chunk*p.k)
	p.wire.rows = make([]uint32, cfg.Chunk)
	p.initAlt()
	p.stats.Rejected = map[string]int64{}
	p.rejectLog = ratelog.NewRejections()
	for k := schemas.KindHello; k <= schemas.KindControl; k++ {
		p.subjects[k] = schemas.Subject(cfg.Run, k, cfg.ID)
	}
	if err := p.initTrust(); err != nil {
		return nil, err
	}
	for subj, base := range cfg.ChainBases {
		if p.tr == nil || base == 0 {
			continue
		}
		pub, err := p.tr.out.Publisher(subj)
		if err != nil {
			return nil, fmt.Errorf("%w: party %d: chain base: %w", ErrConfig, cfg.ID, err)
		}
		pub.Restart(base)
	}
	return p, nil
}

// Params returns a copy of the current parameters: after a stop that
// names an evaluation round, that round's (the final model; keep.go).
func (p *Party) Params() []float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]float64(nil), p.w...)
}

// Stats returns a snapshot of the counters.
func (p *Party) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.InFlight = p.n
	s.Started, s.Joined = p.started, p.join.answered != ""
	s.HoldOut, s.HeldOut = p.cfg.HoldOut.HoldOut, p.cfg.HoldOut.HeldOut
	s.Rejected = make(map[string]int64, len(p.stats.Rejected))
	for k, v := range p.stats.Rejected {
		s.Rejected[k] = v
	}
	return s
}

// ReadEvalsFrom records where the resume read the party's own evaluation
// outputs back from (Stats.EvalsFrom; 1: the stream's start).
func (p *Party) ReadEvalsFrom(seq uint64) {
	p.mu.Lock()
	p.stats.EvalsFrom = seq
	p.mu.Unlock()
}

// Run joins the run on bus, sends the initial pass over the training set,
// steps on Start and answers eval requests until the aggregator says Stop or
// ctx is done. It returns nil after Stop.
func (p *Party) Run(ctx context.Context, bus broker.Bus) error {
	run, m := p.cfg.Run, p.cfg.ID
	p.mu.Lock()
	p.bus, p.ctx = bus, ctx
	p.mu.Unlock()
	// One subscription for the replies and the control messages: the
	// party must see them in the aggregator's order (every reply published
	// before an evaluation or a stop is applied before the party answers
	// it, so that the models scored are the ones the step counts
	// describe). Only what comes after it: the aggregator sends nothing to
	// a party before its hello.
	opts := broker.SubscribeOptions{Durable: fmt.Sprintf("party-%d", m), Deliver: broker.DeliverNew}
	handler := p.handle
	var caughtUp chan struct{}
	switch {
	case p.recov.resumed && p.tr != nil:
		// Live at once, held until the stream is read back one subject
		// at a time (catchup.go).
		opts = broker.SubscribeOptions{Deliver: broker.DeliverNew}
		caughtUp = make(chan struct{})
		handler = func(ctx context.Context, d broker.Delivery) {
			select {
			case <-caughtUp:
				p.handle(ctx, d)
			case <-ctx.Done():
			}
		}
	case p.recov.resumed:
		// From the start of the stream: what the checkpoint applied is
		// skipped, the rest applied again (checkpoint.go).
		opts = broker.SubscribeOptions{Deliver: broker.DeliverAll}
	}
	sub, err := bus.Subscribe(ctx,
		[]string{schemas.Subject(run, schemas.KindReply, m), schemas.Subject(run, schemas.KindControl, 0)},
		opts, handler)
	if err != nil {
		return fmt.Errorf("party %d: subscribe: %w", m, err)
	}
	defer sub.Close()
	if p.recov.resumed {
		// Before the party publishes anything again.
		p.probeStream(ctx, bus)
	}
	if caughtUp != nil {
		err := p.catchUp(ctx, bus)
		close(caughtUp)
		if err != nil {
			return fmt.Errorf("party %d: reading the stream to resume: %w", m, err)
		}
	}
	if p.recov.resumed {
		for _, s := range p.recov.resend {
			if err := bus.Publish(ctx, &broker.Message{Subject: s.Subject, Data: s.Data, Header: s.Header}); err != nil {
				return fmt.Errorf("party %d: sending again what the stream lost: %w", m, err)
			}
		}
		if len(p.recov.resend) > 0 {
			p.cfg.Log.Warn().Int("party", m).Int("resent", len(p.recov.resend)).Msg("the stream lacked requests the checkpoint counts as sent (a broker crash?): sent again")
		}
		p.cfg.Log.Info().Int("party", m).Int("steps", p.t).Uint64("aggregator_reply_seq", p.recov.skipTo[0]).Uint64("aggregator_control_seq", p.recov.skipTo[1]).Msg("resumed from the checkpoint; catching up from the stream")
		p.mu.Lock()
		for p.stop.topUp && !p.cfg.LabelFree && p.started && !p.stop.stopping && p.err == nil && p.n < p.cfg.Window {
			// Paused with nothing in flight: the window fills again.
			if err := p.request(); err != nil {
				p.fail(err)
			}
		}
		p.stop.topUp = false
		p.mu.Unlock()
		return p.finish(ctx, bus)
	}

	// A hello that asks the aggregator to call: the party joins by its
	// answer to the call, then sends its initial pass (answerCall).
	p.mu.Lock()
	err = p.hello(schemas.CallAsked)
	p.join.helloSeq = p.seq
	p.mu.Unlock()
	if err != nil {
		return fmt.Errorf("party %d: %w", m, err)
	}
	if err := bus.Flush(ctx); err != nil {
		return fmt.Errorf("party %d: flush: %w", m, err)
	}
	p.cfg.Log.Debug().Int("party", m).Msg("hello sent; waiting for the aggregator's call")
	return p.finish(ctx, bus)
}

// answerCall answers the aggregator's call c of this party's hello (p.mu
// held): a hello carrying the call's nonce, then the initial pass. A call
// of another hello (an earlier process of this party's) is not its own;
// a call answered once is not answered again.
func (p *Party) answerCall(c *schemas.Control) {
	if int(c.Party) != p.cfg.ID || uint64(c.Round) != p.join.helloSeq&0xffffffff || c.Reason == p.join.answered || p.started {
		return
	}
	p.join.answered = c.Reason
	if err := p.takeHoldOut(c.HoldOut); err != nil {
		p.fail(err)
		return
	}
	err := p.hello(c.Reason)
	p.join.answerSeq = p.seq
	if err == nil {
		err = p.sendSplit(schemas.SplitInit, 0)
	}
	if err != nil {
		p.fail(fmt.Errorf("party %d: %w", p.cfg.ID, err))
		return
	}
	p.cfg.Log.Debug().Int("party", p.cfg.ID).Int("samples", p.cfg.Train.NRows).Msg("called: joined; initial pass sent")
}

// finish waits for the end of the run and flushes.
func (p *Party) finish(ctx context.Context, bus broker.Bus) error {
	m := p.cfg.ID
	err := p.wait(ctx)
	p.mu.Lock()
	failed := p.err != nil
	p.mu.Unlock()
	// A signal after the run's stop interrupts nothing: the party's part
	// is over and its last flush goes on (finalWait bounds it).
	if err != nil || ctx.Err() != nil && failed {
		// A signal may also show as a publish that failed when the
		// context ended (p.err): that is an interruption too. The
		// checkpoint is saved only if no publish failed (saveCheckpoint).
		if ctx.Err() != nil {
			// Interrupted: the checkpoint is saved; what was published
			// still reaches the broker.
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = bus.Flush(fctx)
			cancel()
			return fmt.Errorf("party %d: %w: %w", m, ErrInterrupted, context.Cause(ctx))
		}
		return err
	}
	p.mu.Lock()
	err, paused := p.err, p.stop.pausing
	p.mu.Unlock()
	if err != nil {
		return err
	}
	if paused {
		// Its state after the seal: a resume goes on from there.
		p.saveCheckpoint(ctx)
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalWait)
	defer cancel()
	if err := bus.Flush(fctx); err != nil {
		return fmt.Errorf("party %d: flush: %w", m, err)
	}
	return nil
}

// finalWait bounds the last flush of a party whose part is over: a
// signal then does not cut it short (a further one quits at once).
const finalWait = 30 * time.Second

// wait waits for the end of the run. Before the start it gives up after
// JoinWait, after it when the aggregator is silent for Wait while requests
// are in flight; it logs what it waits for every Notice.
func (p *Party) wait(ctx context.Context) error {
	m := p.cfg.ID
	joined := time.Now()
	p.mu.Lock()
	p.lastAct = joined
	p.mu.Unlock()
	lastNotice := joined
	period := min(time.Second, p.cfg.Notice/2)
	if p.cfg.CheckpointEvery > 0 {
		period = min(period, p.cfg.CheckpointEvery)
	} else if p.cfg.CheckpointEvery == 0 {
		period = min(period, ckpt.MinEvery/2) // adaptive (ckpt.Every): close to the period it picks
	}
	tick := time.NewTicker(period)
	defer tick.Stop()
	lastCk := joined
	for {
		select {
		case <-p.done:
			return nil
		case <-ctx.Done():
			p.saveCheckpoint(ctx)
			return ctx.Err()
		case now := <-tick.C:
			p.mu.Lock()
			every := ckpt.Every(p.cfg.CheckpointEvery, p.recov.ckTook)
			due := p.started && !p.stop.stopping && (p.recov.ckNow || every > 0 && now.Sub(lastCk) >= every)
			p.mu.Unlock()
			if due && p.cfg.OnCheckpoint != nil {
				lastCk = now
				p.saveCheckpoint(ctx)
			}
			p.mu.Lock()
			started, inFlight, idle := p.started, p.n, now.Sub(p.lastAct)
			var err error
			if p.stop.stopping && !p.stop.sealBy.IsZero() && now.After(p.stop.sealBy) {
				p.endAfterSeal(true)
			}
			if p.stop.pausing && !p.stop.pauseDone && now.After(p.stop.pauseBy) {
				p.cfg.Log.Warn().Int("party", p.cfg.ID).Msg("no seal from the aggregator after the pause: the end of the log is not countersigned")
				p.endPause()
			}
			switch {
			case p.err != nil || p.stop.stopping:
			case !started && now.Sub(joined) >= p.cfg.JoinWait:
				err = fmt.Errorf("party %d: %w: no start within %v of joining run %s (--join-wait): is the aggregator running, with the same --run, on this broker? It starts when every party has joined",
					m, ErrNoProgress, p.cfg.JoinWait, p.cfg.Run)
			case started && inFlight > 0 && idle >= p.cfg.Wait:
				err = fmt.Errorf("party %d: %w: no reply for %v with %d requests in flight (--wait): is the aggregator still running?",
					m, ErrNoProgress, p.cfg.Wait, inFlight)
			case now.Sub(lastNotice) < p.cfg.Notice:
			case !started && p.join.answered == "":
				p.cfg.Log.Warn().Int("party", m).Str("for", now.Sub(joined).Round(time.Second).String()).
					Msgf("waiting for the aggregator of run %s to call this party (it calls each hello once it runs)", p.cfg.Run)
				lastNotice = now
			case !started:
				p.cfg.Log.Warn().Int("party", m).Str("for", now.Sub(joined).Round(time.Second).String()).
					Msgf("waiting for the aggregator's start of run %s (it starts when every party has joined)", p.cfg.Run)
				lastNotice = now
			case inFlight > 0 && idle >= p.cfg.Notice:
				p.cfg.Log.Warn().Int("party", m).Str("for", idle.Round(time.Second).String()).Int("in_flight", inFlight).
					Msg("waiting for the aggregator: no reply")
				lastNotice = now
			}
			p.mu.Unlock()
			if err != nil {
				return err
			}
		}
	}
}

func (p *Party) publish(k schemas.Kind, msg schemas.Message) error {
	p.seq = p.nextSeq(k)
	msg.Head().Seq = p.seq
	data, err := p.wire.enc.Marshal(msg)
	if err != nil {
		return err
	}
	if p.seq <= p.recov.published[k] && p.recov.has(k, p.seq) {
		// Computed again after a resume: the stream holds it already.
		p.chainRecomputed(k, p.seq, data)
		p.stats.Recomputed++
		p.stats.MessagesUp++
		p.stats.BytesUp += int64(len(data))
		return nil
	}
	p.stamp(k, data)
	// No dedupe id (Nats-Msg-Id): nothing on the default transport sends
	// a message twice, and a predictable id lets anyone who can publish
	// on the run's stream squat on it and have the real message dropped.
	p.wire.msg.Subject = p.subjects[k]
	p.wire.msg.Data = data
	if err := p.bus.Publish(p.ctx, &p.wire.msg); err != nil {
		return fmt.Errorf("publish %s: %w", k, err)
	}
	if k == schemas.KindOutput {
		p.outbox.Keep(p.seq, p.wire.msg.Subject, data, p.wire.msg.Header)
	}
	p.stats.MessagesUp++
	p.stats.BytesUp += int64(len(data))
	return nil
}

// hello publishes the party's hello with call (schemas.CallAsked, or the
// nonce of the call it answers).
func (p *Party) hello(call string) error {
	h := &schemas.Hello{
		Header: schemas.Header{Version: schemas.Version, Party: uint16(p.cfg.ID)},
		Model:  modelName(p.cfg.Model),
		InDim:  uint32(p.cfg.Model.InDim()),
		OutDim: uint32(p.k),
		NTrain: uint32(p.cfg.Train.NRows),
		IDHash: p.cfg.IDHash,
		Call:   call,
	}
	if p.cfg.Test != nil {
		h.NTest = uint32(p.cfg.Test.NRows)
	}
	return p.publish(schemas.KindHello, h)
}

func modelName(m model.Local) string {
	type namer interface{ Name() string }
	if n, ok := m.(namer); ok {
		return n.Name()
	}
	return fmt.Sprintf("%T", m)
}

// sendSplit publishes the party's outputs for every sample of a split.
func (p *Party) sendSplit(s schemas.Split, round uint32) error {
	x := p.cfg.Train
	if s == schemas.SplitTest {
		x = p.cfg.Test
	}
	if x == nil {
		return nil
	}
	p.wire.ev.Round, p.wire.ev.Split, p.wire.ev.Total = round, s, uint32(x.NRows)
	for first := 0; first < x.NRows; first += p.cfg.Chunk {
		n := min(p.cfg.Chunk, x.NRows-first)
		rows := p.wire.rows[:n]
		for j := range rows {
			rows[j] = uint32(first + j)
		}
		p.wire.ev.First = uint32(first)
		p.wire.ev.C = p.wire.ev.C[:n*p.k]
		p.cfg.Model.Forward(p.evalW(), x, rows, p.wire.ev.C)
		if a := p.cfg.Adversary; a != nil {
			a.Eval(s, first, p.wire.ev.C)
		}
		if err := p.checkOutputs(p.wire.ev.C, nil); err != nil {
			return err
		}
		if p.tr != nil && first+n == x.NRows {
			p.tr.seal = true // a round's last chunk is proven at once
		}
		if err := p.publish(schemas.KindEval, &p.wire.ev); err != nil {
			return err
		}
	}
	return nil
}

// request prepares and publishes the next PartyOutput.
func (p *Party) request() error {
	start := p.alt.clock()
	var slot *pending
	if p.cfg.FirstOrder {
		slot = p.prepareGrad()
	} else {
		slot = p.prepare()
	}
	if err := p.checkOutputs(p.out.C, p.out.CHat); err != nil {
		return err
	}
	if p.stats.FlatProbes < flatProbes && !p.cfg.FirstOrder { // TIG sends no c_hat
		p.probeFlat()
	}
	p.alt.delay(start)
	if err := p.publish(schemas.KindOutput, &p.out); err != nil {
		return err
	}
	slot.seq = p.seq
	p.n++
	p.stats.Requests++
	return nil
}

// prepare draws a direction and a batch into the next free slot and
// evaluates the model at w and at w + mu u into p.out. It does not allocate.
func (p *Party) prepare() *pending {
	slot := &p.ring[(p.head+p.n)%len(p.ring)]
	p.drawBatch(slot)
	b := len(slot.ids) * p.k
	p.out.C, p.out.CHat = p.out.C[:b], p.out.CHat[:b]
	kernel.Probe(p.cfg.Model, p.cfg.Train, slot.ids, p.cfg.Dist, p.step.rng, p.cfg.Mu, p.w, p.step.wp, slot.u, p.out.C, p.out.CHat)
	if a := p.cfg.Adversary; a != nil {
		a.Request(p.requests-1, slot.ids, p.out.C, p.out.CHat)
	}
	slot.regDiff = kernel.RegDiff(p.cfg.Reg, p.cfg.Lambda, p.w, p.step.wp)
	p.out.IDs = slot.ids
	return slot
}

// apply consumes the reply to the oldest request in flight:
// w <- w - eta (phi/mu) [mean(h_bar - h) + lambda (g(w+mu u) - g(w))] u.
func (p *Party) apply(r *schemas.Reply) error {
	if p.n == 0 {
		return fmt.Errorf("%w: reply to %d with no request in flight", schemas.ErrState, r.ReqSeq)
	}
	slot := &p.ring[p.head]
	if r.ReqSeq != slot.seq {
		return fmt.Errorf("%w: reply to %d, oldest request in flight is %d", schemas.ErrReplay, r.ReqSeq, slot.seq)
	}
	if p.cfg.FirstOrder {
		return p.applyGrad(slot, r)
	}
	if err := r.Validate(schemas.Limits{Party: p.cfg.ID, Batch: len(slot.ids), MaxAbs: p.cfg.ReplyBound}); err != nil {
		return err
	}
	diff := replyDiff(r, len(slot.ids)) + slot.regDiff
	if p.frozen() {
		p.advance() // an attacker that keeps its model (Frozen)
		return nil
	}
	if p.cfg.EMA > 0 && p.step.ema == nil {
		p.step.ema = slices.Clone(p.w) // the average starts at the initial model
	}
	if !kernel.Update(p.w, slot.u, p.cfg.LR.At(p.t), p.step.phi, p.cfg.Mu, diff) {
		// A diverging step size: the party stops, rather than skip steps.
		err := fmt.Errorf("%w: the step on reply %d is not finite (step size %g, difference %g)", ErrModel, r.ReqSeq, p.cfg.LR.At(p.t), diff)
		p.fail(err)
		return err
	}
	p.updateEMA()
	p.advance()
	return nil
}

// updateEMA folds the new iterate into the moving average (Config.EMA).
func (p *Party) updateEMA() {
	if p.step.ema == nil {
		return
	}
	p.step.emaN++
	b := min(p.cfg.EMA, float64(1+p.step.emaN)/float64(10+p.step.emaN))
	for k, v := range p.w {
		p.step.ema[k] = b*p.step.ema[k] + (1-b)*v
	}
}

// evalW is the parameters evaluated: the moving average under
// Config.EMA once a step is taken, else the iterate.
func (p *Party) evalW() []float64 {
	if p.step.ema != nil {
		return p.step.ema
	}
	return p.w
}

// advance retires the oldest request in flight once its update is applied.
func (p *Party) advance() {
	p.t++
	p.stats.Steps++
	p.stats.Replies++
	if d := p.n - 1; d > p.stats.MaxDelay {
		p.stats.MaxDelay = d
	}
	p.head = (p.head + 1) % len(p.ring)
	p.n--
}

// flatProbes is how many of its first requests a party checks for a model
// whose outputs do not move under the perturbation.
const flatProbes = 64

// probeFlat counts a request whose c_hat equals c exactly, and warns once
// when most of the first flatProbes are flat: the model does not react to
// perturbations of size mu (quantised weights or outputs), so the
// two-point differences are zero and the steps carry no signal.
func (p *Party) probeFlat() {
	// Rows empty in this party's block give equal outputs whatever the
	// model: such a probe says nothing.
	empty := true
	for _, id := range p.out.IDs {
		if idx, _ := p.cfg.Train.Row(int(id)); len(idx) > 0 {
			empty = false
			break
		}
	}
	if empty {
		return
	}
	p.stats.FlatProbes++
	flat := true
	for i, c := range p.out.C {
		if p.out.CHat[i] != c {
			flat = false
			break
		}
	}
	if flat {
		p.stats.FlatOutputs++
	}
	if p.stats.FlatProbes == flatProbes && p.stats.FlatOutputs*10 >= flatProbes*9 {
		p.cfg.Log.Warn().Int("party", p.cfg.ID).Msgf("the model's outputs did not change under %d of the first %d perturbations of size mu = %g: "+
			"it is flat at that scale (quantised weights or outputs?), so the steps carry no signal: raise --mu (the quantised examples need --mu 0.1)",
			p.stats.FlatOutputs, flatProbes, p.cfg.Mu)
	}
}

// ErrModel reports a local model that failed or produced non-finite outputs.
var ErrModel = errors.New("party: local model failed")

// ErrDiverged reports outputs beyond OutputBound or not finite: the step
// size is too large for the data (raw columns on very different scales).
var ErrDiverged = fmt.Errorf("%w: the outputs diverged", ErrModel)

// OutputBound is the largest output magnitude a party publishes: the
// aggregator's default bound (aggregator.DefaultOutputBound), beyond which
// it would reject every request and the run would stall.
const OutputBound = 1e6

// checkOutputs stops the party, rather than publishing what the aggregator
// would reject, when the model failed (an external model's Err) or gave a
// non-finite output (a diverging step size, say).
func (p *Party) checkOutputs(a, b []float64) error {
	if f, ok := p.cfg.Model.(model.Failer); ok {
		if err := f.Err(); err != nil {
			return fmt.Errorf("%w: %w", ErrModel, err)
		}
	}
	for _, x := range [2][]float64{a, b} {
		for i, v := range x {
			if math.IsNaN(v) || math.IsInf(v, 0) || math.Abs(v) > OutputBound {
				return fmt.Errorf("%w: output %d is %v, beyond the bound of %g the aggregator accepts: the training diverges; "+
					"on raw columns of very different scales --scale standard fixes it (else a smaller --lr)", ErrDiverged, i, v, OutputBound)
			}
		}
	}
	return nil
}

func (p *Party) reject(err error) {
	r := schemas.Reason(err)
	p.stats.Rejected[r]++
	// Counted in full, logged at a bounded rate per reason: a client that
	// floods the party's subjects must not turn each message into a line.
	p.rejectLog.Warn(p.cfg.Log, r).Int("party", p.cfg.ID).Str("reason", r).Err(err).Msg("rejected message")
}

func (p *Party) fail(err error) {
	if p.err == nil {
		p.err = fmt.Errorf("party %d: %w", p.cfg.ID, err)
		close(p.done)
	}
}

// handle is the subscription's handler: replies and controls, in order.
func (p *Party) handle(ctx context.Context, d broker.Delivery) {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer d.Ack()
	if p.err != nil || p.stop.stopping && !p.awaitingSeal() {
		return
	}
	defer func() { p.lastAct = time.Now() }()
	data := d.Data()
	p.stats.MessagesIn++
	p.stats.BytesIn += int64(len(data))
	kind, _, err := schemas.ParseSubject(p.cfg.Run, d.Subject())
	if err != nil {
		p.reject(err)
		return
	}
	switch kind {
	case schemas.KindReply:
		if err := p.wire.dec.Unmarshal(data, &p.wire.rep); err != nil {
			p.reject(err)
			return
		}
		if p.wire.rep.Seq <= p.recov.skipTo[0] {
			p.stats.Skipped++
			return
		}
		if err := p.verify(d, p.wire.rep.Seq); err != nil {
			p.rejectTrust(err)
			return
		}
		if err := p.aggSeqOK(0, p.wire.rep.Seq); err != nil {
			p.reject(err)
			return
		}
		p.alt.begin()
		if err := p.apply(&p.wire.rep); err != nil {
			p.reject(err)
			return
		}
		if !p.stop.stopping && !p.stop.pausing {
			if err := p.request(); err != nil {
				p.fail(err)
			}
		}
	case schemas.KindControl:
		if err := p.wire.dec.Unmarshal(data, &p.wire.ctl); err != nil {
			p.reject(err)
			return
		}
		if err := p.wire.ctl.Validate(schemas.Limits{}); err != nil {
			p.reject(err)
			return
		}
		if p.wire.ctl.Seq <= p.recov.skipTo[1] {
			p.stats.Skipped++
			return
		}
		if err := p.verify(d, p.wire.ctl.Seq); err != nil {
			p.rejectTrust(err)
			return
		}
		if err := p.aggSeqOK(1, p.wire.ctl.Seq); err != nil {
			p.reject(err)
			return
		}
		if p.wire.ctl.Op == schemas.CtlSeal {
			final := p.tr != nil && p.tr.final
			p.onSeal(d, &p.wire.ctl)
			if p.stop.stopping && !final && p.tr != nil && p.tr.final {
				p.endAfterSeal(false)
			}
			if p.stop.pausing {
				p.endPause() // the seal after the pause covers the whole log
			}
			return
		}
		if p.stop.stopping {
			return
		}
		p.control(&p.wire.ctl)
	default:
		p.reject(fmt.Errorf("%w: %s on a party's subscription", schemas.ErrSubject, kind))
	}
}

// endPause ends a paused party's run (p.mu held), once: Run then saves
// its state and returns.
func (p *Party) endPause() {
	if !p.stop.pauseDone {
		p.stop.pauseDone = true
		close(p.done)
	}
}

// aggSeqOK accepts the aggregator's sequence number seq on its reply
// subject (s 0) or the control subject (s 1) if it is above every one
// accepted there before. It is checked after decoding and before the
// message acts; a message rejected later (a reply that does not match the
// request in flight) still moves the mark, since the aggregator never
// reuses a number.
func (p *Party) aggSeqOK(s int, seq uint64) error {
	if seq <= p.aggSeq[s] {
		return fmt.Errorf("%w: aggregator sequence %d after %d", schemas.ErrReplay, seq, p.aggSeq[s])
	}
	p.aggSeq[s] = seq
	return nil
}

func (p *Party) control(c *schemas.Control) {
	switch c.Op {
	case schemas.CtlStart:
		if p.started {
			return
		}
		p.started = true
		p.recov.ckNow = true
		p.batchSeed = c.BatchSeed
		for !p.cfg.LabelFree && p.n < p.cfg.Window {
			if err := p.request(); err != nil {
				p.fail(err)
				return
			}
		}
	case schemas.CtlEval:
		if p.cfg.IgnoreEvals && c.Round > 0 {
			return
		}
		if c.Round > 0 {
			p.keep.eval(c.Round, c.Keep, p.evalW())
		}
		for _, s := range []struct {
			bit   uint8
			split schemas.Split
		}{{schemas.EvalTrain, schemas.SplitTrain}, {schemas.EvalTest, schemas.SplitTest}} {
			if c.Splits&s.bit != 0 {
				if err := p.sendSplit(s.split, c.Round); err != nil {
					p.fail(err)
					return
				}
			}
		}
	case schemas.CtlPause:
		if p.stop.pausing {
			return
		}
		p.stop.pausing = true
		p.stats.Paused = true
		p.stats.StopReason = c.Reason
		p.stop.pauseBy = time.Now().Add(pauseSealWait)
		p.cfg.Log.Info().Int("party", p.cfg.ID).Int("steps", p.t).Int("in_flight", p.n).Msg("the run pauses: no new request; waiting for the seal to countersign")
		if p.tr == nil {
			p.endPause() // no seal to wait for
		}
	case schemas.CtlCheckpoint:
		p.recov.ckNow = true
		if c.Reason != "" {
			p.cfg.Log.Info().Int("party", p.cfg.ID).Msgf("the aggregator asks for a checkpoint: %s", c.Reason)
		}
	case schemas.CtlStop:
		p.stop.stopping = true
		p.stats.StopReason = c.Reason
		p.keepRound(c.Round)
		p.cfg.Log.Debug().Int("party", p.cfg.ID).Str("reason", c.Reason).Int("steps", p.t).Msg("stop")
		if p.awaitingSeal() {
			// The final checkpoint follows the stop; wait for it a little.
			p.stop.sealBy = time.Now().Add(finalSealWait)
			return
		}
		close(p.done)
	case schemas.CtlCall:
		p.answerCall(c)
	case schemas.CtlRefuse:
		switch m := int(c.Party); {
		case m == 0:
			p.fail(fmt.Errorf("%w: %s", ErrAborted, c.Reason))
		case m == p.cfg.ID && (c.Round == 0 || uint64(c.Round) == p.join.helloSeq&0xffffffff || p.join.answerSeq != 0 && uint64(c.Round) == p.join.answerSeq&0xffffffff):
			p.fail(fmt.Errorf("%w: %s", ErrRefused, c.Reason))
		case m != p.cfg.ID:
			p.cfg.Log.Info().Int("party", p.cfg.ID).Int("refused", m).Str("reason", c.Reason).Msg("the aggregator refused another party; waiting for it to join again")
		}
	}
}
