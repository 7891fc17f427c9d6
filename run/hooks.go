package run

import (
	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/aggregator"
	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/party"
)

// Hooks are what a program plugs into a run besides its settings (Config,
// which is plain data): the logger, callbacks, data already loaded,
// attackers and the pause. Train, Aggregate and Participate take them as
// their own argument; the zero value is a run of the command line without
// any, logging nowhere.
type Hooks struct {
	// Log is where the run logs (the zero Logger: nowhere).
	Log zerolog.Logger

	// Loaded, if set, is the run's data, used instead of Config's Data
	// and Synthetic (experiments that load a set once for many runs).
	Loaded *Data
	// Missing, if set, gets what the missing-value policy found in the
	// CSV files read (dataset.CSVOptions.Report, which Config's CSV does
	// not carry).
	Missing *dataset.MissingCount

	// OnPoint, if set, is called for each evaluation (after the log
	// line).
	OnPoint func(aggregator.Point)
	// OnObjective, if set (Train only), is called after each evaluation
	// with the regularisation term lambda sum_m g(w_m) of the parties'
	// current models, so that point.TrainLoss + reg is the objective f.
	// It is read just after the evaluation, from another goroutine.
	OnObjective func(pt aggregator.Point, reg float64)
	// StopWhen, if set, is asked after each evaluation: true stops the
	// run (with OnObjective: stop once the objective reaches a target).
	StopWhen func() bool

	// Adversaries turns parties into attackers (attack experiments), and
	// PartyData changes an attacker's own data (a backdoor's trigger).
	Adversaries map[int]party.Adversary
	PartyData   map[int]func(train, test *dataset.Matrix) (*dataset.Matrix, *dataset.Matrix)
	// Attackers, if set, is called once the data are loaded, before the
	// parties are built, to set h.Adversaries and h.PartyData from them.
	Attackers func(cfg *Config, d *Data, h *Hooks) error

	// Pause, if set, pauses a run of Train when it is closed (the command
	// line's first Ctrl-C): what is in flight is answered, a seal covers
	// the whole log, every participant saves its state, and Train returns
	// the part that ran with an error wrapping ErrInterrupted
	// (aggregator.ErrPaused). The log is intact and --resume goes on. A
	// cancelled context instead stops at once, leaving the last seconds
	// unsealed.
	Pause <-chan struct{}
	// PartyURL, if set (experiments), gives the URL party m's connection
	// dials instead of the broker's own ("" keeps it): a proxy that
	// delays the link, say (experiment wan).
	PartyURL func(m int) string
	// OnBroker, if set, is called by Train with the embedded broker's URL
	// once it runs (adversary tests and experiments).
	OnBroker func(url string)
	// OnListen, if set, is told the addresses of the metrics and the live
	// board (Config.Monitor) once they listen ("" for one not asked for):
	// port 0 picks a free one.
	OnListen func(metrics, board string)

	// onPartyCheckpoint and onAggCheckpoint, for tests, see each
	// checkpoint of party m and of the aggregator once it is saved: the
	// file at CheckpointPath holds it while the hook runs, and the next
	// save waits for the hook (c is reused: copy what is kept).
	onPartyCheckpoint func(m int, c *party.Checkpoint)
	onAggCheckpoint   func(c *aggregator.Checkpoint)
}
