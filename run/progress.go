package run

import (
	"fmt"
	"math"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/aggregator"
	"github.com/asyrevel/asyrevel/party"
)

// progress logs each evaluation and watches whether the run learns: a test
// accuracy that stays at the share of the largest class, a training loss
// that grows, a party model that does not react to its perturbations.
type progress struct {
	log      zerolog.Logger
	next     func(aggregator.Point)
	cfg      *job
	majority float64 // share of the largest class in the test set (NaN: no test set)
	entropy  float64 // the training loss of the best constant prediction: the class shares' entropy
	first    float64 // the first training loss
	points   int     // evaluations before the final one
	atMajor  int     // of them, at the majority share
	warned   map[string]bool
	warnings []string
	logged   time.Time // when the last progress line was written
	unscaled bool      // the data's columns differ in range by orders of magnitude (Data.Unscaled)
}

// Thresholds of the learning checks.
const (
	// majorityMargin: an accuracy within this of the largest class's share
	// is "at the majority rate": no better than always predicting it.
	majorityMargin = 0.005
	// learntLoss: a training loss below this share of the constant
	// prediction's shows the model has learnt, whatever its accuracy.
	learntLoss = 0.9
	// lossGrowth: a training loss this many times the first has grown.
	lossGrowth = 1.5
	// stuckPoints: evaluations all at the majority rate before a warning
	// during the run.
	stuckPoints = 10
)

func newProgress(cfg *job, data *Data) *progress {
	p := &progress{log: cfg.hooks.Log, next: cfg.hooks.OnPoint, cfg: cfg, majority: math.NaN(), entropy: math.NaN(), first: math.NaN(), warned: map[string]bool{},
		unscaled: data.Unscaled}
	if n := len(data.TrainY); n > 0 {
		counts := make(map[int32]int)
		for _, y := range data.TrainY {
			counts[y]++
		}
		p.entropy = 0
		for _, c := range counts {
			f := float64(c) / float64(n)
			p.entropy -= f * math.Log(f)
		}
	}
	if ys := data.TestY; len(ys) > 0 {
		if data.TestRows() > 0 {
			ys = ys[data.HeldOut:] // the test set's own rows (the accuracy reported is theirs)
		}
		counts := make([]int, max(data.Classes, 1))
		for _, y := range ys {
			if int(y) < len(counts) {
				counts[y]++
			}
		}
		top := 0
		for _, c := range counts {
			top = max(top, c)
		}
		p.majority = float64(top) / float64(len(ys))
	}
	return p
}

// progressEvery is the least time between two progress lines when the
// evaluations come faster (early stopping evaluates every StopEvalEvery).
const progressEvery = time.Second

// point logs one evaluation as a progress line (at most one every
// progressEvery, and the final one).
func (p *progress) point(pt aggregator.Point) {
	if !pt.Final && !p.logged.IsZero() && time.Since(p.logged) < progressEvery {
		p.check(pt)
		if p.next != nil {
			p.next(pt)
		}
		return
	}
	first := p.logged.IsZero()
	p.logged = time.Now()
	ev := p.log.Info()
	if pt.Final {
		ev = ev.Bool("final", true)
	}
	ev = ev.Str("elapsed", (time.Duration(pt.Seconds*1e3) * time.Millisecond).String())
	if p.cfg.LabelFree {
		// The label holder's head fit: its epochs and held-out loss, no
		// steps or messages (the parties' part is done).
		ev = ev.Int("epoch", pt.Epoch).Str("loss", fmtF(pt.TrainLoss, 4)).Str("held_out_loss", fmtF(pt.HeldOutLoss, 4))
		if !math.IsNaN(pt.TestAccuracy) {
			ev = ev.Str("acc", fmtF(100*pt.TestAccuracy, 2)+"%")
		}
		ev.Msg("progress")
		p.check(pt)
		if p.next != nil {
			p.next(pt)
		}
		return
	}
	ev = ev.Int64("steps", pt.Steps).
		Str("loss", fmtF(pt.TrainLoss, 4))
	if !math.IsNaN(pt.TestAccuracy) {
		ev = ev.Str("acc", fmtF(100*pt.TestAccuracy, 2)+"%")
	}
	if !first {
		// A rate since the previous evaluation: the first has none (its
		// count is the table's fill over a moment, millions a second).
		ev = ev.Str("msg/s", fmtF(pt.MsgsPerSec, 0))
	}
	ev = ev.Uint32("stale", pt.MaxStaleness)
	if len(pt.Stale) > 0 {
		ev = ev.Str("last_outputs_of", "party "+partyList(pt.Stale, ", "))
	}
	ev.Msg("progress")
	p.check(pt)
	if p.next != nil {
		p.next(pt)
	}
}

// check warns during the run, once each, when it does not learn.
func (p *progress) check(pt aggregator.Point) {
	if math.IsNaN(p.first) && !math.IsNaN(pt.TrainLoss) {
		p.first = pt.TrainLoss
	}
	if pt.Final || p.cfg.LabelFree {
		// A label-free run's points are its head's fit: the step size,
		// mu and scaling advice of these warnings is not for it.
		return
	}
	p.points++
	if p.atMajority(pt.TestAccuracy, pt.TrainLoss) {
		p.atMajor++
	}
	if w := p.lossWarning(pt.TrainLoss); w != "" {
		p.warn("loss", w)
	}
	if p.points >= stuckPoints && p.atMajor == p.points {
		p.warn("majority", p.majorityWarning(pt.TestAccuracy, fmt.Sprintf("in all %d evaluations so far", p.points)))
	}
}

// atMajority reports whether an evaluation is no better than always
// predicting the largest class: its accuracy within majorityMargin of that
// class's share, and its training loss not clearly below the best constant
// prediction's. On an imbalanced set (w8a: 97% one class) a model that has
// learnt can sit within the margin on accuracy, but its loss shows it.
func (p *progress) atMajority(acc, loss float64) bool {
	if math.IsNaN(acc) || math.IsNaN(p.majority) || acc > p.majority+majorityMargin {
		return false
	}
	return math.IsNaN(loss) || math.IsNaN(p.entropy) || loss >= learntLoss*p.entropy
}

func (p *progress) lossWarning(loss float64) string {
	if math.IsNaN(p.first) || !(math.IsNaN(loss) || loss > lossGrowth*p.first) {
		return ""
	}
	if p.unscaled {
		// A smaller step only slows the small columns further while the
		// large ones still overshoot: scaling is the fix (issue 24: --lr
		// 0.01, 0.001 left 90-91% where --scale standard gave 97%).
		return fmt.Sprintf("the training loss grows: %.4g at the start, %.4g now: the columns are on very different scales (see the warning above): give --scale standard; a smaller --lr (now %g) would only slow the small columns down",
			p.first, loss, p.cfg.LR)
	}
	return fmt.Sprintf("the training loss grows: %.4g at the start, %.4g now: the step size is too large (--lr, now %g: try %g) or the columns are on very different scales (--scale standard)",
		p.first, loss, p.cfg.LR, p.cfg.LR/10)
}

func (p *progress) majorityWarning(acc float64, when string) string {
	if math.Abs(acc-p.majority) < 0.005 {
		return fmt.Sprintf("the test accuracy, %.2f%% %s, is the share of the largest class (%.2f%%): the model predicts that class and has learnt nothing. %s",
			100*acc, when, 100*p.majority, p.causes())
	}
	return fmt.Sprintf("the test accuracy, %.2f%% %s, is no better than always predicting the largest class (%.2f%% of the test set): the model has learnt nothing. %s",
		100*acc, when, 100*p.majority, p.causes())
}

func (p *progress) causes() string {
	if p.cfg.LabelFree {
		return fmt.Sprintf("Likely causes, under the label-free profile: codes that keep too little of the columns (--codes, now %d), columns on very different scales (--scale standard), or columns that do not predict the label", p.cfg.Codes)
	}
	if p.unscaled {
		return fmt.Sprintf("Likely cause: columns on very different scales (see the warning above): give --scale standard. If a scaled run does not learn either: the step size (--lr, now %g) or, for a model whose weights or outputs are quantised, the smoothing radius (--mu, now %g; the quantised example models need --mu 0.1)",
			p.cfg.LR, p.cfg.Mu)
	}
	return fmt.Sprintf("Likely causes: a step size too small to move or so large that it overshoots (--lr, now %g); a smoothing radius too small for a model whose weights or outputs are quantised (--mu, now %g; the quantised example models need --mu 0.1); columns on very different scales (--scale standard)",
		p.cfg.LR, p.cfg.Mu)
}

// warn logs a warning once per kind and keeps it for the summary.
func (p *progress) warn(kind, msg string) {
	if p.warned[kind] {
		return
	}
	p.warned[kind] = true
	p.warnings = append(p.warnings, msg)
	p.log.Warn().Msg(msg)
}

// flat records, for the summary, a party whose model did not react to
// its perturbations (the party has logged it).
func (p *progress) flat(st party.Stats) {
	if st.FlatProbes > 0 && st.FlatOutputs*10 >= st.FlatProbes*9 && !p.warned["flat"] {
		p.warned["flat"] = true
		p.warnings = append(p.warnings, fmt.Sprintf("a party's model did not change its outputs under %d of its first %d perturbations of size mu = %g: it is flat at that scale (quantised weights or outputs?): raise --mu",
			st.FlatOutputs, st.FlatProbes, p.cfg.Mu))
	}
}

// finish adds the final checks and every warning to the summary.
func (p *progress) finish(s *Summary) {
	if n := len(s.Curve); n > 0 && s.Interrupted == "" {
		last := s.Curve[n-1]
		switch {
		case p.atMajority(last.TestAccuracy, last.TrainLoss):
			p.warn("majority", p.majorityWarning(last.TestAccuracy, "at the end"))
		case math.IsNaN(last.TestAccuracy) && last.TrainLoss >= p.entropy-majorityMargin:
			p.warn("majority", fmt.Sprintf("the training loss, %.4f at the end, is no better than predicting the share of each class, the largest class's included (%.4f): the model has learnt nothing. %s",
				last.TrainLoss, p.entropy, p.causes()))
		}
		if w := p.lossWarning(last.TrainLoss); w != "" && !p.cfg.LabelFree {
			p.warn("loss", w)
		}
	}
	s.Warnings = append(s.Warnings, p.warnings...)
}
