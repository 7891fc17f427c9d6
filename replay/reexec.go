package replay

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/schemas"
)

// Count is the number of messages of kind in the log (all parties).
func (l *Log) Count(ctx context.Context, kind schemas.Kind) (uint64, error) {
	f := schemas.Filter(l.src.Run, kind)
	si, err := l.st.Info(ctx, jetstream.WithSubjectFilter(f))
	if err != nil {
		return 0, fmt.Errorf("replay: counting %s: %w", f, err)
	}
	var n uint64
	for _, c := range si.State.Subjects {
		n += c
	}
	return n, nil
}

// ReexecReport is the outcome of a re-execution.
type ReexecReport struct {
	Run        string           `json:"run"`
	Recorded   int              `json:"recorded_replies"`
	Recomputed int              `json:"recomputed_replies"`
	Matched    int              `json:"matched"`
	Differ     int              `json:"different"`
	Missing    int              `json:"missing"` // recorded replies the fresh aggregator did not give
	Extra      int              `json:"extra"`   // replies it gave that the log does not hold
	First      *ReplyDiff       `json:"first_difference,omitempty"`
	Rejected   map[string]int64 `json:"rejected,omitempty"` // party messages the fresh aggregator rejected
	Messages   uint64           `json:"messages_read"`
	Seconds    float64          `json:"seconds"`
}

// OK reports whether every recorded reply was recomputed exactly and no
// other was given.
func (r *ReexecReport) OK() bool {
	return r.Differ == 0 && r.Missing == 0 && r.Extra == 0 && r.Matched == r.Recorded
}

// ReplyDiff is the first difference between a recorded and a recomputed
// reply.
type ReplyDiff struct {
	Party      int     `json:"party"`
	ReqSeq     uint64  `json:"request_seq"`
	StreamSeq  uint64  `json:"stream_seq"` // of the recorded reply (0 if none)
	Field      string  `json:"field"`
	Index      int     `json:"index"`
	Recorded   float64 `json:"recorded"`
	Recomputed float64 `json:"recomputed"`
	Detail     string  `json:"detail,omitempty"`
}

func (d *ReplyDiff) String() string {
	if d.Detail != "" {
		return fmt.Sprintf("party %d, request %d (stream seq %d): %s", d.Party, d.ReqSeq, d.StreamSeq, d.Detail)
	}
	return fmt.Sprintf("party %d, request %d (stream seq %d): %s[%d] recorded %v, recomputed %v",
		d.Party, d.ReqSeq, d.StreamSeq, d.Field, d.Index, d.Recorded, d.Recomputed)
}

// Executor is the aggregator that re-execution drives: a fresh one,
// built by Start, handed the recorded party messages one at a time, that
// answers with what it publishes. aggregator.NewReexecutor gives the
// aggregator's own; replay does not import package aggregator (the roles
// sit above the packages that read their log).
type Executor interface {
	// Start builds the fresh aggregator of run (the recorded run's name),
	// to stop after replies replies, where the recorded run stopped.
	// It is called once, before anything else.
	Start(run string, replies int) error
	// Deliver hands it one recorded message (subject and payload) and
	// returns what it published in answer (Subject and Data set), valid
	// until the next call.
	Deliver(subject string, data []byte) []broker.Message
	// Rejected is the messages it rejected so far, by reason.
	Rejected() map[string]int64
	// Err is the error that failed it, if any.
	Err() error
}

type replyKey struct {
	party  int
	reqSeq uint64
}

// Reexecute feeds the party messages of the log (hellos, requests,
// evaluation outputs) to a fresh aggregator, x started for the log's run
// and its number of recorded replies (aggregator.NewReexecutor of the
// run's settings, seed, secret key and the aggregator's labels), and
// compares every reply it computes with the reply the log recorded, bit
// for bit (the aggregator's own sequence numbers aside: they also count
// the control messages its clock sent).
//
// Requests are applied in the order the aggregator applied them, which
// need not be the order the stream stored them in (a default run delivers
// through core subscriptions while the stream captures in parallel): each
// recorded reply names the request it answers by digest (Reply.Cause),
// and the replies are stored in the order the aggregator made them, so
// the request a reply names is applied when the reply is reached.
// Requests that no reply names (late, rejected or never answered) are
// applied at the end, in stream order. A log written before replies named
// their cause is applied in stream order.
func Reexecute(ctx context.Context, l *Log, x Executor, progress func(messages uint64)) (*ReexecReport, error) {
	n, err := l.Count(ctx, schemas.KindReply)
	if err != nil {
		return nil, err
	}
	each := func(fn func(*Record) error) error { return l.Each(ctx, ReadOptions{}, fn) }
	return ReexecuteRecords(ctx, l.Run(), int(n), each, x, progress)
}

// ReexecuteRecords is Reexecute over the records each gives, in stream
// order, of run whose log holds replies recorded replies.
func ReexecuteRecords(ctx context.Context, run string, replies int, each func(func(*Record) error) error, rp Executor, progress func(messages uint64)) (*ReexecReport, error) {
	t0 := time.Now()
	if err := rp.Start(run, replies); err != nil {
		return nil, err
	}
	rep := &ReexecReport{Run: run, Recorded: replies}
	x := &reexec{rp: rp, rep: rep, run: run, codec: schemas.NewCodec(),
		pending: map[replyKey]*schemas.Reply{}, reqs: map[string][]*queued{}, await: map[string][]*Record{}}
	err := each(func(r *Record) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		rep.Messages++
		if progress != nil && rep.Messages%500000 == 0 {
			progress(rep.Messages)
		}
		switch r.Kind {
		case schemas.KindHello, schemas.KindEval:
			return x.deliver(r.Subject, r.Data)
		case schemas.KindOutput:
			key := string(schemas.RequestDigest(nil, r.Data))
			if w := x.await[key]; len(w) > 0 {
				// A reply stored before its request (a log that is not
				// causal: the audit says so): applied now.
				delete(x.await, key)
				if err := x.deliver(r.Subject, r.Data); err != nil {
					return err
				}
				for _, rec := range w {
					x.compare(rec)
				}
				return nil
			}
			q := &queued{subject: r.Subject, data: slices.Clone(r.Data)}
			x.reqs[key] = append(x.reqs[key], q)
			x.order = append(x.order, q)
			x.live++
		case schemas.KindReply:
			rec := r.Reply()
			if rec == nil {
				x.differ(&ReplyDiff{Party: r.Party, StreamSeq: r.Seq, Detail: fmt.Sprintf("recorded reply does not decode: %v", r.Err)})
				return nil
			}
			r = r.Clone()
			if len(rec.Cause) == 0 {
				// A log of an earlier revision: stream order.
				if err := x.flush(); err != nil {
					return err
				}
				x.compare(r)
				return nil
			}
			key := string(rec.Cause)
			qs := x.reqs[key]
			var q *queued
			for len(qs) > 0 && q == nil {
				if !qs[0].done {
					q = qs[0]
				}
				qs = qs[1:]
			}
			if len(qs) == 0 {
				delete(x.reqs, key)
			} else {
				x.reqs[key] = qs
			}
			if q == nil {
				if _, ok := x.pending[replyKey{r.Party, r.Reply().ReqSeq}]; ok {
					x.compare(r) // a sync round's reply: its request is applied
					return nil
				}
				x.await[key] = append(x.await[key], r)
				return nil
			}
			if err := x.apply(q); err != nil {
				return err
			}
			x.compare(r)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := x.flush(); err != nil {
		return nil, err
	}
	x.end = true
	for _, w := range x.await {
		for _, r := range w {
			x.compare(r) // missing: its request is not in the log
		}
	}
	for _, r := range x.waiting {
		x.compare(r)
	}
	rep.Extra = len(x.pending)
	if rep.First == nil && rep.Extra > 0 {
		for k := range x.pending {
			rep.First = &ReplyDiff{Party: k.party, ReqSeq: k.reqSeq, Detail: "the fresh aggregator gave a reply that the log does not hold"}
			break
		}
	}
	if err := rp.Err(); err != nil && rep.First == nil {
		rep.First = &ReplyDiff{Detail: "the fresh aggregator failed: " + err.Error()}
	}
	if rj := rp.Rejected(); len(rj) > 0 {
		rep.Rejected = rj
	}
	rep.Seconds = time.Since(t0).Seconds()
	return rep, nil
}

// queued is a request of the log not yet applied.
type queued struct {
	subject string
	data    []byte
	done    bool
}

// reexec is the state of one re-execution.
type reexec struct {
	rp      Executor
	rep     *ReexecReport
	run     string
	codec   *schemas.Codec
	pending map[replyKey]*schemas.Reply // recomputed, not yet compared
	reqs    map[string][]*queued        // requests by digest, not yet applied
	order   []*queued                   // every request in stream order
	await   map[string][]*Record        // recorded replies stored before their request
	waiting []*Record                   // recorded replies whose recomputed reply has not come yet (a round in progress)
	live    int                         // requests in order not yet applied
	end     bool                        // the log is read: what has not come is missing
}

func (x *reexec) final() bool { return x.end }

// apply hands the fresh aggregator queued request q.
func (x *reexec) apply(q *queued) error {
	q.done = true
	data := q.data
	q.data = nil
	x.live--
	if len(x.order) > 1024 && x.live < len(x.order)/4 {
		x.order = slices.DeleteFunc(x.order, func(q *queued) bool { return q.done })
	}
	return x.deliver(q.subject, data)
}

func (x *reexec) differ(d *ReplyDiff) {
	x.rep.Differ++
	if x.rep.First == nil {
		x.rep.First = d
	}
}

// deliver hands the fresh aggregator one party message and keeps what it
// answers; recorded replies waiting for one of those are compared.
func (x *reexec) deliver(subject string, data []byte) error {
	got := false
	for _, p := range x.rp.Deliver(subject, data) {
		kind, m, err := schemas.ParseSubject(x.run, p.Subject)
		if err != nil || kind != schemas.KindReply {
			continue
		}
		re := &schemas.Reply{}
		if err := x.codec.Unmarshal(p.Data, re); err != nil {
			return fmt.Errorf("replay: the fresh aggregator's reply does not decode: %w", err)
		}
		x.rep.Recomputed++
		x.pending[replyKey{m, re.ReqSeq}] = re
		got = true
	}
	if got && len(x.waiting) > 0 {
		w := x.waiting
		x.waiting = nil
		for _, r := range w {
			x.compare(r)
		}
	}
	return nil
}

// flush applies every request not yet applied, in stream order.
func (x *reexec) flush() error {
	for _, q := range slices.Clone(x.order) {
		if !q.done {
			if err := x.apply(q); err != nil {
				return err
			}
		}
	}
	x.order = x.order[:0]
	clear(x.reqs)
	return nil
}

// compare checks recorded reply r against the recomputed one; one that
// has not come yet waits (end: missing).
func (x *reexec) compare(r *Record) {
	rec := r.Reply()
	k := replyKey{r.Party, rec.ReqSeq}
	re, ok := x.pending[k]
	if !ok {
		if !x.final() {
			x.waiting = append(x.waiting, r)
			return
		}
		x.rep.Missing++
		if x.rep.First == nil {
			x.rep.First = &ReplyDiff{Party: r.Party, ReqSeq: rec.ReqSeq, StreamSeq: r.Seq,
				Detail: "the log holds a reply that the fresh aggregator did not give"}
		}
		return
	}
	delete(x.pending, k)
	if d := compareReplies(rec, re); d != nil {
		d.Party, d.ReqSeq, d.StreamSeq = r.Party, rec.ReqSeq, r.Seq
		x.differ(d)
		return
	}
	x.rep.Matched++
}

// compareReplies returns the first difference of recorded and recomputed
// replies, or nil. Floats are compared bit for bit.
func compareReplies(rec, re *schemas.Reply) *ReplyDiff {
	if rec.Mean != re.Mean {
		return &ReplyDiff{Field: "mean", Detail: fmt.Sprintf("recorded mean=%v, recomputed mean=%v", rec.Mean, re.Mean)}
	}
	for _, f := range [...]struct {
		name   string
		rc, rx []float64
	}{{"h", rec.H, re.H}, {"h_bar", rec.HBar, re.HBar}, {"delta", rec.Delta, re.Delta}} {
		if len(f.rc) != len(f.rx) {
			return &ReplyDiff{Field: f.name, Detail: fmt.Sprintf("recorded %d values of %s, recomputed %d", len(f.rc), f.name, len(f.rx))}
		}
		for i := range f.rc {
			if math.Float64bits(f.rc[i]) != math.Float64bits(f.rx[i]) {
				return &ReplyDiff{Field: f.name, Index: i, Recorded: f.rc[i], Recomputed: f.rx[i]}
			}
		}
	}
	if rec.Staleness != re.Staleness {
		return &ReplyDiff{Field: "staleness", Recorded: float64(rec.Staleness), Recomputed: float64(re.Staleness)}
	}
	return nil
}
