package aggregator

import (
	"maps"
	"slices"
	"time"
)

// Snapshot is the aggregator's state for monitoring (package observe): the
// counters it keeps anyway, copied under its lock. Taking one costs the
// aggregator one lock and a copy of a few per-party values; the privacy
// accounting, which sorts one value per label, only when asked for.
type Snapshot struct {
	// Phase: joining, training, stopping or done.
	Phase string
	// Elapsed is the training time so far, Steps the answered requests
	// (after a resume: with those before it).
	Elapsed time.Duration
	Steps   int64
	// Parties has one entry per party (index m-1).
	Parties []PartySnapshot
	// MaxStaleness and MeanStaleness are over every reply of the run;
	// Replies counts those replies.
	MaxStaleness  uint32
	MeanStaleness float64
	Replies       int64
	// Evaluations counts the rounds scored by this process, EvalSeconds
	// their total duration (request to score; not the final round nor a
	// round that went on without a departed party), LastEval the
	// duration of the latest of them.
	Evaluations int64
	EvalSeconds float64
	LastEval    time.Duration
	// Rejected counts the rejected deliveries by reason.
	Rejected map[string]int64
	// Timeouts counts the departures of parties, Returned their returns.
	Timeouts, Returned int64
	// Unreachable is when the broker became unreachable (zero: it is
	// reachable), Outage how long it was so during the run.
	Unreachable time.Time
	Outage      time.Duration
	// Resumed: this aggregator started from a checkpoint and the stream
	// (Recovery says what it applied again).
	Resumed  bool
	Recovery *Recovery
	// Trust: the trust layer is on; Seals counts the signed checkpoints
	// of the log published.
	Trust bool
	Seals uint64
	// Defense is the defense's report with the privacy accounting so far
	// (only with SnapshotOptions.Privacy).
	Defense *DefenseReport
	// StopReason is why training stopped ("" while it goes on).
	StopReason string
}

// PartySnapshot is the aggregator's view of one party.
type PartySnapshot struct {
	Joined   bool   // its hello was accepted
	Refused  string // why its latest hello was refused ("" if not)
	Departed bool   // an evaluation stopped waiting for it, and it has not come back
	Why      string // why it departed
	// Answered counts its requests answered; LastRequest is when its
	// latest valid request came (zero: none yet).
	Answered    int64
	LastRequest time.Time
	// Staleness of its replies: the latest, the largest and the mean.
	LastStale, MaxStale uint32
	MeanStale           float64
	StaleEvals          int64 // evaluations scored with its last outputs
}

// SnapshotOptions says what a Snapshot includes besides the counters.
type SnapshotOptions struct {
	// Privacy computes the privacy accounting (a sort of one value per
	// label: milliseconds on large sets).
	Privacy bool
}

// partyStale is one party's staleness statistics (recordStaleness).
type partyStale struct {
	sum       float64
	n         int64
	last, max uint32
}

var phaseNames = [...]string{joining: "joining", training: "training", stopping: "stopping", done: "done"}

// Snapshot returns the aggregator's state for monitoring. Safe for
// concurrent use with Run.
func (a *Aggregator) Snapshot(o SnapshotOptions) Snapshot {
	a.mu.Lock()
	s := a.monitorSnapshot()
	var def *defense
	if o.Privacy {
		def = a.def.accounts()
	}
	a.mu.Unlock()
	if def != nil {
		// The sort over the labels, outside the lock.
		d := def.report(a.n)
		s.Defense = &d
	}
	return s
}

// accounts is a copy of what report reads (a.mu held): the per-label
// accounting is copied, so that report runs without the lock.
func (d *defense) accounts() *defense {
	c := *d
	c.unitAll, c.maxP, c.unitH, c.visits = slices.Clone(d.unitAll), slices.Clone(d.maxP), slices.Clone(d.unitH), slices.Clone(d.visits)
	return &c
}

// monitorSnapshot is Snapshot's counters (a.mu held).
func (a *Aggregator) monitorSnapshot() Snapshot {
	s := Snapshot{
		Phase: phaseNames[a.phase], Steps: a.res.Steps, Elapsed: a.recov.trainedBefore,
		MaxStaleness: a.res.MaxStaleness, Replies: a.stats.staleN,
		Evaluations: a.eval.done, EvalSeconds: a.eval.sum.Seconds(), LastEval: a.eval.cost,
		Rejected: maps.Clone(a.res.Rejected), Timeouts: a.res.Timeouts, Returned: a.res.Returned,
		Resumed: a.resumed != nil, Trust: a.tr != nil, Seals: a.res.Checkpoints, StopReason: a.stop.reason,
		Parties: make([]PartySnapshot, a.q),
	}
	switch {
	case a.phase == training && !a.start.IsZero():
		s.Elapsed = time.Since(a.start)
	case a.phase != joining:
		s.Elapsed = a.res.Training
	}
	if a.stats.staleN > 0 {
		s.MeanStaleness = a.stats.staleSum / float64(a.stats.staleN)
	}
	if a.resumed != nil {
		r := *a.resumed
		s.Recovery = &r
	}
	if b := a.bus; b != nil {
		if u, ok := b.(interface{ Unreachable() time.Time }); ok {
			s.Unreachable = u.Unreachable()
		}
		if o, ok := b.(interface{ Outage() time.Duration }); ok {
			s.Outage = o.Outage()
		}
	}
	for m := 1; m <= a.q; m++ {
		p := &s.Parties[m-1]
		p.Joined, p.Refused, p.Departed = a.hello[m], a.join.refused[m], a.departed[m]
		if p.Departed {
			p.Why = a.res.Departed[m]
		}
		p.Answered, p.LastRequest = int64(a.version[m]), a.waits.lastReq[m]
		p.StaleEvals = a.res.StaleEvals[m]
		if st := a.stats.stalePer; len(st) > m {
			p.LastStale, p.MaxStale = st[m].last, st[m].max
			if st[m].n > 0 {
				p.MeanStale = st[m].sum / float64(st[m].n)
			}
		}
	}
	return s
}
