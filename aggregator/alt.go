package aggregator

import (
	"fmt"
	"time"

	"github.com/asyrevel/asyrevel/model"
)

// alt is the aggregator's state for the other algorithms of the pipeline:
// SynREVEL's round (sync.go) and TIG's gradients (tig.go).
type alt struct {
	// SynREVEL: the round being collected.
	ids   []uint32    // the round's batch (every party's must be the same)
	c     [][]float64 // per party (1..q): its outputs c for the batch
	chat  [][]float64 // per party: c_hat
	seq   []uint64    // per party: the sequence number of its request
	cause [][]byte    // per party: its request's digest (Reply.Cause)
	got   []bool      // per party: its request of this round arrived
	n     int         // requests of this round so far
	size  int64       // their payload bytes
	// rounds counts the rounds answered.
	rounds int64

	// TIG: the white-box head and gradient scratch.
	head model.WhiteBoxHead
	dc   []float64 // dF_0/dc for one sample, all q*k slots
	g0   []float64 // dF_0/dw_0 summed over a request
}

func (a *Aggregator) initAlt() error {
	cfg := &a.cfg
	if cfg.Sync && cfg.FirstOrder {
		return fmt.Errorf("%w: the first-order baseline is asynchronous", ErrConfig)
	}
	s := &a.alt
	if cfg.Sync {
		s.ids = make([]uint32, 0, cfg.MaxBatch)
		s.c = make([][]float64, a.q+1)
		s.chat = make([][]float64, a.q+1)
		for m := 1; m <= a.q; m++ {
			s.c[m] = make([]float64, 0, cfg.MaxBatch*a.k)
			s.chat[m] = make([]float64, 0, cfg.MaxBatch*a.k)
		}
		s.seq = make([]uint64, a.q+1)
		s.cause = make([][]byte, a.q+1)
		s.got = make([]bool, a.q+1)
	}
	if cfg.FirstOrder {
		wb, ok := cfg.Head.(model.WhiteBoxHead)
		if !ok {
			return fmt.Errorf("%w: the first-order baseline needs the head's gradient: %w", ErrConfig, model.ErrNoGradient)
		}
		s.head = wb
		s.dc = make([]float64, a.width)
		s.g0 = make([]float64, len(a.w0))
		a.rep.Grad = make([]float64, 0, cfg.MaxBatch*a.k)
	}
	return nil
}

// checkBudget stops the run when its step budget or duration is used up.
// Not while recovery applies recorded requests again: the budget counts the
// whole run, and a run resumed from an old checkpoint would otherwise stop
// inside the stretch it is restoring; the next live step checks it.
func (a *Aggregator) checkBudget() {
	if a.recov.replaying {
		return
	}
	if a.cfg.MaxSteps > 0 && a.res.Steps >= a.cfg.MaxSteps {
		a.beginStop("step budget reached")
	} else if a.cfg.Duration > 0 && time.Since(a.start) >= a.cfg.Duration {
		a.beginStop("duration reached")
	} else if a.def.budgetSpent(a.q) {
		a.beginStop(ReasonBudget)
	}
}

// staleness records, for one sample written by party m, how many updates the
// other parties' slots of that sample are behind, and returns the largest.
func (a *Aggregator) staleness(m, i int, stale uint32) uint32 {
	q := a.q
	ver := a.ver[i*q : (i+1)*q]
	ver[m-1] = a.version[m]
	for p := 1; p <= q; p++ {
		if p != m {
			if s := a.version[p] - ver[p-1]; s > stale {
				stale = s
			}
		}
	}
	return stale
}

// recordStaleness adds the staleness of one reply to party m to the run's
// statistics and the party's.
func (a *Aggregator) recordStaleness(m int, stale uint32) {
	if stale > a.res.MaxStaleness {
		a.res.MaxStaleness = stale
	}
	a.stats.staleSum += float64(stale)
	a.stats.staleN++
	p := &a.stats.stalePer[m]
	p.sum += float64(stale)
	p.n++
	p.last, p.max = stale, max(p.max, stale)
}
