package serve

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/internal/ratelog"
	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/trust"
)

// ResponderConfig configures a party in serving mode.
type ResponderConfig struct {
	// Run is the run id of the subjects (default: the model's).
	Run string
	// Model is the party's model file; Rows its rows, prepared by
	// ReadParty (or ReadAll).
	Model *File
	Rows  *Rows
	// Key signs the answers; Roster verifies the requests (the
	// aggregator's signature). Both nil: no signatures.
	Key    *trust.Key
	Roster *trust.Roster
	// Allowed, if not nil, lists the only ids the party scores; a request
	// with another id is refused (the answer names it).
	Allowed map[string]bool
	Log     zerolog.Logger
}

// ResponderStats counts what a Responder did.
type ResponderStats struct {
	Requests int64            // requests answered with outputs
	IDs      int64            // ids scored
	Unknown  int64            // requests naming an id the party lacks
	Refused  int64            // requests naming an id outside the allowed list
	Rejected map[string]int64 // malformed, forged or replayed requests, by reason
}

// Responder is a party in serving mode: it finds its rows by id (an index
// built at start) and answers the aggregator's scoring requests with its
// model's outputs. It never sees a prediction or a label.
type Responder struct {
	cfg   ResponderConfig
	run   string
	subj  string // its answer subject
	local model.Local
	close func() error
	index map[string]uint32
	in    *chainIn // the aggregator's request chain (nil without keys)
	k     int

	// Handler state: one request at a time.
	hmu    sync.Mutex
	out    *chainOut // its answer chain (nil without keys); made at the first Subscribe
	last   uint64
	seq    uint64 // answers sent (without keys)
	ids    [][]byte
	rows   []uint32
	outs   []float64
	ans    schemas.ScoreAnswer
	buf    []byte
	msg    broker.Message
	unsent bool // msg was chained but not published: send it first

	requests, nids, unknown, refused atomic.Int64
	mu                               sync.Mutex
	rejected                         map[string]int64
	rejLog                           *ratelog.Limiter
}

// NewResponder indexes the rows by id and builds the party's model (an
// external model's program is started: Close stops it).
func NewResponder(ctx context.Context, cfg ResponderConfig) (*Responder, error) {
	f := cfg.Model
	if f == nil || cfg.Rows == nil {
		return nil, fmt.Errorf("%w: a responder needs a model and rows", ErrMismatch)
	}
	if f.Role != RoleParty {
		return nil, fmt.Errorf("%w: %s is not a party's model", ErrMismatch, FileName(f.Party))
	}
	if cfg.Rows.X.NCols != f.In {
		return nil, fmt.Errorf("%w: rows of %d columns, the model takes %d", ErrData, cfg.Rows.X.NCols, f.In)
	}
	run := cfg.Run
	if run == "" {
		run = f.Run
	}
	if cfg.Roster != nil {
		if err := f.CheckSigner(cfg.Roster); err != nil {
			return nil, err
		}
	}
	index, err := Index(cfg.Rows.IDs)
	if err != nil {
		return nil, err
	}
	if (cfg.Key == nil) != (cfg.Roster == nil) {
		return nil, fmt.Errorf("%w: a responder needs both a key and the roster, or neither", ErrSignature)
	}
	in, err := newChainIn(cfg.Roster, schemas.ScoreSubject(run))
	if err != nil {
		return nil, err
	}
	local, closeFn, err := f.Local(ctx)
	if err != nil {
		return nil, err
	}
	return &Responder{cfg: cfg, run: run, subj: schemas.ScoredSubject(run, f.Party), local: local, close: closeFn, index: index, in: in, k: f.Out,
		rejected: map[string]int64{}, rejLog: ratelog.NewRejections()}, nil
}

// Index maps each id to its row; a repeated id is an error.
func Index(ids []string) (map[string]uint32, error) {
	index := make(map[string]uint32, len(ids))
	for i, id := range ids {
		if _, dup := index[id]; dup {
			return nil, fmt.Errorf("%w: id %q appears twice", ErrData, id)
		}
		index[id] = uint32(i)
	}
	return index, nil
}

// Close releases the model (an external model's process).
func (r *Responder) Close() error { return r.close() }

// Run answers requests on bus until ctx is done; it returns nil then.
func (r *Responder) Run(ctx context.Context, bus broker.Bus) error {
	sub, err := r.Subscribe(ctx, bus)
	if err != nil {
		return err
	}
	<-ctx.Done()
	sub.Close()
	return nil
}

// Subscribe starts answering requests on bus; Close of the subscription
// (or ctx) stops it.
func (r *Responder) Subscribe(ctx context.Context, bus broker.Bus) (broker.Subscription, error) {
	r.hmu.Lock()
	if r.out == nil && r.cfg.Key != nil {
		out, err := newChainOut(ctx, bus, r.cfg.Roster, r.cfg.Key, r.subj, r.cfg.Log)
		if err != nil {
			r.hmu.Unlock()
			return nil, fmt.Errorf("party %d: %w", r.cfg.Model.Party, err)
		}
		r.out = out
	} else if r.out == nil && r.seq == 0 {
		r.seq = timeSeq() // without keys: numbers above any earlier process's
	}
	r.hmu.Unlock()
	sub, err := bus.Subscribe(ctx, []string{schemas.ScoreSubject(r.run)}, broker.SubscribeOptions{Deliver: broker.DeliverNew},
		func(ctx context.Context, d broker.Delivery) { r.handle(ctx, bus, d) })
	if err != nil {
		return nil, fmt.Errorf("party %d: subscribing to scoring requests: %w", r.cfg.Model.Party, err)
	}
	return sub, nil
}

// Stats returns a snapshot of the counters.
func (r *Responder) Stats() ResponderStats {
	r.mu.Lock()
	rej := make(map[string]int64, len(r.rejected))
	for k, v := range r.rejected {
		rej[k] = v
	}
	r.mu.Unlock()
	return ResponderStats{Requests: r.requests.Load(), IDs: r.nids.Load(), Unknown: r.unknown.Load(), Refused: r.refused.Load(), Rejected: rej}
}

func (r *Responder) reject(reason string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rejected[reason]++
	r.rejLog.Warn(r.cfg.Log, reason).Int("party", r.cfg.Model.Party).Err(err).Msg("scoring request rejected")
}

func (r *Responder) handle(ctx context.Context, bus broker.Bus, d broker.Delivery) {
	r.hmu.Lock()
	defer r.hmu.Unlock()
	if r.unsent && !r.resend(ctx, bus) {
		return
	}
	data := d.Data()
	v, seq, ids, err := schemas.DecodeScoreRequest(data, r.ids)
	r.ids = ids[:0]
	if err != nil {
		r.reject("malformed", err)
		return
	}
	signed, err := r.in.check(d, seq)
	if err != nil {
		r.reject("trust-"+trust.Reason(err), err)
		return
	}
	req := schemas.ScoreRequest{V: v, Seq: seq}
	if err := req.Check(); err != nil {
		r.reject("invalid", err)
		return
	}
	if r.in == nil && seq <= r.last {
		// Without keys the numbers still increase (with keys the chain
		// rejects a replay).
		r.reject("replay", fmt.Errorf("%w: request %d after %d", schemas.ErrScore, seq, r.last))
		return
	}
	for _, id := range ids {
		if len(id) == 0 || len(id) > schemas.MaxScoreIDLen {
			r.reject("invalid", fmt.Errorf("%w: an id of %d bytes (1..%d)", schemas.ErrScore, len(id), schemas.MaxScoreIDLen))
			return
		}
	}
	r.last = seq
	m := r.cfg.Model.Party
	a := &r.ans
	*a = schemas.ScoreAnswer{V: schemas.ScoreVersion, Party: m, Req: seq, K: r.k, Unknown: a.Unknown[:0], Refused: a.Refused[:0]}
	r.rows = r.rows[:0]
	for _, id := range ids {
		i, ok := r.index[string(id)]
		switch {
		case !ok:
			a.Unknown = append(a.Unknown, string(id))
		case r.cfg.Allowed != nil && !r.cfg.Allowed[string(id)]:
			a.Refused = append(a.Refused, string(id))
		}
		r.rows = append(r.rows, i)
	}
	switch {
	case len(a.Refused) > 0:
		r.refused.Add(1)
	case len(a.Unknown) > 0:
		r.unknown.Add(1)
	case len(ids) == 0: // a seal: no outputs
	default:
		n := len(r.rows) * r.k
		if cap(r.outs) < n {
			r.outs = make([]float64, n)
		}
		out := r.outs[:n]
		r.local.Forward(r.cfg.Model.Params, r.cfg.Rows.X, r.rows, out)
		if ext, ok := r.local.(*model.External); ok && ext.Err() != nil {
			a.Err = fmt.Sprintf("party %d's external model failed: %v", m, ext.Err())
		} else {
			r.buf = schemas.AppendScoreOutputs(r.buf[:0], out)
			a.C = r.buf
			r.requests.Add(1)
			r.nids.Add(int64(len(r.rows)))
		}
	}
	// The answer's own number, then its chain link (the chain covers the
	// payload, number included): a signed request, or a seal, gets a
	// signed answer.
	if r.out != nil {
		a.Seq = r.out.next()
	} else {
		r.seq++
		a.Seq = r.seq
	}
	payload := schemas.AppendScoreAnswer(r.msg.Data[:0], a)
	r.msg = broker.Message{Subject: r.subj, Data: payload}
	if r.out != nil {
		r.msg.Header, _ = r.out.stamp(payload, signed || len(ids) == 0)
	}
	r.unsent = true
	r.resend(ctx, bus)
}

// resend publishes the chained answer in r.msg; false if it failed (it is
// sent again before the next answer: a chained message must not be lost,
// or its receivers and the log see a gap).
func (r *Responder) resend(ctx context.Context, bus broker.Bus) bool {
	if err := bus.Publish(ctx, &r.msg); err != nil {
		if !errors.Is(err, context.Canceled) {
			r.cfg.Log.Warn().Err(err).Int("party", r.cfg.Model.Party).Msg("publishing a scoring answer")
		}
		return false
	}
	r.unsent = false
	return true
}
