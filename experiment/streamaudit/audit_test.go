package streamaudit

import (
	"context"
	"testing"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/schemas"
)

// msg is one message of a test stream: a party's request (out), the
// aggregator's reply to party m's request req, or a payload that does not
// decode.
type msg struct {
	kind schemas.Kind
	m    int
	seq  uint64 // the sender's sequence number on its subject
	req  uint64 // a reply's request
	junk bool
}

func out(m int, seq uint64) msg        { return msg{kind: schemas.KindOutput, m: m, seq: seq} }
func reply(m int, seq, req uint64) msg { return msg{kind: schemas.KindReply, m: m, seq: seq, req: req} }

// TestStream counts what a stream holds: each case is a stream written on
// the memory bus, and the counts its senders' sequence numbers imply.
func TestStream(t *testing.T) {
	const run = "t1"
	cases := []struct {
		name string
		msgs []msg
		want Audit
		ok   bool
	}{
		{"whole", []msg{out(1, 1), out(1, 2), out(2, 1), reply(1, 1, 1), reply(1, 2, 2), reply(2, 1, 1)},
			Audit{Messages: 6, Requests: 3, Replies: 3, Answered: 3}, true},
		{"a request lost", []msg{out(1, 1), out(1, 3), reply(1, 1, 1), reply(1, 2, 3)},
			Audit{Messages: 4, Requests: 2, Replies: 2, Answered: 2, Lost: 1}, false},
		{"an update applied twice", []msg{out(1, 1), reply(1, 1, 1), reply(1, 2, 1)},
			Audit{Messages: 3, Requests: 1, Replies: 2, Answered: 1, Duplicated: 1}, false},
		{"a sequence number repeated", []msg{out(1, 1), out(1, 1)},
			Audit{Messages: 2, Requests: 2, Unanswered: 1, Duplicated: 1}, false},
		{"an orphan reply", []msg{out(1, 1), reply(1, 1, 1), reply(1, 2, 9)},
			Audit{Messages: 3, Requests: 1, Replies: 2, Answered: 1, Orphans: 1}, false},
		{"unanswered and undecodable", []msg{out(1, 1), out(1, 2), reply(1, 1, 1), {kind: schemas.KindOutput, m: 2, junk: true}},
			Audit{Messages: 3, Requests: 2, Replies: 1, Answered: 1, Unanswered: 1, Undecodable: 1}, true},
		{"a party beyond the run's", []msg{out(3, 1)}, Audit{Undecodable: 1}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			b := broker.NewMemoryHub().Connect("test")
			defer b.Close()
			codec := schemas.NewCodec()
			for _, m := range c.msgs {
				h := schemas.Header{Version: schemas.Version, Party: uint16(m.m), Seq: m.seq}
				var sm schemas.Message = &schemas.PartyOutput{Header: h, IDs: []uint32{1}, C: []float64{0}, CHat: []float64{0}}
				if m.kind == schemas.KindReply {
					sm = &schemas.Reply{Header: h, ReqSeq: m.req, H: []float64{0}, HBar: []float64{0}}
				}
				data, err := codec.Marshal(sm)
				if err != nil {
					t.Fatal(err)
				}
				if m.junk {
					data = []byte{0xc1}
				}
				if err := b.Publish(ctx, &broker.Message{Subject: schemas.Subject(run, m.kind, m.m), Data: data}); err != nil {
					t.Fatal(err)
				}
			}
			if err := b.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			got, err := Stream(ctx, b, run, 2)
			if err != nil {
				t.Fatal(err)
			}
			if *got != c.want || got.OK() != c.ok {
				t.Errorf("got %+v (OK %v), want %+v (OK %v)", *got, got.OK(), c.want, c.ok)
			}
		})
	}
}
