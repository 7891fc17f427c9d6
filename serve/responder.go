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
	local model.Local
	close func() error
	index map[string]uint32
	ver   *verifier
	k     int

	// Handler state: one request at a time.
	last uint64
	rows []uint32
	out  []float64
	buf  []byte

	requests, ids, unknown, refused atomic.Int64
	mu                              sync.Mutex
	rejected                        map[string]int64
	rejLog                          *ratelog.Limiter
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
	ver, err := newVerifier(cfg.Roster, 0)
	if err != nil {
		return nil, err
	}
	local, closeFn, err := f.Local(ctx)
	if err != nil {
		return nil, err
	}
	return &Responder{cfg: cfg, run: run, local: local, close: closeFn, index: index, ver: ver, k: f.Out,
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
	sub, err := bus.Subscribe(ctx, []string{RequestSubject(r.run)}, broker.SubscribeOptions{Deliver: broker.DeliverNew},
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
	return ResponderStats{Requests: r.requests.Load(), IDs: r.ids.Load(), Unknown: r.unknown.Load(), Refused: r.refused.Load(), Rejected: rej}
}

func (r *Responder) reject(reason string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rejected[reason]++
	r.rejLog.Warn(r.cfg.Log, reason).Int("party", r.cfg.Model.Party).Err(err).Msg("scoring request rejected")
}

func (r *Responder) handle(ctx context.Context, bus broker.Bus, d broker.Delivery) {
	data := d.Data()
	if err := r.ver.check(d.Header(SigHeader), r.run, d.Subject(), data); err != nil {
		r.reject("signature", err)
		return
	}
	var req Request
	if err := unmarshal(data, &req); err != nil {
		r.reject("malformed", err)
		return
	}
	if err := req.Check(); err != nil {
		r.reject("invalid", err)
		return
	}
	if req.Req <= r.last {
		r.reject("replay", fmt.Errorf("%w: request %d after %d", ErrMessage, req.Req, r.last))
		return
	}
	r.last = req.Req
	m := r.cfg.Model.Party
	ans := Answer{V: WireVersion, Req: req.Req, Party: m, K: r.k}
	r.rows = r.rows[:0]
	for _, id := range req.IDs {
		i, ok := r.index[id]
		switch {
		case !ok:
			ans.Unknown = append(ans.Unknown, id)
		case r.cfg.Allowed != nil && !r.cfg.Allowed[id]:
			ans.Refused = append(ans.Refused, id)
		}
		r.rows = append(r.rows, i)
	}
	switch {
	case len(ans.Refused) > 0:
		r.refused.Add(1)
	case len(ans.Unknown) > 0:
		r.unknown.Add(1)
	default:
		n := len(r.rows) * r.k
		if cap(r.out) < n {
			r.out = make([]float64, n)
		}
		out := r.out[:n]
		r.local.Forward(r.cfg.Model.Params, r.cfg.Rows.X, r.rows, out)
		if ext, ok := r.local.(*model.External); ok && ext.Err() != nil {
			ans.Err = fmt.Sprintf("party %d's external model failed: %v", m, ext.Err())
		} else {
			r.buf = appendFloats(r.buf[:0], out)
			ans.C = r.buf
			r.requests.Add(1)
			r.ids.Add(int64(len(r.rows)))
		}
	}
	payload, err := marshal(&ans)
	if err != nil {
		r.cfg.Log.Error().Err(err).Msg("encoding a scoring answer")
		return
	}
	subj := AnswerSubject(r.run, m)
	msg := broker.Message{Subject: subj, Data: payload}
	if r.cfg.Key != nil {
		msg.Header = map[string]string{SigHeader: sign(r.cfg.Key, r.run, subj, payload)}
	}
	if err := bus.Publish(ctx, &msg); err != nil && !errors.Is(err, context.Canceled) {
		r.cfg.Log.Warn().Err(err).Int("party", m).Msg("publishing a scoring answer")
	}
}
