package run

import (
	"context"
	"encoding/hex"
	"fmt"
	"math"
	"time"

	"github.com/asyrevel/asyrevel/aggregator"
	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/party"
	"github.com/asyrevel/asyrevel/zoo"
)

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

// newAggregator builds the aggregator of a run from the labels of data.
func newAggregator(cfg *job, data *Data, onPoint func(aggregator.Point)) (*aggregator.Aggregator, error) {
	ac, err := aggregatorConfig(cfg, data, onPoint)
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
	cfg.hooks.Log.Info().Int64("steps", ck.Steps).Time("saved", ck.Saved).Msg("aggregator: resuming from its checkpoint")
	return a, nil
}

// AggregatorConfig is the configuration of the aggregator of a run, for
// re-execution: without hooks, keys or logger.
func AggregatorConfig(cfg *Config, data *Data, onPoint func(aggregator.Point)) (aggregator.Config, error) {
	return aggregatorConfig(&job{Config: *cfg}, data, onPoint)
}

// aggregatorConfig is the configuration of the aggregator of a run.
func aggregatorConfig(cfg *job, data *Data, onPoint func(aggregator.Point)) (aggregator.Config, error) {
	algo, err := LookupAlgo(cfg.Algo)
	if err != nil {
		return aggregator.Config{}, err
	}
	head, k := NewHead(&cfg.Config, data.Classes)
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
		if cfg.EvalByEpoch {
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
		Log: cfg.hooks.Log, OnPoint: onPoint,
		Key: cfg.trust.key(0), Roster: cfg.trust.rosterOrNil(), Sign: cfg.Trust.Sign, SealEvery: cfg.Trust.SealEvery,
		Pause: cfg.hooks.Pause, HoldOut: rowsHoldOut(cfg, data), HoldOutRows: rowsHeldOut(cfg, data),
	}, nil
}

// newParty builds party m (1..q) of a run from its columns of data, its
// sequence numbers starting after seqBase (see party.Config.SeqBase).
// close releases its model (an external model's process).
// With checkpoints, it sets the party's hook; with cfg.Resume, *ck is the
// checkpoint to resume from (the caller calls Resume once it knows what
// the stream holds).
// With the trust layer, chainBases (subject -> messages of an earlier
// attempt) restart the party's chains after them.
func newParty(ctx context.Context, cfg *job, data *Data, m int, seqBase uint64, chainBases map[string]uint64, ck **party.Checkpoint) (p *party.Party, close func() error, err error) {
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
	local, close, err := NewLocal(ctx, &cfg.Config, m, data.Blocks[m-1].Len(), data.Classes)
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
		Log: cfg.hooks.Log,
		Key: cfg.trust.key(m), Roster: cfg.trust.rosterOrNil(), Sign: cfg.Trust.Sign, Receipts: cfg.receiptsDir(m),
		HoldOut: partyHoldOut(cfg, data, m),
	}
	c, err := partyCheckpoints(cfg, &pc, m)
	if err != nil {
		close()
		return nil, nil, err
	}
	if h := &pc.HoldOut; c != nil && c.HoldOutKnown && !c.HoldOut.Same(&h.HoldOut) && !h.Given && h.Resplit != nil {
		// Resumed: its rows split as they were when it took the
		// aggregator's hold-out (party.Resume checks it).
		r, err := h.Resplit(c.HoldOut)
		if err != nil {
			close()
			return nil, nil, fmt.Errorf("party %d: splitting its rows as its checkpoint records (%s): %w", m, c.HoldOut.String(), err)
		}
		pc.Train, pc.Test, pc.LR, h.HoldOut, h.HeldOut = r.Train, r.Test, r.LR, c.HoldOut, r.HeldOut
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
