package sim

import (
	"context"
	"fmt"

	"github.com/asyrevel/asyrevel/run"

	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/zoo"
)

// ReferenceFor runs ReferenceZO with the settings of a training
// configuration: the same models, step sizes and budget, on data (nil:
// the configuration's, loaded).
func ReferenceFor(ctx context.Context, cfg run.Config, data *run.Data, evalEvery int64, onPoint func(RefPoint)) (*RefResult, *run.Data, error) {
	if cfg.Unbounded() {
		// The loop has no early stopping: it needs a length.
		return nil, nil, fmt.Errorf("%w: give --epochs, --duration or --steps", run.ErrConfig)
	}
	if err := cfg.Prepare(); err != nil {
		return nil, nil, err
	}
	if cfg.Model == "external" {
		return nil, nil, fmt.Errorf("%w: the reference loop runs in-process models only", run.ErrConfig)
	}
	data, err := loadData(&cfg, data)
	if err != nil {
		return nil, nil, err
	}
	algo, _ := run.LookupAlgo(cfg.Algo)
	dist := algo.Dist
	reg, err := model.ParseRegularizer(cfg.Reg)
	if err != nil {
		return nil, nil, err
	}
	head, _ := run.NewHead(&cfg, data.Classes)
	sched := cfg.Schedule(data.NTrain)
	maxSteps, err := cfg.Budget(data.NTrain)
	if err != nil {
		return nil, nil, err
	}
	headLR := cfg.HeadLR
	if evalEvery <= 0 {
		evalEvery = max(int64(data.NTrain/cfg.Batch), 1)
	}
	r, err := ReferenceZO(ctx, data, RefConfig{
		Parties: cfg.Parties, Dist: dist, Batch: cfg.Batch, LR: sched,
		HeadLR: zoo.Schedule{Eta0: headLR, T0: sched.T0 * float64(cfg.Parties)}, Mu: cfg.Mu, Lambda: cfg.Lambda, Reg: reg, Seed: cfg.Seed,
		MaxSteps: maxSteps, Duration: cfg.Duration, EvalEvery: evalEvery, TargetAcc: cfg.TargetAcc,
		StopAtTarget: cfg.StopAtTarget,
		NewLocal: func(m, d int) model.Local {
			l, _, _ := run.NewLocal(ctx, &cfg, m+1, d, data.Classes)
			return l
		},
		Head: head, OnPoint: onPoint,
	})
	return r, data, err
}

// FirstOrderFor trains the network of a training configuration first-order
// (centralised back-propagation), with SGD step lr and momentum, on data
// (nil: the configuration's, loaded).
func FirstOrderFor(ctx context.Context, cfg run.Config, data *run.Data, lr, momentum float64, evalEvery int64, onPoint func(RefPoint)) (*RefResult, error) {
	if err := cfg.Prepare(); err != nil {
		return nil, err
	}
	if cfg.Model == "external" {
		return nil, fmt.Errorf("%w: an external model is a black box: %w", run.ErrConfig, model.ErrNoGradient)
	}
	data, err := loadData(&cfg, data)
	if err != nil {
		return nil, err
	}
	reg, err := model.ParseRegularizer(cfg.Reg)
	if err != nil {
		return nil, err
	}
	head, _ := run.NewHead(&cfg, data.Classes)
	wb, ok := head.(model.WhiteBoxHead)
	if !ok {
		return nil, fmt.Errorf("%w: head", model.ErrNoGradient)
	}
	maxSteps := cfg.MaxSteps
	if cfg.Epochs > 0 {
		maxSteps = int64(cfg.Epochs * float64(data.NTrain) / float64(cfg.Batch))
	}
	if evalEvery <= 0 {
		evalEvery = max(int64(data.NTrain/cfg.Batch/4), 1)
	}
	return FirstOrder(ctx, data, FirstOrderConfig{
		Parties: cfg.Parties, Batch: cfg.Batch, LR: lr, Momentum: momentum, Lambda: cfg.Lambda, Reg: reg,
		Seed: cfg.Seed, MaxSteps: maxSteps, Duration: cfg.Duration, EvalEvery: evalEvery, TargetAcc: cfg.TargetAcc,
		NewLocal: func(m, d int) model.Local {
			l, _, _ := run.NewLocal(ctx, &cfg, m+1, d, data.Classes)
			return l
		},
		Head: wb, OnPoint: onPoint,
	})
}

// loadData is data if set (checked against cfg's parties), else cfg's
// data, loaded.
func loadData(cfg *run.Config, data *run.Data) (*run.Data, error) {
	if data == nil {
		return run.LoadData(cfg, run.RoleAll)
	}
	if len(data.Blocks) != cfg.Parties {
		return nil, fmt.Errorf("%w: data split for %d parties, run has %d", run.ErrConfig, len(data.Blocks), cfg.Parties)
	}
	return data, nil
}
