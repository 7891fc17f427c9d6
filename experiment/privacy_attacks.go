package experiment

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/asyrevel/asyrevel/privacy"
	"github.com/asyrevel/asyrevel/replay"
	"github.com/asyrevel/asyrevel/run"
	"github.com/asyrevel/asyrevel/schemas"
)

// AttackNone names the row of a run whose attacker party sent no request
// and received no reply (a label-free run): the label attacks have nothing
// to read, and the row says what the party received instead.
const AttackNone = "none"

// labelTarget is a run's log and what the label attacks need of it.
type labelTarget struct {
	log     *replay.Log
	summary *run.Summary
	labels  []int32
	classes int
	// attacker is the attacking party; nudger the multiclass active run's
	// second attacker (privacy.Active with Nudge).
	attacker, nudger int
	active, tig      bool
	known            map[uint32]int32 // labels the attacker knows
	seed             uint64
}

// labelAttacks runs the privacy experiment's label attacks on a run's
// log, each from the attacker's view, and scores them against the labels:
// one row each, copied from base. A view without requests (a label-free
// run's) gives a single row, AttackNone, whose note counts what the party
// received; an attack that cannot read the view gives a row with its
// error as the note.
func labelAttacks(ctx context.Context, t labelTarget, base PrivacyRow) ([]PrivacyRow, error) {
	v, err := privacy.ReadView(ctx, t.log, t.attacker)
	if errors.Is(err, privacy.ErrNoRequests) {
		return []PrivacyRow{noRequestRow(ctx, t.log, t.attacker, base)}, nil
	}
	if err != nil {
		return nil, err
	}
	var rows []PrivacyRow
	add := func(inf *privacy.LabelInference, err error) {
		r := base
		if err != nil {
			r.Attack, r.AUC, r.AttackAccuracy, r.Note = "?", nanF, nanF, err.Error()
			rows = append(rows, r)
			return
		}
		sc, err := privacy.ScoreLabels(inf, v, t.labels, nil)
		r.Attack = inf.Attack
		if err != nil {
			r.AUC, r.AttackAccuracy, r.Note = nanF, nanF, err.Error()
		} else {
			r.AUC, r.AttackAccuracy, r.Covered, r.MaxClassAUC = sc.AUC, sc.Accuracy, sc.Covered, sc.AUC
			class := int32(1)
			if inf.Classes > 2 {
				r.MaxClassAUC = sc.MaxClassAUC
				class = worstClassOf(sc.ClassAUC)
			}
			r.Positives = classCount(inf.IDs, t.labels, class)
		}
		rows = append(rows, r)
	}
	binary := t.classes == 2
	switch {
	case t.tig:
		g, err := v.Gradients()
		if err != nil {
			return nil, err
		}
		if binary {
			add(privacy.GradientSignAttack(g))
			add(privacy.GradientNormAttack(g))
		}
		add(privacy.GradientDirectionAttack(g, t.classes, t.known))
		if binary {
			add(privacy.ModelAttack(v))
		}
	case !binary:
		add(privacy.DerivativeAttack(v, t.classes, t.known))
		if !t.active {
			// The reference: the same attack with the replies shuffled
			// among the requests reads only the party's own perturbations.
			inf, err := privacy.DerivativeAttack(privacy.ShuffleReplies(v, t.seed), t.classes, t.known)
			if inf != nil {
				inf.Attack = "shuffled"
			}
			add(inf, err)
			rows[len(rows)-1].Note = "the derivative attack on the replies shuffled among the requests: what the party's own c_hat - c (its features) tell"
		}
		if t.active {
			nv, err := privacy.ReadView(ctx, t.log, t.nudger)
			if errors.Is(err, privacy.ErrNoRequests) {
				rows = append(rows, noRequestRow(ctx, t.log, t.nudger, base))
				break
			}
			if err != nil {
				return nil, err
			}
			add(privacy.NudgeAttack(nv, t.classes, t.known, 0))
			r := &rows[len(rows)-1]
			r.Note = strings.TrimSuffix(fmt.Sprintf("party %d nudging every sample; %s", t.nudger, r.Note), "; ")
		}
	case t.active:
		add(privacy.RegressionAttack(v, 100))
	default:
		if v.Format != "mean" {
			add(privacy.SignAttack(v))
		}
		if v.Format == "h,h_bar" {
			add(privacy.LossAttack(v))
		}
		add(privacy.RegressionAttack(v, 100))
		add(privacy.ModelAttack(v))
		if s := t.summary; s != nil && s.Leakage != nil && s.Leakage.Scored {
			r := base
			r.Attack, r.AUC, r.AttackAccuracy = "online-sign-max", 0, 0
			for _, p := range s.Leakage.Parties {
				if p.SignAUC > r.AUC {
					r.AUC, r.AttackAccuracy, r.Covered = p.SignAUC, p.SignAccuracy, p.Covered
				}
			}
			r.MaxClassAUC = r.AUC
			r.Note = "privacy.json: the sign attack of the most exposed party, scored online"
			rows = append(rows, r)
		}
	}
	return rows, nil
}

// worstClassOf is the class of the largest one-vs-rest AUC (the first of
// equals, as privacy.ScoreLabels picks MaxClassAUC); -1 if none is a
// number.
func worstClassOf(aucs []float64) int32 {
	best := int32(-1)
	for c, a := range aucs {
		if !math.IsNaN(a) && (best < 0 || a > aucs[best]) {
			best = int32(c)
		}
	}
	return best
}

// classCount is the number of the samples ids whose label is class.
func classCount(ids []uint32, labels []int32, class int32) int {
	n := 0
	for _, id := range ids {
		if int(id) < len(labels) && labels[id] == class {
			n++
		}
	}
	return n
}

// noRequestRow is the row of an attacker party that sent no request: no
// attack ran, its AUC is empty, and the note says what the party's view
// holds (the messages it received from the aggregator, by kind).
func noRequestRow(ctx context.Context, l *replay.Log, m int, base PrivacyRow) PrivacyRow {
	r := base
	r.Attack, r.AUC, r.AttackAccuracy, r.MaxClassAUC = AttackNone, nanF, nanF, nanF
	got := map[schemas.Kind]int{}
	err := l.Each(ctx, replay.ReadOptions{Party: m, Raw: true}, func(rec *replay.Record) error {
		if rec.Sender == 0 && !rec.Receipt {
			got[rec.Kind]++
		}
		return nil
	})
	r.Note = fmt.Sprintf("no label-dependent message: party %d sent no request and received %d replies and %d control messages; no label attack has anything to read",
		m, got[schemas.KindReply], got[schemas.KindControl])
	if err != nil {
		r.Note += fmt.Sprintf(" (reading its view: %v)", err)
	}
	return r
}
