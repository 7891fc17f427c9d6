package observe

import (
	"context"
	"math"
	"strconv"
	"time"
)

// State is what the board shows: one reading of the process, its curve
// from point From on, and its events. It is the board's JSON
// (/api/state) and the data a report page carries.
type State struct {
	Info
	Now     time.Time `json:"now"`
	Started time.Time `json:"started"`
	// Final: the run has ended; this is its last state (a report).
	Final bool `json:"final"`

	Phase       string  `json:"phase"`
	Elapsed     float64 `json:"elapsed_seconds"`
	Steps       int64   `json:"steps"`
	StepsPerSec float64 `json:"steps_per_second"`

	// From is the index of Curve's first point in the whole curve, Points
	// the whole curve's length.
	From   int          `json:"from"`
	Points int          `json:"points"`
	Curve  []CurvePoint `json:"curve"`

	Parties  []PartyState   `json:"parties"`
	Privacy  *PrivacyState  `json:"privacy,omitempty"`
	Store    *StreamFigures `json:"store,omitempty"`
	Recovery RecoveryState  `json:"recovery"`
	Audit    AuditState     `json:"audit"`
	Events   []Event        `json:"events"`
	// Dropped counts the oldest events no longer kept.
	Dropped int `json:"events_dropped,omitempty"`
}

// CurvePoint is one evaluation.
type CurvePoint struct {
	Seconds   float64 `json:"s"`
	Steps     int64   `json:"steps"`
	TrainLoss Num     `json:"train_loss"`
	TestLoss  Num     `json:"test_loss"`
	Accuracy  Num     `json:"accuracy"`
	Stale     []int   `json:"stale,omitempty"`
	Final     bool    `json:"final,omitempty"`
}

// PartyState is one party as the board shows it.
type PartyState struct {
	ID       int    `json:"id"`
	Status   string `json:"status"` // waiting, joined, training, departed, refused
	Why      string `json:"why,omitempty"`
	Answered int64  `json:"answered"`           // its requests answered
	Lag      Num    `json:"lag_seconds"`        // since its latest request reached the aggregator
	Stale    uint32 `json:"staleness"`          // its latest reply's
	MaxStale uint32 `json:"staleness_max"`      //
	Mean     Num    `json:"staleness_mean"`     //
	Steps    int64  `json:"steps,omitempty"`    // its own count (a party in this process)
	InFlight int    `json:"in_flight"`          // requests in flight (a party in this process; -1: unknown)
	Window   int    `json:"window,omitempty"`   //
	Receipts int    `json:"receipts,omitempty"` // seals countersigned (a party in this process)
}

// PrivacyState is the label privacy spent so far and its bound.
type PrivacyState struct {
	Switch    string `json:"switch,omitempty"` // --privacy's choice
	Reply     string `json:"reply"`
	Noise     Num    `json:"noise"`
	Budget    Num    `json:"rho_budget"` // 0: none
	MaxRho    Num    `json:"rho_max"`
	MedianRho Num    `json:"rho_median"`
	Epsilon   Num    `json:"epsilon_max"`
	MedianEps Num    `json:"epsilon_median"`
	AUCBound  Num    `json:"auc_bound"`
	Visited   int    `json:"labels_visited"`
	Labels    int    `json:"labels"`
	Masked    int64  `json:"masked_visits"`
}

// RecoveryState is what the run recovered from.
type RecoveryState struct {
	Resumes       int     `json:"resumes"`
	OutageSeconds float64 `json:"outage_seconds"`
	Reachable     bool    `json:"broker_reachable"`
	Departures    int64   `json:"departures"`
	Returns       int64   `json:"returns"`
	Reapplied     int64   `json:"reapplied,omitempty"` // requests a resume applied again from the stream
}

// AuditState is the trust layer's state: what the log's audit will check.
type AuditState struct {
	Trust    bool             `json:"trust"`
	Seals    uint64           `json:"seals"`
	Receipts int              `json:"receipts"`
	Rejected map[string]int64 `json:"rejected"`
}

// State reads the process and returns its state with the curve from point
// since on (0: all of it).
func (w *Watch) State(since int) State {
	if w == nil {
		return State{}
	}
	v := w.read(context.Background())
	st := State{Info: v.info, Now: time.Now(), Started: w.start, Audit: AuditState{Rejected: map[string]int64{}}}
	st.Recovery.Resumes, st.Recovery.OutageSeconds, st.Recovery.Reachable = v.resumes, v.outage.Seconds(), true
	if v.info.Resumed {
		st.Recovery.Resumes++
	}
	for _, b := range v.buses {
		st.Recovery.OutageSeconds += b.outage.Seconds()
		st.Recovery.Reachable = st.Recovery.Reachable && !b.unreachable
	}
	st.Store = v.stream

	w.mu.Lock()
	since = min(max(since, 0), len(w.curve))
	st.From, st.Points = since, len(w.curve)
	for _, pt := range w.curve[since:] {
		st.Curve = append(st.Curve, CurvePoint{Seconds: pt.Seconds, Steps: pt.Steps, TrainLoss: Num(pt.TrainLoss),
			TestLoss: Num(pt.TestLoss), Accuracy: Num(pt.TestAccuracy), Stale: pt.Stale, Final: pt.Final})
	}
	st.Events = append([]Event(nil), w.events...)
	st.Dropped = w.dropped
	w.mu.Unlock()

	n := max(v.info.Parties, len(v.parties))
	if s := v.agg; s != nil {
		n = max(n, len(s.Parties))
		st.Phase, st.Elapsed, st.Steps = s.Phase, s.Elapsed.Seconds(), s.Steps
		if st.Elapsed > 0 {
			st.StepsPerSec = float64(s.Steps) / st.Elapsed
		}
		st.Recovery.Departures, st.Recovery.Returns = s.Timeouts, s.Returned
		if s.Recovery != nil {
			st.Recovery.Reapplied = s.Recovery.Reapplied
		}
		st.Audit.Trust, st.Audit.Seals = s.Trust, s.Seals
		for r, c := range s.Rejected {
			st.Audit.Rejected["aggregator: "+r] += c
		}
		if d := s.Defense; d != nil {
			p := &PrivacyState{Switch: v.info.Privacy, Reply: d.Reply, Noise: Num(d.Noise), Budget: Num(d.Budget), Masked: d.Masked}
			if a := d.Accounting; a != nil {
				p.MaxRho, p.MedianRho, p.Epsilon, p.MedianEps = Num(a.MaxRho), Num(a.MedianRho), Num(a.Epsilon), Num(a.MedianEps)
				p.AUCBound, p.Visited, p.Labels = Num(a.AUCBound), a.Visited, a.Labels
			}
			st.Privacy = p
		}
		st.Final = s.Phase == "done"
	}
	now := time.Now()
	for m := 1; m <= n; m++ {
		ps := PartyState{ID: m, Status: "waiting", Lag: Num(math.NaN()), Mean: Num(math.NaN()), InFlight: -1}
		if s := v.agg; s != nil && m <= len(s.Parties) {
			a := s.Parties[m-1]
			ps.Answered, ps.Stale, ps.MaxStale = a.Answered, a.LastStale, a.MaxStale
			if a.Answered > 0 {
				ps.Mean = Num(a.MeanStale)
			}
			if !a.LastRequest.IsZero() && s.Phase != "done" {
				ps.Lag = Num(now.Sub(a.LastRequest).Seconds())
			}
			switch {
			case a.Departed:
				ps.Status, ps.Why = "departed", a.Why
			case a.Refused != "" && !a.Joined:
				ps.Status, ps.Why = "refused", a.Refused
			case a.Joined && s.Phase == "joining":
				ps.Status = "joined"
			case a.Joined && s.Phase == "done":
				ps.Status = "done"
			case a.Joined:
				ps.Status = "training"
			}
		}
		if m <= len(v.parties) && v.parties[m-1] != nil {
			p := v.parties[m-1]
			ps.Steps, ps.InFlight, ps.Window, ps.Receipts = p.Steps, p.InFlight, v.info.Window, p.Receipts
			st.Audit.Receipts += p.Receipts
			for r, c := range p.Rejected {
				st.Audit.Rejected["party "+strconv.Itoa(m)+": "+r] += c
			}
		}
		st.Parties = append(st.Parties, ps)
	}
	return st
}
