package run

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/trust"
	"github.com/asyrevel/asyrevel/zoo"
)

// ErrConfig reports an unusable Config.
var ErrConfig = errors.New("invalid settings")

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
	// Monitor: Prometheus metrics, the live board, the report page (watch.go).
	Monitor Monitor
}

// Training is the data, model and hyper-parameters of a run: what the
// aggregator and every party must agree on. Fields marked "derived" are
// filled in by Config.Prepare when 0.
type Training struct {
	Data         string                   // training set path
	Preset       string                   // named preprocessing recipe (dataset.LookupPreset)
	Test         string                   // test set path ("" = none)
	CSV          dataset.CSVOptions       // how a CSV file is read (label and id columns, categorical columns, rows to skip; its Report is Hooks.Missing)
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

	EvalEvery time.Duration // evaluation period (derived: 1s, or Duration/40)
	// EvalByEpoch: the evaluations also come once an epoch
	// (aggregator.Config.EvalSteps). Derived with EvalEvery: true where
	// the evaluations decide (Patience, HoldOut); a period given by the
	// caller (--eval-every, an experiment's) is kept as it is.
	EvalByEpoch  bool
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
// (DIR/RUN/aggregator.ckpt, party-M.ckpt) every CheckpointEvery (0 =
// adaptive, ckpt.Every: 250ms to 10s, at most ~2% of the CPU; <0 =
// never) and when interrupted; Resume restarts from those files and the
// run's stream.
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
	if err := c.derive(false); err != nil {
		return err
	}
	return c.Validate()
}

// derive fills in the settings whose default depends on other settings or
// on the data, where the field holds its documented "derive" value (0 for
// a count, step size or period, which cannot be 0; "" for the run id and
// the transport design). It sets nothing that Defaults sets. loaded: the
// run's data are given (Hooks.Loaded), not read from Data.
func (c *Config) derive(loaded bool) error {
	algo, err := LookupAlgo(c.Algo)
	if err != nil {
		return err
	}
	if err := algo.defaults(c); err != nil {
		return err
	}
	if c.Parties == 0 && c.Synthetic == nil && !loaded && c.Data != "" && dataset.IsSplit(c.Data) {
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
		c.EvalByEpoch = c.EvalByEpoch || c.Patience > 0 || c.HoldOut > 0
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
