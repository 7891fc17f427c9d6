package serve

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/internal/ratelog"
	"github.com/asyrevel/asyrevel/model"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/trust"
)

// Errors of Score; the HTTP service maps them to status codes.
var (
	// ErrUnknownID: a party lacks an id (404).
	ErrUnknownID = errors.New("serve: unknown id")
	// ErrRefused: a party refuses an id outside its allowed list (403).
	ErrRefused = errors.New("serve: id refused")
	// ErrPartyDown: a party did not answer in time (503).
	ErrPartyDown = errors.New("serve: party not answering")
	// ErrPartyFailed: a party answered that it could not score (502).
	ErrPartyFailed = errors.New("serve: party failed")
)

// DefaultTimeout bounds a scoring request's wait for the parties: serve's
// default, where a caller waits on each answer.
const DefaultTimeout = 2 * time.Second

// DefaultBatchTimeout is predict's: one request of a batch (Chunk ids, with
// Window others in flight) that outlasts its timeout fails the whole
// batch, and on a busy host a party may take seconds to score a chunk;
// nobody waits on a single answer, so a late one costs nothing.
const DefaultBatchTimeout = 30 * time.Second

// ScorerConfig configures the aggregator's side of scoring.
type ScorerConfig struct {
	// Run is the run id of the subjects (default: the model's).
	Run string
	// Model is the aggregator's model file.
	Model *File
	// Key signs the requests; Roster verifies the answers. Both nil: no
	// signatures.
	Key    *trust.Key
	Roster *trust.Roster
	// Timeout bounds each request's wait for every party's answer
	// (default DefaultTimeout).
	Timeout time.Duration
	// NoBatch sends every Score call as a request of its own.
	NoBatch bool
	// SealIdle is how long the request chain may sit with unsigned
	// messages before it is sealed (default SealIdle; negative: never,
	// for tests that count the requests sent).
	SealIdle time.Duration
	Log      zerolog.Logger
}

// Prediction is the combined prediction for one id: the class index, and
// the probability of each class.
type Prediction struct {
	Class int32
	Probs []float64
}

// ScorerStats counts what a Scorer did.
type ScorerStats struct {
	Requests int64            // requests sent
	Answered int64            // requests every party answered
	IDs      int64            // ids scored
	Timeouts int64            // requests a party did not answer in time
	Late     int64            // answers after their request's end
	Rejected map[string]int64 // malformed or forged answers, by reason
}

// Scorer is the aggregator's side of scoring: it sends the ids to every
// party and combines their outputs with its head. It never sees a feature.
// Safe for concurrent use.
type Scorer struct {
	cfg  ScorerConfig
	run  string
	subj string // the request subject
	q, k int
	head model.Head
	ins  []*chainIn // by party, 1..q: their answer chains (nil without keys)
	bus  broker.Bus
	subs []broker.Subscription

	mu       sync.Mutex // the request chain: numbering, stamping and publishing in order
	out      *chainOut  // the request chain (nil without keys)
	next     uint64     // without keys: the last request number
	seal     bool       // sign the next request (a party did not answer the last)
	unsent   *broker.Message
	buf      []byte
	pending  map[uint64]*call
	stats    ScorerStats
	rejLog   *ratelog.Limiter
	headPool sync.Pool
	isCode   func(float64) bool // a head over codes: what the parties may answer
	lastSend time.Time
	stop     chan struct{}
	stopped  chan struct{}
	closing  bool // Close has sealed (or found nothing to seal)

	bmu      sync.Mutex // batching of Score calls
	waiting  []*scoreCall
	inflight int
}

// call is one request in flight.
type call struct {
	ids     []string
	c       []float64 // n x q*k
	got     []bool    // by party, 1..q
	left    int
	unknown map[int][]string
	refused map[int][]string
	failed  map[int]string
	done    chan struct{}
}

// NewScorer builds the aggregator's side of scoring from its model file.
func NewScorer(cfg ScorerConfig) (*Scorer, error) {
	f := cfg.Model
	if f == nil || f.Role != RoleAggregator {
		return nil, fmt.Errorf("%w: a scorer needs the aggregator's model", ErrMismatch)
	}
	if cfg.Roster != nil {
		if err := f.CheckSigner(cfg.Roster); err != nil {
			return nil, err
		}
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	run := cfg.Run
	if run == "" {
		run = f.Run
	}
	head, err := f.Head()
	if err != nil {
		return nil, err
	}
	if (cfg.Key == nil) != (cfg.Roster == nil) {
		return nil, fmt.Errorf("%w: a scorer needs both a key and the roster, or neither", ErrSignature)
	}
	s := &Scorer{cfg: cfg, run: run, subj: schemas.ScoreSubject(run), q: f.Parties, k: f.K, head: head, pending: map[uint64]*call{},
		next: timeSeq(), rejLog: ratelog.NewRejections()}
	s.stats.Rejected = map[string]int64{}
	s.ins = make([]*chainIn, s.q+1)
	for m := 1; m <= s.q; m++ {
		if s.ins[m], err = newChainIn(cfg.Roster, schemas.ScoredSubject(run, m)); err != nil {
			return nil, err
		}
	}
	s.headPool.New = func() any { h, _ := f.Head(); return h }
	if c, ok := head.(interface{ IsCode(float64) bool }); ok {
		s.isCode = c.IsCode
	}
	return s, nil
}

// Start listens for the parties' answers on bus, one subscription a party
// so that their chains are checked in parallel. Close stops.
func (s *Scorer) Start(ctx context.Context, bus broker.Bus) error {
	if s.cfg.Key != nil {
		out, err := newChainOut(ctx, bus, s.cfg.Roster, s.cfg.Key, s.subj, s.cfg.Log)
		if err != nil {
			return fmt.Errorf("aggregator: %w", err)
		}
		s.out = out
	}
	for m := 1; m <= s.q; m++ {
		sub, err := bus.Subscribe(ctx, []string{schemas.ScoredSubject(s.run, m)}, broker.SubscribeOptions{Deliver: broker.DeliverNew}, s.handle)
		if err != nil {
			s.Close()
			return fmt.Errorf("aggregator: subscribing to party %d's scoring answers: %w", m, err)
		}
		s.subs = append(s.subs, sub)
	}
	s.mu.Lock()
	s.bus = bus
	s.mu.Unlock()
	if s.out != nil && s.cfg.SealIdle >= 0 {
		s.stop, s.stopped = make(chan struct{}), make(chan struct{})
		go s.sealIdle(ctx)
	}
	return nil
}

// SealIdle is how long the request chain may sit with unsigned messages
// before the Scorer seals it (and with it the parties' answer chains),
// unless ScorerConfig.SealIdle says otherwise.
const SealIdle = 500 * time.Millisecond

// sealIdle seals the chains when scoring falls idle.
func (s *Scorer) sealIdle(ctx context.Context) {
	defer close(s.stopped)
	every := SealIdle
	if s.cfg.SealIdle > 0 {
		every = s.cfg.SealIdle
	}
	t := time.NewTicker(every / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.stop:
			return
		case <-t.C:
		}
		s.mu.Lock()
		idle := time.Since(s.lastSend) >= every && s.out.pub.Unsigned() > 0
		s.mu.Unlock()
		if idle {
			s.Seal(ctx)
		}
	}
}

// Seal sends a request without ids, signed, which every party answers
// signed: the request chain and the answer chains end sealed (an auditor
// finds no unsigned tail). Without keys it does nothing.
func (s *Scorer) Seal(ctx context.Context) error {
	if s.out == nil {
		return nil
	}
	_, err := s.outputs(ctx, nil, true, s.cfg.Timeout)
	return err
}

// Close seals the chains (if they hold unsigned messages; bounded by the
// timeout) and stops listening.
func (s *Scorer) Close() error {
	if s.stop != nil {
		close(s.stop)
		<-s.stopped
		s.stop = nil
	}
	if s.out != nil && !s.closing {
		s.closing = true
		s.mu.Lock()
		open := s.bus != nil && s.out.pub.Unsigned() > 0
		s.mu.Unlock()
		if open {
			s.Seal(context.Background())
		}
	}
	var err error
	for _, sub := range s.subs {
		err = errors.Join(err, sub.Close())
	}
	s.subs = nil
	return err
}

// timeSeq is a number above any a process of this run can have used
// before: the first request number without keys.
func timeSeq() uint64 { return uint64(time.Now().UnixNano()) }

// Parties is q, Classes the number of classes.
func (s *Scorer) Parties() int { return s.q }

// Classes is the number of classes the head predicts.
func (s *Scorer) Classes() int { return s.cfg.Model.Out }

// Stats returns a snapshot of the counters.
func (s *Scorer) Stats() ScorerStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Rejected = make(map[string]int64, len(s.stats.Rejected))
	for k, v := range s.stats.Rejected {
		st.Rejected[k] = v
	}
	return st
}

// Outputs asks every party for its outputs on ids and returns them side by
// side: row i holds party 1's k outputs, then party 2's, ... (the head's
// input). It waits at most the configured timeout (or ctx).
func (s *Scorer) Outputs(ctx context.Context, ids []string) ([]float64, error) {
	if len(ids) == 0 || len(ids) > schemas.MaxScoreIDs {
		return nil, fmt.Errorf("%w: %d ids (1..%d)", schemas.ErrScore, len(ids), schemas.MaxScoreIDs)
	}
	for _, id := range ids {
		if len(id) == 0 || len(id) > schemas.MaxScoreIDLen {
			return nil, fmt.Errorf("%w: an id of %d bytes (1..%d)", schemas.ErrScore, len(id), schemas.MaxScoreIDLen)
		}
	}
	return s.outputs(ctx, ids, false, s.cfg.Timeout)
}

// send numbers, chains and publishes a request for ids (under s.mu: the
// parties accept numbers in order only) and registers c under its number.
func (s *Scorer) send(ctx context.Context, ids []string, c *call, seal bool) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bus == nil {
		return 0, errors.New("serve: scorer not started")
	}
	if s.unsent != nil {
		// A chained request that was not published goes first: the
		// parties and the log must not see a gap.
		if err := s.bus.Publish(ctx, s.unsent); err != nil {
			return 0, fmt.Errorf("publishing a scoring request: %w", err)
		}
		s.unsent = nil
	}
	var req uint64
	if s.out != nil {
		req = s.out.next()
	} else {
		s.next++
		req = s.next
	}
	s.buf = schemas.AppendScoreRequest(s.buf[:0], req, ids)
	msg := broker.Message{Subject: s.subj, Data: s.buf}
	if s.out != nil {
		msg.Header, _ = s.out.stamp(s.buf, seal || s.seal)
		s.seal = false
	}
	s.pending[req] = c
	s.stats.Requests++
	s.lastSend = time.Now()
	if err := s.bus.Publish(ctx, &msg); err != nil {
		delete(s.pending, req)
		if s.out != nil {
			m := msg
			m.Data = slices.Clone(msg.Data)
			m.Header = maps.Clone(msg.Header)
			s.unsent = &m
		}
		return 0, fmt.Errorf("publishing a scoring request: %w", err)
	}
	return req, nil
}

// outputs sends a request for ids (seal: signed, answered signed) and
// waits up to timeout for every party's answer.
func (s *Scorer) outputs(ctx context.Context, ids []string, seal bool, timeout time.Duration) ([]float64, error) {
	c := &call{ids: ids, c: make([]float64, len(ids)*s.q*s.k), got: make([]bool, s.q+1), left: s.q, done: make(chan struct{})}
	req, err := s.send(ctx, ids, c, seal)
	if err != nil {
		return nil, err
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-c.done:
	case <-timer.C:
	case <-ctx.Done():
	}
	s.mu.Lock()
	delete(s.pending, req)
	left := c.left
	if left > 0 && (len(c.unknown) > 0 || len(c.refused) > 0) {
		left = 0 // what a party said settles it: its id is unknown or refused
	}
	var silent []string
	if left > 0 {
		s.stats.Timeouts++
		s.seal = true // a party that was away resumes at a signed request
		for m := 1; m <= s.q; m++ {
			if !c.got[m] {
				silent = append(silent, trust.PartyID(m))
			}
		}
	}
	s.mu.Unlock()
	if left > 0 {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: %s did not answer within %v", ErrPartyDown, strings.Join(silent, ", "), timeout)
	}
	if err := c.err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.stats.Answered++
	s.stats.IDs += int64(len(ids))
	s.mu.Unlock()
	return c.c, nil
}

// err is the first problem the parties reported, naming the organisation.
func (c *call) err() error {
	name := func(m int, ids []string) string {
		if len(ids) > 5 {
			return fmt.Sprintf("%s lacks %d of the ids, first %q", trust.PartyID(m), len(ids), ids[:5])
		}
		return fmt.Sprintf("%s lacks %q", trust.PartyID(m), ids)
	}
	if len(c.refused) > 0 {
		var why []string
		for _, m := range sortedKeys(c.refused) {
			why = append(why, fmt.Sprintf("%s refuses %q (not in its allowed list)", trust.PartyID(m), head(c.refused[m])))
		}
		return fmt.Errorf("%w: %s", ErrRefused, strings.Join(why, "; "))
	}
	if len(c.unknown) > 0 {
		var why []string
		for _, m := range sortedKeys(c.unknown) {
			why = append(why, name(m, c.unknown[m]))
		}
		return fmt.Errorf("%w: %s", ErrUnknownID, strings.Join(why, "; "))
	}
	if len(c.failed) > 0 {
		var why []string
		for _, m := range sortedKeys(c.failed) {
			why = append(why, c.failed[m])
		}
		return fmt.Errorf("%w: %s", ErrPartyFailed, strings.Join(why, "; "))
	}
	return nil
}

func head(ids []string) []string { return ids[:min(len(ids), 5)] }

func sortedKeys[V any](m map[int]V) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func (s *Scorer) rejectLocked(reason string, m int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reject(reason, m, err)
}

func (s *Scorer) reject(reason string, m int, err error) {
	s.stats.Rejected[reason]++
	s.rejLog.Warn(s.cfg.Log, strconv.Itoa(m)+reason).Int("party", m).Err(err).Msg("scoring answer rejected")
}

func (s *Scorer) handle(_ context.Context, d broker.Delivery) {
	subj := d.Subject()
	m, err := strconv.Atoi(subj[strings.LastIndexByte(subj, '.')+1:])
	if err != nil || m < 1 || m > s.q {
		s.rejectLocked("subject", 0, fmt.Errorf("%w: subject %s", schemas.ErrScore, subj))
		return
	}
	// Decoded and checked outside the lock: the requests being sent
	// need it.
	var a schemas.ScoreAnswer
	if err := schemas.DecodeScoreAnswer(d.Data(), &a); err != nil {
		s.rejectLocked("malformed", m, err)
		return
	}
	if _, err := s.ins[m].check(d, a.Seq); err != nil {
		s.rejectLocked("trust-"+trust.Reason(err), m, err)
		return
	}
	if a.V != schemas.ScoreVersion || a.Party != m {
		s.rejectLocked("invalid", m, fmt.Errorf("%w: version %d, party %d on party %d's subject", schemas.ErrScore, a.V, a.Party, m))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.pending[a.Req]
	if c == nil {
		s.stats.Late++
		return
	}
	if c.got[m] {
		s.reject("duplicate", m, fmt.Errorf("%w: a second answer of party %d to request %d", schemas.ErrScore, m, a.Req))
		return
	}
	switch {
	case len(a.Refused) > 0:
		if c.refused == nil {
			c.refused = map[int][]string{}
		}
		c.refused[m] = a.Refused
	case len(a.Unknown) > 0:
		if c.unknown == nil {
			c.unknown = map[int][]string{}
		}
		c.unknown[m] = a.Unknown
	case a.Err != "":
		if c.failed == nil {
			c.failed = map[int]string{}
		}
		c.failed[m] = a.Err
	default:
		n, w, k := len(c.ids), s.q*s.k, s.k
		if a.K != k || len(a.C) != 8*n*k {
			s.reject("invalid", m, fmt.Errorf("%w: party %d answered %d bytes of outputs (k %d) for %d ids (k %d)", schemas.ErrScore, m, len(a.C), a.K, n, k))
			return
		}
		slot := (m - 1) * k
		for i := range n {
			for j := range k {
				v := math.Float64frombits(binary.LittleEndian.Uint64(a.C[8*(i*k+j):]))
				if math.IsNaN(v) || math.IsInf(v, 0) {
					s.reject("invalid", m, fmt.Errorf("%w: party %d answered a non-finite output %v", schemas.ErrScore, m, v))
					return
				}
				if s.isCode != nil && !s.isCode(v) {
					s.reject("invalid", m, fmt.Errorf("%w: party %d answered %v, not one of the head's codes", schemas.ErrScore, m, v))
					return
				}
				c.c[i*w+slot+j] = v
			}
		}
	}
	c.got[m] = true
	c.left--
	if c.left == 0 {
		close(c.done)
	}
}

// Predict combines outputs (n rows of the head's input) into predictions:
// the class the head predicts (as in training's evaluation) and each
// class's probability.
func (s *Scorer) Predict(outputs []float64, dst []Prediction) []Prediction {
	w := s.q * s.k
	n := len(outputs) / w
	h := s.headPool.Get().(model.Head)
	defer s.headPool.Put(h)
	return Combine(h, s.cfg.Model.Params, outputs, n, dst)
}

// Combine applies head h with parameters w0 to n rows of outputs.
func Combine(h model.Head, w0, outputs []float64, n int, dst []Prediction) []Prediction {
	w, classes := h.InDim(), h.Classes()
	for i := range n {
		c := outputs[i*w : (i+1)*w]
		p := Prediction{Class: h.Predict(w0, c), Probs: make([]float64, classes)}
		for j := range classes {
			// The head's loss for class j is -log p_j.
			p.Probs[j] = math.Exp(-h.Loss(w0, c, int32(j)))
		}
		dst = append(dst, p)
	}
	return dst
}

// Score asks the parties for ids and combines their outputs. A call that
// finds a request slot free sends its ids at once, from its own goroutine;
// calls that arrive while inFlight requests are out wait and are sent
// together in one request (up to MaxBatchIDs ids) when a slot frees: each
// party then checks one message and answers once for all of them. A batch
// that names an unknown or refused id is sent again call by call, so that
// only the call with that id fails.
func (s *Scorer) Score(ctx context.Context, ids []string) ([]Prediction, error) {
	if s.cfg.NoBatch {
		return s.score(ctx, ids)
	}
	r := &scoreCall{ctx: ctx, ids: ids}
	s.bmu.Lock()
	if s.inflight < inFlight {
		s.inflight++
		s.bmu.Unlock()
		preds, err := s.score(ctx, ids)
		s.done()
		return preds, err
	}
	r.done = make(chan scoreResult, 1)
	s.waiting = append(s.waiting, r)
	s.bmu.Unlock()
	select {
	case res := <-r.done:
		return res.preds, res.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (s *Scorer) score(ctx context.Context, ids []string) ([]Prediction, error) {
	out, err := s.Outputs(ctx, ids)
	if err != nil {
		return nil, err
	}
	return s.Predict(out, make([]Prediction, 0, len(ids))), nil
}

// Batching of Score calls.
const (
	MaxBatchIDs = 4096 // ids of one batched request
	inFlight    = 4    // requests in flight
)

type scoreCall struct {
	ctx  context.Context
	ids  []string
	done chan scoreResult
}

type scoreResult struct {
	preds []Prediction
	err   error
}

// done frees a request slot: the calls that waited go out together.
func (s *Scorer) done() {
	s.bmu.Lock()
	if len(s.waiting) == 0 {
		s.inflight--
		s.bmu.Unlock()
		return
	}
	n, i := 0, 0
	for i < len(s.waiting) && (i == 0 || n+len(s.waiting[i].ids) <= MaxBatchIDs) {
		n += len(s.waiting[i].ids)
		i++
	}
	calls := slices.Clone(s.waiting[:i])
	s.waiting = slices.Delete(s.waiting, 0, i)
	s.bmu.Unlock()
	go func() {
		s.sendBatch(calls)
		s.done()
	}()
}

func (s *Scorer) sendBatch(calls []*scoreCall) {
	if len(calls) == 1 {
		p, err := s.score(calls[0].ctx, calls[0].ids)
		calls[0].done <- scoreResult{p, err}
		return
	}
	var ids []string
	for _, c := range calls {
		ids = append(ids, c.ids...)
	}
	ctx := context.Background() // each caller waits on its own ctx
	preds, err := s.score(ctx, ids)
	if errors.Is(err, ErrUnknownID) || errors.Is(err, ErrRefused) {
		var wg sync.WaitGroup
		for _, c := range calls {
			wg.Go(func() {
				p, err := s.score(c.ctx, c.ids)
				c.done <- scoreResult{p, err}
			})
		}
		wg.Wait()
		return
	}
	at := 0
	for _, c := range calls {
		if err != nil {
			c.done <- scoreResult{nil, err}
			continue
		}
		c.done <- scoreResult{preds[at : at+len(c.ids) : at+len(c.ids)], nil}
		at += len(c.ids)
	}
}
