package run

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/asyrevel/asyrevel/aggregator"
	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/logread"
	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/observe"
	"github.com/asyrevel/asyrevel/party"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/trust"
	"github.com/asyrevel/asyrevel/zoo"
)

// ErrConfig reports an unusable Config.
var ErrConfig = errors.New("invalid settings")

// Algorithms that Train runs (see algo.go).
var Algorithms = []string{"asyrevel-gau", "asyrevel-uni", "synrevel-gau", "synrevel-uni", "tig", "nonf"}

// Config is one training run; the fields mirror `asyrevel train`. It is
// made of the parts each role reads: Training (data, model and
// hyper-parameters, which every participant of a run must agree on),
// Aggregation (the aggregator's: when the run stops, evaluation, replies),
// Party (what experiments inject into parties), Protection (label privacy),
// Recovery (checkpoints and resumption) and Net (broker, run id, keys:
// every role). Build one with Defaults or New: a zero value is a value,
// never "unset" (see Defaults).
type Config struct {
	Training
	Aggregation
	Party
	Protection
	Recovery
	Net

	Out string // output directory for summary.json, curve.csv, curve.png ("" = none)
	// ReplaceOut: a run of Train into an Out that holds an earlier run
	// removes that run (its log, keys, receipts, checkpoints, models and
	// outputs) instead of keeping it in OUT/earlier (store.go, keepEarlier).
	ReplaceOut bool
	Log        zerolog.Logger
	// Monitor: Prometheus metrics, the live board, the report page (watch.go).
	Monitor Monitor

	trust *runTrust
	early *earlyStop  // the early stopping of the run's aggregator (stop.go)
	stuck *stuckWatch // the stop of a run that does not learn (stuck.go)
	// evalByEpoch: EvalEvery was derived and the evaluations decide
	// (Patience, HoldOut): they also come once an epoch
	// (aggregator.Config.EvalSteps); a period given by the caller
	// (--eval-every, an experiment's) is kept as it is.
	evalByEpoch bool
	heal        *healState // set when the participant resumes by itself after a lost broker connection (heal.go)

	// watch is the process's metrics and board (watch.go); nil without.
	watch *observe.Watch

	// hooks are the run's Hooks (Train, Aggregate, Participate): the
	// working state of a run, never its settings.
	hooks Hooks
}

// Training is the data, model and hyper-parameters of a run: what the
// aggregator and every party must agree on. Fields marked "derived" are
// filled in by Config.Prepare when 0.
type Training struct {
	Data         string                   // training set path
	Preset       string                   // named preprocessing recipe (dataset.LookupPreset)
	Test         string                   // test set path ("" = none)
	CSV          dataset.CSVOptions       // how a CSV file is read (label and id columns, categorical columns, rows to skip)
	Scale        dataset.ScaleMethod      // scaling of each party's columns, fitted on the training set ("" = none)
	Synthetic    *dataset.SyntheticConfig // used instead of Data when set (Hooks.Loaded comes first)
	Parties      int                      // q (derived: a split folder's own count, else 8; 1 for nonf)
	Algo         string                   // one of Algorithms
	Model        string                   // linear | mlp | external
	Hidden       int                      // MLP hidden units
	ModelCmd     string                   // the external model's command line (--model external)
	ModelTimeout time.Duration            // per call of an external model (0 = its default)
	K            int                      // outputs per party for multiclass sets (derived: 1; 8 for nonf, the paper's 8-party width)
	Codes        int                      // a codebook's codes per output (the label-free profile; derived from the training rows)
	NoBias       bool                     // binary sets: no intercept in the head (the paper's F_0)

	// HoldOut is the share of the training rows kept aside, never trained
	// on, to choose the model kept and to measure the held-out loss of
	// early stopping (holdout.go; derived: DefaultHoldOut when early
	// stopping is on; <0: none, the training loss is watched instead and
	// the last model kept). A hold-out is applied whenever HoldOut > 0,
	// with or without a test set (a label-free run's: without one only).
	HoldOut float64

	LR      float64 // initial party step size (derived: by model and batch size)
	LRDecay float64 // step-size decay scale in samples per party (0 = half the training set, <0 = constant)
	// PartyEMA: each party evaluates an exponential moving average of its
	// parameters with this decay (0: its iterate).
	PartyEMA float64
	HeadLR   float64 // initial step size of the aggregator's head (derived: DefaultHeadLR)
	Mu       float64 // smoothing
	Lambda   float64 // regularisation weight (0 turns the regulariser off)
	Reg      string  // nonconvex | l2 | none
	Batch    int     // samples per request (derived: 64, MLPBatch for mlp; the paper's algorithm is 1)
	Window   int     // requests in flight per party (derived: 8, MLPWindow for mlp, 1 for synrevel; the paper's algorithm is 1)
	Seed     uint64
}

// Aggregation is what the aggregator alone reads: the run's length, early
// stopping, evaluation, the form of its replies and its hooks.
type Aggregation struct {
	Epochs   float64       // passes over the training set per party (0 = unlimited)
	Duration time.Duration // training time limit (0 = unlimited)
	MaxSteps int64         // answered requests limit (0 = unlimited)

	// Early stopping (stop.go): the run stops when Patience epochs go by
	// without the held-out loss falling by Tolerance (relative) below its
	// best. Patience 0 is derived: DefaultPatience when no length
	// (Epochs, Duration, MaxSteps, StopAtTarget) is given, else off; <0:
	// off. The held-out loss is that of Training.HoldOut's rows (without
	// them, the training loss is watched); the test set never counts.
	Patience  float64
	Tolerance float64

	Delta    bool // reply only h_bar - h
	MaxBatch int

	// EmbedDim and EmbedHidden shape the label-free profile's head (an
	// embedding of each code, a hidden layer; set by the privacy switch).
	EmbedDim, EmbedHidden int

	EvalEvery    time.Duration // evaluation period (derived: 1s, or Duration/40)
	TargetAcc    float64
	StopAtTarget bool

	// PartyTimeout is how long an evaluation waits for a silent party
	// before training goes on without it (0 = the aggregator's default,
	// <0 = never: the evaluation waits Wait and the run aborts).
	PartyTimeout time.Duration
}

// Party is what experiments inject into the parties: simulated compute, a
// straggler, a silent party (attackers are Hooks).
type Party struct {
	// Simulated compute (experiment fig4 and fig3): each step of party m
	// lasts its measured compute plus SimCompute times its model's number
	// of parameters, and Straggler's steps are StragglerFactor times as
	// long (a delay proportional to their measured and simulated compute).
	SimCompute      time.Duration // per model parameter and step (0 = real compute only)
	Straggler       int           // party id of the straggler (0 = none)
	StragglerFactor float64       // its slowdown, e.g. 1.6
	// EvalSilent is a party (id) that never answers evaluation requests
	// while it trains: a fault to inject (tests, experiment faults).
	EvalSilent int
}

// Protection is the protection of the labels.
type Protection struct {
	// Defense protects the labels (replies, noise, randomised response,
	// batches drawn by the aggregator, output bounds): defense.go.
	Defense DefenseConfig
	// Privacy is the --privacy switch (off, auc=A, epsilon=E[,delta=D]):
	// once the data are loaded it sets a defended configuration for the
	// data set and model at hand (privacy.go), leaving alone the settings
	// named in Explicit (flag names the run gave itself); "" leaves the
	// configuration as the fields say. PrivacyDefault says that the run
	// gave no switch (the command line's default), so that a run without
	// a defense (tig) falls back to off instead of failing. PrivacyChoice
	// is what it chose.
	Privacy        string
	PrivacyDefault bool
	Explicit       map[string]bool
	PrivacyChoice  *PrivacyChoice
	// LabelFree: the privacy switch chose the label-free profile
	// (labelfree.go): the parties' models are codebooks, the head an
	// embedding head fitted by the aggregator alone.
	LabelFree bool
	// NoLeakage skips privacy.json (what each party's view reveals).
	NoLeakage bool
}

// Recovery is checkpointing and resumption (checkpoint.go): CheckpointDir,
// if set, is where each participant saves its state
// (DIR/RUN/aggregator.ckpt, party-M.ckpt) every CheckpointEvery (0 = 10s,
// <0 = never) and when interrupted; Resume restarts from those files and
// the run's stream.
type Recovery struct {
	CheckpointDir   string
	CheckpointEvery time.Duration
	Resume          bool
}

// Net is what every role reads to reach the others: the broker, the run
// id, the waits, keys and roster.
type Net struct {
	Run      string // run id ("" = generated)
	Bus      string // jetstream | memory
	Design   string // transport design over NATS: capture (default), core, ordered or acked (broker.Design)
	Persist  string // when the stream writes to its files: sync or async (default: async on the embedded broker, sync on an external one)
	Compress string // the stream's store compression: none (default) or s2 (server 2.10+)
	// MaxStore bounds the run's stream in bytes (when this process
	// creates it): full, it refuses new messages and the run stops with
	// broker.ErrStreamFull; it never drops old ones. 0: the embedded
	// broker's default, 80% of the disk space free at its store when the
	// run starts; an external broker's stream is then unbounded (its
	// account limits apply). -1: unbounded.
	MaxStore int64
	// BrokerWait is how long a participant waits for its broker to be
	// reachable and its JetStream available (0: not at all; the command
	// line's default is DefaultBrokerWait).
	BrokerWait time.Duration
	NATS       string // external server URL ("" = embedded)
	InProcess  bool   // connect to the embedded server in-process instead of over TCP loopback
	Cluster    int    // run an embedded JetStream cluster of this many nodes (stream replicated on min(3, N))
	StoreDir   string // embedded server store ("" = OUT/stream, or a temporary directory)

	// ClusterURLs: the participants of an embedded cluster connect as
	// separate processes given every node's URL do (--nats URL1,URL2,URL3):
	// a home node first, with the fail-over publisher
	// (broker.JetStreamConfig.Retry). For the throughput experiment.
	ClusterURLs bool

	// Waits (0 = the runtimes' defaults): JoinWait bounds the join phase
	// without progress (the aggregator) and the wait for the start (a
	// party); Wait bounds an evaluation without an answer (the aggregator)
	// and the aggregator's silence while requests are in flight (a party);
	// Notice is how often a wait is logged.
	JoinWait, Wait, Notice time.Duration

	// Trust: keys, roster, signatures, receipts (trust.go).
	Trust TrustConfig
	// TLS, for a connection to an external broker (NATS set): the
	// participant's certificate and key (mutual TLS, both or neither) and
	// the authorities that sign the broker's certificate. The embedded
	// broker listens on loopback only and takes no TLS.
	TLS trust.TLSFiles
}

// Summary is the outcome of a run, written to summary.json.
type Summary struct {
	Algo          string  `json:"algo"`
	Dataset       string  `json:"dataset"`
	Parties       int     `json:"parties"`
	Model         string  `json:"model"`
	Steps         int64   `json:"steps"`
	WallSeconds   float64 `json:"wall_seconds"`
	TrainSeconds  float64 `json:"train_seconds"`
	SetupSeconds  float64 `json:"setup_seconds"`
	TrainLoss     float64 `json:"train_loss"`
	TestAccuracy  float64 `json:"test_accuracy"`
	TestLoss      float64 `json:"test_loss"`
	TimeToTarget  float64 `json:"time_to_target,omitempty"`
	TargetAcc     float64 `json:"target_accuracy,omitempty"`
	MessagesUp    int64   `json:"messages_up"`
	MessagesDown  int64   `json:"messages_down"`
	BytesUp       int64   `json:"bytes_up"`
	BytesDown     int64   `json:"bytes_down"`
	MaxStaleness  uint32  `json:"max_staleness"`
	MeanStaleness float64 `json:"mean_staleness"`
	StepsPerSec   float64 `json:"steps_per_second"`
	StepBytes     int64   `json:"step_bytes"`           // payload bytes of the training steps alone (outputs answered and their replies)
	WireBytes     int64   `json:"wire_bytes,omitempty"` // bytes on the broker connections, both ways (train: all of them; aggregator: its own)
	Design        string  `json:"design"`               // transport design (broker.Design)
	// MessagesSent counts every message the parties and the aggregator
	// published (train only: a process that runs one participant knows
	// only its own); MessagesStored the run's messages in the log after
	// the run (-1 for a design without a log). Lost is their difference
	// when both are known.
	MessagesSent   int64 `json:"messages_sent,omitempty"`
	MessagesStored int64 `json:"messages_stored"`
	Lost           int64 `json:"lost,omitempty"`
	// Dropped counts live deliveries lost by subscriptions that fell
	// behind (core designs; the stream still has them with capture).
	Dropped int64 `json:"dropped,omitempty"`

	PartySteps  []int64          `json:"party_steps,omitempty"` // updates each party applied (Train only)
	Outputs     int64            `json:"outputs"`               // PartyOutputs consumed by the aggregator
	Replies     int64            `json:"replies"`               // Replies published
	LateOutputs int64            `json:"late_outputs"`          // PartyOutputs after the stop, not answered
	Rejected    map[string]int64 `json:"rejected"`              // by reason, aggregator and parties
	Stream      *StreamCounts    `json:"stream,omitempty"`

	// Interrupted says why the run was cut short (a signal); the figures
	// are those of the part that ran, the accuracy the last evaluation's.
	Interrupted string `json:"interrupted,omitempty"`
	// OutputsErr says why the output folder could not be written (a full
	// disk): the summary exists only in memory and on the screen.
	OutputsErr string `json:"-"`
	// StoppedBy is the limit that ended the training: epochs, steps,
	// duration, target, patience (the held-out loss stopped improving),
	// condition (an experiment's), or interrupted. EarlyStop says what
	// early stopping watched (with Config.Patience).
	StoppedBy string `json:"stopped_by,omitempty"`
	// LabelFree is what a label-free run's head fit did (the privacy
	// switch's label-free profile): its epochs, the best one on the
	// held-out training rows, which is the head kept.
	LabelFree *aggregator.FitReport `json:"label_free,omitempty"`
	EarlyStop *EarlyStopReport      `json:"early_stop,omitempty"`
	// Kept is the model every participant kept and saved: the evaluation
	// best on the held-out rows, or the last one and why (kept.go). The
	// summary's train_loss, test_accuracy and test_loss are its.
	Kept *KeptModel `json:"kept_model,omitempty"`
	// HeldOutRows is the training rows held out (holdout.go); with
	// HeldOutAsTest, the run has no test set and the test figures are
	// theirs.
	HeldOutRows   int  `json:"held_out_rows,omitempty"`
	HeldOutAsTest bool `json:"held_out_as_test,omitempty"`
	// EvalWaitSeconds is how long training waited for evaluation rounds
	// (one at least every epoch: on a small table a round takes longer
	// than an epoch).
	EvalWaitSeconds float64 `json:"eval_wait_seconds,omitempty"`
	// Stuck says why a run that did not learn was stopped (stopped_by
	// "stuck", stuck.go).
	Stuck string `json:"stuck,omitempty"`
	// Warnings are the signs that the run did not learn (accuracy at the
	// share of the largest class, a growing loss, a flat model) with their
	// likely causes, and data warnings (unscaled columns).
	Warnings []string `json:"warnings,omitempty"`
	// Refused lists the refusals of parties at join time, by party.
	Refused map[int]string `json:"refused,omitempty"`
	// Departed lists the parties that left (an evaluation stopped waiting
	// for them, --party-timeout) and had not come back at the end, and
	// why; PartyTimeouts counts departures, Returned the parties that came
	// back, EvalsWithout the evaluations scored with a departed party's
	// last outputs. Resumed is what a resumed aggregator applied again
	// from the stream.
	Departed      map[int]string `json:"departed,omitempty"`
	PartyTimeouts int64          `json:"party_timeouts,omitempty"`
	Returned      int64          `json:"returned,omitempty"`
	EvalsWithout  int64          `json:"evals_without_departed,omitempty"`
	// StaleEvals counts, by party, the evaluations scored with its last
	// outputs because it did not answer in time; FinalStale lists the
	// parties whose last outputs the final evaluation used.
	StaleEvals map[int]int64 `json:"stale_evaluations,omitempty"`
	// BrokerOutage is how long the aggregator's connection to the broker
	// was down during the run (s).
	BrokerOutage float64 `json:"broker_outage_seconds,omitempty"`
	// BrokerResumes counts the times the aggregator resumed by itself
	// from its checkpoint and the stream after its broker connection was
	// lost (a broker crash and restart): no one restarted anything.
	BrokerResumes int `json:"broker_resumes,omitempty"`
	// PartyRepliesFrom is, per party resumed with the trust layer, the
	// stream sequence its resume read the replies from (1: the start;
	// 0: not resumed).
	PartyRepliesFrom []uint64 `json:"party_replies_read_from,omitempty"`
	// PartyEvalsFrom is, per resumed party, the stream sequence its
	// resume read its own evaluation outputs from (1: the start; 0: not
	// resumed); PartyEvalChunksLost the evaluation chunks the parties'
	// checkpoints counted as sent that the stream lacked.
	PartyEvalsFrom      []uint64             `json:"party_evals_read_from,omitempty"`
	PartyEvalChunksLost int                  `json:"party_eval_chunks_lost,omitempty"`
	FinalStale          []int                `json:"final_stale_parties,omitempty"`
	Resumed             *aggregator.Recovery `json:"resumed,omitempty"`

	// Store is the embedded broker's store directory ("" for a temporary
	// one or an external broker); StoreBytes its size on disk after the
	// run. StreamBytes is the size of the run's stream as the broker
	// reports it.
	Store       string `json:"store,omitempty"`
	StoreBytes  int64  `json:"store_bytes,omitempty"`
	StreamBytes uint64 `json:"stream_bytes,omitempty"`

	Batch  int `json:"batch"`
	Window int `json:"window"`

	Straggler  string  `json:"straggler,omitempty"`                // "M:S"
	SimCompute float64 `json:"sim_compute_us_per_param,omitempty"` // simulated compute per parameter and step
	LR         string  `json:"lr"`
	Mu         float64 `json:"mu"`
	Lambda     float64 `json:"lambda"`
	Bus        string  `json:"bus"`
	Run        string  `json:"run"`
	Seed       uint64  `json:"seed"`
	Samples    int     `json:"train_samples"`
	Tests      int     `json:"test_samples"`

	// Defense is the defense in force, what it did and the label privacy
	// accounting; Settings what re-execution needs.
	Defense  *aggregator.DefenseReport `json:"defense,omitempty"`
	Settings Settings                  `json:"settings"`
	// Privacy is what the --privacy switch chose.
	Privacy *PrivacyChoice `json:"privacy,omitempty"`
	// HeadParams are the aggregator's final head parameters (w0).
	HeadParams []float64 `json:"head_params,omitempty"`

	Curve   []aggregator.Point  `json:"-"`
	Leakage *aggregator.Leakage `json:"-"` // privacy.json

	rejectedOutputs int64 // PartyOutputs the aggregator rejected
}

// StreamCounts are the messages the run's stream holds after the run, by kind.
type StreamCounts struct {
	Hello   uint64 `json:"join"`
	Outputs uint64 `json:"out"`
	Replies uint64 `json:"reply"`
	Evals   uint64 `json:"eval"`
	Control uint64 `json:"ctl"`
	// Receipts are the parties' countersigned checkpoints (trust layer).
	Receipts uint64 `json:"rcpt,omitempty"`
}

// Defaults is a Config with every fixed default set: the one place where
// they live. The command line's flags take their defaults from it, and a
// program builds its Config from it (New). A zero value in a Config is a
// value, never "unset": Mu 0 or Hidden 0 are refused by Validate, Lambda 0
// turns the regulariser off, Tolerance 0 counts any fall of the held-out
// loss. The settings whose default depends on other settings or on the
// data (Parties, K, Batch, Window, LR, HeadLR, Patience, HoldOut,
// EvalEvery, Run, Design) are derived by Prepare; their fields say so.
func Defaults() Config {
	var c Config
	c.Training = Training{
		Algo:   "asyrevel-gau",
		Model:  "linear",
		Hidden: 128,
		Mu:     1e-3,
		Lambda: DefaultLambda,
		Reg:    "nonconvex",
	}
	c.Aggregation = Aggregation{Tolerance: DefaultTolerance}
	c.Net = Net{Bus: "jetstream"}
	return c
}

// New is Defaults with set applied: how a program builds a Config.
func New(set func(c *Config)) Config {
	c := Defaults()
	if set != nil {
		set(&c)
	}
	return c
}

// Prepare derives the settings left to derive and validates the result.
// Train, Aggregate and Participate call it; it is exported for
// command-line tools that want to report errors before loading data.
func (c *Config) Prepare() error {
	if err := c.derive(); err != nil {
		return err
	}
	return c.Validate()
}

// derive fills in the settings whose default depends on other settings or
// on the data, where the field holds its documented "derive" value (0 for
// a count, step size or period, which cannot be 0; "" for the run id and
// the transport design). It sets nothing that Defaults sets.
func (c *Config) derive() error {
	algo, err := LookupAlgo(c.Algo)
	if err != nil {
		return err
	}
	if err := algo.defaults(c); err != nil {
		return err
	}
	if c.Parties == 0 && c.Synthetic == nil && c.hooks.Loaded == nil && c.Data != "" && dataset.IsSplit(c.Data) {
		// A split folder says how many parties it was split for; a
		// manifest that cannot be read is reported when the data are.
		if man, err := dataset.ReadManifest(c.Data); err == nil {
			c.Parties = man.Q
		}
	}
	if c.Parties == 0 {
		c.Parties = 8
	}
	if c.K == 0 {
		c.K = 1
	}
	if c.Batch == 0 {
		c.Batch = 64
		if c.Model == "mlp" {
			c.Batch = MLPBatch
		}
	}
	if c.Window == 0 {
		c.Window = 8
		if c.Model == "mlp" {
			c.Window = MLPWindow
		}
	}
	if c.LR == 0 {
		c.LR = algo.defaultLR(c.Model, c.Batch)
	}
	if c.HeadLR == 0 {
		c.HeadLR = algo.defaultHeadLR()
	}
	if c.Patience == 0 && c.Unbounded() {
		c.Patience = DefaultPatience
	}
	if c.Patience > 0 && c.HoldOut == 0 {
		c.HoldOut = DefaultHoldOut
	}
	if c.EvalEvery == 0 {
		// Once an epoch where the evaluations decide (when to stop, the
		// model kept): on a small table a round takes longer than an
		// epoch, and training waits for it (6 times the training time on
		// a 178-row table); a run of a given length without rows held
		// out only draws its curve from them.
		c.evalByEpoch = c.Patience > 0 || c.HoldOut > 0
		c.EvalEvery = time.Second
		if c.Patience > 0 && c.Duration == 0 {
			c.EvalEvery = StopEvalEvery
		} else if c.Duration > 0 {
			c.EvalEvery = min(max(c.Duration/40, 250*time.Millisecond), 10*time.Second)
		}
	}
	if c.Run == "" {
		var b [3]byte
		_, _ = rand.Read(b[:])
		c.Run = time.Now().UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b[:])
	}
	d, err := broker.ParseDesign(c.Design)
	if err != nil || c.Bus == "memory" && d != broker.DesignMemory && c.Design != "" {
		return nil // Validate refuses it
	}
	if d == broker.DesignMemory {
		c.Bus = "memory"
	}
	if c.Bus == "memory" {
		d = broker.DesignMemory
	}
	c.Design = string(d)
	return nil
}

// Validate checks the configuration; it changes nothing.
func (c *Config) Validate() error {
	algo, err := LookupAlgo(c.Algo)
	if err != nil {
		return err
	}
	if c.TLS.Enabled() && c.NATS == "" && c.Bus != "memory" {
		return fmt.Errorf("%w: the TLS files are for a connection to an external broker (--nats); the embedded broker listens on loopback only", ErrConfig)
	}
	if c.TLS.Enabled() {
		if _, err := trust.ClientTLS(c.TLS, ""); err != nil {
			return fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	// A run without data (no Data, Synthetic or Hooks.Loaded) is refused
	// when its data are loaded (LoadData): a program may give them as
	// Hooks.Loaded, which a Config does not hold.
	switch {
	case c.Parties < 1 || c.Parties > schemas.MaxParties:
		return fmt.Errorf("%w: --parties %d not in 1..%d", ErrConfig, c.Parties, schemas.MaxParties)
	case c.Batch < 1 || c.Window < 1:
		return fmt.Errorf("%w: --batch and --window must be at least 1", ErrConfig)
	case c.Hidden < 1 || c.K < 1:
		return fmt.Errorf("%w: --hidden and --k must be at least 1 (hidden %d, k %d)", ErrConfig, c.Hidden, c.K)
	case c.Mu <= 0 || c.LR <= 0 || !(c.Lambda >= 0) || math.IsInf(c.Lambda, 1):
		return fmt.Errorf("%w: --mu and --lr must be positive, --lambda finite and non-negative (mu %g, lr %g, lambda %g)", ErrConfig, c.Mu, c.LR, c.Lambda)
	case c.Epochs < 0 || c.Duration < 0 || c.MaxSteps < 0:
		return fmt.Errorf("%w: negative run length", ErrConfig)
	case !(c.Tolerance >= 0 && c.Tolerance < 1):
		return fmt.Errorf("%w: --tolerance %v not in [0, 1)", ErrConfig, c.Tolerance)
	case !(c.HoldOut < 1) || math.IsNaN(c.HoldOut):
		return fmt.Errorf("%w: --holdout %v: want a share of the training rows below 1 (e.g. 0.1)", ErrConfig, c.HoldOut)
	case c.Bus != "jetstream" && c.Bus != "memory":
		return fmt.Errorf("%w: --bus %q: want jetstream or memory", ErrConfig, c.Bus)
	case c.Bus == "memory" && c.Design != "" && c.Design != string(broker.DesignMemory):
		return fmt.Errorf("%w: --bus memory has no transport design (--transport %s)", ErrConfig, c.Design)
	case c.Cluster < 0 || c.Cluster > 0 && (c.Bus == "memory" || c.NATS != "" || c.InProcess):
		return fmt.Errorf("%w: --cluster N runs N embedded JetStream nodes over TCP: not with --bus memory, --nats or --in-process", ErrConfig)
	case c.Model != "linear" && c.Model != "mlp" && c.Model != "external" && c.Model != "codebook":
		return fmt.Errorf("%w: --model %q: want linear, mlp, codebook or external", ErrConfig, c.Model)
	case (c.Model == "external") != (c.ModelCmd != ""):
		return fmt.Errorf("%w: --model external and --model-cmd go together", ErrConfig)
	}
	if err := algo.check(c); err != nil {
		return err
	}
	if _, err := broker.ParseDesign(c.Design); err != nil {
		return fmt.Errorf("%w: --transport: %w", ErrConfig, err)
	}
	if _, err := c.persist(); err != nil {
		return err
	}
	if _, err := c.compression(); err != nil {
		return err
	}
	return schemas.CheckRun(c.Run)
}

// persist is the stream's persistence for Persist.
func (c *Net) persist() (broker.Persist, error) {
	switch c.Persist {
	case "":
		return broker.PersistDefault, nil
	case "sync":
		return broker.PersistSync, nil
	case "async":
		return broker.PersistAsync, nil
	}
	return 0, fmt.Errorf("%w: --persist %q: want sync or async", ErrConfig, c.Persist)
}

// compression is the stream's store compression for Compress.
func (c *Net) compression() (broker.Compression, error) {
	switch c.Compress {
	case "":
		return broker.CompressionDefault, nil
	case "none":
		return broker.CompressionNone, nil
	case "s2":
		return broker.CompressionS2, nil
	}
	return 0, fmt.Errorf("%w: --compress %q: want s2 or none", ErrConfig, c.Compress)
}

// DefaultLR is the default initial step size of a party for a model and
// batch size (measured on a9a for the linear model, MNIST for the MLP):
// the paper's 1e-3 scale at batch 1 (3e-3 with the default decay), larger
// with larger batches, whose estimates are less noisy. The MLP has 12,800
// parameters per party and needs a smaller step.
func DefaultLR(model string, batch int) float64 {
	if model == "mlp" {
		if batch >= 16 {
			return 0.004
		}
		return 0.001
	}
	switch {
	case batch >= 64:
		return 0.1
	case batch >= 16:
		return 0.03
	case batch >= 4:
		return 0.01
	}
	return 3e-3
}

// DefaultHeadLR is the default step size of a head with parameters (the
// softmax head of multiclass sets), measured on MNIST.
const DefaultHeadLR = 0.05

// ParseAlgo gives the direction distribution of a zeroth-order algorithm
// (an error for the first-order baseline, which draws none).
func ParseAlgo(algo string) (zoo.Dist, error) {
	a, err := LookupAlgo(algo)
	if err == nil && a.FirstOrder {
		err = fmt.Errorf("%w: --algo %s is first-order: it draws no directions", ErrConfig, algo)
	}
	return a.Dist, err
}

// NewLocal builds a party's local model for d features. For an external
// model it starts the model's process; close releases it (a no-op for the
// others).
func NewLocal(ctx context.Context, cfg *Config, m, d, classes int) (local model.Local, close func() error, err error) {
	k := cfg.Outputs(classes)
	switch cfg.Model {
	case "mlp":
		return model.NewMLP(d, cfg.Hidden, k), noClose, nil
	case "codebook":
		if k > d {
			return nil, nil, fmt.Errorf("%w: party %d holds %d columns, too few for %d codes a row (--k)", ErrConfig, m, d, k)
		}
		return model.NewCodebook(d, k, max(cfg.Codes, 1)), noClose, nil
	case "external":
		argv, err := model.ParseCommand(cfg.ModelCmd)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: --model-cmd: %w", ErrConfig, err)
		}
		ext, err := model.StartExternal(ctx, argv, d, model.ExternalOptions{
			OutDim: k, Timeout: cfg.ModelTimeout, StderrPrefix: fmt.Sprintf("[party %d model] ", m),
		})
		if err != nil {
			return nil, nil, fmt.Errorf("party %d: %w", m, err)
		}
		return ext, ext.Close, nil
	}
	return model.NewLinear(d, k), noClose, nil
}

func noClose() error { return nil }

// NewHead builds the aggregator's head for q parties.
func NewHead(cfg *Config, classes int) (model.Head, int) {
	if cfg.LabelFree {
		k := cfg.Outputs(classes)
		return model.NewEmbed(cfg.Parties*k, max(cfg.Codes, 1), max(cfg.EmbedDim, 1), cfg.EmbedHidden, max(classes, 2)), k
	}
	if classes <= 2 {
		if cfg.NoBias {
			return model.NewLogistic(cfg.Parties), 1
		}
		return model.NewLogisticBias(cfg.Parties), 1
	}
	return model.NewSoftmax(cfg.Parties*cfg.K, classes), cfg.K
}

// The defaults of the paper's network (--model mlp), measured on MNIST
// with the single-process reference loop (8 parties, seed 1): batch 256
// with the step size decaying over 8 passes reaches 90.1% after 200,000
// steps where batch 64 with the linear model's decay (half a pass) reaches
// 87.1%; decaying over 32 passes instead gives 88.5%, 90.2% and 90.9%
// after 100,000, 200,000 and 300,000 steps where 8 passes gives 88.3%,
// 90.1% and 90.6% (the step stays larger for the long runs the network
// needs). A zeroth-order step's noise comes mostly from the batch's gradient
// noise late in training, which a larger batch divides; the direction draw,
// which costs as much as the forward passes of 64 samples, is paid once.
const (
	MLPBatch       = 256
	MLPWindow      = 4
	MLPDecayEpochs = 32
)

// DefaultLambda is the default regularisation weight (Defaults): the
// paper's 1e-4.
const DefaultLambda = 1e-4

// Schedule converts the configured decay scale (samples per party) into
// party steps. The default scale is half the training set, MLPDecayEpochs
// passes of it for the MLP.
func (c *Training) Schedule(n int) zoo.Schedule {
	s := c.LRDecay
	if s == 0 {
		s = float64(n) / 2
		if c.Model == "mlp" {
			s = MLPDecayEpochs * float64(n)
		}
	}
	if s < 0 {
		return zoo.Schedule{Eta0: c.LR}
	}
	return zoo.Schedule{Eta0: c.LR, T0: max(s/float64(c.Batch), 1)}
}

// Budget is the number of answered requests after which the run stops.
func (c *Config) Budget(n int) (int64, error) {
	maxSteps := c.MaxSteps
	if c.Epochs > 0 {
		s := int64(math.Ceil(c.Epochs * float64(n) / float64(c.Batch) * float64(c.Parties)))
		if maxSteps == 0 || s < maxSteps {
			maxSteps = s
		}
	}
	if maxSteps == 0 && c.Duration == 0 && !c.StopAtTarget && c.Patience <= 0 {
		return 0, fmt.Errorf("%w: give --epochs, --duration or --steps (or --patience: stop when the held-out loss stops improving)", ErrConfig)
	}
	return maxSteps, nil
}

// ErrInterrupted is returned, with the summary of the part that ran, by a
// run whose context was cancelled (Ctrl-C, SIGTERM).
var ErrInterrupted = errors.New("run interrupted")

// NewAggregator builds the aggregator of a run from the labels of data.
func NewAggregator(cfg *Config, data *Data, onPoint func(aggregator.Point)) (*aggregator.Aggregator, error) {
	ac, err := AggregatorConfig(cfg, data, onPoint)
	if err != nil {
		return nil, err
	}
	ac.PartyTimeout = cfg.PartyTimeout
	ck, err := aggregatorCheckpoints(cfg, &ac)
	if err != nil {
		return nil, err
	}
	if ck != nil && ck.DefenseKey != ([32]byte{}) && ck.DefenseKey != ac.Defense.Key {
		// A resumed run goes on with the first part's defense key (a new
		// one was drawn at this start): its noise, and the summary that
		// re-execution reads.
		ac.Defense.Key = ck.DefenseKey
		cfg.Defense.Key = hex.EncodeToString(ck.DefenseKey[:])
	}
	a, err := aggregator.New(ac)
	if err != nil || ck == nil {
		return a, err
	}
	if err := a.Resume(ck); err != nil {
		return nil, err
	}
	cfg.Log.Info().Int64("steps", ck.Steps).Time("saved", ck.Saved).Msg("aggregator: resuming from its checkpoint")
	return a, nil
}

// AggregatorConfig is the configuration of the aggregator of a run (for
// NewAggregator, and for re-execution).
func AggregatorConfig(cfg *Config, data *Data, onPoint func(aggregator.Point)) (aggregator.Config, error) {
	algo, err := LookupAlgo(cfg.Algo)
	if err != nil {
		return aggregator.Config{}, err
	}
	head, k := NewHead(cfg, data.Classes)
	sched := cfg.Schedule(data.NTrain)
	maxSteps, err := cfg.Budget(data.NTrain)
	if err != nil {
		return aggregator.Config{}, err
	}
	def, err := cfg.aggregatorDefense(aggregator.IsLogistic(head))
	if err != nil {
		return aggregator.Config{}, err
	}
	stopWhen, heldOut := cfg.hooks.StopWhen, 0
	var stopReason func() string
	var evalSteps int64
	if !cfg.LabelFree {
		heldOut = data.HeldOut
		if cfg.evalByEpoch {
			evalSteps = int64(math.Ceil(epochSteps(cfg, data.NTrain)))
		}
		var es *earlyStop
		if cfg.Patience > 0 {
			es = newEarlyStop(cfg, data.NTrain, heldOut > 0)
			onPoint = es.observe(onPoint)
			stopWhen = es.stopWhen(stopWhen)
		}
		st := newStuckWatch(cfg, data)
		onPoint = st.observe(onPoint)
		stopWhen = st.stopWhen(stopWhen)
		stopReason = func() string {
			if r := st.reason(); r != "" {
				return r
			}
			return es.reason()
		}
		cfg.early, cfg.stuck = es, st
	}
	return aggregator.Config{
		Defense: def, ScoreLeakage: !cfg.NoLeakage && !cfg.LabelFree, LabelFree: cfg.labelFreeAggregator(data.NTrain, data.Classes),
		Run: cfg.Run, Parties: cfg.Parties, K: k, Head: head,
		Labels: data.TrainY, TestLabels: data.TestY, HeldOut: heldOut, IDHash: data.IDHash,
		Mu: cfg.Mu, LR: zoo.Schedule{Eta0: cfg.HeadLR, T0: sched.T0 * float64(cfg.Parties)}, Dist: algo.Dist, Seed: cfg.Seed,
		MaxBatch: max(cfg.MaxBatch, cfg.Batch), ReplyDelta: cfg.Delta,
		Sync: algo.Sync, FirstOrder: algo.FirstOrder,
		MaxSteps: maxSteps, Duration: cfg.Duration, EvalEvery: cfg.EvalEvery, EvalSteps: evalSteps,
		EvalTimeout: cfg.Wait, JoinWait: cfg.JoinWait, Notice: cfg.Notice,
		TargetAcc: cfg.TargetAcc, StopAtTarget: cfg.StopAtTarget, StopWhen: stopWhen, StopReason: stopReason,
		Log: cfg.Log, OnPoint: onPoint,
		Key: cfg.trust.key(0), Roster: cfg.trust.rosterOrNil(), Sign: cfg.Trust.Sign, SealEvery: cfg.Trust.SealEvery,
		Pause: cfg.hooks.Pause,
	}, nil
}

// NewParty builds party m (1..q) of a run from its columns of data. close
// releases its model (an external model's process).
func NewParty(ctx context.Context, cfg *Config, data *Data, m int) (p *party.Party, close func() error, err error) {
	return newParty(ctx, cfg, data, m, 0, nil, nil)
}

// newParty is NewParty for a party whose sequence numbers start after
// seqBase (see party.Config.SeqBase).
// With checkpoints, it sets the party's hook; with cfg.Resume, *ck is the
// checkpoint to resume from (the caller calls Resume once it knows what
// the stream holds).
// With the trust layer, chainBases (subject -> messages of an earlier
// attempt) restart the party's chains after them.
func newParty(ctx context.Context, cfg *Config, data *Data, m int, seqBase uint64, chainBases map[string]uint64, ck **party.Checkpoint) (p *party.Party, close func() error, err error) {
	algo, err := LookupAlgo(cfg.Algo)
	if err != nil {
		return nil, nil, err
	}
	if m < 1 || m > cfg.Parties {
		return nil, nil, fmt.Errorf("%w: party id %d not in 1..%d", ErrConfig, m, cfg.Parties)
	}
	reg, err := model.ParseRegularizer(cfg.Reg)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	local, close, err := NewLocal(ctx, cfg, m, data.Blocks[m-1].Len(), data.Classes)
	if err != nil {
		return nil, nil, err
	}
	train, test := data.PartTrain[m-1], data.PartTest[m-1]
	if f := cfg.hooks.PartyData[m]; f != nil {
		train, test = f(train, test)
	}
	pc := party.Config{
		Run: cfg.Run, ID: m, Model: local,
		Train: train, Test: test,
		Reg: reg, Lambda: cfg.Lambda, Dist: algo.Dist, Mu: cfg.Mu, LR: cfg.Schedule(data.NTrain), IDHash: data.IDHash, EMA: cfg.PartyEMA,
		Batch: cfg.Batch, Window: cfg.Window, Seed: cfg.Seed*1000003 + uint64(m),
		Sync: algo.Sync, SampleSeed: cfg.Seed, FirstOrder: algo.FirstOrder,
		StepCost: cfg.SimCompute * time.Duration(local.NumParams()), Slowdown: cfg.slowdown(m),
		SeqBase: seqBase, ChainBases: chainBases, JoinWait: cfg.JoinWait, Wait: cfg.Wait, Notice: cfg.Notice,
		Adversary: cfg.hooks.Adversaries[m], IgnoreEvals: cfg.EvalSilent == m, LabelFree: cfg.LabelFree,
		Log: cfg.Log,
		Key: cfg.trust.key(m), Roster: cfg.trust.rosterOrNil(), Sign: cfg.Trust.Sign, Receipts: cfg.receiptsDir(m),
	}
	c, err := partyCheckpoints(cfg, &pc, m)
	if err != nil {
		close()
		return nil, nil, err
	}
	if ck != nil {
		*ck = c
	}
	p, err = party.New(pc)
	if err != nil {
		close()
		return nil, nil, err
	}
	return p, close, nil
}

// Train runs one AsyREVEL training in this process: it loads and splits the
// data, starts the broker (an embedded JetStream server unless cfg.NATS
// names one), the aggregator and the parties, each with a connection of its
// own, runs until the configured end, and writes the outputs.
//
// If ctx is cancelled (Ctrl-C), Train still writes the outputs of the part
// that ran and returns its summary with an error wrapping ErrInterrupted.
// hooks are what the caller plugs in (the zero value: none).
func Train(ctx context.Context, cfg Config, hooks Hooks) (*Summary, error) {
	t0 := time.Now()
	cfg.hooks = hooks
	if err := cfg.Prepare(); err != nil {
		return nil, err
	}
	if err := checkResumeTrust(&cfg, true); err != nil {
		return nil, err
	}
	wt, err := startWatch(&cfg, "train")
	if err != nil {
		return nil, err
	}
	defer wt.close()
	cfg.watch = wt.watch()
	data, err := LoadData(&cfg, RoleAll)
	if err != nil {
		return nil, err
	}
	if err := cfg.applyPrivacy(data.Classes, data.NTrain); err != nil {
		return nil, err
	}
	wt.loaded(data)
	logData(&cfg, data)
	if cfg.hooks.Attackers != nil {
		if err := cfg.hooks.Attackers(&cfg, data, &cfg.hooks); err != nil {
			return nil, err
		}
	}
	q := cfg.Parties
	if !cfg.Resume && cfg.Out != "" {
		// OUT describes one run: an earlier run there is kept aside (or
		// removed with ReplaceOut) before this one writes a file.
		if err := keepEarlier(&cfg); err != nil {
			return nil, err
		}
	}
	if cfg.trust, err = makeRunKeys(&cfg); err != nil {
		return nil, err
	}
	defer cfg.trust.close()
	obs := newObserver(&cfg)
	cfg.hooks.OnPoint = cfg.watch.OnPoint(obs.onPoint(cfg.hooks.OnPoint))
	prog := newProgress(&cfg, data)
	agg, err := NewAggregator(&cfg, data, prog.point)
	if err != nil {
		return nil, err
	}
	cfg.watch.SetAggregator(agg)
	parties := make([]*party.Party, q)
	cks := make([]*party.Checkpoint, q)
	for m := range parties {
		p, close, err := newParty(ctx, &cfg, data, m+1, 0, nil, &cks[m])
		if err != nil {
			return nil, err
		}
		defer close()
		parties[m] = p
		cfg.watch.SetParty(m+1, p)
	}

	net, err := openNetwork(ctx, &cfg)
	if err != nil {
		return nil, err
	}
	defer net.close()
	wt.network(net)
	ctx, unwatch := net.WatchStore(ctx)
	defer unwatch()
	if f := cfg.hooks.OnBroker; f != nil && net.URL() != "" {
		f(net.URL())
	}
	aggBus, err := net.connect(ctx, "aggregator")
	if err != nil {
		return nil, err
	}
	wt.aggregatorBus(aggBus)
	if cfg.Resume {
		err = net.checkResume(ctx, aggBus, cfg.Run)
		for m := 0; m < q && err == nil; m++ {
			err = resumeParty(ctx, aggBus, &cfg, parties[m], cks[m], m+1)
		}
	} else {
		err = net.checkFresh(ctx, aggBus, cfg.Run)
	}
	if err != nil {
		aggBus.Close()
		return nil, err
	}
	partyBus := make([]broker.Bus, q)
	for m := range partyBus {
		if partyBus[m], err = net.connect(ctx, fmt.Sprintf("party-%d", m+1)); err != nil {
			return nil, err
		}
		cfg.watch.SetBus(fmt.Sprintf("party-%d", m+1), partyBus[m])
	}
	obs.start(parties)
	defer obs.stop()
	// The whole data set was garbage once split by columns: collect it now,
	// so that the heap's next limit is set by what the run keeps (a
	// million dense samples: 3.3 GB peak resident without this).
	runtime.GC()
	setup := time.Since(t0)
	g, gctx := errgroup.WithContext(ctx)
	var res *aggregator.Result
	var paused error // the aggregator paused (Hooks.Pause)
	// The parties start once the aggregator listens to what they send
	// first: a design without history (core) would lose it otherwise,
	// and the others need not replay it.
	watch := newWatchBus(aggBus, cfg.Run)
	g.Go(func() error {
		var err error
		res, err = agg.Run(gctx, watch)
		if res != nil && res.Paused && ctx.Err() == nil {
			// The parties countersign the seal and end by themselves:
			// the group must not cancel them first.
			paused = err
			return nil
		}
		return err
	})
	select {
	case <-watch.ready:
	case <-gctx.Done():
	}
	for m, p := range parties {
		g.Go(func() error { return p.Run(gctx, partyBus[m]) })
	}
	err = g.Wait()
	if errors.Is(err, party.ErrInterrupted) && res != nil && res.Final.Final && res.Interrupted == "" {
		// The run had ended when the signal came: a party that had not
		// seen the stop yet does not make it an interrupted run.
		err = nil
	}
	stalled := errors.Is(err, aggregator.ErrStalled) && res != nil
	stopped := err != nil && (ctx.Err() != nil || stalled) && res != nil || paused != nil // interrupted: the outputs of the part that ran
	if err != nil && !stopped {
		return nil, err
	}
	buses := append(partyBus, aggBus)
	for _, b := range buses {
		if err := b.Close(); err != nil && !stopped {
			return nil, fmt.Errorf("closing connection: %w", err)
		}
	}
	s := summarize(&cfg, data, res, net.Name())
	s.WireBytes = broker.WireBytes(buses...)
	s.Dropped = broker.Dropped(buses...)
	s.WallSeconds = time.Since(t0).Seconds()
	s.SetupSeconds = setup.Seconds()
	s.MessagesSent = s.MessagesDown // the aggregator's
	for _, p := range parties {
		st := p.Stats()
		s.MessagesSent += st.MessagesUp
		for r, v := range st.Rejected {
			s.Rejected["party:"+r] += v
		}
		s.PartySteps = append(s.PartySteps, st.Steps)
		s.PartyRepliesFrom = append(s.PartyRepliesFrom, st.RepliesFrom)
		s.PartyEvalsFrom = append(s.PartyEvalsFrom, st.EvalsFrom)
		s.PartyEvalChunksLost += st.EvalChunksLost
		prog.flat(st)
	}
	if !slices.ContainsFunc(s.PartyRepliesFrom, func(v uint64) bool { return v > 0 }) {
		s.PartyRepliesFrom = nil
	}
	if !slices.ContainsFunc(s.PartyEvalsFrom, func(v uint64) bool { return v > 0 }) {
		s.PartyEvalsFrom = nil
	}
	if !stopped {
		if res.Fit != nil {
			cfg.EmbedHidden = res.Fit.Hidden // the head the label-free fit kept
		}
		f, err := AggregatorModel(&cfg, data, res.Params, res.Steps)
		if err = writeModel(&cfg, f, err); err != nil {
			return nil, err
		}
		for m, p := range parties {
			f, err := PartyModel(&cfg, data, m+1, p.Params())
			if err = writeModel(&cfg, f, err); err != nil {
				return nil, err
			}
		}
	}
	if stalled {
		s, _ = net.finish(ctx, &cfg, s, prog)
		return s, err
	}
	if paused != nil {
		return net.finishPaused(ctx, &cfg, s, prog, paused)
	}
	if !stopped {
		// The run is over: its log is closed (seal.go), even if a signal
		// comes meanwhile (a further one quits at once).
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		err := net.sealStream(sctx)
		cancel()
		if err != nil {
			return nil, err
		}
	}
	return stuckErr(&cfg)(net.finish(ctx, &cfg, s, prog))
}

// watchBus is the aggregator's Bus in Train: ready is closed once the
// aggregator has subscribed to the subjects a party publishes on.
type watchBus struct {
	broker.Bus
	mu     sync.Mutex
	need   []string
	ready  chan struct{}
	closed bool
}

// Unreachable and Outage pass on the broker connection's outage state
// (broker.JetStream), which the aggregator asks its bus for.
func (w *watchBus) Unreachable() time.Time {
	if u, ok := w.Bus.(interface{ Unreachable() time.Time }); ok {
		return u.Unreachable()
	}
	return time.Time{}
}

// Outage: see Unreachable.
func (w *watchBus) Outage() time.Duration {
	if o, ok := w.Bus.(interface{ Outage() time.Duration }); ok {
		return o.Outage()
	}
	return 0
}

// Room passes on the stream's fill (broker.JetStream), which the
// aggregator watches to pause before its bound.
func (w *watchBus) Room(ctx context.Context) (used, limit int64, err error) {
	if r, ok := w.Bus.(interface {
		Room(context.Context) (int64, int64, error)
	}); ok {
		return r.Room(ctx)
	}
	return 0, 0, broker.ErrUnsupported
}

func newWatchBus(b broker.Bus, run string) *watchBus {
	return &watchBus{Bus: b, ready: make(chan struct{}), need: []string{
		schemas.Subject(run, schemas.KindHello, 1), schemas.Subject(run, schemas.KindEval, 1), schemas.Subject(run, schemas.KindOutput, 1),
	}}
}

func (w *watchBus) Subscribe(ctx context.Context, filters []string, opts broker.SubscribeOptions, h broker.Handler) (broker.Subscription, error) {
	s, err := w.Bus.Subscribe(ctx, filters, opts, h)
	if err != nil {
		return s, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.need = slices.DeleteFunc(w.need, func(subj string) bool {
		return slices.ContainsFunc(filters, func(f string) bool { return broker.SubjectMatch(f, subj) })
	})
	if len(w.need) == 0 && !w.closed {
		close(w.ready)
		w.closed = true
	}
	return s, nil
}

// Aggregate runs only the aggregator of a run, connected to the broker at
// cfg.NATS, for a run whose parties are separate processes. Interrupted,
// it writes the outputs of the part that ran as Train does.
func Aggregate(ctx context.Context, cfg Config, hooks Hooks) (*Summary, error) {
	t0 := time.Now()
	cfg.hooks = hooks
	if err := cfg.Prepare(); err != nil {
		return nil, err
	}
	if err := checkResumeTrust(&cfg, false); err != nil {
		return nil, err
	}
	wt, err := startWatch(&cfg, "aggregator")
	if err != nil {
		return nil, err
	}
	defer wt.close()
	cfg.watch = wt.watch()
	data, err := LoadData(&cfg, RoleAggregator)
	if err != nil {
		return nil, err
	}
	if err := cfg.applyPrivacy(data.Classes, data.NTrain); err != nil {
		return nil, err
	}
	wt.loaded(data)
	logData(&cfg, data)
	if cfg.trust, err = readKeys(&cfg, 0); err != nil {
		return nil, err
	}
	warnUntrusted(&cfg)
	cfg.hooks.OnPoint = cfg.watch.OnPoint(cfg.hooks.OnPoint)
	prog := newProgress(&cfg, data)
	if cfg.healable(0) {
		cfg.heal = &healState{}
		cfg.watch.SetHeal(cfg.heal.resumes)
	}
	agg, err := NewAggregator(&cfg, data, prog.point)
	if err != nil {
		return nil, err
	}
	cfg.watch.SetAggregator(agg)
	net, err := openNetwork(ctx, &cfg)
	if err != nil {
		return nil, err
	}
	defer net.close()
	wt.network(net)
	var (
		res    *aggregator.Result
		bus    broker.Bus
		lostAt time.Time
	)
	for {
		if bus, err = net.connect(ctx, "aggregator"); err != nil {
			if !lostAt.IsZero() {
				err = fmt.Errorf("resuming after the broker connection was lost: %w", err)
			}
			return nil, err
		}
		wt.aggregatorBus(bus)
		if !lostAt.IsZero() {
			cfg.heal.healed(time.Since(lostAt))
		}
		check := net.checkAggregator
		if cfg.Resume {
			check = net.checkResume
		}
		if err := check(ctx, bus, cfg.Run); err != nil {
			bus.Close()
			return nil, err
		}
		lctx, cancel := watchLoss(ctx, bus)
		res, err = agg.Run(lctx, bus)
		lost := lostConn(ctx, lctx, err)
		cancel(nil)
		if !lost {
			break
		}
		// The broker connection was lost: the aggregator stopped
		// publishing. It resumes from its latest checkpoint and the
		// stream as soon as the broker is back, as --resume would.
		bus.Close()
		lostAt = time.Now()
		cfg.Log.Warn().Str("broker", cfg.NATS).Str("wait", cfg.BrokerWait.String()).
			Msg("the broker connection was lost: the aggregator resumes from its latest checkpoint and the stream once the broker is back")
		// Before its first checkpoint (training had not started) it
		// starts again from the beginning instead.
		cfg.Resume = cfg.Resume || cfg.heal.latest(0) != nil
		if agg, err = NewAggregator(&cfg, data, prog.point); err != nil {
			return nil, fmt.Errorf("resuming after the broker connection was lost: %w", err)
		}
		cfg.watch.SetAggregator(agg)
	}
	stalled := errors.Is(err, aggregator.ErrStalled) && res != nil
	paused := err != nil && res != nil && res.Paused && ctx.Err() == nil
	stopped := err != nil && (ctx.Err() != nil || stalled || paused) && res != nil
	if err != nil && !stopped {
		bus.Close()
		return nil, err
	}
	if err := bus.Close(); err != nil && !stopped {
		return nil, err
	}
	if !stopped {
		if res.Fit != nil {
			cfg.EmbedHidden = res.Fit.Hidden // the head the label-free fit kept
		}
		f, err := AggregatorModel(&cfg, data, res.Params, res.Steps)
		if err = writeModel(&cfg, f, err); err != nil {
			return nil, err
		}
	}
	s := summarize(&cfg, data, res, net.Name())
	s.WireBytes = broker.WireBytes(bus) // the aggregator's connection only
	s.Dropped = broker.Dropped(bus)
	s.WallSeconds = time.Since(t0).Seconds()
	if n, out := cfg.heal.resumes(); n > 0 {
		s.BrokerResumes = n
		s.BrokerOutage += out.Seconds()
	}
	if stalled {
		s, _ = net.finish(ctx, &cfg, s, prog)
		return s, err
	}
	if paused {
		return net.finishPaused(ctx, &cfg, s, prog, err)
	}
	return stuckErr(&cfg)(net.finish(ctx, &cfg, s, prog))
}

// Participate runs only party m of a run, connected to the broker at
// cfg.NATS, until the aggregator stops the run. It refuses a run that has
// started or ended already; if the run's stream holds messages of an
// earlier attempt of party m (refused, say), it joins as a new attempt.
func Participate(ctx context.Context, cfg Config, m int, hooks Hooks) (party.Stats, error) {
	cfg.hooks = hooks
	if err := cfg.Prepare(); err != nil {
		return party.Stats{}, err
	}
	if err := checkResumeTrust(&cfg, false); err != nil {
		return party.Stats{}, err
	}
	wt, err := startWatch(&cfg, fmt.Sprintf("party-%d", m))
	if err != nil {
		return party.Stats{}, err
	}
	defer wt.close()
	cfg.watch = wt.watch()
	data, err := LoadData(&cfg, m)
	if err != nil {
		return party.Stats{}, err
	}
	if err := cfg.applyPrivacy(data.Classes, data.NTrain); err != nil {
		return party.Stats{}, err
	}
	logPrivacy(&cfg)
	if cfg.trust, err = readKeys(&cfg, m); err != nil {
		return party.Stats{}, err
	}
	warnUntrusted(&cfg)
	if cfg.hooks.Attackers != nil {
		if err := cfg.hooks.Attackers(&cfg, data, &cfg.hooks); err != nil {
			return party.Stats{}, err
		}
	}
	wt.loaded(data)
	if cfg.healable(m) {
		cfg.heal = &healState{}
		cfg.watch.SetHeal(cfg.heal.resumes)
	}
	net, err := openNetwork(ctx, &cfg)
	if err != nil {
		return party.Stats{}, err
	}
	defer net.close()
	for {
		stats, lost, err := participateOnce(ctx, &cfg, net, data, m)
		if !lost {
			return stats, err
		}
		// The broker connection was lost: the party stopped publishing.
		// It resumes from its latest checkpoint and the stream as soon as
		// the broker is back, as --resume would.
		cfg.Log.Warn().Int("party", m).Str("broker", cfg.NATS).Str("wait", cfg.BrokerWait.String()).
			Msg("the broker connection was lost: the party resumes from its latest checkpoint and the stream once the broker is back")
		// Before its first checkpoint (training had not started) it joins
		// again as a new attempt instead.
		cfg.Resume = cfg.Resume || cfg.heal.latest(m) != nil
	}
}

// participateOnce is one attempt of Participate: lost reports an attempt
// that ended because the broker connection was lost (cfg.heal), after
// which the party resumes.
func participateOnce(ctx context.Context, cfg *Config, net *network, data *Data, m int) (_ party.Stats, lost bool, err error) {
	bus, err := net.connect(ctx, fmt.Sprintf("party-%d", m))
	if err != nil {
		if cfg.heal != nil && cfg.Resume {
			err = fmt.Errorf("resuming after the broker connection was lost: %w", err)
		}
		return party.Stats{}, false, err
	}
	defer bus.Close()
	var base uint64
	if cfg.Resume {
		err = net.checkResume(ctx, bus, cfg.Run)
	} else {
		base, err = net.checkParty(ctx, bus, cfg.Run, m)
	}
	if err != nil {
		return party.Stats{}, false, err
	}
	var chains map[string]uint64
	if base > 0 {
		cfg.Log.Info().Int("party", m).Uint64("messages", base).Msg("the run holds an earlier attempt of this party: joining as a new attempt")
		if cfg.trust.key(m) != nil {
			// Its chains restart after the earlier attempt's messages,
			// each subject on its own.
			chains = map[string]uint64{}
			for _, s := range cfg.trust.roster.Subjects(trust.PartyID(m)) {
				if chains[s], err = count(ctx, bus, s); err != nil {
					return party.Stats{}, false, err
				}
			}
		}
	}
	var ck *party.Checkpoint
	p, close, err := newParty(ctx, cfg, data, m, base, chains, &ck)
	if err != nil {
		return party.Stats{}, false, err
	}
	defer close()
	cfg.watch.SetParty(m, p)
	cfg.watch.SetBus(fmt.Sprintf("party-%d", m), bus)
	if cfg.Resume {
		if err := resumeParty(ctx, bus, cfg, p, ck, m); err != nil {
			return party.Stats{}, false, err
		}
	} else {
		cfg.Log.Info().Int("party", m).Str("run", cfg.Run).Msg("joining; waiting for the aggregator's start")
	}
	lctx, cancel := watchLoss(ctx, bus)
	err = p.Run(lctx, bus)
	lost = lostConn(ctx, lctx, err)
	cancel(nil)
	if lost {
		return p.Stats(), true, err
	}
	if err == nil {
		f, ferr := PartyModel(cfg, data, m, p.Params())
		err = writeModel(cfg, f, ferr)
	}
	if errors.Is(err, party.ErrInterrupted) {
		err = fmt.Errorf("%w: %w", ErrInterrupted, err)
	}
	if cerr := bus.Close(); err == nil {
		err = cerr
	}
	return p.Stats(), false, err
}

// resumeParty restores party m from its checkpoint ck and the sequence
// numbers of its messages in the stream (per subject), read back one
// subject at a time (a single filter: what the broker's permissions grant
// a party on its own subjects). With the trust layer, the messages after
// the checkpoint's chains are handed over with their headers.
func resumeParty(ctx context.Context, b broker.Bus, cfg *Config, p *party.Party, ck *party.Checkpoint, m int) error {
	if ck == nil {
		return fmt.Errorf("%w: party %d", ErrNoCheckpoint, m)
	}
	t0 := time.Now()
	var readBytes int64
	// The party's sequence numbers in the stream, by subject: after a
	// broker crash some may be missing in the middle, not only at the end.
	var (
		have  = map[schemas.Kind][]uint64{}
		own   []trust.Msg
		count int
		dec   = schemas.NewCodec()
		h     schemas.Hello
		o     schemas.PartyOutput
		ev    schemas.EvalOutput
		chain = map[string]uint64{}
	)
	for _, e := range ck.TrustOut {
		chain[e.Subject] = e.Seq
	}
	for _, kind := range []schemas.Kind{schemas.KindHello, schemas.KindOutput, schemas.KindEval} {
		var msg schemas.Message = &h
		switch kind {
		case schemas.KindOutput:
			msg = &o
		case schemas.KindEval:
			msg = &ev
		}
		fn := func(d broker.Delivery) {
			if dec.Unmarshal(d.Data(), msg) != nil {
				return
			}
			seq := msg.Head().Seq
			have[kind] = append(have[kind], seq)
			count++
			readBytes += int64(len(d.Data()))
			if ck.Trust && seq > chain[d.Subject()] {
				own = append(own, trust.Msg{StreamSeq: d.Seq(), Subject: d.Subject(), Seq: seq, Payload: slices.Clone(d.Data()),
					Sig: d.Header(trust.SigHeader), Prev: d.Header(trust.PrevHeader)})
			}
		}
		subj := schemas.Subject(cfg.Run, kind, m)
		var err error
		// From the checkpoint's floor where it holds what the resume
		// looks at (see party.Checkpoint.StreamFloor): the requests
		// (most of the party's messages) below the outbox and all after
		// the checkpoint; the evaluation chunks (the largest, on the
		// networks) after FloorEvalSeq. Those up to present were
		// published before the floor was counted and are taken as in
		// the stream, as a full read would find them.
		fromFloor, present, what := false, uint64(0), "requests"
		switch kind {
		case schemas.KindOutput:
			if fromFloor = ck.StreamFloor > 1 && len(ck.Outbox) > 0; fromFloor {
				lowest := ck.Outbox[0].Seq
				for _, s := range ck.Outbox {
					lowest = min(lowest, s.Seq)
				}
				present = lowest - 1
			}
		case schemas.KindEval:
			fromFloor, present, what = ck.StreamFloor > 1 && ck.FloorEvalKnown, ck.FloorEvalSeq, "evaluation outputs"
		}
		if fromFloor {
			own0, count0 := len(own), count
			_, err = logread.Read(ctx, b, []string{subj}, logread.Options{StartSeq: ck.StreamFloor}, fn)
			if err == nil {
				if present > 0 {
					have[kind] = append(have[kind], present)
				}
				if kind == schemas.KindEval {
					p.ReadEvalsFrom(ck.StreamFloor)
				}
				continue
			}
			cfg.Log.Info().Int("party", m).Err(err).Msg("party: reading its " + what + " from the stream's start")
			have[kind], own, count = have[kind][:0], own[:own0], count0
		}
		if kind == schemas.KindEval {
			p.ReadEvalsFrom(1)
		}
		if _, err = logread.Deliveries(ctx, b, []string{subj}, fn); err != nil {
			return fmt.Errorf("reading party %d's messages in the stream: %w", m, err)
		}
	}
	if ck.Trust {
		// Its receipts: the countersignatures it makes again are not sent
		// again either.
		subj := trust.ReceiptSubject(cfg.Run, m)
		_, err := logread.Deliveries(ctx, b, []string{subj}, func(d broker.Delivery) {
			if seq, _, err := trust.ParseReceiptMessage(d.Data()); err == nil && seq > chain[subj] {
				own = append(own, trust.Msg{StreamSeq: d.Seq(), Subject: subj, Seq: seq, Payload: slices.Clone(d.Data()),
					Sig: d.Header(trust.SigHeader), Prev: d.Header(trust.PrevHeader)})
			}
		})
		if err != nil {
			return fmt.Errorf("reading party %d's receipts in the stream: %w", m, err)
		}
	}
	if err := p.ResumeStream(ck, have, own); err != nil {
		return err
	}
	cfg.Log.Info().Int("party", m).Int64("steps", ck.Steps).Int("stream_messages", count).Int64("stream_bytes", readBytes).
		Uint64("evaluations_from", p.Stats().EvalsFrom).Dur("took", time.Since(t0).Round(time.Millisecond)).Time("saved", ck.Saved).
		Msg("party: resuming from its checkpoint")
	return nil
}

func logData(cfg *Config, data *Data) {
	logPrivacy(cfg)
	cfg.Log.Info().Str("data", data.Name).Int("samples", data.NTrain).Int("features", data.Features).
		Int("classes", data.Classes).Int("test", data.NTest).Int("parties", cfg.Parties).
		Str("algo", cfg.Algo).Str("model", cfg.Model).Int("batch", cfg.Batch).Int("window", cfg.Window).
		Str("lr", cfg.Schedule(data.NTrain).String()).Str("run", cfg.Run).Msg("data loaded")
}

func summarize(cfg *Config, data *Data, res *aggregator.Result, bus string) *Summary {
	s := &Summary{
		Algo: cfg.Algo, Dataset: data.Name, Parties: cfg.Parties, Model: cfg.Model,
		Steps: res.Steps, TrainSeconds: res.Training.Seconds(),
		TrainLoss: res.Final.TrainLoss, TestAccuracy: res.Final.TestAccuracy, TestLoss: res.Final.TestLoss,
		TimeToTarget: res.TimeToTarget, TargetAcc: cfg.TargetAcc,
		BytesUp: res.BytesIn, BytesDown: res.BytesOut, StepBytes: res.StepBytes,
		MaxStaleness: res.MaxStaleness, MeanStaleness: res.MeanStaleness,
		Outputs: res.Received["out"], Replies: res.Published["reply"], LateOutputs: res.LateOutputs,
		Rejected: map[string]int64{},
		Batch:    cfg.Batch, Window: cfg.Window, LR: cfg.Schedule(data.NTrain).String(), Mu: cfg.Mu, Lambda: cfg.Lambda,
		Bus: bus, Design: cfg.Design, Run: cfg.Run, Seed: cfg.Seed, Samples: data.NTrain, Tests: cmp.Or(data.TestRows(), data.NTest),
		Curve: res.Curve, Interrupted: res.Interrupted, Warnings: slices.Clone(data.Warnings),
		Settings: cfg.Settings(), Leakage: res.Leakage, HeadParams: res.Params, Privacy: cfg.PrivacyChoice,
	}
	if data.HeldOut > 0 {
		s.Settings.HoldOut = cfg.HoldOut
	}
	s.StoppedBy, s.EarlyStop = cfg.stoppedBy(res, data.NTrain), cfg.early.report(data)
	s.applyKept(res, data)
	s.HeldOutRows, s.HeldOutAsTest = data.HeldOut, data.HeldOut > 0 && data.TestRows() == 0
	if cfg.stuck != nil && cfg.stuck.fired {
		s.Stuck = cfg.stuck.words()
	}
	s.EvalWaitSeconds = res.EvalWait.Seconds()
	s.LabelFree = res.Fit
	if res.Defense != (aggregator.DefenseReport{Reply: "losses"}) {
		d := res.Defense
		s.Defense = &d
	}
	if len(res.Refused) > 0 {
		s.Refused = res.Refused
	}
	if len(res.Departed) > 0 {
		s.Departed = res.Departed
	}
	s.PartyTimeouts, s.Returned, s.EvalsWithout, s.Resumed = res.Timeouts, res.Returned, res.EvalsWithout, res.Recovery
	s.StaleEvals, s.FinalStale = res.StaleEvals, res.Final.Stale
	s.BrokerOutage = res.BrokerOutage.Seconds()
	if s.TrainSeconds > 0 {
		s.StepsPerSec = float64(s.Steps) / s.TrainSeconds
	}
	if cfg.Straggler > 0 {
		s.Straggler = fmt.Sprintf("%d:%g", cfg.Straggler, cfg.StragglerFactor)
	}
	s.SimCompute = float64(cfg.SimCompute) / float64(time.Microsecond)
	for _, v := range res.Received {
		s.MessagesUp += v
	}
	for r, v := range res.Rejected {
		s.MessagesUp += v
		s.Rejected["aggregator:"+r] += v
	}
	s.rejectedOutputs = res.RejectedOutputs
	for _, v := range res.Published {
		s.MessagesDown += v
	}
	return s
}
