package aggregator

import (
	"fmt"
	"slices"

	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/zoo/kernel"
)

// SynREVEL, the synchronous counterpart of AsyREVEL: a round is one batch
// shared by all q parties (they draw it from the run's common sampling
// seed). The aggregator collects one request of every party, stores all
// their fresh outputs, computes h once per sample and h_bar with each
// party's c_hat in its slot, replies to every party, and takes one step of
// its own head. No slot is ever stale; the round lasts as long as its
// slowest party.

// collect takes party m's request o (size payload bytes) into the round and
// answers the round when it is complete.
func (a *Aggregator) collect(m int, o *schemas.PartyOutput, size int) error {
	s := &a.alt
	if s.got[m] {
		return fmt.Errorf("%w: party %d sent a second request in round %d (SynREVEL: one a round)", schemas.ErrState, m, s.rounds+1)
	}
	if s.n == 0 {
		s.ids = append(s.ids[:0], o.IDs...)
	} else if !slices.Equal(s.ids, o.IDs) {
		// Not an attack to absorb but a setup error: the round cannot be
		// computed and the run would wait for ever.
		err := fmt.Errorf("%w: party %d's batch in round %d is not the other parties' (SynREVEL draws one batch for all: every party needs the same --seed)",
			schemas.ErrState, m, s.rounds+1)
		a.fail(err)
		return err
	}
	s.c[m] = append(s.c[m][:0], o.C...)
	s.chat[m] = append(s.chat[m][:0], o.CHat...)
	s.seq[m] = o.Seq
	s.cause[m] = append(s.cause[m][:0], a.wire.cause...)
	s.got[m] = true
	s.n++
	s.size += int64(size)
	if s.n == a.q {
		a.answerRound()
	}
	return nil
}

// answerRound answers the complete round. It does not allocate.
func (a *Aggregator) answerRound() {
	s := &a.alt
	q, k, w := a.q, a.k, a.width
	head, y := a.cfg.Head, a.labels
	// Every party's fresh outputs go into the table first.
	for m := 1; m <= q; m++ {
		kernel.Store(a.table, w, (m-1)*k, s.ids, s.c[m])
	}
	for _, id := range s.ids {
		for m := 1; m <= q; m++ {
			a.ver[int(id)*q+m-1] = a.version[m]
		}
	}
	kernel.Losses(head, a.w0, a.table, w, s.ids, y, a.step.hh[:len(s.ids)])
	bytes := s.size
	r := &a.rep
	for m := 1; m <= q; m++ {
		slot := (m - 1) * k
		r.Party, r.ReqSeq, r.Staleness = uint16(m), s.seq[m], 0
		r.Cause = append(r.Cause[:0], s.cause[m]...)
		r.H, r.HBar, r.Delta = r.H[:0], r.HBar[:0], r.Delta[:0]
		for j, id := range s.ids {
			i := int(id)
			hb := kernel.Bar(head, a.w0, a.table[i*w:(i+1)*w], slot, s.c[m][j*k:(j+1)*k], s.chat[m][j*k:(j+1)*k], y[i])
			if a.cfg.ReplyDelta {
				r.Delta = append(r.Delta, hb-a.step.hh[j])
			} else {
				r.H = append(r.H, a.step.hh[j])
				r.HBar = append(r.HBar, hb)
			}
		}
		bytes += int64(a.publish(a.wire.subjReply[m], schemas.KindReply, r))
		a.recordStaleness(m, 0)
	}
	for m := 1; m <= q; m++ {
		a.version[m]++
		s.got[m] = false
	}
	s.n, s.size = 0, 0
	s.rounds++
	a.stepHead(s.ids)
	a.res.StepBytes += bytes
	a.res.Steps += int64(q)
	a.checkBudget()
}
