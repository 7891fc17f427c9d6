package run

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/asyrevel/asyrevel/aggregator"
)

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

	// LateEvals counts the evaluation chunks of rounds already over (a
	// late party's, or answered again after a resume): not scored.
	LateEvals int64 `json:"late_evaluations,omitempty"`

	// Interrupted says why the run was cut short (a signal); the figures
	// are those of the part that ran, the accuracy the last evaluation's.
	Interrupted string `json:"interrupted,omitempty"`
	// OutputsErr says why the output folder could not be written (a full
	// disk): the summary exists only in memory and on the screen.
	OutputsErr string `json:"-"`
	// StoppedBy is the limit that ended the training: epochs, steps,
	// duration, target, patience (the held-out loss stopped improving),
	// condition (an experiment's), paused (Hooks.Pause, or the stream
	// nearly full), stream_full (the stream nearly full with no checkpoint
	// to go on from) or interrupted (a cancelled context). EarlyStop says what
	// early stopping watched (with Config.Patience).
	StoppedBy string `json:"stopped_by,omitempty"`
	// NotStarted: the run was stopped (paused or interrupted) before its
	// training started, while its data loaded, its stream was set up or
	// its parties joined. There is no checkpoint and nothing to resume;
	// starting the run again is the way on.
	NotStarted bool `json:"not_started,omitempty"`
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
	// BrokerOutage is how long the broker was unreachable for the
	// aggregator during the run (s): no connection, or the run's stream
	// answering none of its publishes (a cluster's fail-over).
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

func summarize(cfg *job, data *Data, res *aggregator.Result, bus string) *Summary {
	s := &Summary{
		Algo: cfg.Algo, Dataset: data.Name, Parties: cfg.Parties, Model: cfg.Model,
		Steps: res.Steps, TrainSeconds: res.Training.Seconds(),
		TrainLoss: res.Final.TrainLoss, TestAccuracy: res.Final.TestAccuracy, TestLoss: res.Final.TestLoss,
		TimeToTarget: res.TimeToTarget, TargetAcc: cfg.TargetAcc,
		BytesUp: res.BytesIn, BytesDown: res.BytesOut, StepBytes: res.StepBytes,
		MaxStaleness: res.MaxStaleness, MeanStaleness: res.MeanStaleness,
		Outputs: res.Received["out"], Replies: res.Published["reply"], LateOutputs: res.LateOutputs, LateEvals: res.LateEvals,
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
	s.NotStarted = res.Interrupted != "" && !res.Started
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
