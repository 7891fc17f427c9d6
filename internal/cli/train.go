package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asyrevel/asyrevel/aggregator"
	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/run"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/dataset"
)

// Which commands a training flag is for: each command shows and reads only
// the flags it uses.
type role uint8

const (
	roleTrain      role = 1 << iota // asyrevel train: the whole run
	roleAggregator                  // asyrevel aggregator
	roleParty                       // asyrevel party
	roleReference                   // asyrevel experiment reference: the single-process loop
	roleFirstOrder                  // asyrevel experiment firstorder

	roleAll   = roleTrain | roleAggregator | roleParty | roleReference | roleFirstOrder
	roleLoops = roleReference | roleFirstOrder
	roleRun   = roleTrain | roleAggregator | roleParty
)

// trainFlags registers the training flags shared by train, aggregator,
// party and the reference loops on fs.
type trainFlags struct {
	role      role
	bias      *bool
	straggler string
	cfg       run.Config
	hooks     run.Hooks // what the command plugs into the run (run.Hooks)
	seed      uint64
	scale     string
	logLevel  string
	logJSON   bool
	verbose   bool
	// missing counts what the missing-value policy did to the CSV files
	// read (dataset.CSVOptions.Report).
	missing dataset.MissingCount
	// resumed says which run --resume took when --run was left out.
	resumed string
}

func newTrainFlags(fs *flag.FlagSet, r role) *trainFlags {
	f := &trainFlags{role: r, seed: 1, logLevel: "info", cfg: run.Defaults()}
	for _, d := range trainFlagTable(f) {
		if d.roles&r != 0 {
			d.add(fs)
		}
	}
	return f
}

// flagDef is one training flag and the commands it is for.
type flagDef struct {
	roles role
	add   func(fs *flag.FlagSet)
}

// trainFlagTable lists the training flags; the help test checks that each
// command shows those of its role and no other.
func trainFlagTable(f *trainFlags) []flagDef {
	c := &f.cfg
	return []flagDef{
		{roleAll, func(fs *flag.FlagSet) {
			fs.StringVar(&c.Data, "data", "", "training set: a LIBSVM or CSV file (plain or gzip), a folder of IDX files\n(MNIST: its t10k files are the test set), a split folder written by \"asyrevel data split\",\nor \"synthetic[:n=20000,d=64,test=5000,noise=0.05,density=1,classes=2]\"")
		}},
		{roleAll, func(fs *flag.FlagSet) {
			fs.StringVar(&c.Preset, "preset", "", "named preprocessing of a CSV set that also makes its test split\n(uci-credit-card, give-me-some-credit; see asyrevel data presets)")
		}},
		{roleAll, func(fs *flag.FlagSet) {
			fs.StringVar(&c.Test, "test", "", "test set in the same format (its features must fit the training set's)")
		}},
		{roleAll, func(fs *flag.FlagSet) { addCSVFlags(fs, &c.CSV) }},
		{roleTrain | roleParty | roleLoops, func(fs *flag.FlagSet) {
			fs.StringVar(&f.scale, "scale", "", "scale each column, fitted on the training set only and applied to both sets:\nnone, standard, std, minmax, maxabs (as data split --scale; a party scales its own columns)")
		}},
		{roleAll, func(fs *flag.FlagSet) {
			fs.IntVar(&c.Parties, "parties", 0, "number of parties q; the features are split into q nearly equal blocks\n(default: a split folder's own count, else 8; nonf: 1)")
		}},
		{roleRun | roleReference, func(fs *flag.FlagSet) {
			fs.StringVar(&c.Algo, "algo", c.Algo, "algorithm: "+strings.Join(run.Algorithms, ", ")+"\n"+
				"  asyrevel-gau, asyrevel-uni  asynchronous zeroth-order (Gaussian / unit-sphere directions)\n"+
				"  synrevel-gau, synrevel-uni  synchronous rounds: one shared batch, the aggregator waits for all parties\n"+
				"  tig                         first-order split learning: gradients dF_0/dc back to white-box models\n"+
				"  nonf                        all features at one party (q = 1), AsyREVEL-Gau: the non-federated yardstick")
		}},
		{roleTrain | roleParty | roleLoops, func(fs *flag.FlagSet) {
			fs.StringVar(&c.Model, "model", c.Model, "local model: linear, mlp (d x hidden x k, ReLU), codebook (k-means codes fitted\nwithout labels: the label-free privacy profile's) or external (a black-box process)")
			fs.IntVar(&c.Hidden, "hidden", c.Hidden, "hidden units of the mlp local model")
		}},
		{roleAll, func(fs *flag.FlagSet) {
			fs.IntVar(&c.Codes, "codes", 0, "codebook models: codes per output (default: set by --privacy's label-free\nprofile from the training rows, sqrt(rows/2) between 4 and 256)")
		}},
		{roleTrain | roleAggregator, func(fs *flag.FlagSet) {
			fs.IntVar(&c.EmbedDim, "embed-dim", 0, "label-free profile: the width of a code's embedding in the aggregator's head\n(default 16; 4 on fewer than 5,000 rows)")
			fs.IntVar(&c.EmbedHidden, "embed-hidden", -1, "label-free profile: hidden units of the aggregator's head (default 128; 0,\nno hidden layer, on fewer than 5,000 rows)")
		}},
		{roleTrain | roleParty, func(fs *flag.FlagSet) {
			fs.StringVar(&c.ModelCmd, "model-cmd", "", "command of an external black-box model (--model external), e.g.\n\"bin/quantized -scale 16\"; it speaks the protocol of model/EXTERNAL.md")
			fs.DurationVar(&c.ModelTimeout, "model-timeout", 0, "time limit of one call of an external model (default 30s)")
		}},
		{roleAll, func(fs *flag.FlagSet) {
			fs.IntVar(&c.K, "k", 0, "outputs per party for multiclass sets (default 1; nonf: 8, the width of the\npaper's 8-party network)")
		}},
		{roleTrain | roleAggregator | roleLoops, func(fs *flag.FlagSet) {
			f.bias = fs.Bool("bias", true, "binary sets: the aggregator's head has an intercept (false: the paper's\nF_0 = log(1+exp(-y sum c)) without one)")
		}},
		{roleTrain | roleAggregator | roleLoops, func(fs *flag.FlagSet) {
			fs.Float64Var(&c.Epochs, "epochs", 0, "stop after this many passes over the training set per party")
			fs.DurationVar(&c.Duration, "duration", 0, "stop after this much training time (e.g. 30s)")
			fs.Int64Var(&c.MaxSteps, "steps", 0, "stop after this many party steps (answered requests)")
		}},
		{roleTrain | roleAggregator, func(fs *flag.FlagSet) {
			fs.Float64Var(&c.Patience, "patience", 0, fmt.Sprintf("stop when this many epochs go by without the held-out loss falling by\n--tolerance below its best, and at least %d requests of each party and %d\nevaluations (a small table's epoch is a few requests) (default %g when no\n--epochs, --duration, --steps or --stop-at-target is given, else off;\nnegative: off)", run.MinPatienceSteps, run.MinPatienceEvals, run.DefaultPatience))
			fs.Float64Var(&c.Tolerance, "tolerance", c.Tolerance, "with --patience: the relative gain an evaluation needs to count as an\nimprovement (0: any fall counts)")
		}},
		{roleRun, func(fs *flag.FlagSet) {
			fs.Float64Var(&c.HoldOut, "holdout", 0, fmt.Sprintf("keep this share of the training rows aside, chosen at random with --seed and\nnever trained on: early stopping watches their loss and the run keeps the\nmodels of the evaluation best on them (a test set is only reported; without\none their accuracy is reported). train and aggregator: default %g when the run\nstops by --patience, else none; party: the aggregator's, which its call names\n(given, it must match the aggregator's share and --seed, or the party\nrefuses); negative: none", run.DefaultHoldOut))
		}},
		{roleTrain | roleParty | roleReference, func(fs *flag.FlagSet) {
			fs.Float64Var(&c.LR, "lr", 0, "initial step size of the parties (default: by model and batch size: linear\n0.003 at batch 1 to 0.1 at 64; mlp 0.001, or 0.004 from batch 16)")
		}},
		{roleRun | roleReference, func(fs *flag.FlagSet) {
			fs.Float64Var(&c.LRDecay, "lr-decay", 0, "step size decays as lr/sqrt(1+s/S) where s is samples seen by the\nparty; S defaults to half the training set (mlp: 32 times it), negative means constant")
			fs.Float64Var(&c.PartyEMA, "party-ema", 0, "each party evaluates (sends for evaluation) an exponential moving average of its\nparameters with this decay in [0, 1) (0: its iterate); training is unchanged")
		}},
		{roleTrain | roleAggregator | roleReference, func(fs *flag.FlagSet) {
			fs.Float64Var(&c.HeadLR, "head-lr", 0, "initial step size of the aggregator's softmax head (default 0.05)")
		}},
		{roleRun | roleReference, func(fs *flag.FlagSet) {
			fs.Float64Var(&c.Mu, "mu", c.Mu, "smoothing radius of the two-point estimator (a model with quantised weights\nor outputs needs one above its quantisation step: the example models 0.1)")
		}},
		{roleTrain | roleParty | roleLoops, func(fs *flag.FlagSet) {
			fs.Float64Var(&c.Lambda, "lambda", c.Lambda, "regularisation weight (0 turns the regulariser off)")
			fs.StringVar(&c.Reg, "reg", c.Reg, "regulariser: nonconvex (the paper's), l2 or none")
		}},
		{roleTrain | roleAggregator | roleParty | roleLoops, func(fs *flag.FlagSet) {
			fs.IntVar(&c.Batch, "batch", 0, "samples per request (default 64; mlp: 256); the paper's algorithm is --batch 1 --window 1")
		}},
		{roleTrain | roleParty, func(fs *flag.FlagSet) {
			fs.IntVar(&c.Window, "window", 0, "requests in flight per party; more trades staleness for throughput\n(default 8; mlp: 4; synrevel: 1)")
			fs.StringVar(&f.straggler, "straggler", "", "M:S makes party M's steps S times as long (a delay proportional to its\nmeasured compute), e.g. 3:1.6")
			fs.DurationVar(&c.SimCompute, "sim-compute", 0, "simulated compute per model parameter and step, on top of the real one\n(e.g. 2us: a party with 1,000 parameters sleeps 2 ms a step), to model one\nmachine per party on a small host")
		}},
		{roleAll, func(fs *flag.FlagSet) {
			fs.Uint64Var(&f.seed, "seed", 1, "random seed (data sampling, directions, synthetic data)")
		}},
		{roleTrain | roleAggregator, func(fs *flag.FlagSet) {
			fs.BoolVar(&c.Delta, "delta", false, "reply only h_bar - h instead of h and h_bar")
		}},
		{roleRun, func(fs *flag.FlagSet) {
			fs.StringVar(&c.Privacy, "privacy", run.DefaultPrivacy, "label privacy, one switch for a consistent defended configuration (reply form, batch,\n"+
				"clipping, noise, budget, who draws the batches) for the data set and model at hand:\n"+
				"  auc=A      no attacker in one party's position, passive or active, infers any label\n"+
				"             with an AUC above A (0.5 < A < 1)\n"+
				"  epsilon=E  every label (E, delta)-DP in one party's view (epsilon=E,delta=D; delta 1e-5)\n"+
				"  off        the paper's wire format, undefended (h and h_bar per sample: every party\n"+
				"             can read every label it asks about)\n"+
				"the defense flags below override single settings; the same value on every process of a run")
		}},
		{roleTrain | roleAggregator, func(fs *flag.FlagSet) { addDefenseFlags(fs, &c.Defense, &c.NoLeakage) }},
		{roleTrain, func(fs *flag.FlagSet) { addAdversaryFlag(fs, &f.hooks) }},
		{roleTrain, func(fs *flag.FlagSet) {
			fs.StringVar(&c.Bus, "bus", c.Bus, "transport: jetstream, or memory (in-process baseline, no broker)")
		}},
		{roleRun, func(fs *flag.FlagSet) {
			fs.StringVar(&c.Design, "transport", "", "how messages travel over NATS (default capture; every process of a run the same):\n"+
				"  capture  core NATS publish/subscribe, the stream captures every message,\n"+
				"           publishers bounded by the stream's confirmed position (lossless)\n"+
				"  ordered  acked JetStream publishes, ordered consumers without acks\n"+
				"  acked    acked publishes, durable consumers with acks (the first design)\n"+
				"  core     core NATS only: no stream, no audit log (a benchmark baseline)")
			fs.StringVar(&c.NATS, "nats", "", "URL of a NATS server with JetStream, e.g. nats://127.0.0.1:4222 (train: default\nan embedded one)")
			fs.StringVar(&c.Persist, "persist", "", "when the run's stream writes a message to its files, for the participant that\ncreates it: sync (before acknowledging it: a broker killed with -9 loses nothing it\nconfirmed; the default with --nats) or async (after: faster; the default with the\nembedded broker, which dies with the run)")
			fs.DurationVar(&c.BrokerWait, "broker-wait", run.DefaultBrokerWait, "how long to wait for the broker to listen and its JetStream to be available\n(started before it, a cluster electing its leader), retrying with a line every\nfew seconds; 0s or less: fail at once")
		}},
		{roleTrain, func(fs *flag.FlagSet) {
			fs.BoolVar(&c.InProcess, "in-process", false, "connect to the embedded broker in-process instead of over TCP loopback")
			fs.IntVar(&c.Cluster, "cluster", 0, "run an embedded JetStream cluster of N nodes (stream replicated on 3), participants spread over them")
			fs.StringVar(&c.StoreDir, "store", "", "embedded broker's store directory, kept after the run (default OUT/stream, which\nholds the latest run into OUT only; else a temporary one); see asyrevel store")
		}},
		{roleRun, func(fs *flag.FlagSet) {
			fs.StringVar(&c.Run, "run", "", "run id: names the stream ASYREVEL_<run>, which must not hold an earlier run\n(train: default generated)")
		}},
		{roleTrain | roleAggregator, func(fs *flag.FlagSet) {
			fs.Var((*sizeFlag)(&c.MaxStore), "max-store", "bound of the run's stream, e.g. 20GB or 500MiB (none: unbounded). Full, it refuses\nnew messages and the run stops with a clear error; old ones are never dropped\n(default with the embedded broker: 80% of the disk space free at its store)")
		}},
		{roleTrain | roleAggregator, func(fs *flag.FlagSet) {
			fs.DurationVar(&c.EvalEvery, "eval-every", 0, "evaluation period (default: 1s, duration/40, or 50ms under --patience, and at\nleast once an epoch under --patience or --holdout; given: this period only); rounds are spaced at least 9\ntimes their own duration apart, so that they take at most a tenth of the run")
		}},
		{roleTrain | roleAggregator | roleLoops, func(fs *flag.FlagSet) {
			fs.Float64Var(&c.TargetAcc, "target", 0, "record the time test accuracy first reaches this (e.g. 0.845)")
			fs.BoolVar(&c.StopAtTarget, "stop-at-target", false, "stop when --target is reached")
		}},
		{roleTrain | roleAggregator | roleParty, func(fs *flag.FlagSet) {
			fs.StringVar(&c.Out, "out", "", "write summary.json, curve.csv and curve.png into this directory (not a party), and\nthe final models into DIR/models: party-M.model, aggregator.model (asyrevel predict)")
		}},
		{roleTrain, func(fs *flag.FlagSet) {
			fs.BoolVar(&c.ReplaceOut, "replace", false, "remove the earlier run that --out holds (its log, keys, receipts, checkpoints,\nmodels and outputs) instead of keeping it whole in OUT/earlier/RUN")
		}},
		{roleRun, func(fs *flag.FlagSet) {
			fs.DurationVar(&c.JoinWait, "join-wait", 10*time.Minute, "give up when joining makes no progress for this long: the aggregator waits for\nevery party's hello and initial pass (a refused party may join again meanwhile),\na party for the aggregator's start")
			fs.DurationVar(&c.Wait, "wait", 2*time.Minute, "give up when, after the start, an evaluation gets no answer (aggregator) or no\nreply comes to the requests in flight (party) for this long")
		}},
		{roleRun, func(fs *flag.FlagSet) {
			fs.BoolVar(&c.Resume, "resume", false, "go on with a run that was interrupted or whose process died: restart from the\nlatest checkpoint in --checkpoint-dir and apply the run's stream from there (no\nupdate lost or applied twice); the same --run and flags as the first start")
			fs.DurationVar(&c.CheckpointEvery, "checkpoint-every", 0, "how often the state is saved to --checkpoint-dir (also at the start of\ntraining and on Ctrl-C or SIGTERM); default: adaptive, 250ms to 10s, at most ~2%\nof the CPU (50 times the last save's cost); negative: never")
		}},
		{roleRun, func(fs *flag.FlagSet) {
			def := "asyrevel-checkpoints"
			if f.role == roleTrain {
				def = "" // OUT/checkpoints with --out
			}
			fs.StringVar(&c.CheckpointDir, "checkpoint-dir", def, "where the state is saved for --resume: DIR/RUN/aggregator.ckpt, DIR/RUN/party-M.ckpt\n(train: default OUT/checkpoints with --out, else none)")
		}},
		{roleTrain | roleAggregator, func(fs *flag.FlagSet) {
			fs.DurationVar(&c.Trust.SealEvery, "seal-every", 0, "how often the aggregator publishes a signed checkpoint of the log for the\nparties to countersign (default 5s; negative: only the final one)")
			fs.DurationVar(&c.PartyTimeout, "party-timeout", 0, "a party that sends nothing (no request, no evaluation) this long counts as\ndeparted: training goes on without it and the evaluations use its last outputs\nuntil it is back (an evaluation waits for a party silent in it only a few times\nwhat the round takes the others; default min(wait/2, 30s); negative: wait\n--wait, then abort the run)")
		}},
		{roleTrain, func(fs *flag.FlagSet) {
			fs.BoolVar(&c.Trust.Off, "no-trust", false, "turn the trust layer off: messages neither signed nor verified, the embedded\nbroker open to anyone (to measure the layer's cost; never across organisations)")
			fs.StringVar(&c.Trust.KeysDir, "keys", "", "`DIR` for the run's keys and roster.json, made by train (default OUT/keys, else a\ntemporary folder); asyrevel audit verify --roster DIR/roster.json checks the log")
		}},
		{roleAggregator | roleParty, func(fs *flag.FlagSet) {
			fs.StringVar(&c.Trust.KeyFile, "key", "", "this participant's key `FILE` (asyrevel keys); with --roster, every message is\nsigned and every message received verified")
			fs.StringVar(&c.Trust.RosterFile, "roster", "", "the run's roster.json (`FILE`: every participant's public key; asyrevel keys roster)")
		}},
		{roleRun, func(fs *flag.FlagSet) {
			fs.StringVar(&c.TLS.CA, "tls-ca", "", "PEM `FILE` of the authorities that sign the broker's certificate (TLS to --nats)")
			fs.StringVar(&c.TLS.Cert, "tls-cert", "", "PEM `FILE` of this participant's certificate, for a broker that requires mutual TLS\n(with --tls-key)")
			fs.StringVar(&c.TLS.Key, "tls-key", "", "PEM `FILE` of the private key of --tls-cert")
		}},
		{roleParty, func(fs *flag.FlagSet) {
			fs.StringVar(&c.Trust.Receipts, "receipts", "", "`DIR` where the party keeps its receipts: the aggregator's checkpoints of the log,\nchecked and countersigned (needs --key; asyrevel audit verify --receipts DIR)")
		}},
		{roleRun, func(fs *flag.FlagSet) {
			fs.StringVar(&c.Monitor.Metrics, "metrics", "", "serve Prometheus metrics at http://`ADDR`/metrics while the process runs, e.g.\n127.0.0.1:9464 (port 0: any free one, named in the log); steps, staleness, losses,\nprivacy spent, the stream's size, rejections, outages (docs/running.md lists them)")
		}},
		{roleTrain | roleAggregator, func(fs *flag.FlagSet) {
			fs.StringVar(&c.Monitor.Board, "board", "", "serve a live page of the run at http://`ADDR`/, e.g. 127.0.0.1:8090: learning\ncurves, each party's steps, lag and staleness, the privacy budget, the store,\nrecoveries and events; nothing loaded from elsewhere. With --out the same page\nis written as OUT/report.html at the end (with or without --board)")
		}},
		{roleAll, func(fs *flag.FlagSet) {
			fs.StringVar(&f.logLevel, "log", "info", "log level: debug, info, warn, error")
			fs.BoolVar(&f.logJSON, "log-json", false, "log JSON lines instead of console text")
		}},
		{roleRun, func(fs *flag.FlagSet) {
			fs.BoolVar(&f.verbose, "verbose", false, "say more: the debug log (unless --log says otherwise) and, at the end, every\nsetting the privacy switch made (summary.json and privacy.json hold them)")
		}},
	}
}

// addCSVFlags registers the flags that say how a CSV file is read.
func addCSVFlags(fs *flag.FlagSet, o *dataset.CSVOptions) {
	fs.StringVar(&o.Label, "label", "", "CSV: the label column, by `NAME` or 0-based position (default: the column named\nlabel, class, target or y; asyrevel never guesses another)")
	fs.StringVar(&o.ID, "id-column", "", "CSV: the column of sample ids, by `NAME` or position (default: one named id, or an\nunnamed first column; - for none)")
	fs.IntVar(&o.SkipRows, "skip-rows", 0, "CSV: lines before the header to skip")
	addCellFlags(fs, &o.Missing, &o.NA, &o.Drop, &o.Categorical)
}

// addCellFlags registers the flags that say how a CSV file's cells are
// read, in the same words on every command that reads one (data inspect,
// data split, train, aggregator, party, align): --missing, --na, --drop,
// --categorical. The missing-value policy starts as error: a file with a
// missing cell is refused until told.
func addCellFlags(fs *flag.FlagSet, missing *dataset.MissingPolicy, na, drop, categorical *[]string) {
	fs.Func("categorical", "CSV: `COLUMNS` (comma-separated names or positions) to one-hot encode", func(v string) error {
		*categorical = append(*categorical, splitList(v)...)
		return nil
	})
	fs.Func("drop", "CSV: `COLUMNS` (comma-separated names or positions) to leave out", func(v string) error {
		*drop = append(*drop, splitList(v)...)
		return nil
	})
	*missing = dataset.MissingError
	fs.Func("missing", "CSV: what to do with a missing cell (empty, or one of --na): `HOW` is error (the\ndefault: refuse the file, naming the line and column), zero (read it as 0; a\ncategorical cell as no category) or drop (leave its row out)", func(v string) error {
		p, err := dataset.ParseMissing(v)
		if err != nil {
			return fmt.Errorf("want error, zero or drop")
		}
		*missing = p
		return nil
	})
	fs.Func("na", "CSV: the cell `VALUES` (comma-separated) that mean missing (default: an empty cell and NA)", func(v string) error {
		*na = append(*na, splitList(v)...)
		return nil
	})
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// parse parses args and finishes the configuration.
func (f *trainFlags) parse(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	if err := f.otherRoles(fs, args); err != nil {
		return err
	}
	var config *string
	if f.role&roleRun != 0 {
		config = fs.String("config", "", "run file (YAML; see examples/run.yaml): its keys are these flags' names; flags\ngiven here win")
	}
	if err := fs.Parse(args); err != nil {
		return usageErr(err)
	}
	if config != nil && *config != "" {
		if err := f.applyRunFile(fs, *config); err != nil {
			return err
		}
	}
	return f.finish(fs, stderr)
}

// roleNames name the commands of the roles, for messages.
var roleNames = []struct {
	r    role
	name string
}{{roleTrain, "train"}, {roleAggregator, "aggregator"}, {roleParty, "party"},
	{roleReference, "experiment reference"}, {roleFirstOrder, "experiment firstorder"}}

// otherRoles says clearly when args hold a training flag that another
// command uses but this one does not (the same flags pasted to the
// aggregator and the parties, say), rather than the flag package's
// "flag provided but not defined".
func (f *trainFlags) otherRoles(fs *flag.FlagSet, args []string) error {
	var all *flag.FlagSet
	for _, a := range args {
		if a == "--" || !strings.HasPrefix(a, "-") || a == "-" {
			if a == "--" {
				break
			}
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name == "" || fs.Lookup(name) != nil {
			continue
		}
		if all == nil {
			all = flag.NewFlagSet("all", flag.ContinueOnError)
			var g trainFlags
			for _, d := range trainFlagTable(&g) {
				d.add(all)
			}
		}
		if all.Lookup(name) == nil {
			continue // unknown everywhere: the flag package says so
		}
		var users []string
		for _, d := range trainFlagTable(&trainFlags{}) {
			probe := flag.NewFlagSet("probe", flag.ContinueOnError)
			d.add(probe)
			if probe.Lookup(name) != nil {
				for _, rn := range roleNames {
					if d.roles&rn.r != 0 {
						users = append(users, rn.name)
					}
				}
			}
		}
		this := ""
		for _, rn := range roleNames {
			if rn.r == f.role {
				this = rn.name
			}
		}
		return fmt.Errorf("%w: --%s is a flag of %s; %s does not use it: leave it out here", errUsage, name, strings.Join(users, ", "), this)
	}
	return nil
}

// finish checks the flags after parsing and sets up logging.
func (f *trainFlags) finish(fs *flag.FlagSet, stderr io.Writer) error {
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	c := &f.cfg
	c.Seed = f.seed
	c.Monitor.Report = f.role&(roleTrain|roleAggregator) != 0 // OUT/report.html
	if f.bias != nil {
		c.NoBias = !*f.bias
	}
	if c.CSV.SkipRows < 0 {
		return fmt.Errorf("%w: --skip-rows %d", errUsage, c.CSV.SkipRows)
	}
	scale, err := dataset.ParseScaleMethod(f.scale)
	if err != nil {
		return fmt.Errorf("%w: --scale: %v", errUsage, err)
	}
	c.Scale = scale
	if f.verbose && !flagGiven(fs, "log") {
		f.logLevel = "debug"
	}
	lvl, err := zerolog.ParseLevel(f.logLevel)
	if err != nil {
		return fmt.Errorf("%w: --log %q", errUsage, f.logLevel)
	}
	f.hooks.Log = newLogger(stderr, lvl, f.logJSON)
	f.hooks.Missing = &f.missing
	if spec, ok := strings.CutPrefix(c.Data, "synthetic"); ok && (spec == "" || spec[0] == ':') {
		sc, err := parseSynthetic(strings.TrimPrefix(spec, ":"), f.seed)
		if err != nil {
			return err
		}
		c.Synthetic = &sc
	}
	if c.Data == "" {
		return fmt.Errorf("%w: --data is required (a LIBSVM file, or synthetic)", errUsage)
	}
	if c.Parties < 0 || c.Parties == 0 && flagGiven(fs, "parties") {
		return fmt.Errorf("%w: --parties %d: need at least 1", errUsage, c.Parties)
	}
	if f.role == roleParty && !flagGiven(fs, "holdout") {
		// A party does not know the aggregator's length flags, which
		// decide the hold-out: it loads its rows with none kept aside and
		// keeps aside what the aggregator's call names (run/holdout.go).
		c.HoldOut = -1
	}
	if f.straggler != "" {
		m, s, err := run.ParseStraggler(f.straggler)
		if err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		c.Straggler, c.StragglerFactor = m, s
	}
	if c.Design == "" && len(broker.ServerURLs(c.NATS)) > 1 {
		// A cluster: the design whose publishes and consumers survive the
		// loss of a node (the default, capture, loses live deliveries).
		c.Design = string(broker.DesignOrdered)
	}
	if f.role == roleTrain && c.CheckpointDir == "" && c.Out != "" {
		c.CheckpointDir = filepath.Join(c.Out, "checkpoints")
	}
	if c.Resume && !c.Trust.Off && f.role == roleTrain && c.Out == "" && c.Trust.KeysDir == "" {
		// The first part's keys were temporary: nothing can go on
		// signing its chains.
		return fmt.Errorf("%w: %w", errUsage, run.ErrResumeTrust)
	}
	if c.Resume && !flagGiven(fs, "run") {
		last, saved, err := lastRun(c.CheckpointDir)
		if err != nil {
			return fmt.Errorf("%w: --resume without --run goes on with the last run of --out (its checkpoints): %v; give --run R", errUsage, err)
		}
		c.Run = last
		f.resumed = fmt.Sprintf("--resume without --run: going on with run %s, the last one in %s (saved %s)", last, c.CheckpointDir, saved.Local().Format("2006-01-02 15:04:05"))
		fmt.Fprintln(stderr, f.resumed)
	}
	if c.Resume && f.role == roleTrain && c.NATS == "" && c.Out == "" && c.StoreDir == "" {
		return fmt.Errorf("%w: train --resume needs the run's stream: the --out (or --store) of the first start", errUsage)
	}
	if f.role&roleRun != 0 {
		if _, err := run.ParsePrivacy(c.Privacy); err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		c.PrivacyDefault = !flagGiven(fs, "privacy")
		c.Explicit = map[string]bool{}
		fs.Visit(func(fl *flag.Flag) { c.Explicit[fl.Name] = true })
	}
	if err := c.Prepare(); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if f.role&roleRun != 0 && !flagGiven(fs, "parties") && !c.Resume {
		why := "the default; --parties Q for another"
		switch {
		case c.Algo == "nonf":
			why = "nonf holds every feature at one party"
		case c.Synthetic == nil && dataset.IsSplit(c.Data):
			why = "the split folder's manifest: it was split for them"
		}
		f.hooks.Log.Info().Msgf("%d parties (%s)", c.Parties, why)
	}
	if f.role&roleRun != 0 {
		// What the missing-value policy did, once the data are read (the
		// first evaluation comes after).
		next, said := f.hooks.OnPoint, false
		f.hooks.OnPoint = func(p aggregator.Point) {
			if !said {
				said = true
				if w := f.missing.String(); w != "" {
					f.hooks.Log.Info().Msg("data: " + w)
				}
			}
			if next != nil {
				next(p)
			}
		}
	}
	return nil
}

// lastRun is the run whose checkpoints in dir were saved last: the run
// train --resume goes on with when no --run is given.
func lastRun(dir string) (string, time.Time, error) {
	if dir == "" {
		return "", time.Time{}, errors.New("no checkpoint folder (--out or --checkpoint-dir)")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", time.Time{}, err
	}
	var best string
	var at time.Time
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		files, err := os.ReadDir(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		for _, fe := range files {
			if info, err := fe.Info(); err == nil && info.ModTime().After(at) {
				best, at = e.Name(), info.ModTime()
			}
		}
	}
	if best == "" {
		return "", time.Time{}, fmt.Errorf("%s holds no run's checkpoints", dir)
	}
	return best, at, nil
}

// needBudget checks that a run that decides when to stop was told when:
// a length, or early stopping (on by default without one).
func (f *trainFlags) needBudget() error {
	c := &f.cfg
	if c.Unbounded() && c.Patience < 0 {
		return fmt.Errorf("%w: --patience %g turns early stopping off: say how long to train: --epochs N, --steps N or --duration 30s", errUsage, c.Patience)
	}
	return nil
}

func newLogger(w io.Writer, lvl zerolog.Level, json bool) zerolog.Logger {
	if !json {
		tty := false
		if f, ok := w.(*os.File); ok {
			tty = isatty.IsTerminal(f.Fd())
		}
		w = zerolog.ConsoleWriter{Out: w, NoColor: !tty, TimeFormat: "15:04:05"}
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger()
}

// parseSynthetic reads "n=20000,d=100,test=5000,noise=0.05,density=1,classes=2".
func parseSynthetic(spec string, seed uint64) (dataset.SyntheticConfig, error) {
	c := dataset.SyntheticConfig{Samples: 20000, TestSamples: 5000, Features: 64, Classes: 2, Density: 1, Noise: 0.05, Seed: seed}
	if spec == "" {
		return c, nil
	}
	for _, kv := range strings.Split(spec, ",") {
		k, v, ok := strings.Cut(kv, "=")
		var err error
		switch {
		case !ok:
			err = errors.New("want key=value")
		case k == "n" || k == "samples":
			c.Samples, err = strconv.Atoi(v)
		case k == "test":
			c.TestSamples, err = strconv.Atoi(v)
		case k == "d" || k == "features":
			c.Features, err = strconv.Atoi(v)
		case k == "classes":
			c.Classes, err = strconv.Atoi(v)
		case k == "noise":
			c.Noise, err = strconv.ParseFloat(v, 64)
		case k == "density":
			c.Density, err = strconv.ParseFloat(v, 64)
		default:
			err = errors.New("unknown key (n, test, d, classes, noise, density)")
		}
		if err != nil {
			return c, fmt.Errorf("%w: --data synthetic: %q: %v", errUsage, kv, err)
		}
	}
	return c, nil
}

func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	out := &flagOutput{w: stderr}
	fs.SetOutput(out)
	fs.Usage = func() { out.usage(fs, synopsis) }
	return fs
}

func cmdTrain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("train", "asyrevel train --data PATH [--test PATH] --parties Q --algo A [flags]\n\n"+
		"Runs a whole AsyREVEL training in this process: an embedded NATS JetStream broker\n"+
		"(unless --nats), the aggregator and Q parties, each with its own connection.\n"+
		"Given no length, it stops when the held-out loss stops improving (--patience);\n"+
		"given --epochs, --steps, --duration or --target with --stop-at-target, at the\n"+
		"first one reached. Ctrl-C pauses it: what is in flight is answered, the log\n"+
		"sealed (not with --no-trust) and, with --out or --checkpoint-dir, the state\n"+
		"saved (--resume goes on); a second Ctrl-C stops at once.", stderr)
	f := newTrainFlags(fs, roleTrain)
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the training, from the first evaluation (the start)\nto the end, to this file (for go tool pprof)")
	memProfile := fs.String("memprofile", "", "write a heap profile (live objects) at the end of the training, before the\nbroker shuts down, to this file (for go tool pprof)")
	if err := f.parse(fs, args, stderr); err != nil {
		return err
	}
	if err := f.needBudget(); err != nil {
		return err
	}
	if *cpuProfile != "" {
		stop, err := profileFromStart(&f.hooks, *cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	if *memProfile != "" {
		f.hooks.OnPoint = heapAtEnd(f.hooks.OnPoint, *memProfile, f.hooks.Log)
	}
	// The first Ctrl-C pauses the run with its log sealed (main).
	pause := make(chan struct{})
	var once sync.Once
	var pausedBy atomic.Pointer[signalError]
	stop := func(sig os.Signal) {
		once.Do(func() {
			pausedBy.Store(&signalError{sig})
			close(pause)
		})
	}
	f.hooks.Pause = pause
	pauseWords.Store(ptr(trainPauseWords(&f.cfg)))
	pauser.Store(&stop)
	defer pauser.Store(nil)
	s, err := run.Train(ctx, f.cfg, f.hooks)
	if s != nil {
		report(stdout, &f.cfg, s, f.verbose && f.hooks.Log.GetLevel() > zerolog.DebugLevel)
	}
	if sig := pausedBy.Load(); sig != nil && errors.Is(err, run.ErrInterrupted) {
		// A pause's cause is the signal, as a cancelled context's is.
		err = signalled{err: err, sig: *sig}
	}
	return withResume(err, "train", args, &f.cfg, s)
}

// signalled is err, a run's end that a signal caused (a pause) without
// carrying it in its chain; errors.As finds the signal.
type signalled struct {
	err error
	sig signalError
}

func (e signalled) Error() string   { return e.err.Error() }
func (e signalled) Unwrap() []error { return []error{e.err, e.sig} }

// notStarted is the end of a run stopped (paused or interrupted) before its
// training started: nothing to resume (summary.json: not_started). again
// says how to start it.
type notStarted struct {
	err   error
	again string
	// noSummary: the command writes no summary.json (party).
	noSummary bool
}

func (e notStarted) Error() string { return e.err.Error() }
func (e notStarted) Unwrap() error { return e.err }

// progName is how the user ran asyrevel (main sets it from os.Args[0]),
// for the commands it prints.
var progName = "asyrevel"

// resumeHint is a run's end that --resume goes on from, with the exact
// command that does it.
type resumeHint struct {
	err     error
	command string
}

func (h resumeHint) Error() string { return h.err.Error() }
func (h resumeHint) Unwrap() error { return h.err }

// withResume gives an interrupted or paused run's error the command that
// goes on with it: the same command line with --resume and the run's id.
// A run stopped before its training started has no checkpoint: the
// command that starts it again instead (notStarted).
func withResume(err error, cmd string, args []string, cfg *run.Config, s *run.Summary) error {
	if !errors.Is(err, run.ErrInterrupted) {
		return err
	}
	id := cfg.Run
	if s != nil && s.Run != "" {
		id = s.Run
	}
	switch {
	case s != nil && s.NotStarted:
		return notStarted{err: err, again: startAgain(cmd, args, cfg, id)}
	case cfg.CheckpointDir == "" || cfg.CheckpointEvery < 0:
		return err // no checkpoint kept: nothing to go on from
	}
	return resumeHint{err: err, command: resumeCommand(cmd, args, id)}
}

// startAgain says how to start again a run that stopped before its
// training started. train without --run, or with its stream in --out (an
// earlier run there is kept aside) or in a temporary store, starts again
// with the same command; a run id given whose stream is kept elsewhere
// (--store, --nats) holds the stopped run's messages, and the run starts
// under another id.
func startAgain(cmd string, args []string, cfg *run.Config, id string) string {
	if cmd != "train" {
		return "start every participant again with another --run (run " + id + "'s stream holds the stopped start)"
	}
	if cfg.Run != "" && (cfg.StoreDir != "" || cfg.NATS != "") {
		return "start it again under another run id (run " + id + "'s stream holds the stopped start), as this command does:\n  " +
			strings.Join(commandWords(cmd, args), " ")
	}
	return "the same command starts it again:\n  " + sameCommand(cmd, args)
}

// checkpointKept reports whether participant role of cfg's run has a
// checkpoint file in --checkpoint-dir.
func checkpointKept(cfg *run.Config, role int) bool {
	if cfg.CheckpointDir == "" {
		return false
	}
	_, err := os.Stat(run.CheckpointPath(cfg.CheckpointDir, cfg.Run, role))
	return err == nil
}

// partyAgain says how a party stopped before training started takes part
// again. Until the aggregator's call is answered (joined), the run holds
// only its hello, and the same command joins anew (run.checkParty sets the
// earlier attempt aside); once answered, the aggregator refuses a second
// join of that party ("has already joined this run").
func partyAgain(args []string, run string, joined bool) string {
	if joined {
		return "the aggregator of run " + run + " had taken this party's join and refuses a second one: " +
			"stop every participant and start them all again with another --run"
	}
	return "the same command joins the run again while its training has not started (this attempt is set aside; " +
		"if the aggregator stopped too, start every participant again with another --run):\n  " + sameCommand("party", args)
}

// sameCommand is cmd args as given, quoted for a POSIX shell.
func sameCommand(cmd string, args []string) string {
	return strings.Join(append([]string{progName, cmd}, quoteAll(args)...), " ")
}

func quoteAll(args []string) []string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = shellQuote(a)
	}
	return q
}

// resumeCommand is cmd args with --resume and --run id (an earlier --resume
// or --run dropped), quoted for a POSIX shell.
func resumeCommand(cmd string, args []string, id string) string {
	return strings.Join(append(commandWords(cmd, args), "--resume", "--run", shellQuote(id)), " ")
}

// commandWords is cmd args without --resume and --run, quoted for a POSIX
// shell.
func commandWords(cmd string, args []string) []string {
	words := []string{progName, cmd}
	for i := 0; i < len(args); i++ {
		a := args[i]
		name := strings.TrimLeft(a, "-")
		if strings.HasPrefix(a, "-") {
			switch {
			case name == "resume" || strings.HasPrefix(name, "resume="):
				continue
			case name == "run":
				i++ // and its value
				continue
			case strings.HasPrefix(name, "run="):
				continue
			}
		}
		words = append(words, shellQuote(a))
	}
	return words
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=,@%+", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// heapAtEnd writes a heap profile into path at the final evaluation,
// while the broker and the participants still hold what they kept.
func heapAtEnd(next func(aggregator.Point), path string, log zerolog.Logger) func(aggregator.Point) {
	return func(p aggregator.Point) {
		if next != nil {
			next(p)
		}
		if !p.Final {
			return
		}
		runtime.GC()
		out, err := os.Create(path)
		if err == nil {
			err = pprof.WriteHeapProfile(out)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			log.Warn().Err(err).Msg("heap profile not written")
		}
	}
}

// profileFromStart makes cfg start a CPU profile into path at its first
// evaluation point (training starts there); stop ends it.
func profileFromStart(h *run.Hooks, path string) (stop func(), err error) {
	out, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	var once sync.Once
	started := false
	next := h.OnPoint
	h.OnPoint = func(p aggregator.Point) {
		once.Do(func() { started = pprof.StartCPUProfile(out) == nil })
		if next != nil {
			next(p)
		}
	}
	return func() {
		if started {
			pprof.StopCPUProfile()
		}
		out.Close()
	}, nil
}

func usageErr(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	// The flag set's usage function has said it (flagOutput).
	return fmt.Errorf("%w: %w: %v", errUsage, errUsageShown, err)
}

// report prints the outcome of a run for people; verbose adds every
// setting the privacy switch made (which a debug log has said already).
func report(w io.Writer, cfg *run.Config, s *run.Summary, verbose bool) {
	acc := "no test set"
	if !math.IsNaN(s.TestAccuracy) {
		acc = fmt.Sprintf("test accuracy %.2f%%", 100*s.TestAccuracy)
		if s.HeldOutAsTest {
			acc = fmt.Sprintf("held-out accuracy %.2f%% (%d training rows kept aside, --holdout)", 100*s.TestAccuracy, s.HeldOutRows)
		}
		if n := len(s.Curve); s.Interrupted != "" && n > 0 && s.Curve[n-1].Steps < s.Steps {
			// The figure is the last evaluation's, from before the stop.
			acc += fmt.Sprintf(" at its last evaluation, after %d of the %d steps", s.Curve[n-1].Steps, s.Steps)
		}
	}
	if s.Steps == 0 && s.Resumed == nil && s.LabelFree == nil {
		// Nothing was trained: an accuracy and a loss of 0 would read as
		// results.
		fmt.Fprintf(w, "%s on %s, %d parties: stopped before training started: no model, no accuracy\n", s.Algo, s.Dataset, s.Parties)
	} else if len(s.Curve) == 0 && s.LabelFree == nil && s.TestAccuracy == 0 && s.TrainLoss == 0 {
		// Trained, but stopped (diverged, interrupted) before any
		// evaluation: zeros would read as results.
		fmt.Fprintf(w, "%s on %s, %d parties: stopped before its first evaluation: no accuracy, no loss to report\n", s.Algo, s.Dataset, s.Parties)
	} else {
		fmt.Fprintf(w, "%s on %s, %d parties: %s, train loss %.4f\n", s.Algo, s.Dataset, s.Parties, acc, s.TrainLoss)
	}
	if f := s.LabelFree; f != nil {
		fmt.Fprintf(w, "label-free: the parties sent their codes (%d a party output) and no request; the label holder's head took %d epochs in %.1f s (%.1f s in all), %d messages up, %d down\n",
			f.Codes, f.Epochs, s.TrainSeconds, s.WallSeconds, s.MessagesUp, s.MessagesDown)
	} else if s.Resumed != nil {
		fmt.Fprintf(w, "%d steps in %.1f s of training, this process and the ones before it (%.0f steps/s); this process ran %.1f s; %d messages up, %d down, max staleness %d\n",
			s.Steps, s.TrainSeconds, s.StepsPerSec, s.WallSeconds, s.MessagesUp, s.MessagesDown, s.MaxStaleness)
	} else {
		fmt.Fprintf(w, "%d steps in %.1f s of training (%.0f steps/s; %.1f s in all), %d messages up, %d down, max staleness %d\n",
			s.Steps, s.TrainSeconds, s.StepsPerSec, s.WallSeconds, s.MessagesUp, s.MessagesDown, s.MaxStaleness)
	}
	if words := s.StopWords(); words != "" {
		fmt.Fprintln(w, words)
	}
	if words := s.Kept.Words(); words != "" {
		fmt.Fprintln(w, words)
	}
	if s.TargetAcc > 0 {
		if s.TimeToTarget >= 0 {
			fmt.Fprintf(w, "reached %.2f%% after %.1f s of training\n", 100*s.TargetAcc, s.TimeToTarget)
		} else {
			fmt.Fprintf(w, "did not reach %.2f%%\n", 100*s.TargetAcc)
		}
	}
	var rej int64
	for _, v := range s.Rejected {
		rej += v
	}
	if rej > 0 {
		fmt.Fprintf(w, "rejected messages: %s\n", rejectedText(s.Rejected))
	}
	for m, r := range s.Refused {
		fmt.Fprintf(w, "party %d was refused at first: %s\n", m, r)
	}
	for m, r := range s.Departed {
		fmt.Fprintf(w, "party %d departed and did not come back: %s; training went on without it, the evaluations used its last outputs\n", m, r)
	}
	if len(s.FinalStale) > 0 {
		fmt.Fprintf(w, "the final evaluation used the last outputs of party %s (no fresh ones came in time): its accuracy is that of their models when they last answered\n", joinInts(s.FinalStale))
	}
	for m, n := range s.StaleEvals {
		fmt.Fprintf(w, "party %d did not answer %d evaluations in time: each used its last outputs (stale_parties in curve.csv)\n", m, n)
	}
	if s.PartyTimeouts > 0 {
		fmt.Fprintf(w, "party timeouts: %d (departures), %d came back; %d evaluations used a departed party's last outputs\n", s.PartyTimeouts, s.Returned, s.EvalsWithout)
	}
	if r := s.Resumed; r != nil {
		fmt.Fprintln(w, resumedText(r))
	}
	for _, warn := range s.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
	if s.Interrupted != "" {
		fmt.Fprintf(w, "interrupted (%s): these are the figures of the part that ran\n", s.Interrupted)
	}
	if s.Store != "" {
		fmt.Fprintf(w, "store: %s, %s (the audit log; asyrevel store list|rm)\n", s.Store, run.MB(s.StoreBytes))
	}
	if line := privacyBoundLine(s); line != "" {
		fmt.Fprintln(w, line)
	}
	if line := leakageLine(s); line != "" {
		fmt.Fprintln(w, line)
	}
	if verbose && s.Privacy != nil {
		fmt.Fprintf(w, "privacy settings: %s\n", s.Privacy)
	}
	switch {
	case cfg.Out != "" && s.OutputsErr != "":
		fmt.Fprintf(w, "outputs: not written to %s (%s): the figures above are all there is\n", cfg.Out, s.OutputsErr)
	case cfg.Out != "":
		fmt.Fprintf(w, "plot: %s\nsummary: %s\n", filepath.Join(cfg.Out, "curve.png"), filepath.Join(cfg.Out, "summary.json"))
		if s.Leakage != nil {
			fmt.Fprintf(w, "privacy: %s (the bound, the attacks and the settings the privacy switch made)\n", filepath.Join(cfg.Out, "privacy.json"))
		}
	}
}

// privacyBoundLine is the run's bound on what its traffic reveals of the
// labels, in one line: the switch that chose it and the bound.
func privacyBoundLine(s *run.Summary) string {
	if s.Privacy == nil && s.Defense == nil {
		return ""
	}
	who := ""
	if c := s.Privacy; c != nil {
		who = "--privacy " + c.Switch
		if c.Default {
			who += ", the default"
		}
		if c.Profile != "" && c.Profile != "off" {
			who += ", " + c.Profile + " profile"
		}
		who = " (" + who + ")"
	}
	b := s.Bound()
	if s.LabelFree != nil {
		return fmt.Sprintf("label privacy%s: no message a party receives depends on a label: it tells a label at chance, AUC 0.5, for one party or all of them; no budget spent", who)
	}
	if b.AUC >= 1 || s.Defense == nil || s.Defense.Accounting == nil {
		return fmt.Sprintf("label privacy%s: no bound: a party's replies may reveal every label it asks about", who)
	}
	a := s.Defense.Accounting
	if a.Delta == 0 {
		return fmt.Sprintf("label privacy%s: randomised response on the labels, every label %.3g-DP: no one infers a label above AUC %.3f", who, a.Epsilon, b.AUC)
	}
	return fmt.Sprintf("label privacy%s: no party infers any label above AUC %.3f from what it receives (all parties colluding: %.3f); epsilon %.3g at delta %.0e for the worst label",
		who, b.AUC, b.AUCAll, a.Epsilon, a.Delta)
}

// leakageLine is what the run measured of each party's view, in one line:
// the strongest attack's result and what it means next to the bound. Above
// a bound, the signal is the party's own columns: its model's outputs
// predict the label, which no bound on what it receives covers
// (docs/privacy.md).
func leakageLine(s *run.Summary) string {
	if s.LabelFree != nil {
		return "leakage: nothing to measure on this run: no reply reached a party, only its own codes went out (label-free); attacks on the log find no label signal"
	}
	l := s.Leakage
	if l == nil || !l.Scored || len(l.Parties) == 0 || s.NotStarted {
		// (Stopped before training, no party got a reply: an AUC of 0
		// would read as a measurement.)
		return ""
	}
	worst := l.Parties[0]
	for _, p := range l.Parties {
		if p.SignAUC > worst.SignAUC {
			worst = p
		}
	}
	if worst.SignAUC < 0 {
		return fmt.Sprintf("leakage: measured on this run: no AUC: the labels party %d saw are all of one class", worst.Party)
	}
	found := fmt.Sprintf("party %d's sign attack matches %d labels at %.1f%% (AUC %.3f)", worst.Party, worst.Covered, 100*worst.SignAccuracy, worst.SignAUC)
	if worst.LossAccuracy != nil {
		found += fmt.Sprintf(", its loss attack %.1f%%", 100**worst.LossAccuracy)
	}
	b := s.Bound()
	switch {
	case b.AUC >= 1:
		return fmt.Sprintf("leakage: measured on this run, %s from the replies it received: --privacy auc=0.6 bounds that", found)
	case worst.SignAUC <= b.AUC:
		return fmt.Sprintf("leakage: measured on this run, the strongest attack, %s: within the bound", found)
	}
	return fmt.Sprintf("leakage: measured on this run, %s: above the bound because it reads party %d's own columns, which predict the label; no label bound covers them (docs/privacy.md)",
		found, worst.Party)
}

// trainPauseWords says what train's first signal does to a run of cfg:
// a pause that answers what is in flight, seals the log and saves the
// state; without the trust layer a pause that saves the state only; and
// with no checkpoint kept, a stop.
func trainPauseWords(cfg *run.Config) string {
	switch {
	case cfg.CheckpointDir == "" || cfg.CheckpointEvery < 0:
		return "stopping: no checkpoint is kept (--out or --checkpoint-dir keeps one), so there is no state to save; writing what the run has so far"
	case cfg.Trust.Off:
		return "pausing: saving the state (the trust layer is off: nothing seals the log)"
	}
	return "pausing: answering what is in flight, sealing the log, saving the state"
}

func cmdAggregator(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("aggregator", "asyrevel aggregator --nats URL --run R [training flags]\n\n"+
		"Runs only the aggregator of a run whose parties are separate processes\n"+
		"(asyrevel party). It holds the labels: it reads them from --data.", stderr)
	f := newTrainFlags(fs, roleAggregator)
	if err := f.parse(fs, args, stderr); err != nil {
		return err
	}
	if f.cfg.NATS == "" || !flagGiven(fs, "run") {
		return fmt.Errorf("%w: aggregator needs --nats URL and --run R (the same as the parties')", errUsage)
	}
	if err := f.needBudget(); err != nil {
		return err
	}
	s, err := run.Aggregate(ctx, f.cfg, f.hooks)
	if s != nil {
		report(stdout, &f.cfg, s, f.verbose && f.hooks.Log.GetLevel() > zerolog.DebugLevel)
	}
	return withResume(err, "aggregator", args, &f.cfg, s)
}

func cmdParty(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if slices.ContainsFunc(args, func(a string) bool { return a == "--serve" || a == "-serve" }) {
		return cmdPartyServe(ctx, args, stdout, stderr) // serving mode: serve.go
	}
	fs := newFlagSet("party", "asyrevel party --nats URL --run R --id M [training flags]\n\n"+
		"Runs party M of a run: it reads its block of columns of --data, joins the run\n"+
		"and steps until the aggregator stops it.", stderr)
	f := newTrainFlags(fs, roleParty)
	id := fs.Int("id", 0, "this party's id, 1..parties")
	if err := f.parse(fs, args, stderr); err != nil {
		return err
	}
	if f.cfg.NATS == "" || !flagGiven(fs, "run") || *id < 1 || *id > f.cfg.Parties {
		return fmt.Errorf("%w: party needs --nats URL, --run R and --id in 1..%d", errUsage, f.cfg.Parties)
	}
	st, err := run.Participate(ctx, f.cfg, *id, f.hooks)
	// Stopped (Ctrl-C, SIGTERM) before training started: no checkpoint
	// was taken, with --checkpoint-dir or without, and there is nothing
	// to resume. A signal that lands while the party loads, connects,
	// subscribes or sends its hello shows as that step's failure: it is
	// the same stop. Not for a resume, nor with a checkpoint on disk (a
	// stop while the party joins again after a broker outage).
	early := err != nil && !f.cfg.Resume && !st.Started && (errors.Is(err, run.ErrInterrupted) || ctx.Err() != nil) &&
		!checkpointKept(&f.cfg, *id)
	if early && !errors.Is(err, run.ErrInterrupted) {
		err = fmt.Errorf("%w: %w (%w)", run.ErrInterrupted, context.Cause(ctx), err)
	}
	if early {
		err = notStarted{err: err, again: partyAgain(args, f.cfg.Run, st.Joined), noSummary: true}
	}
	if err != nil && st.Requests == 0 && st.Skipped == 0 {
		return partyErr(err, *id) // it never took part
	}
	// Stopped by the aggregator, its stream nearly full, with no
	// checkpoint to go on from: the run did not finish, and its stream
	// holds the stop, so a checkpoint of this party's resumes nothing.
	full := !early && errors.Is(err, run.ErrStoppedByAggregator)
	stop := st.StopReason
	switch {
	case early:
		stop = "interrupted before training started: no checkpoint to keep, nothing to resume"
	case full:
		stop = "the run did not finish: the aggregator stopped it, its stream nearly full, with no checkpoint to go on from"
	case errors.Is(err, run.ErrInterrupted) && f.cfg.CheckpointDir == "":
		stop = "interrupted; no checkpoint was kept (--checkpoint-dir keeps one)"
	case errors.Is(err, run.ErrInterrupted) && f.cfg.CheckpointEvery < 0:
		stop = "interrupted; no checkpoint was kept (--checkpoint-every is negative)"
	case errors.Is(err, run.ErrInterrupted):
		stop = "interrupted; the checkpoint is saved: go on with " + resumeCommand("party", args, f.cfg.Run)
	case err != nil:
		stop = "failed (" + err.Error() + "); with checkpoints, restart it with --resume"
	case st.Paused && (f.cfg.CheckpointDir == "" || f.cfg.CheckpointEvery < 0):
		// Paused by the aggregator with no checkpoint on disk (one kept
		// in memory for a broker outage ends with the process): nothing
		// to go on from (main).
		err = fmt.Errorf("%w (%s)", errPartyPaused, st.StopReason)
	case st.Paused:
		// Paused by the aggregator: not finished (exit status 75, main).
		err = resumeHint{err: fmt.Errorf("%w (%s)", errPartyPaused, st.StopReason), command: resumeCommand("party", args, f.cfg.Run)}
	}
	fmt.Fprintf(stdout, "party %d: %d steps, %d messages up, %d rejected; stopped: %s\n", *id, st.Steps, st.MessagesUp, sum(st.Rejected), stop)
	if st.HeldOut > 0 {
		fmt.Fprintf(stdout, "party %d kept %d training rows aside, as the aggregator did (%s), never trained on\n", *id, st.HeldOut, st.HoldOut.String())
	}
	if w := f.missing.String(); w != "" {
		fmt.Fprintf(stdout, "party %d's data: %s\n", *id, w)
	}
	if st.Skipped+st.Recomputed > 0 {
		from := ""
		if st.RepliesFrom > 1 {
			from = fmt.Sprintf("; replies read from stream sequence %d", st.RepliesFrom)
		}
		fmt.Fprintf(stdout, "party %d resumed: %d deliveries skipped (in the checkpoint), %d messages computed again that the stream held%s\n", *id, st.Skipped, st.Recomputed, from)
	}
	if early || full {
		return partyErr(err, *id)
	}
	return partyErr(withResume(err, "party", args, &f.cfg, nil), *id)
}

// partyEnd is the end of party id (cmdParty): a party writes no
// summary.json; its stop line on stdout says what it did.
type partyEnd struct {
	err error
	id  int
}

func (e partyEnd) Error() string { return e.err.Error() }
func (e partyEnd) Unwrap() error { return e.err }

// partyErr marks err, if any, as party id's end.
func partyErr(err error, id int) error {
	if err == nil {
		return nil
	}
	return partyEnd{err: err, id: id}
}

func sum(m map[string]int64) int64 {
	var s int64
	for _, v := range m {
		s += v
	}
	return s
}

func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			given = true
		}
	})
	return given
}
