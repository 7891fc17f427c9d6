package replay

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/asyrevel/asyrevel/aggregator"
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

type replyKey struct {
	party  int
	reqSeq uint64
}

// Reexecute feeds the party messages of the log (hellos, requests,
// evaluation outputs), in log order, to a fresh aggregator built from cfg
// (the run's settings, seed, secret key and the aggregator's labels), and
// compares every reply it computes with the reply the log recorded, bit
// for bit (the aggregator's own sequence numbers aside: they also count
// the control messages its clock sent). cfg.MaxSteps is set to the
// number of recorded replies, so that it stops where the run stopped.
func Reexecute(ctx context.Context, l *Log, cfg aggregator.Config, progress func(messages uint64)) (*ReexecReport, error) {
	t0 := time.Now()
	n, err := l.Count(ctx, schemas.KindReply)
	if err != nil {
		return nil, err
	}
	cfg.MaxSteps = int64(n)
	if cfg.Run == "" {
		cfg.Run = l.Run()
	}
	rp, err := aggregator.NewReplayer(cfg)
	if err != nil {
		return nil, err
	}
	rep := &ReexecReport{Run: l.Run(), Recorded: int(n)}
	pending := map[replyKey]*schemas.Reply{}
	codec := schemas.NewCodec()
	differ := func(d *ReplyDiff) {
		rep.Differ++
		if rep.First == nil {
			rep.First = d
		}
	}
	err = l.Each(ctx, ReadOptions{}, func(r *Record) error {
		rep.Messages++
		if progress != nil && rep.Messages%500000 == 0 {
			progress(rep.Messages)
		}
		switch r.Kind {
		case schemas.KindHello, schemas.KindOutput, schemas.KindEval:
			for _, p := range rp.Deliver(r.Subject, r.Data) {
				kind, m, err := schemas.ParseSubject(l.Run(), p.Subject)
				if err != nil || kind != schemas.KindReply {
					continue
				}
				var re schemas.Reply
				if err := codec.Unmarshal(p.Data, &re); err != nil {
					return fmt.Errorf("replay: the fresh aggregator's reply does not decode: %w", err)
				}
				rep.Recomputed++
				pending[replyKey{m, re.ReqSeq}] = &re
			}
		case schemas.KindReply:
			rec := r.Reply()
			if rec == nil {
				differ(&ReplyDiff{Party: r.Party, StreamSeq: r.Seq, Detail: fmt.Sprintf("recorded reply does not decode: %v", r.Err)})
				return nil
			}
			k := replyKey{r.Party, rec.ReqSeq}
			re, ok := pending[k]
			if !ok {
				rep.Missing++
				if rep.First == nil {
					rep.First = &ReplyDiff{Party: r.Party, ReqSeq: rec.ReqSeq, StreamSeq: r.Seq,
						Detail: "the log holds a reply that the fresh aggregator did not give"}
				}
				return nil
			}
			delete(pending, k)
			if d := compareReplies(rec, re); d != nil {
				d.Party, d.ReqSeq, d.StreamSeq = r.Party, rec.ReqSeq, r.Seq
				differ(d)
				return nil
			}
			rep.Matched++
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	rep.Extra = len(pending)
	if rep.First == nil && rep.Extra > 0 {
		for k := range pending {
			rep.First = &ReplyDiff{Party: k.party, ReqSeq: k.reqSeq, Detail: "the fresh aggregator gave a reply that the log does not hold"}
			break
		}
	}
	if err := rp.Err(); err != nil && rep.First == nil {
		rep.First = &ReplyDiff{Detail: "the fresh aggregator failed: " + err.Error()}
	}
	res := rp.Result()
	if len(res.Rejected) > 0 {
		rep.Rejected = res.Rejected
	}
	rep.Seconds = time.Since(t0).Seconds()
	return rep, nil
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
