package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/asyrevel/asyrevel/schemas"
)

// ReadOptions chooses what a Reader yields.
type ReadOptions struct {
	// From is the first stream sequence to read (0: the first).
	From uint64
	// Since starts at the first message stored at or after this time
	// (zero: no bound). From and Since exclude each other.
	Since time.Time
	// Party, if not 0, reads only what party Party sent and received:
	// its join, out, eval and reply subjects and the control subject.
	Party int
	// Kinds, if not empty, reads only these kinds of message.
	Kinds []schemas.Kind
	// Raw skips decoding: Record.Msg stays nil (for audits that only
	// need the payloads and headers).
	Raw bool
	// Prefetch is how many messages the server sends ahead of the
	// reader (default 20,000).
	Prefetch int
}

// Record is one message of the log. A Reader reuses its Record and the
// decoded message between calls of Next: copy what must outlive the next
// call, or use Clone.
type Record struct {
	Seq     uint64       // stream sequence
	Time    time.Time    // when the broker stored it
	Subject string       // as published
	Kind    schemas.Kind // from the subject (0 if the subject is not the run's)
	// Party is the party the subject names: the sender of join, out and
	// eval, the receiver of reply; 0 for control.
	Party int
	// Sender is who published it: the party for join, out and eval, 0
	// (the aggregator) for reply and control.
	Sender int
	Header nats.Header // headers as stored (Nats-Msg-Id, signatures, ...)
	Data   []byte      // raw payload
	// Msg is the decoded message (a *schemas.Hello, *PartyOutput, *Reply,
	// *EvalOutput or *Control), nil if Err is set or ReadOptions.Raw.
	Msg schemas.Message
	// Receipt marks a party's receipt (a countersigned checkpoint of the
	// trust layer, on asyrevel.R.rcpt.m): Party and Sender are the party,
	// Kind 0 and Msg nil; trust.ParseReceiptMessage reads Data.
	Receipt bool
	// Err says why the subject or payload could not be decoded: the record
	// is still delivered (a log may hold hostile messages; audits count
	// them). It wraps a schemas sentinel error.
	Err error
}

// Output, Reply, Eval, Hello and Control return the decoded message of
// their kind, or nil.
func (r *Record) Output() *schemas.PartyOutput { m, _ := r.Msg.(*schemas.PartyOutput); return m }

// Reply returns the decoded Reply, or nil.
func (r *Record) Reply() *schemas.Reply { m, _ := r.Msg.(*schemas.Reply); return m }

// Eval returns the decoded EvalOutput, or nil.
func (r *Record) Eval() *schemas.EvalOutput { m, _ := r.Msg.(*schemas.EvalOutput); return m }

// Hello returns the decoded Hello, or nil.
func (r *Record) Hello() *schemas.Hello { m, _ := r.Msg.(*schemas.Hello); return m }

// Control returns the decoded Control, or nil.
func (r *Record) Control() *schemas.Control { m, _ := r.Msg.(*schemas.Control); return m }

// Clone returns a deep copy of r that later calls of Next leave alone.
func (r *Record) Clone() *Record {
	c := *r
	c.Data = slices.Clone(r.Data)
	if r.Header != nil {
		c.Header = make(nats.Header, len(r.Header))
		for k, v := range r.Header {
			c.Header[k] = slices.Clone(v)
		}
	}
	switch m := r.Msg.(type) {
	case *schemas.Hello:
		x := *m
		c.Msg = &x
	case *schemas.PartyOutput:
		x := *m
		x.IDs, x.C, x.CHat = slices.Clone(m.IDs), slices.Clone(m.C), slices.Clone(m.CHat)
		c.Msg = &x
	case *schemas.Reply:
		x := *m
		x.H, x.HBar, x.Delta, x.Grad, x.Cause = slices.Clone(m.H), slices.Clone(m.HBar), slices.Clone(m.Delta), slices.Clone(m.Grad), slices.Clone(m.Cause)
		c.Msg = &x
	case *schemas.EvalOutput:
		x := *m
		x.C = slices.Clone(m.C)
		c.Msg = &x
	case *schemas.Control:
		x := *m
		c.Msg = &x
	}
	return &c
}

// Reader yields the records of a log in stream order. It is for one
// goroutine.
type Reader struct {
	decoder
	// Direct reading (Source.Direct): the next sequence to get, the
	// stream, and the filter and start time to apply here.
	direct   bool
	seq      uint64
	st       jetstream.Stream
	keep     func(subject string) bool
	since    time.Time
	it       jetstream.MessagesContext
	cons     jetstream.Consumer
	prefetch int
	stop     func() bool
	closed   bool
}

// decoder turns delivered messages into Records.
type decoder struct {
	last  uint64 // the stream's last sequence when the read started
	done  bool
	raw   bool
	rec   Record
	codec *schemas.Codec
	msgs  [schemas.KindControl + 1]schemas.Message
	count uint64
	run   string
}

// DefaultPrefetch is ReadOptions.Prefetch's default.
const DefaultPrefetch = 20000

// Read starts reading the log as opts says, up to the last message stored
// when Read is called. Close the Reader when done (reading to the end
// does not release it).
func (l *Log) Read(ctx context.Context, opts ReadOptions) (*Reader, error) {
	if opts.From > 0 && !opts.Since.IsZero() {
		return nil, fmt.Errorf("%w: --from and --since exclude each other", ErrSource)
	}
	if opts.Party < 0 || opts.Party > schemas.MaxParties {
		return nil, fmt.Errorf("%w: party %d not in 1..%d", ErrSource, opts.Party, schemas.MaxParties)
	}
	if opts.Prefetch <= 0 {
		opts.Prefetch = DefaultPrefetch
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: filters(l.src.Run, opts)}
	switch {
	case opts.From > 0:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, opts.From
	case !opts.Since.IsZero():
		t := opts.Since
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &t
	}
	si, err := l.st.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("replay: stream info: %w", err)
	}
	r := &Reader{decoder: decoder{last: si.State.LastSeq, raw: opts.Raw, codec: schemas.NewCodec(), run: l.src.Run}}
	r.msgs = [...]schemas.Message{nil, &schemas.Hello{}, &schemas.PartyOutput{}, &schemas.Reply{}, &schemas.EvalOutput{}, &schemas.Control{}}
	if si.State.Msgs == 0 || (opts.From > 0 && opts.From > r.last) {
		r.done = true
		return r, nil
	}
	if l.src.Direct {
		r.direct, r.st, r.seq, r.since = true, l.st, max(opts.From, si.State.FirstSeq, 1), opts.Since
		if fs := cfg.FilterSubjects; len(fs) > 0 {
			r.keep = func(s string) bool {
				for _, f := range fs {
					if subjectMatches(f, s) {
						return true
					}
				}
				return false
			}
		}
		return r, nil
	}
	if r.cons, err = l.st.OrderedConsumer(ctx, cfg); err != nil {
		return nil, fmt.Errorf("replay: ordered consumer: %w", err)
	}
	r.prefetch = opts.Prefetch
	return r, nil
}

// start begins the pull (Next) delivery.
func (r *Reader) start(ctx context.Context) error {
	var err error
	if r.it, err = r.cons.Messages(jetstream.PullMaxMessages(r.prefetch)); err != nil {
		return fmt.Errorf("replay: ordered consumer: %w", err)
	}
	empty, err := r.empty(ctx)
	if err != nil {
		r.it.Stop()
		return err
	}
	r.done = empty
	it := r.it
	r.stop = context.AfterFunc(ctx, it.Stop)
	return nil
}

// empty reports whether the consumer (started) has nothing to deliver:
// no message pending and none delivered. (Deliveries already under way
// end the read themselves: the last one has no message pending after it.)
func (r *Reader) empty(ctx context.Context) (bool, error) {
	ci, err := r.cons.Info(ctx)
	if err != nil {
		return false, fmt.Errorf("replay: ordered consumer: %w", err)
	}
	return ci.NumPending == 0 && ci.Delivered.Consumer == 0, nil
}

// filters are the subjects a read with opts covers (nil: the whole run).
func filters(run string, opts ReadOptions) []string {
	kinds := opts.Kinds
	if len(kinds) == 0 && opts.Party == 0 {
		return nil
	}
	if len(kinds) == 0 {
		kinds = []schemas.Kind{schemas.KindHello, schemas.KindOutput, schemas.KindReply, schemas.KindEval, schemas.KindControl}
	}
	var fs []string
	for _, k := range kinds {
		var f string
		if opts.Party > 0 {
			f = schemas.Subject(run, k, opts.Party)
		} else {
			f = schemas.Filter(run, k)
		}
		if !slices.Contains(fs, f) {
			fs = append(fs, f)
		}
	}
	return fs
}

// Count is the number of records Next has returned.
func (r *Reader) Count() uint64 { return r.count }

// Next returns the next record, or io.EOF after the last one. The record
// is valid until the next call.
func (r *Reader) Next(ctx context.Context) (*Record, error) {
	if r.done || r.closed {
		return nil, io.EOF
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if r.direct {
		return r.nextDirect(ctx)
	}
	if r.it == nil {
		if err := r.start(ctx); err != nil {
			return nil, err
		}
		if r.done {
			return nil, io.EOF
		}
	}
	m, err := r.it.Next()
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return nil, cerr
		}
		if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
			return nil, io.EOF
		}
		return nil, fmt.Errorf("replay: reading the stream: %w", err)
	}
	return r.record(m)
}

// nextDirect gets the next stored message of the filter by its
// sequence number.
func (r *Reader) nextDirect(ctx context.Context) (*Record, error) {
	for r.seq <= r.last {
		seq := r.seq
		r.seq++
		m, err := r.st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // removed: the audit sees the hole in the sequence
		}
		if err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return nil, cerr
			}
			return nil, fmt.Errorf("replay: getting message %d: %w", seq, err)
		}
		if (r.keep != nil && !r.keep(m.Subject)) || (!r.since.IsZero() && m.Time.Before(r.since)) {
			continue
		}
		if seq >= r.last {
			r.done = true
		}
		return r.decode(m.Sequence, m.Time.UnixNano(), m.Subject, m.Header, m.Data)
	}
	r.done = true
	return nil, io.EOF
}

// subjectMatches reports whether subject s matches filter f (tokens, with
// '*' for one and '>' for the rest).
func subjectMatches(f, s string) bool {
	ft, st := strings.Split(f, "."), strings.Split(s, ".")
	for i, t := range ft {
		switch {
		case t == ">":
			return len(st) > i
		case i >= len(st):
			return false
		case t != "*" && t != st[i]:
			return false
		}
	}
	return len(ft) == len(st)
}

// record decodes the delivered message m into the decoder's Record.
func (r *decoder) record(m jetstream.Msg) (*Record, error) {
	seq, ts, pending, ok := ackMeta(m.Reply())
	if !ok {
		md, err := m.Metadata()
		if err != nil {
			return nil, fmt.Errorf("replay: message metadata: %w", err)
		}
		seq, ts, pending = md.Sequence.Stream, md.Timestamp.UnixNano(), md.NumPending
	}
	if pending == 0 || seq >= r.last {
		r.done = true
	}
	return r.decode(seq, ts, m.Subject(), m.Headers(), m.Data())
}

// decode fills the decoder's Record from a stored message.
func (r *decoder) decode(seq uint64, ts int64, subject string, header nats.Header, data []byte) (*Record, error) {
	rec := &r.rec
	*rec = Record{Seq: seq, Time: time.Unix(0, ts), Subject: subject, Header: header, Data: data}
	r.count++
	kind, party, err := schemas.ParseSubject(r.run, rec.Subject)
	if err != nil {
		if m, ok := receiptParty(r.run, rec.Subject); ok {
			rec.Receipt, rec.Party, rec.Sender = true, m, m
			return rec, nil
		}
		rec.Err = err
		return rec, nil
	}
	rec.Kind, rec.Party = kind, party
	if kind == schemas.KindHello || kind == schemas.KindOutput || kind == schemas.KindEval {
		rec.Sender = party
	}
	if r.raw {
		return rec, nil
	}
	msg := r.msgs[kind]
	if err := r.codec.Unmarshal(rec.Data, msg); err != nil {
		rec.Err = err
		return rec, nil
	}
	rec.Msg = msg
	return rec, nil
}

// All iterates over the records until the end of the log; it stops at
// the first error, which it yields.
func (r *Reader) All(ctx context.Context) func(yield func(*Record, error) bool) {
	return func(yield func(*Record, error) bool) {
		for {
			rec, err := r.Next(ctx)
			if err == io.EOF {
				return
			}
			if !yield(rec, err) || err != nil {
				return
			}
		}
	}
}

// Close stops the reader and deletes its (ephemeral, in-memory) consumer.
// Idempotent.
func (r *Reader) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	if r.stop != nil {
		r.stop()
	}
	if r.it != nil {
		r.it.Stop()
	}
	return nil
}

// Each reads the log with opts and calls fn for every record until the end,
// fn's first error or ctx's end. fn runs on the consumer's goroutine, one
// record at a time, in stream order (a push consumer: faster than Next).
func (l *Log) Each(ctx context.Context, opts ReadOptions, fn func(*Record) error) error {
	r, err := l.Read(ctx, opts)
	if err != nil {
		return err
	}
	defer r.Close()
	if r.done {
		return nil
	}
	if r.direct {
		for {
			rec, err := r.Next(ctx)
			if err == io.EOF {
				return nil
			}
			if err == nil {
				err = fn(rec)
			}
			if err != nil {
				return err
			}
		}
	}
	finished := make(chan error, 1)
	finish := func(err error) {
		select {
		case finished <- err:
		default:
		}
	}
	var stopped bool
	cc, err := r.cons.Consume(func(m jetstream.Msg) {
		if stopped {
			return
		}
		rec, err := r.record(m)
		if err == nil {
			err = fn(rec)
		}
		if err != nil || r.done {
			stopped = true
			finish(err)
		}
	}, jetstream.PullMaxMessages(r.prefetch), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if errors.Is(err, jetstream.ErrNoHeartbeat) || errors.Is(err, nats.ErrConnectionClosed) {
			finish(fmt.Errorf("replay: reading the stream: %w", err))
		}
	}))
	if err != nil {
		return fmt.Errorf("replay: ordered consumer: %w", err)
	}
	empty, err := r.empty(ctx)
	if err != nil || empty {
		cc.Stop()
		<-cc.Closed()
		return err
	}
	select {
	case err = <-finished:
	case <-ctx.Done():
		err = ctx.Err()
	}
	cc.Stop()
	<-cc.Closed()
	return err
}

// ackMeta reads the stream sequence, timestamp and pending count from a
// JetStream ack subject without allocating: "$JS.ACK.<stream>.<consumer>.
// <delivered>.<sseq>.<cseq>.<ts>.<pending>" (9 tokens) or the form with a
// domain and account hash before the stream and a random token after
// (12 tokens). ok is false for anything else (the caller then asks
// nats.go).
func ackMeta(reply string) (seq uint64, ts int64, pending uint64, ok bool) {
	var toks [12]string
	n := 0
	for n < len(toks) {
		i := strings.IndexByte(reply, '.')
		if i < 0 {
			toks[n] = reply
			n++
			reply = ""
			break
		}
		toks[n], reply = reply[:i], reply[i+1:]
		n++
	}
	if reply != "" || toks[0] != "$JS" || toks[1] != "ACK" {
		return 0, 0, 0, false
	}
	var base int
	switch n {
	case 9:
		base = 5
	case 11, 12:
		base = 7
	default:
		return 0, 0, 0, false
	}
	var err1, err2, err3 error
	seq, err1 = strconv.ParseUint(toks[base], 10, 64)
	var t uint64
	t, err2 = strconv.ParseUint(toks[base+2], 10, 64)
	pending, err3 = strconv.ParseUint(toks[base+3], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || t > 1<<62 {
		return 0, 0, 0, false
	}
	return seq, int64(t), pending, true
}

// receiptParty is m for party m's receipt subject asyrevel.<run>.rcpt.m.
func receiptParty(run, subject string) (int, bool) {
	rest, ok := strings.CutPrefix(subject, "asyrevel."+run+".rcpt.")
	if !ok {
		return 0, false
	}
	m, err := strconv.Atoi(rest)
	if err != nil || m < 1 || m > schemas.MaxParties || strconv.Itoa(m) != rest {
		return 0, false
	}
	return m, true
}
