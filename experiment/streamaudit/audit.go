package streamaudit

import (
	"context"
	"fmt"
	"slices"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/logread"
	"github.com/asyrevel/asyrevel/schemas"
)

// Audit is what a run's stream says about its messages: the proof that
// nothing a sender published is missing and no update was applied twice,
// read from the senders' own sequence numbers (every participant numbers
// its messages 1, 2, 3, ... on each of its subjects: a party its hello,
// requests and evaluations, the aggregator its replies to each party and
// its controls).
type Audit struct {
	Messages int64 `json:"messages"` // the participants' messages in the stream
	Requests int64 `json:"requests"` // PartyOutputs
	Replies  int64 `json:"replies"`
	// Answered requests have exactly one reply; Unanswered none (in flight
	// at the end, or after the stop).
	Answered   int64 `json:"answered"`
	Unanswered int64 `json:"unanswered"`
	// Duplicated counts replies to a request answered already (an update
	// applied twice) and messages whose sequence number repeats on their
	// subject.
	Duplicated int64 `json:"duplicated"`
	// Orphans are replies to requests the stream does not hold.
	Orphans int64 `json:"orphans"`
	// Lost counts the gaps in each subject's sequence numbers: messages a
	// sender published that the stream does not hold.
	Lost int64 `json:"lost"`
	// Undecodable messages were left out of the figures.
	Undecodable int64 `json:"undecodable,omitempty"`
}

// OK says whether the stream shows no lost, duplicated or orphan message.
func (a *Audit) OK() bool { return a.Lost == 0 && a.Duplicated == 0 && a.Orphans == 0 }

func (a *Audit) String() string {
	return fmt.Sprintf("%d messages: %d requests (%d answered once, %d unanswered), %d replies; %d lost, %d duplicated, %d orphan replies",
		a.Messages, a.Requests, a.Answered, a.Unanswered, a.Replies, a.Lost, a.Duplicated, a.Orphans)
}

// Stream reads every message of run on b and checks it (Audit).
func Stream(ctx context.Context, b broker.Bus, run string, parties int) (*Audit, error) {
	var (
		au      Audit
		dec     = schemas.NewCodec()
		seqs    = map[string][]uint64{} // per subject: each is numbered 1, 2, ... by its sender
		reqs    = map[[2]uint64]int{}   // (party, seq) -> replies
		hello   schemas.Hello
		out     schemas.PartyOutput
		rep     schemas.Reply
		ev      schemas.EvalOutput
		ctl     schemas.Control
		replies [][2]uint64
	)
	filters := []string{schemas.Filter(run, schemas.KindHello), schemas.Filter(run, schemas.KindOutput), schemas.Filter(run, schemas.KindReply),
		schemas.Filter(run, schemas.KindEval), schemas.Filter(run, schemas.KindControl)}
	_, err := logread.Messages(ctx, b, filters, func(subject string, data []byte) {
		kind, m, err := schemas.ParseSubject(run, subject)
		if err != nil || m > parties {
			au.Undecodable++
			return
		}
		var msg schemas.Message
		switch kind {
		case schemas.KindHello:
			msg = &hello
		case schemas.KindOutput:
			msg = &out
		case schemas.KindReply:
			msg = &rep
		case schemas.KindEval:
			msg = &ev
		case schemas.KindControl:
			msg = &ctl
		}
		if msg == nil || dec.Unmarshal(data, msg) != nil {
			au.Undecodable++
			return
		}
		au.Messages++
		seqs[subject] = append(seqs[subject], msg.Head().Seq)
		switch kind {
		case schemas.KindOutput:
			au.Requests++
			if _, ok := reqs[[2]uint64{uint64(m), out.Seq}]; !ok {
				reqs[[2]uint64{uint64(m), out.Seq}] = 0
			}
		case schemas.KindReply:
			au.Replies++
			replies = append(replies, [2]uint64{uint64(rep.Party), rep.ReqSeq})
		}
	})
	if err != nil {
		return nil, fmt.Errorf("auditing run %s: %w", run, err)
	}
	for _, r := range replies {
		n, ok := reqs[r]
		switch {
		case !ok:
			au.Orphans++
		case n > 0:
			au.Duplicated++
		}
		if ok {
			reqs[r] = n + 1
		}
	}
	for _, n := range reqs {
		if n == 0 {
			au.Unanswered++
		} else {
			au.Answered++
		}
	}
	for _, s := range seqs {
		if len(s) == 0 {
			continue
		}
		slices.Sort(s)
		want := uint64(1)
		for i, v := range s {
			if i > 0 && v == s[i-1] {
				au.Duplicated++
				continue
			}
			if v > want {
				au.Lost += int64(v - want)
			}
			want = v + 1
		}
	}
	return &au, nil
}

// Store opens the broker store dir (a stopped broker's, such as OUT/stream
// of 'asyrevel train --out OUT') in an embedded server of its own, and
// audits the run's stream there (Stream).
func Store(ctx context.Context, dir, run string, parties int) (*Audit, error) {
	if dir == "" {
		return nil, fmt.Errorf("auditing run %s: no store folder", run)
	}
	net, err := broker.OpenNetwork(ctx, broker.NetworkConfig{Dir: dir, Run: run})
	if err != nil {
		return nil, fmt.Errorf("auditing run %s: %w", run, err)
	}
	defer net.Close()
	b, err := net.Connect(ctx, broker.Dial{Name: "audit"})
	if err != nil {
		return nil, fmt.Errorf("auditing run %s: %w", run, err)
	}
	defer b.Close()
	return Stream(ctx, b, run, parties)
}
