package run

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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

	// onPartyCheckpoint, for tests, sees each party checkpoint before it
	// is saved (reused: copy what is kept).
	onPartyCheckpoint func(m int, c *party.Checkpoint)
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
	Synthetic    *dataset.SyntheticConfig // used instead of Data when set
	Loaded       *Data                    // used instead of Data and Synthetic when set (experiments)
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

	// OnPoint, if set, is called for each evaluation (after the log line).
	OnPoint func(aggregator.Point)
	// OnObjective, if set (Train only), is called after each evaluation
	// with the regularisation term lambda sum_m g(w_m) of the parties'
	// current models, so that point.TrainLoss + reg is the objective f. It
	// is read just after the evaluation, from another goroutine.
	OnObjective func(pt aggregator.Point, reg float64)
	// StopWhen, if set, is asked after each evaluation: true stops the run
	// (with OnObjective: stop once the objective reaches a target).
	StopWhen func() bool
}

// Party is what experiments inject into the parties: simulated compute, a
// straggler, a silent party, attackers.
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

	// Adversaries turns parties into attackers (attack experiments), and
	// PartyData changes an attacker's own data (a backdoor's trigger).
	Adversaries map[int]party.Adversary
	PartyData   map[int]func(train, test *dataset.Matrix) (*dataset.Matrix, *dataset.Matrix)
	// Attackers, if set, is called once the data are loaded, before the
	// parties are built, to set Adversaries and PartyData from them.
	Attackers func(cfg *Config, d *Data) error
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
	// Pause, if set, pauses a run of Train when it is closed (the
	// command line's first Ctrl-C): what is in flight is answered, a seal
	// covers the whole log, every participant saves its state, and Train
	// returns the part that ran with an error wrapping ErrInterrupted
	// (aggregator.ErrPaused). The log is intact and --resume goes on. A
	// cancelled context instead stops at once, leaving the last seconds
	// unsealed.
	Pause <-chan struct{} `json:"-" yaml:"-"`
	NATS  string          // external server URL ("" = embedded)
	// PartyURL, if set (experiments), gives the URL party m's connection
	// dials instead of the broker's own ("" keeps it): a proxy that
	// delays the link, say (experiment wan).
	PartyURL  func(m int) string
	InProcess bool   // connect to the embedded server in-process instead of over TCP loopback
	Cluster   int    // run an embedded JetStream cluster of this many nodes (stream replicated on min(3, N))
	StoreDir  string // embedded server store ("" = OUT/stream, or a temporary directory)

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
	if c.Parties == 0 && c.Synthetic == nil && c.Loaded == nil && c.Data != "" && dataset.IsSplit(c.Data) {
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
	switch {
	case c.Data == "" && c.Synthetic == nil && c.Loaded == nil:
		return fmt.Errorf("%w: --data is required", ErrConfig)
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

// Data is a vertically partitioned data set: what each party holds and
// what the aggregator holds. A process that plays one role holds only that
// role's part: a party's process has nil labels and nil matrices for the
// other parties, the aggregator's has no matrices.
type Data struct {
	Name          string
	Features      int
	Classes       int
	NTrain, NTest int
	TrainY, TestY []int32 // labels (class indices); nil in a party's process
	PartTrain     []*dataset.Matrix
	PartTest      []*dataset.Matrix // nil entries without a test set
	Blocks        []dataset.Block
	// IDHash fingerprints the training sample ids (a file without ids:
	// its row numbers): parties and aggregator compare it when they join.
	IDHash string
	// Names are the feature names where the format gives them ("" else),
	// for messages.
	Names []string
	// Warnings are what loading found worth saying (unscaled columns).
	Warnings []string
	// How raw rows became these features, for the saved models (models.go):
	// the format, the label values of the classes and their names, a CSV
	// file's encoding, and each party's fitted scaling (nil: none).
	Format      string
	LabelValues []float64
	ClassNames  []string
	Encoding    *dataset.Encoding
	Scalers     []*dataset.Scaler
	// HeldOut is the number of training rows kept aside (Config.HoldOut,
	// holdout.go), 0 if none: the first HeldOut rows of PartTest and
	// TestY, before the test set's own (TestRows). NTest counts both.
	HeldOut int
	// Unscaled says that the columns held differ in range by orders of
	// magnitude and were not scaled (the warning in Warnings says which).
	Unscaled bool
}

// Roles for LoadData.
const (
	RoleAll        = -1 // everything: a whole run in one process
	RoleAggregator = 0  // labels only
)

// LoadData reads (or generates) the data of cfg for a role: RoleAll,
// RoleAggregator, or a party id 1..q (that party's columns only). PATH may
// be a LIBSVM or CSV file, a folder of IDX files, a split folder written by
// `asyrevel data split` (each party reads only its own file), or synthetic.
func LoadData(cfg *Config, role int) (*Data, error) {
	if cfg.Loaded != nil {
		if len(cfg.Loaded.Blocks) != cfg.Parties {
			return nil, fmt.Errorf("%w: data split for %d parties, run has %d", ErrConfig, len(cfg.Loaded.Blocks), cfg.Parties)
		}
		return cfg.Loaded, nil
	}
	if cfg.CSV.Given() && (cfg.Synthetic != nil || cfg.Preset != "") {
		return nil, fmt.Errorf("%w: the CSV column flags (--label, --id-column, --categorical, --drop, --skip-rows) are for CSV files; a preset and synthetic data fix their own columns", ErrConfig)
	}
	if cfg.Synthetic == nil && cfg.Data != "" && dataset.IsSplit(cfg.Data) {
		if cfg.CSV.Given() {
			return nil, fmt.Errorf("%w: %s is a split folder, whose label and columns were chosen when it was split: drop the CSV column flags (--label, ...)", ErrConfig, cfg.Data)
		}
		d, err := loadSplit(cfg, role)
		if err != nil {
			return nil, err
		}
		return d, finishData(cfg, d, role)
	}
	var tr, te *dataset.Dataset
	var err error
	switch {
	case cfg.Synthetic != nil:
		tr, te, err = dataset.Synthetic(*cfg.Synthetic)
		if err == nil {
			tr.Name = "synthetic"
		}
	case cfg.Data == "":
		return nil, fmt.Errorf("%w: --data is required", ErrConfig)
	case cfg.Preset != "":
		if cfg.Test != "" {
			return nil, fmt.Errorf("%w: --preset %s makes its own test split: drop --test", ErrConfig, cfg.Preset)
		}
		var p dataset.Preset
		if p, err = dataset.LookupPreset(cfg.Preset); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		tr, te, err = p.Load(cfg.Data)
	default:
		tr, te, err = dataset.OpenPairOptions(cfg.Data, cfg.Test, dataset.OpenOptions{CSV: cfg.CSV})
	}
	if err != nil {
		return nil, err
	}
	if te != nil && te.Len() == 0 {
		te = nil
	}
	d := &Data{Name: tr.Name, Features: tr.X.NCols, Classes: tr.Classes, NTrain: tr.Len(), Names: tr.FeatureNames(),
		Format: tr.Format, LabelValues: tr.LabelValues, ClassNames: tr.ClassNames, Encoding: tr.Encoding}
	d.IDHash = datasetIDHash(tr)
	if role == RoleAll || role == RoleAggregator {
		d.TrainY = tr.Y
		if te != nil {
			d.TestY = te.Y
		}
	}
	if te != nil {
		d.NTest = te.Len()
	}
	d.PartTrain, d.Blocks, err = dataset.VerticalSplit(tr.X, cfg.Parties)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	d.PartTest = make([]*dataset.Matrix, cfg.Parties)
	for m, b := range d.Blocks {
		if role != RoleAll && role != m+1 {
			d.PartTrain[m] = nil
			continue
		}
		if te != nil {
			d.PartTest[m] = te.X.Columns(b.Lo, b.Hi)
		}
	}
	return d, finishData(cfg, d, role)
}

// datasetIDHash fingerprints the sample ids of d, its row numbers if it
// has none (as a split folder written from it names them).
func datasetIDHash(d *dataset.Dataset) string {
	ids := d.IDs
	if ids == nil {
		ids = make([]string, d.Len())
		for i := range ids {
			ids[i] = d.ID(i)
		}
	}
	return idHash(ids)
}

// idHash fingerprints a list of sample ids ("" for none).
func idHash(ids []string) string {
	if len(ids) == 0 {
		return ""
	}
	h := sha256.New()
	for _, id := range ids {
		h.Write([]byte(id))
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// loadSplit reads a split folder for a role; see LoadData.
func loadSplit(cfg *Config, role int) (*Data, error) {
	dir := cfg.Data
	man, err := dataset.ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	if cfg.Test != "" || cfg.Preset != "" {
		return nil, fmt.Errorf("%w: %s is a split folder: it holds its own test set; drop --test and --preset", ErrConfig, dir)
	}
	if man.Q != cfg.Parties {
		return nil, fmt.Errorf("%w: %s was split for %d parties, the run has --parties %d", ErrConfig, dir, man.Q, cfg.Parties)
	}
	if cfg.Scale != dataset.ScaleNone && man.Source.Scale != "" && man.Source.Scale != "none" {
		return nil, fmt.Errorf("%w: %s was scaled (%s) when it was split: drop --scale", ErrConfig, dir, man.Source.Scale)
	}
	d := &Data{Name: filepath.Base(filepath.Clean(dir)), Features: man.Features, Classes: man.Classes, Blocks: man.Blocks,
		Format: "split", LabelValues: man.LabelValues,
		PartTrain: make([]*dataset.Matrix, man.Q), PartTest: make([]*dataset.Matrix, man.Q), Names: make([]string, man.Features)}
	for _, set := range man.Sets {
		switch set.Split {
		case "train":
			d.NTrain = set.Samples
		case "test":
			d.NTest = set.Samples
		}
	}
	for _, split := range []string{"train", "test"} {
		var labels *dataset.Labels
		var parts []*dataset.PartyData
		if role == RoleAll || role == RoleAggregator {
			e, ok := man.File(split, 0)
			if !ok {
				continue
			}
			if err := e.Verify(dir); err != nil {
				return nil, err
			}
			if labels, err = dataset.LoadLabels(filepath.Join(dir, e.Name)); err != nil {
				return nil, err
			}
			if split == "train" {
				d.TrainY, d.IDHash = labels.Y, idHash(labels.IDs)
			} else {
				d.TestY = labels.Y
			}
		}
		for m := 1; m <= man.Q; m++ {
			if role != RoleAll && role != m {
				continue
			}
			e, ok := man.File(split, m)
			if !ok {
				continue
			}
			if err := e.Verify(dir); err != nil {
				return nil, err
			}
			p, err := dataset.LoadPartyFile(filepath.Join(dir, e.Name))
			if err != nil {
				return nil, err
			}
			if p.Party != m || p.Parties != man.Q || p.Block() != man.Blocks[m-1] {
				return nil, fmt.Errorf("%w: %s is party %d of %d with columns [%d,%d), the manifest says party %d of %d",
					dataset.ErrMismatch, e.Name, p.Party, p.Parties, p.Lo, p.Hi, m, man.Q)
			}
			parts = append(parts, p)
			if len(p.Names) == p.Hi-p.Lo {
				copy(d.Names[p.Lo:p.Hi], p.Names)
			}
			if split == "train" {
				d.PartTrain[m-1] = p.X
				if role == m {
					d.IDHash = idHash(p.IDs)
				}
			} else {
				d.PartTest[m-1] = p.X
			}
		}
		if err := dataset.Align(labels, parts...); err != nil {
			return nil, fmt.Errorf("%s: %w", dir, err)
		}
	}
	if err := checkSplitFiles(dir, man, role, d); err != nil {
		return nil, err
	}
	if role == RoleAll || role == RoleAggregator {
		if len(d.TrainY) == 0 {
			return nil, fmt.Errorf("%w: %s has no training labels", dataset.ErrMismatch, dir)
		}
	}
	return d, nil
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
	stopWhen, heldOut := cfg.StopWhen, 0
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
		Pause: cfg.Pause,
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
	if f := cfg.PartyData[m]; f != nil {
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
		Adversary: cfg.Adversaries[m], IgnoreEvals: cfg.EvalSilent == m, LabelFree: cfg.LabelFree,
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
func Train(ctx context.Context, cfg Config) (*Summary, error) {
	t0 := time.Now()
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
	if cfg.Attackers != nil {
		if err := cfg.Attackers(&cfg, data); err != nil {
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
	cfg.OnPoint = cfg.watch.OnPoint(obs.onPoint(cfg.OnPoint))
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
	ctx, unwatch := net.watchStore(ctx)
	defer unwatch()
	if f := cfg.Trust.OnBroker; f != nil && net.url != "" {
		f(net.url)
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
	var paused error // the aggregator paused (Config.Pause)
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
	diverged := errors.Is(err, party.ErrDiverged) && res != nil                                       // stop.go: the outputs of the part that ran, no model
	stopped := err != nil && (ctx.Err() != nil || stalled || diverged) && res != nil || paused != nil // interrupted: the outputs of the part that ran
	if err != nil && !stopped {
		return nil, err
	}
	buses := append(partyBus, aggBus)
	for _, b := range buses {
		if err := b.Close(); err != nil && !stopped {
			return nil, fmt.Errorf("closing connection: %w", err)
		}
	}
	s := summarize(&cfg, data, res, net.name)
	s.WireBytes = wireBytes(buses...)
	s.Dropped = dropped(buses...)
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
	if diverged {
		end := divergedEnd(s, err) // before finish writes summary.json
		return end(net.finish(ctx, &cfg, s, prog))
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
func Aggregate(ctx context.Context, cfg Config) (*Summary, error) {
	t0 := time.Now()
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
	cfg.OnPoint = cfg.watch.OnPoint(cfg.OnPoint)
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
		cfg.heal.lostAt(agg.Snapshot(aggregator.SnapshotOptions{}).Elapsed)
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
	s := summarize(&cfg, data, res, net.name)
	s.WireBytes = wireBytes(bus) // the aggregator's connection only
	s.Dropped = dropped(bus)
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
func Participate(ctx context.Context, cfg Config, m int) (party.Stats, error) {
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
	if cfg.Attackers != nil {
		if err := cfg.Attackers(&cfg, data); err != nil {
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

// network is the broker a run talks through.
type network struct {
	name     string
	hub      *broker.MemoryHub
	srv      *broker.Server
	cluster  *broker.Cluster
	next     int  // the cluster node the next connection goes to
	told     bool // the server's missing features were logged
	url      string
	cfg      *Config
	dir      string // the embedded broker's store
	tmp      string // a temporary store, removed by close
	closed   bool
	maxStore int64      // the stream's bound in bytes (Config.MaxStore)
	op       *trust.Key // the operator's key, when the embedded broker admits only the roster (trust.go)
}

func openNetwork(ctx context.Context, cfg *Config) (*network, error) {
	n := &network{cfg: cfg}
	if cfg.Bus == "memory" {
		n.name = "memory"
		n.hub = broker.NewMemoryHub()
		return n, nil
	}
	if cfg.NATS != "" {
		n.name, n.url = "jetstream-external", cfg.NATS
		return n, nil
	}
	dir := cfg.StoreDir
	switch {
	case dir == "" && cfg.Out != "":
		// Train made room for its run there (keepEarlier); a resume
		// reads the run's stream there.
		dir = storeIn(cfg.Out)
	case dir != "":
		if st, err := OpenStore(dir); err == nil && len(st.Runs) > 0 {
			cfg.Log.Info().Str("store", dir).Int("runs", len(st.Runs)).Str("size", MB(st.Bytes)).
				Msg("the store holds earlier runs (asyrevel store list, asyrevel store rm)")
		}
	default:
		tmp, err := os.MkdirTemp("", "asyrevel-store-")
		if err != nil {
			return nil, err
		}
		n.tmp, dir = tmp, tmp
	}
	n.dir = dir
	n.maxStore = storeBound(dir, cfg.Run, cfg.MaxStore, cfg.Resume, cfg.Log)
	auth, err := n.serverAuth()
	if err != nil {
		n.close()
		return nil, err
	}
	if cfg.Cluster > 0 {
		cc := broker.ClusterConfig{Dir: dir, Nodes: cfg.Cluster, MaxStore: serverMaxStore}
		if auth != nil {
			// Every node admits the roster's users alone.
			cc.Configure = func(_ int, o *server.Options) { auth(o) }
		}
		c, err := broker.StartCluster(ctx, cc)
		if err != nil {
			n.close()
			return nil, fmt.Errorf("starting the embedded %d-node cluster: %w", cfg.Cluster, err)
		}
		n.cluster = c
		n.name = "jetstream-cluster"
		return n, nil
	}
	if cfg.Resume && (n.maxStore > 0 || cfg.MaxStore < 0) {
		if err := raiseBound(ctx, cfg, dir, n.maxStore); err != nil {
			n.close()
			return nil, err
		}
	}
	// Each run's stream has its own bound (Config.MaxStore), which the
	// server reserves: the server's own cap must not refuse it.
	srv, err := broker.StartServer(ctx, broker.ServerConfig{Dir: dir, Configure: auth, MaxPayload: MaxMessage(cfg), MaxStore: serverMaxStore})
	if err != nil {
		n.close()
		return nil, fmt.Errorf("starting the embedded broker: %w", err)
	}
	n.srv, n.url = srv, srv.URL()
	n.name = "jetstream-tcp"
	if cfg.InProcess {
		n.name = "jetstream-inprocess"
	}
	return n, nil
}

// dial connects to the broker, waiting for it for up to
// Config.BrokerWait: a participant started before its broker, or while
// a cluster has no JetStream leader yet, retries with a growing pause
// and says every few seconds what it waits for.
func (n *network) dial(ctx context.Context, name string, jc broker.JetStreamConfig) (*broker.JetStream, error) {
	wait := n.cfg.BrokerWait
	if name != trust.AggregatorID && !strings.HasPrefix(name, "party-") {
		// Reading the stream's counts at the end, say: a broker gone
		// then is reported at once, the summary written without them.
		wait = min(wait, 0)
	}
	t0 := time.Now()
	pause, told := 50*time.Millisecond, time.Time{}
	for {
		b, err := broker.ConnectJetStream(ctx, jc)
		why := waitable(err)
		if why == "" || wait <= 0 || time.Since(t0) >= wait {
			if why != "" && wait > 0 {
				return nil, fmt.Errorf("%w (waited %v for it: --broker-wait)", err, time.Since(t0).Round(time.Second))
			}
			return b, err
		}
		if time.Since(told) >= 5*time.Second {
			told = time.Now()
			where := n.url
			if where == "" {
				where = "the embedded broker"
			}
			if nodes := broker.NodesAnswering(ctx, broker.ServerURLs(n.url), time.Second); nodes != "" {
				why += " (" + nodes + ")"
			}
			n.cfg.Log.Warn().Str("conn", name).Str("waited", time.Since(t0).Round(time.Second).String()).Str("for", wait.String()).
				Msgf("%s at %s %s: retrying (--broker-wait)", "broker", where, why)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the broker: %w", context.Cause(ctx))
		case <-time.After(pause):
		}
		pause = min(2*pause, dialPause) // a broker back is found within dialPause
	}
}

// dialPause bounds the pause between two attempts to reach the broker: a
// refused connection costs next to nothing, and training waits for the
// attempt after the broker's return (a second was most of the time from
// a broker's return to training, experiment faults).
const dialPause = 150 * time.Millisecond

// DefaultBrokerWait is how long a participant of the command line waits
// for its broker by default (Config.BrokerWait).
const DefaultBrokerWait = 10 * time.Minute

// waitable says why err is worth waiting out ("" if it is not): no
// broker listening yet, or a JetStream that is not available yet (a
// cluster without a metadata leader).
func waitable(err error) string {
	var apiErr *jetstream.APIError
	switch {
	case err == nil:
		return ""
	case errors.Is(err, nats.ErrNoServers), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, nats.ErrConnectionClosed):
		return "unreachable (not started yet, or restarting?)"
	case broker.ClusterWait(err) != "":
		// A cluster without a leader, or missing a node its stream needs.
		return broker.ClusterWait(err)
	case errors.As(err, &apiErr) && apiErr.Code == 503:
		return "has no JetStream available yet (a cluster still electing its leader, or missing a node?)"
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return "does not answer its JetStream API yet"
	}
	return ""
}

// serverMaxStore is the embedded broker's cap of all its streams: the
// streams' own bounds (defaultMaxStore) are what limits them.
const serverMaxStore = 1 << 50

func (n *network) connect(ctx context.Context, name string) (broker.Bus, error) {
	if n.hub != nil {
		return n.hub.Connect(name), nil
	}
	jc := broker.JetStreamConfig{
		URL: n.url, Server: n.srv, InProcess: n.cfg.InProcess && n.srv != nil,
		Run: n.cfg.Run, Name: name, Design: broker.Design(n.cfg.Design), Logger: &n.cfg.Log,
	}
	jc.Persist, _ = n.cfg.persist()
	if n.cfg.Persist == "" && n.srv == nil && n.cluster == nil {
		// A broker of its own (a separate process, another organisation's
		// machine) can be killed while the participants go on: it writes
		// each message before it acknowledges it, so that it never loses
		// what it confirmed and the log has no hole mid-subject. The
		// embedded broker dies with its run, and a resume re-sends the
		// tail it lost: it keeps the faster asynchronous writes.
		jc.Persist = broker.PersistSync
	}
	jc.Compression, _ = n.cfg.compression()
	jc.MaxBytes, jc.MaxMsgSize = n.maxStore, MaxMessage(n.cfg)
	// A participant that heals itself stops publishing when its
	// connection drops, and resumes (heal.go).
	jc.EndOnLoss = n.cfg.heal != nil && n.cluster == nil && n.srv == nil && (name == trust.AggregatorID || strings.HasPrefix(name, "party-"))
	if n.cluster != nil {
		// Participants spread over the nodes, over TCP; the stream is
		// replicated on up to three of them.
		nodes := n.cluster.Servers()
		jc.Server, jc.URL = nodes[n.next%len(nodes)], ""
		jc.Replicas = min(3, len(nodes))
		if n.cfg.ClusterURLs {
			urls := n.cluster.URLs()
			for i := range urls {
				jc.URL = strings.TrimPrefix(jc.URL+","+urls[(n.next+i)%len(urls)], ",")
			}
			jc.Server = nil
		}
		n.next++
	}
	if n.cfg.TLS.Enabled() && n.srv == nil && n.cluster == nil {
		tc, err := trust.ClientTLS(n.cfg.TLS, "")
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		jc.Options = append(jc.Options, nats.Secure(tc))
	}
	if n.cfg.PartyURL != nil && n.cluster == nil {
		var m int
		if _, err := fmt.Sscanf(name, "party-%d", &m); err == nil {
			if u := n.cfg.PartyURL(m); u != "" {
				jc.URL, jc.Server, jc.InProcess = u, nil, false
			}
		}
	}
	plain := jc
	n.authorize(&jc, name)
	b, err := n.dial(ctx, name, jc)
	if errors.Is(err, nats.ErrNkeysNotSupported) {
		// A broker that authenticates nobody: the messages' signatures
		// are the only proof of who sent them.
		n.cfg.Log.Warn().Str("conn", name).Msg("the broker does not authenticate participants (no users configured): anyone can publish on the run's subjects; signatures still prove the senders")
		b, err = n.dial(ctx, name, plain)
	}
	if errors.Is(err, nats.ErrNoServers) {
		return nil, fmt.Errorf("connecting %s to the broker: %w (is a broker running there? asyrevel broker starts one)", name, err)
	}
	if err != nil {
		return nil, fmt.Errorf("connecting %s to the broker: %w", name, err)
	}
	if !n.told {
		n.told = true
		if m := b.Features().Missing(); m != "" {
			n.cfg.Log.Info().Msg(m)
		}
	}
	if name == trust.AggregatorID || strings.HasPrefix(name, "party-") {
		// A run that the broker cannot carry stops now, not midway.
		if err := checkRoom(ctx, b, n.cfg); err != nil {
			b.Close()
			return nil, err
		}
	}
	return b, nil
}

// counts reads back how many messages of each kind the run's stream holds
// and, from a JetStream broker, the stream's size in bytes.
func (n *network) counts(ctx context.Context, run string) (*StreamCounts, uint64, error) {
	b, err := n.connect(ctx, "audit")
	if err != nil {
		return nil, 0, err
	}
	defer b.Close()
	var c StreamCounts
	for _, f := range []struct {
		k schemas.Kind
		p *uint64
	}{{schemas.KindHello, &c.Hello}, {schemas.KindOutput, &c.Outputs}, {schemas.KindReply, &c.Replies}, {schemas.KindEval, &c.Evals}, {schemas.KindControl, &c.Control}} {
		v, err := b.Count(ctx, schemas.Filter(run, f.k))
		if err != nil {
			return nil, 0, fmt.Errorf("counting the stream: %w", err)
		}
		*f.p = v
	}
	if c.Receipts, err = b.Count(ctx, "asyrevel."+run+".rcpt.*"); err != nil {
		return nil, 0, fmt.Errorf("counting the stream: %w", err)
	}
	var size uint64
	if js, ok := b.(*broker.JetStream); ok {
		if st, err := jetstream.New(js.Conn()); err == nil {
			if s, err := st.Stream(ctx, broker.StreamName(run)); err == nil {
				if info, err := s.Info(ctx); err == nil {
					size = info.State.Bytes
				}
			}
		}
	}
	return &c, size, nil
}

// wireBytes sums the bytes both ways on the buses' broker connections.
func wireBytes(buses ...broker.Bus) int64 {
	var n int64
	for _, b := range buses {
		if st, ok := broker.BusStats(b); ok {
			n += int64(st.WireIn + st.WireOut)
		}
	}
	return n
}

// finish counts the run's messages in the stream into s, measures the
// store, adds the warnings and writes the outputs if cfg asks for them. It
// closes the network. An interrupted run (ctx done, and the run cut
// short: s.Interrupted) is finished all the same, and returned with an
// error wrapping ErrInterrupted; a run that had ended when the signal
// came (in its last flush, say) is finished, not interrupted.
func (n *network) finish(ctx context.Context, cfg *Config, s *Summary, prog *progress) (*Summary, error) {
	var interrupted error
	wait := 30 * time.Second // the broker answers at once, unless it is gone
	if ctx.Err() != nil {
		if s.Interrupted != "" {
			interrupted = fmt.Errorf("%w: %w", ErrInterrupted, context.Cause(ctx))
		}
		// Counting and writing must not stop with ctx; they are quick.
		ctx, wait = context.WithoutCancel(ctx), 10*time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var err error
	s.MessagesStored = -1
	if broker.Design(cfg.Design).Capabilities().Log {
		if s.Stream, s.StreamBytes, err = n.counts(ctx, cfg.Run); err != nil {
			// The broker is gone: the summary is written all the same,
			// without the stream's counts, and says why.
			cfg.Log.Error().Err(err).Msg("the run's stream could not be counted (is the broker gone?); the summary is written without its counts")
			s.Warnings = append(s.Warnings, "the stream could not be counted after the run: "+err.Error())
		}
	}
	if c := s.Stream; c != nil {
		s.MessagesStored = int64(c.Hello + c.Outputs + c.Replies + c.Evals + c.Control + c.Receipts)
		if s.MessagesSent > 0 {
			s.Lost = s.MessagesSent - s.MessagesStored
		}
	}
	n.close()
	if n.dir != "" && n.tmp == "" {
		s.Store = n.dir
		if s.StoreBytes, _, err = dirSize(n.dir); err != nil {
			return nil, err
		}
	}
	prog.finish(s)
	if cfg.Out != "" {
		if err := WriteOutputs(cfg.Out, s); err != nil {
			if interrupted != nil {
				// The cause comes first (a full disk fails both).
				s.OutputsErr = err.Error()
				return s, fmt.Errorf("%w (and the outputs: %w)", interrupted, err)
			}
			return nil, err
		}
	}
	return s, interrupted
}

// finishPaused is finish for a run the aggregator paused (Result.Paused;
// its error cause): the part that ran, with an error wrapping
// ErrInterrupted and cause.
func (n *network) finishPaused(ctx context.Context, cfg *Config, s *Summary, prog *progress, cause error) (*Summary, error) {
	sum, err := n.finish(ctx, cfg, s, prog)
	if err != nil && !errors.Is(err, ErrInterrupted) && errors.Is(err, ErrNoSummary) {
		// The pause comes first, the outputs it could not write after.
		s.OutputsErr = err.Error()
		return s, fmt.Errorf("%w: %w (and the outputs: %w)", ErrInterrupted, cause, err)
	}
	if err != nil {
		return sum, err
	}
	return sum, fmt.Errorf("%w: %w", ErrInterrupted, cause)
}

// watchStore returns ctx, cancelled with the embedded broker's store
// error (broker.ErrStoreWrite) as its cause when a broker of n fails to
// write its store (a full disk): what the participants publish after
// that is not stored, so the run stops at once, as on Ctrl-C, with the
// checkpoints taken before, rather than training on unrecorded until a
// flush reports the messages lost. The function stops the watch.
func (n *network) watchStore(ctx context.Context) (context.Context, func()) {
	var servers []*broker.Server
	if n.cluster != nil {
		servers = append(servers, n.cluster.Servers()...)
	}
	if n.srv != nil {
		servers = append(servers, n.srv)
	}
	if len(servers) == 0 {
		return ctx, func() {}
	}
	wctx, cancel := context.WithCancelCause(ctx)
	for _, srv := range servers {
		go func() {
			select {
			case <-srv.StoreFailed():
				err := srv.StoreErr()
				n.cfg.Log.Error().Err(err).Msg("the broker cannot write the run's stream: stopping the run; its last checkpoint stands")
				cancel(err)
			case <-wctx.Done():
			}
		}()
	}
	return wctx, func() { cancel(nil) }
}

// raiseBound lifts the bound of a resumed run's stream in the store at
// dir to max bytes (--max-store, or by default what the store holds plus
// 80% of the free space), never lowering it, so that a run that stopped
// with its stream full, or its disk full, goes on once there is room
// (RaiseStreamBound).
func raiseBound(ctx context.Context, cfg *Config, dir string, max int64) error {
	before, raised, err := RaiseStreamBound(ctx, dir, cfg.Run, max, MaxMessage(cfg))
	if raised {
		cfg.Log.Info().Int64("from_bytes", before).Int64("to_bytes", max).
			Msg("resume: the run's stream may hold more than before (--max-store, or more free disk space)")
	}
	return err
}

// RaiseStreamBound lifts the size bound of run's stream in the store at
// dir to max bytes (max < 0: no bound), never lowering it, and returns
// the bound before and whether it changed; a store without the run's
// stream is left alone. The broker's users may not change a stream
// (trust.OperatorUser: an update could also shorten the log), so this
// runs on the store alone, before its broker starts: a server of its
// own, in-process only, without users, stopped at once (0.2 to 0.6 s on
// a 445 MB store). maxPayload is the server's largest message (0: the
// default).
func RaiseStreamBound(ctx context.Context, dir, run string, max int64, maxPayload int32) (before int64, raised bool, err error) {
	srv, err := broker.StartServer(ctx, broker.ServerConfig{Dir: dir, NoListen: true, MaxStore: serverMaxStore, MaxPayload: maxPayload})
	if err != nil {
		return 0, false, fmt.Errorf("reading the store to raise the stream's bound: %w", err)
	}
	defer srv.Shutdown()
	bus, err := broker.ConnectJetStream(ctx, broker.JetStreamConfig{Server: srv, InProcess: true, Run: run, Name: "bound", NoCreate: true})
	if err != nil {
		return 0, false, nil // no such run here: the resume's own checks say so
	}
	defer bus.Close()
	before, raised, err = bus.RaiseMaxBytes(ctx, max)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return before, false, nil
	}
	return before, raised, err
}

func (n *network) close() {
	if n.closed {
		return
	}
	n.closed = true
	if n.srv != nil {
		n.srv.Shutdown()
	}
	if n.cluster != nil {
		n.cluster.Shutdown()
	}
	if n.tmp != "" {
		os.RemoveAll(n.tmp)
	}
}

// dropped sums the live deliveries lost by the buses' subscriptions.
func dropped(buses ...broker.Bus) int64 {
	var n int64
	for _, b := range buses {
		if st, ok := broker.BusStats(b); ok {
			n += int64(st.Dropped)
		}
	}
	return n
}
