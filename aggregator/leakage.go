package aggregator

import (
	"math"

	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/privacy/metric"
	"github.com/asyrevel/asyrevel/schemas"
)

// Leakage is what the label-inference attacks of a curious party would
// recover from its own view of the run (its requests and the replies to
// them), scored by the aggregator, which holds the true labels, as the
// run goes: privacy.json. Only binary logistic heads are scored.
type Leakage struct {
	Scored  bool           `json:"scored"`
	Reason  string         `json:"reason,omitempty"` // why not scored
	Reply   string         `json:"reply"`            // what the replies carried
	Parties []PartyLeakage `json:"parties,omitempty"`
	Defense *DefenseReport `json:"defense,omitempty"`
}

// PartyLeakage is one party's view.
type PartyLeakage struct {
	Party   int `json:"party"`
	Covered int `json:"samples_covered"` // training samples it asked about
	// Sign attack: the label is -sign(h_bar - h) sign(c_hat - c) (the
	// logistic loss is monotone), summed over visits; with batch-mean
	// replies the mean stands for each sample of its batch (a matched
	// filter).
	SignAccuracy float64 `json:"sign_accuracy"`
	SignAUC      float64 `json:"sign_auc"`
	// Loss attack (replies with h and h_bar only): inverting the logistic
	// loss gives the margin t = y z, and (t_bar - t)/(c_hat - c) = y at
	// every visit; its label is the majority of these (offline, the
	// attack also recovers the margin: asyrevel attack loss).
	LossAccuracy *float64 `json:"loss_accuracy,omitempty"`
	LossAUC      *float64 `json:"loss_auc,omitempty"`
}

// leakage scores each party's view online. It does not allocate per step.
type leakage struct {
	on    bool
	why   string
	q, n  int
	loss  bool       // h is sent and the head is logistic: the loss attack applies
	cells []leakCell // q x n
}

// leakCell is what one party's view says about one sample (one cache line
// read per sample and step).
type leakCell struct {
	sign   float32 // sum over visits of sign(c_hat - c) times the value received
	vote   float32 // sum over visits of the loss attack's y (+-1)
	visits uint32
}

func (l *leakage) init(cfg *Config, q, n int, mode ReplyMode) {
	switch {
	case !cfg.ScoreLeakage:
		l.why = "not asked"
	case cfg.Head.Classes() != 2 || cfg.K != 1:
		l.why = "only binary heads with one output per party are scored"
	default:
		l.on = true
	}
	if !l.on {
		return
	}
	_, logistic := cfg.Head.(*model.Logistic)
	l.q, l.n = q, n
	l.loss = logistic && mode == ReplyLosses
	l.cells = make([]leakCell, q*n)
}

// observe scores the reply r that party m receives for its request o.
func (l *leakage) observe(m int, o *schemas.PartyOutput, r *schemas.Reply) {
	if !l.on {
		return
	}
	cells := l.cells[(m-1)*l.n : m*l.n]
	for j, id := range o.IDs {
		c := &cells[id]
		c.visits++
		dc := o.CHat[j] - o.C[j]
		if dc == 0 {
			continue
		}
		var v float64
		switch {
		case r.Mean:
			v = r.Delta[0]
		case len(r.Delta) > 0:
			v = r.Delta[j]
		default:
			v = r.HBar[j] - r.H[j]
		}
		c.sign += float32(math.Copysign(1, dc) * v)
		if l.loss && v != 0 {
			// t = -log(expm1(h)) inverts h = softplus(-t), and t_bar - t =
			// y (c_hat - c); the loss being decreasing in t, the sign of
			// t_bar - t is that of -(h_bar - h): no logarithm needed.
			c.vote -= float32(math.Copysign(1, dc) * math.Copysign(1, v))
		}
	}
}

// report scores each party's view against the true labels.
func (l *leakage) report(labels []int32, mode ReplyMode) *Leakage {
	rep := &Leakage{Scored: l.on, Reason: l.why, Reply: mode.String()}
	if !l.on {
		return rep
	}
	for m := 1; m <= l.q; m++ {
		pl := PartyLeakage{Party: m}
		cells := l.cells[(m-1)*l.n : m*l.n]
		var score, inv []float64
		var pos []bool
		var signOK, invOK int
		for i := range l.n {
			c := &cells[i]
			if c.visits == 0 {
				continue
			}
			y := labels[i] == 1
			// The sign attack's score for class 1 is minus the sum.
			s := -float64(c.sign)
			score = append(score, s)
			pos = append(pos, y)
			if (s > 0) == y {
				signOK++
			}
			if l.loss {
				v := float64(c.vote)
				inv = append(inv, v)
				if (v > 0) == y {
					invOK++
				}
			}
		}
		pl.Covered = len(score)
		if pl.Covered > 0 {
			pl.SignAccuracy = float64(signOK) / float64(pl.Covered)
			pl.SignAUC = nanToNeg(metric.AUC(score, pos))
			if l.loss {
				acc, auc := float64(invOK)/float64(pl.Covered), nanToNeg(metric.AUC(inv, pos))
				pl.LossAccuracy, pl.LossAUC = &acc, &auc
			}
		}
		rep.Parties = append(rep.Parties, pl)
	}
	return rep
}

// nanToNeg maps NaN (one class only) to -1, which JSON can carry.
func nanToNeg(v float64) float64 {
	if math.IsNaN(v) {
		return -1
	}
	return v
}

// leakReport is the leakage scores against the true labels.
func (d *defense) leakReport(labels []int32) *Leakage {
	return d.leak.report(labels, d.cfg.Reply)
}
