package privacy

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/asyrevel/asyrevel/replay"
	"github.com/asyrevel/asyrevel/schemas"
)

// ErrView reports a view that an attack cannot use (no requests, a reply
// format it does not read).
var ErrView = errors.New("privacy: unusable view")

// ErrNoRequests reports a view whose parties sent no request: a
// label-free run's parties send only their codes (the initial pass and the
// evaluations) and get no reply, so no label attack has anything to read.
// ReadView returns such a view with it, evaluation outputs and all, for
// the aggregator's feature inference. It wraps ErrView.
var ErrNoRequests = fmt.Errorf("%w", ErrView)

// Request is one request of an attacker party with the reply it got.
type Request struct {
	Party     int
	Seq       uint64 // the party's sequence number
	StreamSeq uint64 // where it sits in the log
	IDs       []uint32
	C, CHat   []float64 // k per sample
	Replied   bool
	H, HBar   []float64 // per sample (the paper's replies)
	Delta     []float64 // per sample, or one value if Mean
	Mean      bool
	// Grad is a TIG (split learning) reply: dF_0/dc of the party's slot,
	// K values per sample (the request then has no CHat).
	Grad      []float64
	Staleness uint32
}

// Values returns the per-sample h_bar - h of the reply (nil for a mean
// reply or no reply).
func (r *Request) Values() []float64 {
	switch {
	case !r.Replied || r.Mean || r.Grad != nil:
		return nil
	case r.Delta != nil:
		return r.Delta
	}
	v := make([]float64, len(r.H))
	for j := range v {
		v[j] = r.HBar[j] - r.H[j]
	}
	return v
}

// EvalRound is the outputs a party sent for one evaluation round of a
// split (k per sample, sample after sample; NaN where a chunk is missing).
type EvalRound struct {
	Round uint32
	Split schemas.Split
	C     []float64
}

// View is what one or more parties (colluding) legitimately saw of a run:
// their own requests and the replies to them, their own evaluation
// outputs, and the control messages. Nothing of the other parties.
type View struct {
	Run     string
	Parties []int
	K       int // outputs per sample
	NTrain  int
	NTest   int
	// Requests in log order (of all the viewing parties).
	Requests []Request
	// Evals[m] are party m's evaluation rounds, in order (the initial pass
	// is round 0 of the "init" split).
	Evals map[int][]EvalRound
	// Format is the replies' format: "h,h_bar", "delta" or "mean", or
	// "grad" for a TIG run's gradients.
	Format string
	// Undecodable counts records of the view that could not be decoded;
	// Invalid those that decoded but failed validation (a reply that does
	// not fit its request, say). Neither enters the view: a log may hold
	// hostile messages.
	Undecodable, Invalid int
}

// ReadView reads the view of parties from the log. A view without
// requests is returned with ErrNoRequests (the label attacks have nothing
// to read; the parties' evaluation outputs are there).
func ReadView(ctx context.Context, l *replay.Log, parties ...int) (*View, error) {
	if len(parties) == 0 {
		return nil, fmt.Errorf("%w: no attacker party", ErrView)
	}
	v := &View{Run: l.Run(), Parties: slices.Clone(parties), K: 1, Evals: map[int][]EvalRound{}}
	for _, m := range parties {
		if err := v.read(ctx, l, m); err != nil {
			return nil, err
		}
	}
	slices.SortStableFunc(v.Requests, func(a, b Request) int {
		switch {
		case a.StreamSeq < b.StreamSeq:
			return -1
		case a.StreamSeq > b.StreamSeq:
			return 1
		}
		return 0
	})
	if len(v.Requests) == 0 {
		return v, fmt.Errorf("%w: parties %v sent no requests in run %s", ErrNoRequests, parties, v.Run)
	}
	return v, nil
}

func (v *View) read(ctx context.Context, l *replay.Log, m int) error {
	pending := map[uint64]int{} // request seq -> index in v.Requests
	var cur *EvalRound
	return l.Each(ctx, replay.ReadOptions{Party: m}, func(r *replay.Record) error {
		if r.Err != nil {
			v.Undecodable++
			return nil
		}
		lim := schemas.Limits{Party: r.Party, K: v.K, NTrain: v.NTrain, NTest: v.NTest}
		if r.Kind == schemas.KindControl {
			lim.Party = 0
		}
		if o, ok := r.Msg.(*schemas.PartyOutput); ok && len(o.CHat) == 0 {
			lim.FirstOrder = true // TIG: c only
		}
		if _, ok := r.Msg.(*schemas.Reply); !ok {
			if err := r.Msg.Validate(lim); err != nil {
				v.Invalid++
				return nil
			}
		}
		switch msg := r.Msg.(type) {
		case *schemas.Hello:
			v.K = max(1, int(msg.OutDim))
			v.NTrain, v.NTest = int(msg.NTrain), int(msg.NTest)
		case *schemas.PartyOutput:
			pending[msg.Seq] = len(v.Requests)
			v.Requests = append(v.Requests, Request{Party: m, Seq: msg.Seq, StreamSeq: r.Seq,
				IDs: slices.Clone(msg.IDs), C: slices.Clone(msg.C), CHat: slices.Clone(msg.CHat)})
		case *schemas.Reply:
			i, ok := pending[msg.ReqSeq]
			if !ok {
				return nil
			}
			q := &v.Requests[i]
			// A TIG request (c only) takes a gradient reply, k values a
			// sample; a zeroth-order one function values.
			tig := len(q.CHat) == 0
			if err := msg.Validate(schemas.Limits{Party: m, K: v.K, Batch: len(q.IDs), FirstOrder: tig}); err != nil {
				v.Invalid++
				return nil
			}
			delete(pending, msg.ReqSeq)
			q.Replied, q.Mean, q.Staleness = true, msg.Mean, msg.Staleness
			if tig {
				q.Grad = slices.Clone(msg.Grad)
				v.Format = "grad"
				return nil
			}
			if len(msg.Delta) > 0 {
				q.Delta = slices.Clone(msg.Delta)
			} else {
				q.H, q.HBar = slices.Clone(msg.H), slices.Clone(msg.HBar)
			}
			v.Format = replay.ReplyFormat(msg)
		case *schemas.EvalOutput:
			n := int(msg.Total)
			if cur == nil || cur.Round != msg.Round || cur.Split != msg.Split || msg.First == 0 {
				rounds := v.Evals[m]
				rounds = append(rounds, EvalRound{Round: msg.Round, Split: msg.Split, C: nanSlice(n * v.K)})
				v.Evals[m] = rounds
				cur = &rounds[len(rounds)-1]
			}
			lo := int(msg.First) * v.K
			if lo+len(msg.C) <= len(cur.C) {
				copy(cur.C[lo:], msg.C)
			}
		}
		return nil
	})
}

func nanSlice(n int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = nan
	}
	return s
}

// ShuffleReplies is v with the replied requests' reply values permuted
// among them (seeded): no reply carries the labels of its own batch any
// more, and what an attack still infers from it comes from the party's
// own requests (its c and c_hat, functions of its features). It is the
// reference of the multiclass attacks, as the party's own model is of
// the binary ones. v is not modified.
func ShuffleReplies(v *View, seed uint64) *View {
	w := *v
	w.Requests = slices.Clone(v.Requests)
	var rep []int
	for i := range w.Requests {
		if r := &w.Requests[i]; r.Replied && r.Grad == nil {
			rep = append(rep, i)
		}
	}
	perm := rand.New(rand.NewPCG(seed, 0x5f)).Perm(len(rep))
	for k, j := range perm {
		a, b := &w.Requests[rep[k]], &v.Requests[rep[j]]
		a.H, a.HBar, a.Delta, a.Mean = b.H, b.HBar, b.Delta, b.Mean
		if len(a.IDs) != len(b.IDs) && !b.Mean {
			// A per-sample reply of another length fits no sample.
			a.H, a.HBar, a.Delta, a.Replied = nil, nil, nil, false
		}
	}
	return &w
}
