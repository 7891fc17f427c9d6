package aggregator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/internal/ckpt"
	"github.com/asyrevel/asyrevel/logread"
	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/trust"
	"github.com/asyrevel/asyrevel/zoo"
	"github.com/asyrevel/asyrevel/zoo/kernel"
)

// ErrConfig reports an unusable Config.
var ErrConfig = errors.New("aggregator: bad config")

// ErrInterrupted is returned by Run, with the result so far, when its
// context is done before the run ends (Ctrl-C, SIGTERM).
var ErrInterrupted = errors.New("aggregator: interrupted")

// ErrNoProgress reports a wait that ran out: a party that did not join, or
// an evaluation that got no answer, within the configured time.
var ErrNoProgress = errors.New("no progress")

// ErrStalled is returned by Run, with the result so far, when training
// made no step for Config.EvalTimeout although evaluations were answered
// (requests or replies lost in flight, a broker that lost them on a
// crash): the parties are told to save their state, and a restart of
// every participant with --resume recomputes what was lost.
var ErrStalled = errors.New("training stalled")

// Default waits; see Config.
const (
	DefaultJoinWait = 10 * time.Minute
	DefaultWait     = 2 * time.Minute
	DefaultNotice   = 30 * time.Second
	// evalNoticeEvery is how often a waiting evaluation is reported (at
	// most Notice).
	evalNoticeEvery = 5 * time.Second
)

// DefaultOutputBound is the default Config.OutputBound. Outputs of models
// on scaled features are of order 1 to 100.
const DefaultOutputBound = 1e6

// Config is what the aggregator holds: the labels, the global model F_0 and
// the run's schedule.
type Config struct {
	Run        string
	Parties    int // q
	K          int // outputs per sample and party
	Head       model.Head
	Params     []float64 // initial w0; nil = Head.Init
	Labels     []int32   // training labels, class indices
	TestLabels []int32   // test labels; nil = no test set
	IDHash     string    // fingerprint of the training sample ids; parties must match it

	// HeldOut is how many of the first TestLabels are training rows kept
	// aside (never trained on): each evaluation scores them apart
	// (Point.HeldOutLoss), and the round best on them is the model kept
	// (keep.go). The rest are the test set, only reported. When they are
	// all held-out rows, their figures stand in the test columns too.
	HeldOut int
	// HoldOut is what the aggregator's data keep aside of the training
	// rows (dataset.Vertical's hold-out: HoldOutRows rows, the first of
	// TestLabels, chosen by HoldOut's share and seed; zero: none), which
	// HeldOut, the rows early stopping watches, is or is not. The call
	// that admits a party carries it (join.go), so that a party in a
	// process of its own keeps the same rows aside before it answers.
	HoldOut     schemas.HoldOut
	HoldOutRows int

	Mu   float64      // smoothing of the head's own ZO step
	LR   zoo.Schedule // step size of the head's own ZO step
	Dist zoo.Dist     // directions u_0 of the head's own step
	Seed uint64

	MaxBatch int // largest accepted batch (default 4096)
	// OutputBound rejects party outputs larger than this in magnitude
	// (default DefaultOutputBound): finite but huge outputs would turn
	// the head's arithmetic into Inf and NaN.
	OutputBound float64
	ReplyDelta  bool // reply only h_bar - h (Defense.Reply = ReplyDelta)
	// Defense protects the labels and bounds what the parties send
	// (defense.go); the zero value is the paper's protocol.
	Defense Defense
	// ScoreLeakage scores, as the run goes, what each party's view would
	// reveal to the label-inference attacks (Result.Leakage).
	ScoreLeakage bool
	// LabelFree, if set, makes the run label-free (labelfree.go): the
	// parties send codes and no request; the aggregator fits its head on
	// them once they are in. Head must be a head over codes (model.Embed).
	LabelFree *LabelFree

	// The other algorithms of the pipeline (zero values: AsyREVEL); see
	// sync.go and tig.go. The defenses (defense.go) apply to AsyREVEL.
	Sync       bool // SynREVEL: a round waits for one request of every party (the same batch), then answers all
	FirstOrder bool // TIG: requests carry c only, replies dF_0/dc; the head steps first-order (Head must be a model.WhiteBoxHead)

	MaxSteps  int64         // stop after this many answered requests (0 = no limit)
	Duration  time.Duration // stop after this much training time (0 = no limit)
	EvalEvery time.Duration // evaluation period (default 1s), stretched to 9 times a round's duration if that is longer
	// EvalSteps, if positive, makes an evaluation due once this many
	// requests were answered since the last one was requested (an epoch:
	// every party's pass over its rows), whatever EvalEvery says; training
	// waits for a round that is that late (cadence.go).
	EvalSteps int64
	// EvalTimeout aborts the run when an evaluation round gets no answer
	// (no chunk from any party it waits for) for this long (default
	// DefaultWait); every chunk resets it, so a large set that streams in
	// slowly is not cut off.
	EvalTimeout time.Duration
	// JoinWait aborts the run when no party makes progress in joining
	// (a hello, a chunk of its initial pass) for this long (default
	// DefaultJoinWait). A refused party may join again meanwhile.
	JoinWait time.Duration
	// Notice is how often a wait is reported in the log: which parties
	// are awaited and for what (default DefaultNotice).
	Notice       time.Duration
	TargetAcc    float64 // record the time test accuracy first reaches this
	StopAtTarget bool    // and stop there
	// StopWhen, if set, is asked after each evaluation; true stops the run
	// (experiments that stop on a condition the aggregator cannot see,
	// such as the full objective with the parties' regularisers).
	StopWhen func() bool
	// StopReason, if set, says why StopWhen stopped the run (the log, the
	// parties' stop control, Result.StopReason; default "stop condition
	// met").
	StopReason func() string

	// Pause, if set, pauses the run when it is closed (the operator's
	// first Ctrl-C in a process that runs the whole run): the parties are
	// told (CtlPause), what is in flight is answered, a seal covers the
	// whole log and every participant saves its state. Run then returns
	// the part that ran with an error wrapping ErrInterrupted and
	// ErrPaused; a resume goes on. Unlike an interruption (its context
	// cancelled) the log it leaves is sealed: audit verify finds it
	// intact.
	Pause <-chan struct{}

	Log     zerolog.Logger
	OnPoint func(Point) // called (from the aggregator's goroutine) for each curve point

	// OnCheckpoint, if set, is given the aggregator's state (checkpoint.go)
	// once training starts, every CheckpointEvery and when Run is
	// interrupted; it is called from Run's goroutine, and c is valid only
	// during the call. CheckpointEvery 0 (the default) is adaptive
	// (ckpt.Every: 50 times the last save's cost, 250ms to 10s);
	// negative: no periodic saves.
	OnCheckpoint    func(c *Checkpoint) error
	CheckpointEvery time.Duration
	// PartyTimeout is how long an evaluation round waits for a party that
	// sends nothing before it counts that party as departed: training goes
	// on without it and the evaluations use its last outputs until it
	// sends again (default min(EvalTimeout/2, DefaultPartyTimeout); <0:
	// never, the round waits EvalTimeout and aborts).
	PartyTimeout time.Duration
	// Key and Roster turn the trust layer on (package trust, trust.go):
	// every reply and control is numbered per subject, chained and
	// signed with Key (Sign says how often), and every party's message is
	// verified against Roster before it acts; rejected ones are counted
	// by reason ("trust-bad_signature", ...). Both or neither.
	Key    *trust.Key
	Roster *trust.Roster
	Sign   trust.Policy
	// SealEvery is how often the aggregator publishes a signed
	// checkpoint of the log during training (with Key; default
	// DefaultSealEvery, negative: only the final one, after the stop).
	SealEvery time.Duration
}

// DefaultPartyTimeout bounds the default Config.PartyTimeout.
const DefaultPartyTimeout = 30 * time.Second

// Point is one evaluation: where the run was when it was requested.
type Point struct {
	Round        uint32  // the evaluation round (0: a label-free run's without a request)
	Seconds      float64 // training time at the request
	Steps        int64   // answered requests at the request
	TrainLoss    float64 // mean head loss over the training set (without the regulariser)
	TestAccuracy float64 // NaN without a test set
	TestLoss     float64
	MsgsPerSec   float64 // messages (up and down) per second since the previous point
	MaxStaleness uint32
	Final        bool
	// Stale lists the parties whose outputs in this evaluation are the
	// last they sent, not fresh ones: the round stopped waiting for them
	// (departed, or silent in evaluations while they train).
	Stale []int
	// A label-free run's points (LabelFree): the head's loss and accuracy
	// on the held-out training rows and the epoch of its fit (NaN and 0
	// in other runs).
	HeldOutLoss     float64
	HeldOutAccuracy float64
	Epoch           int
}

// Result is what a finished run reports.
type Result struct {
	Steps        int64
	Training     time.Duration // from Start to the final evaluation's request
	Curve        []Point
	Final        Point
	TimeToTarget float64          // seconds; -1 if TargetAcc was not reached
	Received     map[string]int64 // accepted deliveries by kind
	Published    map[string]int64 // messages published by kind
	BytesIn      int64
	BytesOut     int64
	// StepBytes counts the payload bytes of the training steps alone: the
	// PartyOutputs answered and their Replies (no hellos, initial pass,
	// evaluations or control).
	StepBytes int64
	Rejected  map[string]int64 // rejected deliveries by reason
	// RejectedOutputs counts the rejected deliveries on PartyOutput subjects.
	RejectedOutputs int64
	LateOutputs     int64 // requests that arrived after the stop (not answered)
	// LateEvals counts the evaluation chunks of a round that was over (a
	// late party's, or one read again from the stream after a resume):
	// not scored, not rejected.
	LateEvals     int64
	MaxStaleness  uint32
	MeanStaleness float64
	Params        []float64 // final w0
	// Interrupted says why the run was cut short (Run then also returns
	// ErrInterrupted): Final is the last evaluation before, Training and
	// Steps run to the interruption. "" for a run that ended.
	Interrupted string
	// Paused: the run paused (Config.Pause, or its stream nearly full):
	// the log is sealed and every participant saves its state; the
	// parties end by themselves. An interruption instead stops them.
	Paused bool
	// Started: training had started (the parties were told to start, or
	// the run was resumed); false for a run stopped while its parties
	// joined, which leaves no checkpoint to resume from.
	Started bool
	// Refused lists the refusals of parties, by party: why each one's
	// latest hello was refused.
	Refused map[int]string
	Defense DefenseReport
	Leakage *Leakage // with Config.ScoreLeakage
	// Departed lists the parties that an evaluation round stopped waiting
	// for (Config.PartyTimeout) and that had not come back at the end, and
	// why; Timeouts counts the departures, Returned the parties that came
	// back, EvalsWithout the evaluations scored with a departed party's
	// last outputs.
	Departed     map[int]string
	Timeouts     int64
	Returned     int64
	EvalsWithout int64
	// BrokerOutage is how long the broker was unreachable for the
	// aggregator during the run (no connection, or a stream answering
	// none of its publishes).
	BrokerOutage time.Duration
	// StaleEvals counts, by party, the evaluations scored with its last
	// outputs instead of fresh ones (Point.Stale).
	StaleEvals map[int]int64
	// Recovery is what a resumed aggregator applied from the stream (nil
	// for a run that was not resumed).
	Recovery *Recovery
	// Checkpoints counts the signed checkpoints of the log published
	// (with Config.Key).
	Checkpoints uint64
	// Fit is what a label-free run's head fit did (nil in other runs).
	Fit *FitReport
	// KeptRound is the evaluation round whose models every participant
	// kept and saved (keep.go), Kept its evaluation, Params its head; 0
	// when each kept its last model, and KeepWhy says why.
	KeptRound uint32
	Kept      Point
	KeepWhy   string
	// EvalWait is how long training waited for evaluation rounds it was
	// owed (an epoch late: cadence.go).
	EvalWait time.Duration
	// StopReason is why training stopped ("step budget reached",
	// "duration reached", "target accuracy reached", "stop condition
	// met"; "" for a run that did not reach its stop).
	StopReason string
}

type phase int

const (
	joining phase = iota
	training
	stopping
	done
)

type round struct {
	id     uint32
	splits uint8
	at     time.Duration
	steps  int64
	msgs   int64
	next   [][2]uint32 // per party: next expected First for train and test
	wait   []bool      // per party: the round waits for it (it had not departed)

	without   bool // a departed party's last outputs were used
	requested time.Time
	progress  time.Time // the last chunk accepted (or the request)
	remaining int
	final     bool

	// answered is when, after the request, the last party to have sent
	// its whole part did so (0: none yet): what the round takes a party.
	answered time.Duration
	// scored, if made (owed), is closed when the round is scored.
	scored chan struct{}
}

// Aggregator is the aggregator's runtime. What one part of it keeps is
// grouped in a struct of its own (state.go); the defense, the other
// algorithms, a label-free run, the trust layer and the model kept are
// components it holds.
type Aggregator struct {
	cfg   Config
	q, k  int
	width int // q*k
	n     int

	mu      sync.Mutex
	phase   phase
	table   []float64 // n x width: the latest outputs C[i][m]
	ver     []uint32  // n x q: version of party m when C[i][m] was written
	version []uint32  // per party: answered requests
	// lastSeq[c][m] is the last sequence accepted from party m on
	// subject c (seqRequests, seqOther for evaluations, seqHello): each
	// subject is numbered on its own, in the sender's order.
	lastSeq [3][]uint64
	outSeen uint64 // deliveries on the requests subscription
	hello   []bool
	w0      []float64  // the head's parameters
	labels  []int32    // the labels the head trains on (randomised response may have changed some)
	step    headStep   // the head's own step: its scratch and its generator
	def     defense    // the defense component (defense.go): noise, accounting, leakage
	alt     alt        // state of the other algorithms
	lf      *labelFree // a label-free run's (LabelFree)
	tr      *aggTrust  // nil without Config.Key
	keep    keeper     // the model kept (keep.go)

	join  joinState  // the join phase (join.go)
	eval  evalState  // the evaluation rounds (cadence.go)
	waits waitState  // waits, notices and stalls
	wire  wireState  // codecs and decoding buffers
	stats stepStats  // staleness and traffic
	recov recovState // checkpoints and recovery (checkpoint.go, recovery.go)
	pub   pubState   // what the aggregator published: its outbox and sequence numbers
	stop  stopState  // how the run ends

	out      schemas.PartyOutput
	rep      schemas.Reply
	start    time.Time
	departed []bool // per party: an evaluation round stopped waiting for it (leave)
	resumed  *Recovery
	bus      broker.Bus
	ctx      context.Context
	res      Result
	fin      chan struct{}
	err      error
}

// New checks cfg and prepares the aggregator's state.
func New(cfg Config) (*Aggregator, error) {
	if err := schemas.CheckRun(cfg.Run); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if cfg.Parties < 1 || cfg.Parties > schemas.MaxParties || cfg.K < 1 {
		return nil, fmt.Errorf("%w: %d parties with k=%d", ErrConfig, cfg.Parties, cfg.K)
	}
	if cfg.Head == nil || cfg.Head.InDim() != cfg.Parties*cfg.K {
		return nil, fmt.Errorf("%w: head must take q*k = %d inputs", ErrConfig, cfg.Parties*cfg.K)
	}
	if len(cfg.Labels) == 0 {
		return nil, fmt.Errorf("%w: no training labels", ErrConfig)
	}
	for _, y := range append(cfg.Labels[:len(cfg.Labels):len(cfg.Labels)], cfg.TestLabels...) {
		if y < 0 || int(y) >= cfg.Head.Classes() {
			return nil, fmt.Errorf("%w: label %d outside the head's %d classes", ErrConfig, y, cfg.Head.Classes())
		}
	}
	if cfg.Head.NumParams() > 0 && (cfg.Mu <= 0 || cfg.LR.Eta0 <= 0) {
		return nil, fmt.Errorf("%w: the head has parameters: mu and lr must be positive", ErrConfig)
	}
	if cfg.MaxBatch == 0 {
		cfg.MaxBatch = 4096
	}
	if cfg.OutputBound == 0 {
		cfg.OutputBound = DefaultOutputBound
	}
	if cfg.OutputBound < 0 || math.IsNaN(cfg.OutputBound) {
		return nil, fmt.Errorf("%w: output bound %g", ErrConfig, cfg.OutputBound)
	}
	if cfg.EvalEvery <= 0 {
		cfg.EvalEvery = time.Second
	}
	if cfg.EvalTimeout <= 0 {
		cfg.EvalTimeout = DefaultWait
	}
	if cfg.JoinWait <= 0 {
		cfg.JoinWait = DefaultJoinWait
	}
	if cfg.Notice <= 0 {
		cfg.Notice = DefaultNotice
	}
	if cfg.PartyTimeout == 0 {
		cfg.PartyTimeout = min(cfg.EvalTimeout/2, DefaultPartyTimeout)
	}
	if cfg.SealEvery == 0 {
		cfg.SealEvery = DefaultSealEvery
	}
	q, k, n := cfg.Parties, cfg.K, len(cfg.Labels)
	np := cfg.Head.NumParams()
	a := &Aggregator{
		cfg: cfg, q: q, k: k, width: q * k, n: n,
		table:    make([]float64, n*q*k),
		ver:      make([]uint32, n*q),
		version:  make([]uint32, q+1),
		lastSeq:  [3][]uint64{make([]uint64, q+1), make([]uint64, q+1), make([]uint64, q+1)},
		hello:    make([]bool, q+1),
		w0:       make([]float64, np),
		step:     newHeadStep(np, cfg.MaxBatch, cfg.Seed),
		join:     newJoinState(q),
		eval:     evalState{silent: make([]bool, q+1)},
		waits:    newWaitState(q),
		wire:     wireState{enc: schemas.NewCodec(), dec: schemas.NewCodec()},
		stats:    stepStats{stalePer: make([]partyStale, q+1)},
		pub:      pubState{outbox: broker.SentRing{Size: outboxSize}},
		departed: make([]bool, q+1),
		fin:      make(chan struct{}),
	}
	if np > 0 {
		a.step.phi0 = cfg.Dist.Phi(np)
	}
	labels, err := a.def.init(&a.cfg, q, n)
	if err != nil {
		return nil, err
	}
	a.labels = labels
	if cfg.Params != nil {
		if len(cfg.Params) != np {
			return nil, fmt.Errorf("%w: %d initial head parameters, head has %d", ErrConfig, len(cfg.Params), np)
		}
		copy(a.w0, cfg.Params)
	} else {
		cfg.Head.Init(a.w0, a.step.rng)
	}
	if err := a.initAlt(); err != nil {
		return nil, err
	}
	if err := a.initLabelFree(); err != nil {
		return nil, err
	}
	if cfg.HeldOut < 0 || cfg.HeldOut > len(cfg.TestLabels) {
		return nil, fmt.Errorf("%w: %d held-out rows of %d test labels", ErrConfig, cfg.HeldOut, len(cfg.TestLabels))
	}
	if err := cfg.HoldOut.Check(); err != nil || cfg.HoldOutRows < 0 || cfg.HoldOutRows > len(cfg.TestLabels) || (cfg.HoldOutRows > 0) != cfg.HoldOut.Rows() {
		return nil, fmt.Errorf("%w: a hold-out of %d rows of %d test labels (%s; %v)", ErrConfig, cfg.HoldOutRows, len(cfg.TestLabels), cfg.HoldOut.String(), err)
	}
	a.initKeep()
	a.rep.Version = schemas.Version
	a.rep.H = make([]float64, 0, cfg.MaxBatch)
	a.rep.HBar = make([]float64, 0, cfg.MaxBatch)
	a.rep.Delta = make([]float64, 0, cfg.MaxBatch)
	a.wire.subjReply = make([]string, q+1)
	for m := 1; m <= q; m++ {
		a.wire.subjReply[m] = schemas.Subject(cfg.Run, schemas.KindReply, m)
	}
	a.pub.replySeq = make([]uint64, q+1)
	if err := a.initTrust(); err != nil {
		return nil, err
	}
	a.res = Result{
		TimeToTarget: -1,
		Received:     map[string]int64{},
		Published:    map[string]int64{},
		Rejected:     map[string]int64{},
		Refused:      map[int]string{},
		Departed:     map[int]string{},
	}
	return a, nil
}

// Run consumes the parties' messages from bus until the run ends (steps,
// duration or target reached, then a final evaluation) or ctx is done.
func (a *Aggregator) Run(ctx context.Context, bus broker.Bus) (*Result, error) {
	a.mu.Lock()
	a.bus, a.ctx = bus, ctx
	a.mu.Unlock()
	run := a.cfg.Run
	deliver, restDeliver := broker.DeliverAll, broker.DeliverAll
	if a.resumed != nil {
		// Every request of the stream again: those applied are skipped by
		// their sequence numbers. Hellos and evaluations of the past are
		// not needed.
		a.mu.Lock()
		a.start = time.Now().Add(-a.recov.trainedBefore)
		a.mu.Unlock()
		if err := a.recover(ctx, bus); err != nil {
			return nil, err
		}
		restDeliver = broker.DeliverNew
	}
	restOpts := broker.SubscribeOptions{Durable: "aggregator-join", Deliver: restDeliver}
	if a.resumed != nil && a.tr != nil && a.recov.restFrom > 0 {
		// With the trust layer, recovery ran the hellos and evaluations
		// up to restFrom-1 through the verifier: the subscription goes on
		// right after them, so that what was published while recovery
		// read is not missed (a gap in a party's chain, every later
		// evaluation of it rejected) nor delivered twice.
		restOpts.StartSeq = a.recov.restFrom
	}
	// The requests on a subscription of their own: a JetStream consumer
	// with a single filter costs the broker less per message. Hellos and
	// evaluation outputs need no order with the requests: requests only
	// come after the start, which waits for every hello and the initial
	// pass. The handler serialises the two.
	reqOpts := broker.SubscribeOptions{Durable: "aggregator", Deliver: deliver}
	if r := a.resumed; r != nil && a.recov.reqFrom > 0 {
		// Recovery read the requests: they go on at the first it did not
		// apply (recovery.liveFrom).
		reqOpts.StartSeq = a.recov.reqFrom
	} else if r != nil && r.ReadFrom > 1 {
		// Nothing below the floor recovery read from is to be handled
		// again (recovery checked it): the requests are read from there.
		reqOpts.StartSeq = r.ReadFrom
	}
	sub, err := bus.Subscribe(ctx, []string{schemas.Filter(run, schemas.KindOutput)}, reqOpts, a.handleOutputs)
	if err != nil {
		return nil, fmt.Errorf("aggregator: subscribe: %w", err)
	}
	defer sub.Close()
	rest, err := bus.Subscribe(ctx, []string{
		schemas.Filter(run, schemas.KindHello),
		schemas.Filter(run, schemas.KindEval),
	}, restOpts, a.handle)
	if err != nil {
		return nil, fmt.Errorf("aggregator: subscribe: %w", err)
	}
	defer rest.Close()

	// A bounded stream is watched: the run pauses before it fills up.
	var full chan error
	if r, ok := bus.(roomer); ok {
		full = make(chan error, 1)
		wctx, stopWatch := context.WithCancel(ctx)
		defer stopWatch()
		go a.watchRoom(wctx, r, full)
	}

	tick := time.NewTicker(min(a.cfg.EvalEvery, 100*time.Millisecond))
	defer tick.Stop()
	a.mu.Lock()
	a.join.progress, a.waits.lastNotice = time.Now(), time.Now()
	a.mu.Unlock()
	if a.resumed == nil {
		a.cfg.Log.Info().Str("run", run).Int("parties", a.q).Msg("waiting for the parties to join")
	}
	lastCk := time.Now()
	for {
		select {
		case <-ctx.Done():
			if a.over() {
				// The run ended before the signal came: it finishes
				// (finish.go).
				ctx = context.WithoutCancel(ctx)
				continue
			}
			return a.interrupted(ctx, bus)
		case <-a.cfg.Pause:
			return a.pause(ctx, bus, ErrPaused)
		case cause := <-full:
			a.cfg.Log.Warn().Err(cause).Msg("the run's stream is nearly full: the run pauses")
			return a.pause(ctx, bus, cause)
		case <-a.fin:
			a.mu.Lock()
			err := a.err
			a.mu.Unlock()
			if err != nil && ctx.Err() != nil {
				// A publish that failed because ctx ended (a signal): an
				// interruption, without a checkpoint (the state may count
				// a reply that was not sent; the last one stands).
				cause := context.Cause(ctx)
				a.mu.Lock()
				a.stop.closed = true
				res := a.result()
				a.mu.Unlock()
				res.Interrupted = cause.Error()
				if n := len(res.Curve); n > 0 {
					res.Final = res.Curve[n-1]
				}
				return res, fmt.Errorf("%w: %w", ErrInterrupted, cause)
			}
			if err != nil {
				// Let an abort sent to the parties reach the broker.
				fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				_ = bus.Flush(fctx)
				cancel()
				if errors.Is(err, ErrStalled) {
					a.mu.Lock()
					a.stop.closed = true
					res := a.result()
					a.mu.Unlock()
					res.Interrupted = err.Error()
					if n := len(res.Curve); n > 0 {
						res.Final = res.Curve[n-1]
					}
					return res, err
				}
				return nil, err
			}
			a.drain(ctx, bus)
			fctx, cancel := finalContext(ctx) // a signal now does not cut the end short
			defer cancel()
			a.mu.Lock()
			a.ctx = fctx
			// Replies still held for their requests: the final checkpoint
			// counts them as sent.
			a.releaseAllHeld()
			// The final checkpoint, after the late requests: it covers them.
			a.seal(true)
			a.stop.closed = true // what still arrives is not counted: res is final
			res := a.result()
			lf := a.lf
			a.mu.Unlock()
			if lf != nil && lf.flushed != nil {
				// A label-free run published its last message (the final
				// seal) before its head's fit, and flushed it then.
				<-lf.flushed
				return res, nil
			}
			if err := bus.Flush(fctx); err != nil {
				return nil, fmt.Errorf("aggregator: flush: %w", err)
			}
			return res, nil
		case <-tick.C:
			if a.cfg.OnCheckpoint != nil {
				a.mu.Lock()
				every := ckpt.Every(a.cfg.CheckpointEvery, a.recov.ckTook)
				due := a.phase == training && (a.recov.ckNow || every > 0 && time.Since(lastCk) >= every)
				a.mu.Unlock()
				if due {
					lastCk = time.Now()
					a.saveCheckpoint(ctx)
				} else if every > 0 {
					a.nearProbe(ctx, every)
				}
			}
			a.mu.Lock()
			a.watch()
			if len(a.recov.held) > 0 && time.Since(a.recov.heldSince) >= heldWait {
				a.releaseAllHeld()
			}
			if a.phase == training && a.sealDue() {
				a.seal(false)
			}
			if a.phase == training && a.lf == nil {
				el := time.Since(a.start)
				if a.cfg.Duration > 0 && el >= a.cfg.Duration {
					a.beginStop("duration reached")
				} else if a.evalDue(el) {
					a.requestEval(false)
				}
			}
			a.mu.Unlock()
		}
	}
}

// watch checks the waits (with a.mu held): it logs what the aggregator
// waits for every Notice and aborts the run when a wait runs out.
func (a *Aggregator) watch() {
	now := time.Now()
	notice := now.Sub(a.waits.lastNotice) >= a.cfg.Notice
	switch {
	case a.unreachable(now, notice):
		// The broker is down: nobody is to blame but it, and nothing
		// counts against the parties until it is back.
		if a.eval.cur != nil {
			a.eval.cur.progress = now
		}
		a.waits.stallSince, a.join.progress = now, now
	case a.phase == joining:
		idle := now.Sub(a.join.progress)
		if idle >= a.cfg.JoinWait {
			a.abort(fmt.Errorf("%w: the run cannot start: %s; nothing changed for %v (--join-wait)", ErrNoProgress, a.joinStatus(), a.cfg.JoinWait))
			return
		}
		if notice && idle >= a.cfg.Notice {
			a.cfg.Log.Warn().Str("idle", idle.Round(time.Second).String()).Msgf("waiting for the parties to join: %s", a.joinStatus())
			a.waits.lastNotice = now
		}
	case a.eval.cur != nil && (a.phase == training || a.phase == stopping):
		c := a.eval.cur
		idle := now.Sub(c.progress)
		if a.cfg.PartyTimeout > 0 && idle >= a.cfg.PartyTimeout {
			a.leave(c, idle)
			return
		}
		// A silent party gets a short wait: a few times what a round
		// takes, not --party-timeout, in the first round too.
		if short, ok := a.silentWait(c); ok && a.cfg.PartyTimeout > 0 && idle >= short && short < a.cfg.PartyTimeout {
			a.leave(c, idle)
			return
		}
		if idle >= a.cfg.EvalTimeout {
			a.abort(fmt.Errorf("%w: evaluation round %d: no answer from %s for %v (--wait)", ErrNoProgress, c.id, a.missing(c), a.cfg.EvalTimeout))
			return
		}
		// An evaluation that waits says so soon (evaluations are what a
		// person watches), and what happens next.
		evalNotice := min(a.cfg.Notice, evalNoticeEvery)
		if now.Sub(a.waits.lastNotice) >= evalNotice && idle >= evalNotice {
			next := fmt.Sprintf("after --party-timeout %v it goes on with their last outputs", a.cfg.PartyTimeout)
			if a.cfg.PartyTimeout <= 0 {
				next = fmt.Sprintf("after --wait %v the run pauses", a.cfg.EvalTimeout)
			}
			a.cfg.Log.Warn().Str("idle", idle.Round(time.Second).String()).Msgf("evaluation round %d waits for %s: no answer for %v; %s",
				c.id, a.missing(c), idle.Round(time.Second), next)
			a.waits.lastNotice = now
		}
	case a.phase == training && a.stalled(now):
	case a.phase == training && notice:
		// Asynchronous training goes on without a silent party; say so.
		var silent []string
		for m := 1; m <= a.q; m++ {
			if a.version[m] == a.waits.noticeSteps[m] {
				silent = append(silent, strconv.Itoa(m))
			}
			a.waits.noticeSteps[m] = a.version[m]
		}
		if len(silent) > 0 {
			a.cfg.Log.Warn().Str("for", now.Sub(a.waits.lastNotice).Round(time.Second).String()).
				Msgf("no request from party %s", strings.Join(silent, ", "))
		}
		a.waits.lastNotice = now
	}
}

// unreachable reports whether the broker connection is down, and says
// so every Notice.
func (a *Aggregator) unreachable(now time.Time, notice bool) bool {
	u, ok := a.bus.(interface{ Unreachable() time.Time })
	if !ok {
		return false
	}
	since := u.Unreachable()
	if since.IsZero() {
		return false
	}
	if now.Sub(since) >= time.Second && now.Sub(a.waits.lastOutageNote) >= min(a.cfg.Notice, evalNoticeEvery) {
		a.cfg.Log.Warn().Str("since", since.Format(time.RFC3339)).Str("for", now.Sub(since).Round(time.Second).String()).
			Msg("the broker is unreachable: training waits for it (nobody counts as departed meanwhile)")
		a.waits.lastOutageNote, a.waits.lastNotice = now, now
	}
	return true
}

// silentWait is how long round c waits, after its last progress, for the
// parties it still waits for when each of them is silent: it let an
// earlier evaluation down while it trains (eval.silent), or it has sent
// nothing of this round while another party sent all of it. The wait is
// three times what a round takes (the last complete round's cost, or what
// this one took the parties that answered it), at least a second, or
// firstSilentWait for a party not yet known to be silent: a few rounds'
// worth, where --party-timeout (30 s) held up the first evaluation. ok
// is false while a party it waits for is sending its part, or none has
// answered yet.
func (a *Aggregator) silentWait(c *round) (wait time.Duration, ok bool) {
	floor := time.Second
	for m := 1; m <= a.q; m++ {
		if !c.wait[m] || a.roundDone(c, m) {
			continue
		}
		switch {
		case a.eval.silent[m]:
		case c.answered > 0 && c.next[m] == [2]uint32{}:
			floor = firstSilentWait
		default:
			return 0, false
		}
		ok = true
	}
	return max(floor, 3*max(a.eval.cost, c.answered)), ok
}

// firstSilentWait is the least a round waits for a party that sends
// nothing of it before counting it silent, the first time.
const firstSilentWait = 2 * time.Second

// roundDone reports whether party m has sent all of round c.
func (a *Aggregator) roundDone(c *round, m int) bool {
	for s, bit := range [2]uint8{schemas.EvalTrain, schemas.EvalTest} {
		total := a.n
		if s == 1 {
			total = len(a.cfg.TestLabels)
		}
		if c.splits&bit != 0 && int(c.next[m][s]) < total {
			return false
		}
	}
	return true
}

// joinStatus says, party by party, what the join phase still waits for.
func (a *Aggregator) joinStatus() string {
	var ps []string
	for m := 1; m <= a.q; m++ {
		switch {
		case a.join.refused[m] != "":
			ps = append(ps, fmt.Sprintf("party %d was refused (%s)", m, a.join.refused[m]))
		case !a.hello[m] && a.join.called[m] != 0:
			ps = append(ps, fmt.Sprintf("party %d: called (its hello %d), no answer: is it still running, of this revision?", m, a.join.called[m]))
		case !a.hello[m]:
			ps = append(ps, fmt.Sprintf("party %d: no hello", m))
		case int(a.join.initAt[m]) < a.n:
			ps = append(ps, fmt.Sprintf("party %d: initial pass at %d of %d samples", m, a.join.initAt[m], a.n))
		}
	}
	return strings.Join(ps, "; ")
}

// abort ends the run with err (a.mu held) and tells every party why: a
// CtlRefuse addressed to all.
func (a *Aggregator) abort(err error) {
	if a.phase == done {
		return
	}
	a.cfg.Log.Error().Err(err).Msg("aborting the run")
	a.fail(err) // first: should the publish fail, err stays the reason
	c := &schemas.Control{Header: schemas.Header{Version: schemas.Version}, Op: schemas.CtlRefuse, Reason: truncate(err.Error(), 1024)}
	a.publish(schemas.Subject(a.cfg.Run, schemas.KindControl, 0), schemas.KindControl, c)
}

// refuse tells party m that its hello (sequence seq) is refused, and why.
// The party stops; the run waits for it to join again (JoinWait).
func (a *Aggregator) refuse(m int, seq uint64, err error) {
	reason := refusalReason(err)
	if a.hello[m] {
		a.cfg.Log.Warn().Int("party", m).Str("reason", reason).Msg("refused a second process for a party that has joined")
	} else {
		a.join.refused[m] = reason
		a.res.Refused[m] = reason
		a.cfg.Log.Warn().Int("party", m).Str("reason", reason).Msg("refused party; waiting for it to join again (--join-wait)")
	}
	c := &schemas.Control{Header: schemas.Header{Version: schemas.Version, Party: uint16(m)}, Op: schemas.CtlRefuse,
		Round: uint32(seq), Reason: truncate(reason, 1024)}
	a.publish(schemas.Subject(a.cfg.Run, schemas.KindControl, 0), schemas.KindControl, c)
}

// refusalReason words a refused hello's error for the party's user.
func refusalReason(err error) string {
	msg := err.Error()
	for _, p := range []string{"aggregator: ", "schemas: wrong dimensions: ", "schemas: unsupported schema version: ", "schemas: value out of range: "} {
		msg = strings.TrimPrefix(msg, p)
	}
	switch {
	case errors.Is(err, schemas.ErrVersion):
		return "schema version " + msg + ": the participants run different asyrevel versions"
	case errors.Is(err, errHoldOutRevision):
		return msg
	case errors.Is(err, schemas.ErrShape):
		return msg + ": every participant must read the same data set (for a split folder: asyrevel data verify)"
	}
	return msg
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

// interrupted ends a run whose ctx is done: it tells the parties, and
// returns the result so far with ErrInterrupted.
func (a *Aggregator) interrupted(ctx context.Context, bus broker.Bus) (*Result, error) {
	cause := context.Cause(ctx)
	a.mu.Lock()
	reason := "interrupted: " + cause.Error()
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	a.ctx = pctx
	switch {
	case a.phase == training && a.cfg.OnCheckpoint != nil:
		// A pause, not an end: the state is saved and the parties are
		// told to save theirs and wait; the run goes on with --resume.
		a.control(schemas.CtlCheckpoint, 0, 0, reason+": the aggregator saved its state; it goes on when restarted with --resume")
		a.mu.Unlock()
		a.saveCheckpoint(pctx)
		a.mu.Lock()
		a.end()
	case a.phase != done:
		// The parties stop too; they need not wait for a deadline. (end
		// records the training time.)
		a.control(schemas.CtlStop, 0, 0, reason)
		a.seal(true)
		a.end()
	}
	a.stop.closed = true
	res := a.result()
	a.mu.Unlock()
	_ = bus.Flush(pctx)
	res.Interrupted = cause.Error()
	if n := len(res.Curve); n > 0 {
		res.Final = res.Curve[n-1]
	}
	return res, fmt.Errorf("%w: %w", ErrInterrupted, cause)
}

// ErrPaused is the cause of a run paused by Config.Pause.
var ErrPaused = errors.New("paused by its operator")

// pauseWait bounds how long a pause waits for what is in flight.
const pauseWait = 5 * time.Second

// pause pauses the run for cause (ErrPaused: Config.Pause; ErrNearlyFull:
// its stream nearly full): the parties are told to send no new request
// (CtlPause); the requests and evaluations in flight are answered and
// counted; then a seal covers the whole log, the parties countersign it,
// and the state is saved. Outside training, or without checkpoints or the
// trust layer, it is an interruption.
func (a *Aggregator) pause(ctx context.Context, bus broker.Bus, cause error) (*Result, error) {
	a.mu.Lock()
	if a.phase != training || a.cfg.OnCheckpoint == nil || a.tr == nil {
		a.mu.Unlock()
		pctx, cancel := context.WithCancelCause(ctx)
		cancel(cause)
		return a.interrupted(pctx, bus)
	}
	a.stop.pausing = true
	a.cfg.Log.Info().Int64("steps", a.res.Steps).Msg("pausing: answering what is in flight, then sealing the log and saving the state")
	why := "its operator stopped it"
	if errors.Is(cause, ErrNearlyFull) {
		why = "its stream is nearly full; give it a larger bound (--max-store, or free disk space)"
	}
	a.control(schemas.CtlPause, 0, 0, "the run pauses ("+why+"): every participant saves its state; --resume goes on")
	a.mu.Unlock()
	a.quiesce(ctx, bus)
	a.mu.Lock()
	a.releaseAllHeld()
	a.seal(false)
	a.mu.Unlock()
	a.saveCheckpoint(ctx)
	a.mu.Lock()
	a.end()
	a.stop.closed = true
	res := a.result()
	a.mu.Unlock()
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	_ = bus.Flush(fctx)
	cancel()
	res.Interrupted, res.Paused = cause.Error(), true
	if n := len(res.Curve); n > 0 {
		res.Final = res.Curve[n-1]
	}
	return res, fmt.Errorf("%w: %w", ErrInterrupted, cause)
}

// quiesce waits, for at most pauseWait, until no evaluation round is
// open and the requests subscription has delivered every request the
// stream holds, twice in a row 50 ms apart: the parties, told to pause,
// send none after what is in flight.
func (a *Aggregator) quiesce(ctx context.Context, bus broker.Bus) {
	filter := schemas.Filter(a.cfg.Run, schemas.KindOutput)
	end := time.Now().Add(pauseWait)
	quiet := 0
	for quiet < 2 && time.Now().Before(end) && ctx.Err() == nil {
		n, err := a.countRequests(ctx, bus, filter)
		a.mu.Lock()
		done := err == nil && a.outSeen >= n && a.eval.cur == nil
		a.mu.Unlock()
		if done {
			quiet++
		} else {
			quiet = 0
		}
		time.Sleep(50 * time.Millisecond)
	}
	if quiet < 2 {
		a.cfg.Log.Warn().Msg("pausing: requests or an evaluation still in flight after 5 s; sealing what arrived")
	}
}

func (a *Aggregator) result() *Result {
	r := a.res
	r.StopReason = a.stop.reason
	r.Params = append([]float64(nil), a.evalHead()...)
	if a.lf != nil && a.lf.params != nil {
		r.Params = slices.Clone(a.lf.params)
	}
	a.keep.result(&r)
	r.Defense = a.def.report(a.n)
	r.Leakage = a.def.leakReport(a.cfg.Labels)
	r.Leakage.Defense = &r.Defense
	r.Departed = map[int]string{}
	for m, why := range a.res.Departed {
		if a.departed[m] {
			r.Departed[m] = why
		}
	}
	if a.resumed != nil {
		rec := *a.resumed
		r.Recovery = &rec
	}
	if a.stats.staleN > 0 {
		r.MeanStaleness = a.stats.staleSum / float64(a.stats.staleN)
	}
	if o, ok := a.bus.(interface{ Outage() time.Duration }); ok {
		r.BrokerOutage = o.Outage()
	}
	return &r
}

// end marks the run done (a.mu held), once: a publish that failed on the
// way (a full stream, a closed connection) may have ended it already
// (fail), and fin must not be closed twice.
func (a *Aggregator) end() {
	if a.phase != done {
		a.stopClock()
		a.phase = done
		close(a.fin)
	}
}

func (a *Aggregator) fail(err error) {
	if a.err == nil && a.phase != done {
		a.err = fmt.Errorf("aggregator: %w", err)
		a.stopClock()
		a.phase = done
		close(a.fin)
	}
}

// stopClock records the training time when the run leaves the training
// phase for good (a.mu held). A run that failed while training, a
// publish cut by Ctrl-C say, reported 0 s of training (and 0 steps/s)
// when its interruption was handled after the failure.
func (a *Aggregator) stopClock() {
	if a.phase == training && !a.start.IsZero() {
		a.res.Training = time.Since(a.start)
	}
}

// publish sends m and returns its payload's size (0 if it failed, which
// fails the run).
func (a *Aggregator) publish(subject string, kind schemas.Kind, m schemas.Message) int {
	to := int(m.Head().Party)
	m.Head().Seq = a.nextSeq(kind, to)
	data, err := a.wire.enc.Marshal(m)
	if err != nil {
		a.fail(err)
		return 0
	}
	if a.recov.replaying {
		// Applying again what was published before a crash (recover).
		if kind != schemas.KindReply {
			return len(data)
		}
		a.replayPublish(data)
		a.res.Published[kind.String()]++
		a.res.BytesOut += int64(len(data))
		return len(data)
	}
	a.stamp(kind, to, data)
	// No dedupe id: see party.publish.
	a.wire.msg.Subject = subject
	a.wire.msg.Data = data
	if err := a.bus.Publish(a.ctx, &a.wire.msg); err != nil {
		a.fail(fmt.Errorf("publish %s: %w", kind, err))
		return 0
	}
	a.pub.outbox.Keep(m.Head().Seq, subject, data, a.wire.msg.Header)
	a.res.Published[kind.String()]++
	a.res.BytesOut += int64(len(data))
	a.stats.through += int64(len(data)) + storeOverhead
	a.holdRoom()
	return len(data)
}

func (a *Aggregator) control(op schemas.ControlKind, round uint32, splits uint8, reason string) {
	c := &schemas.Control{Header: schemas.Header{Version: schemas.Version}, Op: op, Round: round, Splits: splits, Reason: reason}
	if op == schemas.CtlStart {
		c.BatchSeed = a.def.batchSeed // 0 unless the aggregator draws the batches
	}
	a.publish(schemas.Subject(a.cfg.Run, schemas.KindControl, 0), schemas.KindControl, c)
}

func (a *Aggregator) reject(m int, err error) {
	r := reason(err)
	a.res.Rejected[r]++
	if errors.Is(err, errFromRefused) {
		return
	}
	if m >= 1 && m <= a.q {
		a.waits.lastReject[m] = truncate(err.Error(), 300)
		if a.join.refused[m] != "" && !a.hello[m] {
			return // the refusal was logged; the rest of that attempt is counted
		}
	}
	// A flood of forged messages is counted in full (Rejected) but logged
	// at a bounded rate, per party and reason.
	a.waits.rejectLog.Warn(a.cfg.Log, strconv.Itoa(m)+"/"+r).Int("party", m).Str("reason", r).Err(err).Msg("rejected message")
}

func (a *Aggregator) limits(m int) schemas.Limits {
	return schemas.Limits{Party: m, K: a.k, NTrain: a.n, NTest: len(a.cfg.TestLabels), MaxBatch: a.cfg.MaxBatch, MaxAbs: a.cfg.OutputBound, FirstOrder: a.cfg.FirstOrder}
}

// Subscriptions whose sequences are checked apart.
const (
	seqRequests = iota // PartyOutputs
	seqOther           // EvalOutputs
	seqHello           // Hellos
)

// seqOK enforces strictly increasing sequence numbers per sender and
// subscription c: a replayed or reordered message is rejected.
func (a *Aggregator) seqOK(c, m int, seq uint64) error {
	last := a.lastSeq[c]
	if seq <= last[m] {
		return fmt.Errorf("%w: party %d sequence %d after %d", schemas.ErrReplay, m, seq, last[m])
	}
	last[m] = seq
	return nil
}

// evalSpacing: evaluation rounds start at least this many times the last
// round's duration apart, so that they take at most about a tenth of the
// run whatever EvalEvery asks (each round scores the whole training and
// test sets: on a million samples a round takes seconds, not
// milliseconds).
const evalSpacing = 9

// drainWait bounds how long the aggregator waits, after the final
// evaluation, for the requests still on their way to it.
const drainWait = 2 * time.Second

// countRequests counts the requests (filter) the requests subscription
// has to deliver: from the floor after a resume (the subscription
// started there, Run), else all.
func (a *Aggregator) countRequests(ctx context.Context, bus broker.Bus, filter string) (uint64, error) {
	if r := a.resumed; r != nil && r.ReadFrom > 1 {
		return logread.CountFrom(ctx, bus, filter, r.ReadFrom)
	}
	return bus.Count(ctx, filter)
}

// drain waits until the requests subscription has delivered every
// PartyOutput the stream holds (at most drainWait), so that the requests
// sent before the stop reached the parties are counted as late: the two
// subscriptions are not ordered with each other, so the final evaluation
// may complete first.
func (a *Aggregator) drain(ctx context.Context, bus broker.Bus) {
	filter := schemas.Filter(a.cfg.Run, schemas.KindOutput)
	n, err := a.countRequests(ctx, bus, filter)
	if err != nil {
		a.cfg.Log.Warn().Err(err).Msg("counting the requests in the stream")
		return
	}
	t := time.NewTimer(drainWait)
	defer t.Stop()
	poll := time.NewTicker(2 * time.Millisecond)
	defer poll.Stop()
	for {
		a.mu.Lock()
		seen := a.outSeen
		a.mu.Unlock()
		if seen >= n {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			a.cfg.Log.Warn().Uint64("stream", n).Uint64("delivered", seen).Msg("requests still undelivered after the final evaluation")
			return
		case <-poll.C:
		}
	}
}

// handleOutputs is the handler of the requests subscription.
func (a *Aggregator) handleOutputs(ctx context.Context, d broker.Delivery) {
	a.awaitRound(ctx)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.outSeen++
	if a.cfg.EvalSteps > 0 && a.evalDue(time.Since(a.start)) {
		// An epoch since the last round: the next one scores the models
		// of exactly that many steps.
		a.requestEval(false)
	}
	a.handleLocked(d, true)
}

// handle is the handler of the other subscription (and serves any
// subject); it validates every delivery before it touches state.
func (a *Aggregator) handle(ctx context.Context, d broker.Delivery) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.handleLocked(d, false)
}

func (a *Aggregator) handleLocked(d broker.Delivery, requests bool) {
	defer d.Ack()
	if a.stop.closed {
		return
	}
	// After the final evaluation only late requests are still counted.
	if a.phase == done && (!requests || a.err != nil) {
		return
	}
	data := d.Data()
	a.res.BytesIn += int64(len(data))
	a.stats.through += int64(len(data)) + storeOverhead
	a.holdRoom()
	kind, m, err := schemas.ParseSubject(a.cfg.Run, d.Subject())
	if kind == schemas.KindEval && a.phase != joining {
		a.eval.bytes += int64(len(data)) // not the initial pass
	}
	if err == nil && m > a.q {
		err = fmt.Errorf("%w: party %d of a run with %d parties", schemas.ErrSubject, m, a.q)
	}
	if err != nil {
		a.reject(m, err)
		return
	}
	a.wire.dlv = d
	defer func() { a.wire.dlv = nil }()
	switch kind {
	case schemas.KindHello:
		err = a.onHello(m, data)
	case schemas.KindOutput:
		err = a.onOutput(m, data)
	case schemas.KindEval:
		err = a.onEval(m, data)
	default:
		err = fmt.Errorf("%w: %s on the aggregator's subscription", schemas.ErrSubject, kind)
	}
	if err != nil {
		if err == errApplied {
			a.resumed.Skipped++
			return
		}
		if err == errLateEval {
			a.res.LateEvals++
			return
		}
		if err == errStaleJoin {
			return
		}
		if kind == schemas.KindOutput {
			a.res.RejectedOutputs++
		}
		a.reject(m, err)
		return
	}
	a.res.Received[kind.String()]++
}

// onHello admits party m, or refuses it: a hello that is well formed but
// does not fit the run (schema version, k, sample counts, sample ids) is a
// setup error of that party, which is told why (CtlRefuse) and may join
// again; the run waits for it (Config.JoinWait). A hello that is not
// well formed or claims another party is only rejected.
func (a *Aggregator) onHello(m int, data []byte) error {
	if err := a.wire.dec.Unmarshal(data, &a.wire.hel); err != nil {
		return err
	}
	if err := a.verify(a.wire.hel.Seq); err != nil {
		return err
	}
	err := a.wire.hel.Validate(a.helloLimits(m, &a.wire.hel))
	seq := a.wire.hel.Seq
	switch {
	case errors.Is(err, schemas.ErrVersion):
		// Another version's header is not read: the refusal addresses
		// whatever party m sent.
		seq = 0
	case errors.Is(err, schemas.ErrParty) || seq == 0:
		return err
	case err != nil:
	case a.hello[m]:
		err = fmt.Errorf("%w: party %d has already joined this run (is another process running with --id %d?)", schemas.ErrState, m, m)
	case a.cfg.IDHash != "" && a.wire.hel.IDHash != a.cfg.IDHash:
		have := "no sample ids"
		if a.wire.hel.IDHash != "" {
			have = "ids with fingerprint " + a.wire.hel.IDHash
		}
		err = fmt.Errorf("%w: party %d's training samples are not the labels' (it has %s, the labels %s)", schemas.ErrShape, m, have, a.cfg.IDHash)
	}
	if err != nil {
		err = a.holdOutWords(m, &a.wire.hel, err)
		if a.phase != done {
			a.refuse(m, seq, err)
		}
		return err
	}
	if err := a.seqOK(seqHello, m, a.wire.hel.Seq); err != nil {
		return err
	}
	if admit, err := a.answersCall(m, &a.wire.hel); !admit {
		a.join.progress = time.Now()
		return err
	}
	a.hello[m] = true
	a.join.progress = time.Now()
	if a.join.refused[m] != "" {
		a.cfg.Log.Info().Int("party", m).Msg("refused party joined again")
		a.join.refused[m] = ""
	}
	a.cfg.Log.Debug().Int("party", m).Str("model", a.wire.hel.Model).Uint32("d", a.wire.hel.InDim).Msg("party joined")
	return nil
}

// errLateEval marks an evaluation chunk of a round that is over
// (Result.LateEvals).
var errLateEval = errors.New("evaluation of a round that is over")

// errFromRefused marks messages of a party whose hello was refused: they
// are counted, not logged one by one.
var errFromRefused = fmt.Errorf("%w: from a refused party", schemas.ErrState)

func (a *Aggregator) onOutput(m int, data []byte) error {
	if err := a.wire.dec.Unmarshal(data, &a.out); err != nil {
		return err
	}
	if err := a.verifyOutput(m, data); err != nil {
		return err
	}
	if err := a.out.Validate(a.limits(m)); err != nil {
		return err
	}
	if a.lf != nil {
		return errNoRequests
	}
	// A request applied before the resume: read again from the stream,
	// or sent again after the stream lost it (the reply held for it
	// follows it now, in any phase).
	again := a.resumed != nil && a.out.Seq <= a.lastSeq[seqRequests][m]
	if again {
		a.releaseHeld(m, a.out.Seq)
	}
	switch a.phase {
	case training:
	case stopping, done:
		if err := a.seqOK(seqRequests, m, a.out.Seq); err != nil {
			return err
		}
		a.waits.lastReq[m] = time.Now()
		a.res.LateOutputs++
		return nil
	default:
		return fmt.Errorf("%w: request from party %d before start", schemas.ErrState, m)
	}
	if again {
		return errApplied
	}
	if err := a.seqOK(seqRequests, m, a.out.Seq); err != nil {
		return err
	}
	if a.departed[m] {
		a.back(m)
	}
	if err := a.checkRequest(m, &a.out); err != nil {
		return err
	}
	a.waits.lastReq[m] = time.Now()
	// The reply names this request by content (Reply.Cause).
	a.wire.cause = schemas.RequestDigest(a.wire.cause[:0], data)
	switch {
	case a.cfg.Sync:
		return a.collect(m, &a.out, len(data))
	case a.cfg.FirstOrder:
		a.answerGrad(m, &a.out)
	default:
		a.answer(m, &a.out)
	}
	sent := a.publish(a.wire.subjReply[m], schemas.KindReply, &a.rep)
	a.res.StepBytes += int64(len(data) + sent)
	if sent == 0 && !a.recov.replaying {
		return nil // the reply was not sent (the run fails): not a step
	}
	a.res.Steps++
	a.wentOn()
	a.checkBudget()
	return nil
}

// answer runs the aggregator's part of one step: store the fresh c, compute
// h and h_bar per sample into the reply a.rep, then take the head's own ZO
// step. It does not allocate.
func (a *Aggregator) answer(m int, o *schemas.PartyOutput) {
	q, k, w := a.q, a.k, a.width
	head, y := a.cfg.Head, a.labels
	slot := (m - 1) * k
	a.def.boundOutputs(o)
	b := len(o.IDs)
	r := &a.rep
	r.Party, r.ReqSeq = uint16(m), o.Seq
	r.Cause = append(r.Cause[:0], a.wire.cause...)
	r.H, r.HBar, r.Delta = r.H[:0], r.HBar[:0], r.Delta[:0]
	var stale uint32
	vm := a.version[m]
	for j, id := range o.IDs {
		i := int(id)
		ver := a.ver[i*q : (i+1)*q]
		ver[m-1] = vm
		for p := 1; p <= q; p++ {
			if p != m {
				if s := a.version[p] - ver[p-1]; s > stale {
					stale = s
				}
			}
		}
		// The fresh c goes into the table first (kernel.Answer).
		h, hb := kernel.Answer(head, a.w0, a.table[i*w:(i+1)*w], slot, o.C[j*k:(j+1)*k], o.CHat[j*k:(j+1)*k], y[i])
		a.step.hh[j] = h
		a.def.emit(r, m, i, b, h, hb)
	}
	a.def.replied(m, o, r)
	r.Staleness = stale
	a.version[m]++
	a.recordStaleness(m, stale)

	a.stepHead(o.IDs)
}

// stepHead takes the head's own ZO step with its private direction u_0 on
// the samples ids, whose losses at w_0 are in a.step.hh.
func (a *Aggregator) stepHead(ids []uint32) {
	if len(a.w0) == 0 {
		return
	}
	if a.def.grad != nil {
		a.stepHeadGrad(ids)
		return
	}
	kernel.Direction(a.cfg.Dist, a.step.rng, a.cfg.Mu, a.w0, a.step.w0p, a.step.u0)
	var tap kernel.Tap
	if a.def.head {
		tap = &a.def
	}
	diff := kernel.HeadDiff(a.cfg.Head, a.step.w0p, a.table, a.width, ids, a.labels, a.step.hh, tap)
	a.def.endBatch(ids, false)
	diff += a.def.headNoise()
	if !kernel.Update(a.w0, a.step.u0, a.cfg.LR.At(int(a.res.Steps)), a.step.phi0, a.cfg.Mu, diff) {
		// Bounded outputs keep the losses finite; this guards the head's
		// parameters should a head overflow all the same.
		a.res.Rejected["nonfinite-step"]++
	}
}

// checkRequest enforces the defense's batch rules on a valid request o of
// party m (defense.admit).
func (a *Aggregator) checkRequest(m int, o *schemas.PartyOutput) error {
	return a.def.admit(m, o, a.version[m], a.n)
}

// stepHeadGrad is the head's first-order step (Defense.HeadClip), which
// the defense takes on the aggregator's head.
func (a *Aggregator) stepHeadGrad(ids []uint32) {
	in := headIn{head: a.cfg.Head.(*model.Softmax), w0: a.w0, table: a.table, width: a.width, n: a.n,
		labels: a.labels, lr: a.cfg.LR.At(int(a.res.Steps))}
	a.def.stepHeadGrad(&in, ids)
}

// evalHead is the head's parameters used to evaluate and returned
// (defense.evalHead).
func (a *Aggregator) evalHead() []float64 { return a.def.evalHead(a.w0) }

func (a *Aggregator) onEval(m int, data []byte) error {
	ev := &a.wire.ev
	if err := a.wire.dec.Unmarshal(data, ev); err != nil {
		return err
	}
	if err := a.verify(ev.Seq); err != nil {
		return err
	}
	if err := ev.Validate(a.limits(m)); err != nil {
		return err
	}
	if err := a.checkCodes(ev.C); err != nil {
		return err
	}
	a.def.boundEval(ev.C)
	if ev.Split == schemas.SplitInit {
		if !a.hello[m] {
			switch {
			case a.join.refused[m] != "":
				return errFromRefused
			case a.join.called[m] != 0:
				return errStaleJoin // an attempt not admitted: a dead one's, or before its call
			}
			return fmt.Errorf("%w: initial pass from party %d before its hello", schemas.ErrState, m)
		}
		if a.phase != joining || ev.First != a.join.initAt[m] {
			return fmt.Errorf("%w: initial pass chunk at %d from party %d, expected %d", schemas.ErrState, ev.First, m, a.join.initAt[m])
		}
		if err := a.seqOK(seqOther, m, ev.Seq); err != nil {
			return err
		}
		a.store(a.table, m, ev)
		a.join.progress = time.Now()
		a.join.initAt[m] += uint32(len(ev.C) / a.k)
		if int(a.join.initAt[m]) == a.n {
			a.join.rem--
			if a.join.rem == 0 {
				a.begin()
			}
		}
		return nil
	}
	cur := a.eval.cur
	if cur == nil || ev.Round != cur.id {
		if ev.Round > 0 && ev.Round <= a.eval.rounds {
			// A round asked for and over: the answer of a party that was
			// late, or that answered it again after a resume (its
			// checkpoint predates the request, which it read again from
			// the stream). Counted, not scored, and not a rejection.
			if err := a.seqOK(seqOther, m, ev.Seq); err != nil {
				return err
			}
			return errLateEval
		}
		return fmt.Errorf("%w: eval output for round %d from party %d, round in progress %v", schemas.ErrState, ev.Round, m, cur != nil)
	}
	s := 0
	if ev.Split == schemas.SplitTest {
		s = 1
	}
	want := schemas.EvalTrain
	if s == 1 {
		want = schemas.EvalTest
	}
	if cur.splits&want == 0 || ev.First != cur.next[m][s] {
		return fmt.Errorf("%w: %s chunk at %d from party %d, expected %d", schemas.ErrState, ev.Split, ev.First, m, cur.next[m][s])
	}
	if err := a.seqOK(seqOther, m, ev.Seq); err != nil {
		return err
	}
	a.store(a.eval.tables[s], m, ev)
	cur.progress = time.Now()
	cur.next[m][s] += uint32(len(ev.C) / a.k)
	if cur.next[m][s] == ev.Total && cur.wait[m] {
		if a.roundDone(cur, m) {
			cur.answered = time.Since(cur.requested)
		}
		cur.remaining--
		if cur.remaining == 0 {
			a.score(cur)
		}
	}
	return nil
}

// store copies an eval chunk of party m into table t.
func (a *Aggregator) store(t []float64, m int, ev *schemas.EvalOutput) {
	k, w := a.k, a.width
	slot := (m - 1) * k
	for j := 0; j < len(ev.C)/k; j++ {
		i := int(ev.First) + j
		copy(t[i*w+slot:i*w+slot+k], ev.C[j*k:(j+1)*k])
	}
}

func (a *Aggregator) begin() {
	a.phase = training
	a.res.Started = true
	a.recov.ckNow = true // the first checkpoint: the table is full
	a.start = time.Now()
	a.cfg.Log.Info().Int("parties", a.q).Int("samples", a.n).Msg("table filled; training starts")
	a.control(schemas.CtlStart, 0, 0, "")
	a.requestEval(false)
}

func (a *Aggregator) beginStop(reason string) {
	if a.phase != training {
		return
	}
	a.phase = stopping
	a.res.Training = time.Since(a.start)
	a.cfg.Log.Info().Str("reason", reason).Int64("steps", a.res.Steps).Msg("stopping; final evaluation")
	a.stop.reason = reason
	if a.eval.cur == nil {
		a.requestEval(true)
	}
	// Otherwise the final evaluation follows the one in progress (score).
}

func (a *Aggregator) requestEval(final bool) {
	// Every round scores the current models on the whole training set (the
	// table's outputs are stale and would overstate the loss) and the test set.
	splits := schemas.EvalTrain
	if a.lf != nil {
		splits = 0 // a label-free party's training codes are the table's
	}
	if len(a.cfg.TestLabels) > 0 {
		splits |= schemas.EvalTest
	}
	if splits == 0 {
		// A label-free run without a test set: nothing to ask the
		// parties (an evaluation of no split is refused by them).
		a.score(&round{id: a.eval.rounds, at: time.Since(a.start), final: final, next: make([][2]uint32, a.q+1), wait: make([]bool, a.q+1)})
		return
	}
	a.eval.rounds++
	a.eval.here++
	r := &round{id: a.eval.rounds, splits: splits, steps: a.res.Steps, final: final, next: make([][2]uint32, a.q+1), wait: make([]bool, a.q+1)}
	present := 0
	for m := 1; m <= a.q; m++ {
		if !a.departed[m] {
			r.wait[m] = true
			present++
		} else {
			r.without = true
		}
	}
	r.at = time.Since(a.start)
	r.requested = time.Now()
	r.progress = r.requested
	if final {
		r.at = a.res.Training
	}
	r.msgs = a.msgCount()
	a.evalRequested(r)
	for _, s := range []struct {
		bit uint8
		i   int
		n   int
	}{{schemas.EvalTrain, 0, a.n}, {schemas.EvalTest, 1, len(a.cfg.TestLabels)}} {
		if splits&s.bit != 0 {
			r.remaining += present
			if a.eval.tables[s.i] == nil {
				a.eval.tables[s.i] = make([]float64, s.n*a.width)
			}
		}
	}
	a.eval.cur = r
	// The round best so far is named: the parties may let the others go.
	a.publish(schemas.Subject(a.cfg.Run, schemas.KindControl, 0), schemas.KindControl,
		&schemas.Control{Header: schemas.Header{Version: schemas.Version}, Op: schemas.CtlEval, Round: r.id, Splits: splits, Keep: a.keep.named()})
	if r.remaining == 0 {
		a.score(r) // every party has departed: the last outputs
	}
}

// missing names the parties that have not finished their part of round r,
// with the reason of the latest rejection of each, if any.
func (a *Aggregator) missing(r *round) string {
	var ps, why []string
	for m := 1; m <= a.q; m++ {
		if r.wait[m] && (r.splits&schemas.EvalTrain != 0 && int(r.next[m][0]) < a.n) ||
			r.wait[m] && (r.splits&schemas.EvalTest != 0 && int(r.next[m][1]) < len(a.cfg.TestLabels)) {
			ps = append(ps, strconv.Itoa(m))
			if a.waits.lastReject[m] != "" {
				why = append(why, fmt.Sprintf("party %d's last rejected message: %s", m, a.waits.lastReject[m]))
			}
		}
	}
	s := "party " + strings.Join(ps, ", ")
	if len(why) > 0 {
		s += " (" + strings.Join(why, "; ") + ")"
	}
	return s
}

func (a *Aggregator) msgCount() int64 {
	var n int64
	for _, v := range a.res.Received {
		n += v
	}
	for _, v := range a.res.Published {
		n += v
	}
	return n
}

// scoreRows is the head's accuracy and mean loss on the rows [from, to)
// of the test split's table.
func (a *Aggregator) scoreRows(from, to int) (acc, loss float64) {
	w := a.width
	t, y := a.eval.tables[1], a.cfg.TestLabels
	correct := 0
	for i := from; i < to; i++ {
		c := t[i*w : (i+1)*w]
		if a.cfg.Head.Predict(a.evalHead(), c) == y[i] {
			correct++
		}
		loss += a.cfg.Head.Loss(a.evalHead(), c, y[i])
	}
	n := float64(to - from)
	return float64(correct) / n, loss / n
}

func (a *Aggregator) meanLoss(t []float64, y []int32) float64 {
	var s float64
	w := a.width
	for i, yi := range y {
		s += a.cfg.Head.Loss(a.evalHead(), t[i*w:(i+1)*w], yi)
	}
	return s / float64(len(y))
}

func (a *Aggregator) score(r *round) {
	a.eval.cur = nil
	if r.scored != nil {
		close(r.scored)
	}
	if a.lf != nil && a.scoreLabelFree(r) {
		return
	}
	if !r.final && !r.without {
		a.roundScored(r, time.Now(), a.outageSince(r.requested))
	}
	if r.without {
		a.res.EvalsWithout++
	}
	var stale []int
	for m := 1; m <= a.q; m++ {
		if r.wait[m] {
			a.eval.silent[m] = false // it answered this round
			continue
		}
		stale = append(stale, m)
		if a.res.StaleEvals == nil {
			a.res.StaleEvals = map[int]int64{}
		}
		a.res.StaleEvals[m]++
	}
	pt := Point{
		Round:           r.id,
		Seconds:         r.at.Seconds(),
		Steps:           r.steps,
		TrainLoss:       math.NaN(),
		TestAccuracy:    math.NaN(),
		TestLoss:        math.NaN(),
		HeldOutLoss:     math.NaN(),
		HeldOutAccuracy: math.NaN(),
		MaxStaleness:    a.res.MaxStaleness,
		Final:           r.final,
		Stale:           stale,
	}
	if r.splits&schemas.EvalTrain != 0 {
		pt.TrainLoss = a.meanLoss(a.eval.tables[0], a.cfg.Labels)
	}
	if r.splits&schemas.EvalTest != 0 {
		h, n := a.cfg.HeldOut, len(a.cfg.TestLabels)
		if h > 0 {
			pt.HeldOutAccuracy, pt.HeldOutLoss = a.scoreRows(0, h)
		}
		if h < n {
			pt.TestAccuracy, pt.TestLoss = a.scoreRows(h, n)
		} else {
			// No test set: the held-out rows stand in its columns (the
			// report calls them held-out).
			pt.TestAccuracy, pt.TestLoss = pt.HeldOutAccuracy, pt.HeldOutLoss
		}
	}
	a.keep.offer(r, &pt, a.evalHead())
	if dt := r.at - a.eval.lastPt.at; dt > 0 {
		pt.MsgsPerSec = float64(r.msgs-a.eval.lastPt.msgs) / dt.Seconds()
	}
	a.eval.lastPt.at, a.eval.lastPt.msgs = r.at, r.msgs
	a.res.Curve = append(a.res.Curve, pt)
	if a.cfg.TargetAcc > 0 && a.res.TimeToTarget < 0 && pt.TestAccuracy >= a.cfg.TargetAcc {
		a.res.TimeToTarget = pt.Seconds
	}
	if a.cfg.OnPoint != nil {
		a.cfg.OnPoint(pt)
	}
	switch {
	case r.final:
		a.res.Final = pt
		a.res.Steps = r.steps
		// Every participant keeps its model of the round named (keep.go).
		a.control(schemas.CtlStop, a.keep.stop(), 0, a.stop.reason)
		if a.phase != done {
			a.phase = done
			close(a.fin)
		}
	case a.phase == stopping:
		a.requestEval(true)
	case a.stop.pausing:
		// The run pauses: a stop condition is for the resume to see.
	case a.cfg.StopAtTarget && a.res.TimeToTarget >= 0:
		a.beginStop("target accuracy reached")
	case a.cfg.StopWhen != nil && a.cfg.StopWhen():
		reason := "stop condition met"
		if a.cfg.StopReason != nil {
			reason = cmp.Or(a.cfg.StopReason(), reason)
		}
		a.beginStop(reason)
	}
}
