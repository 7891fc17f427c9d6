package run

import (
	"fmt"
	"math"

	"github.com/asyrevel/asyrevel/aggregator"
)

// KeptModel is the model every participant of a run kept and saved
// (aggregator/keep.go): the evaluation best on the held-out rows, or the
// last one, and why.
type KeptModel struct {
	// Round is the evaluation round kept (0: the last models).
	Round uint32 `json:"round,omitempty"`
	// Best: chosen as the evaluation with the lowest held-out loss.
	Best    bool    `json:"best_on_held_out"`
	Steps   int64   `json:"steps"`
	Seconds float64 `json:"seconds"`
	// The evaluation's figures (absent when it has none: no rows held
	// out, no test set).
	HeldOutLoss     *float64 `json:"held_out_loss,omitempty"`
	HeldOutAccuracy *float64 `json:"held_out_accuracy,omitempty"`
	TestAccuracy    *float64 `json:"test_accuracy,omitempty"`
	TestLoss        *float64 `json:"test_loss,omitempty"`
	TrainLoss       *float64 `json:"train_loss,omitempty"`
	// Why the last models were kept ("" when the best was).
	Why string `json:"why,omitempty"`
	// Last is the last evaluation's figures, when another was kept.
	Last *KeptModel `json:"last,omitempty"`
}

// keptModel is what res kept (nil for a run that did not end, or a
// label-free one, whose head fit reports its own choice).
func keptModel(res *aggregator.Result, data *Data) *KeptModel {
	if res.Interrupted != "" || res.Fit != nil || res.StopReason == "" {
		return nil
	}
	last := pointModel(res.Final, data)
	if res.KeptRound == 0 {
		last.Why = res.KeepWhy
		return last
	}
	k := pointModel(res.Kept, data)
	k.Round, k.Best = res.KeptRound, true
	if res.KeptRound != res.Final.Round {
		k.Last = last
	}
	return k
}

// pointModel is the figures of evaluation pt.
func pointModel(pt aggregator.Point, data *Data) *KeptModel {
	num := func(v float64) *float64 {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil
		}
		return &v
	}
	k := &KeptModel{Steps: pt.Steps, Seconds: pt.Seconds, TrainLoss: num(pt.TrainLoss),
		HeldOutLoss: num(pt.HeldOutLoss), HeldOutAccuracy: num(pt.HeldOutAccuracy)}
	if data.TestRows() > 0 {
		k.TestAccuracy, k.TestLoss = num(pt.TestAccuracy), num(pt.TestLoss)
	}
	return k
}

// Words say in a sentence which models the run kept.
func (k *KeptModel) Words() string {
	if k == nil {
		return ""
	}
	f := func(p *float64) string {
		if p == nil {
			return "none"
		}
		return fmt.Sprintf("%.4f", *p)
	}
	if !k.Best {
		if k.Why == "" || k.Why == aggregator.KeepNoHeldOut {
			return "" // a run of a given length without --holdout: nothing to choose on, as ever
		}
		return fmt.Sprintf("kept: the last models (%s)", k.Why)
	}
	s := fmt.Sprintf("kept: the models of evaluation %d, after %d steps (%.1f s), the best on the held-out rows: held-out loss %s", k.Round, k.Steps, k.Seconds, f(k.HeldOutLoss))
	if k.HeldOutAccuracy != nil {
		s += fmt.Sprintf(", accuracy %.2f%%", 100**k.HeldOutAccuracy)
	}
	if l := k.Last; l != nil {
		s += fmt.Sprintf("; the last evaluation's, after %d steps: held-out loss %s", l.Steps, f(l.HeldOutLoss))
		if l.TestAccuracy != nil {
			s += fmt.Sprintf(", test accuracy %.2f%%", 100**l.TestAccuracy)
		}
	} else {
		s += " (the last evaluation)"
	}
	return s
}

// applyKept makes the summary's figures the kept model's (the saved
// models'), with the last evaluation's in Kept.Last.
func (s *Summary) applyKept(res *aggregator.Result, data *Data) {
	s.Kept = keptModel(res, data)
	if s.Kept == nil || !s.Kept.Best {
		return
	}
	pt := res.Kept
	s.TrainLoss, s.TestAccuracy, s.TestLoss = pt.TrainLoss, pt.TestAccuracy, pt.TestLoss
}
