package serve

import (
	"context"
	"errors"
	"fmt"
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

// DefaultTimeout bounds a scoring request's wait for the parties.
const DefaultTimeout = 2 * time.Second

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
	Log     zerolog.Logger
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
	q, k int
	head model.Head
	vers []*verifier
	bus  broker.Bus
	subs []broker.Subscription

	mu       sync.Mutex
	next     uint64
	pending  map[uint64]*call
	stats    ScorerStats
	rejLog   *ratelog.Limiter
	headPool sync.Pool
	queue    chan *scoreCall // Score calls to batch (nil: NoBatch)
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
	s := &Scorer{cfg: cfg, run: run, q: f.Parties, k: f.K, head: head, pending: map[uint64]*call{},
		next: uint64(time.Now().UnixNano()), rejLog: ratelog.NewRejections()}
	s.stats.Rejected = map[string]int64{}
	s.vers = make([]*verifier, s.q+1)
	for m := 1; m <= s.q; m++ {
		if s.vers[m], err = newVerifier(cfg.Roster, m); err != nil {
			return nil, err
		}
	}
	s.headPool.New = func() any { h, _ := f.Head(); return h }
	return s, nil
}

// Start listens for the parties' answers on bus, one subscription a party
// so that their signatures are verified in parallel. Close stops.
func (s *Scorer) Start(ctx context.Context, bus broker.Bus) error {
	for m := 1; m <= s.q; m++ {
		sub, err := bus.Subscribe(ctx, []string{AnswerSubject(s.run, m)}, broker.SubscribeOptions{Deliver: broker.DeliverNew}, s.handle)
		if err != nil {
			s.Close()
			return fmt.Errorf("aggregator: subscribing to party %d's scoring answers: %w", m, err)
		}
		s.subs = append(s.subs, sub)
	}
	s.bus = bus
	if !s.cfg.NoBatch {
		s.queue = make(chan *scoreCall, 4096)
		go s.batch(ctx)
	}
	return nil
}

// Close stops listening.
func (s *Scorer) Close() error {
	var err error
	for _, sub := range s.subs {
		err = errors.Join(err, sub.Close())
	}
	s.subs = nil
	return err
}

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
	if len(ids) == 0 || len(ids) > MaxIDs {
		return nil, fmt.Errorf("%w: %d ids (1..%d)", ErrMessage, len(ids), MaxIDs)
	}
	for _, id := range ids {
		if len(id) == 0 || len(id) > MaxIDLen {
			return nil, fmt.Errorf("%w: an id of %d bytes (1..%d)", ErrMessage, len(id), MaxIDLen)
		}
	}
	c := &call{ids: ids, c: make([]float64, len(ids)*s.q*s.k), got: make([]bool, s.q+1), left: s.q, done: make(chan struct{})}
	subj := RequestSubject(s.run)
	// The number, the signature and the publish in one critical section:
	// the parties reject a number that does not increase.
	s.mu.Lock()
	if s.bus == nil {
		s.mu.Unlock()
		return nil, errors.New("serve: scorer not started")
	}
	s.next++
	req := s.next
	payload, err := marshal(&Request{V: WireVersion, Req: req, IDs: ids})
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	msg := broker.Message{Subject: subj, Data: payload}
	if s.cfg.Key != nil {
		msg.Header = map[string]string{SigHeader: sign(s.cfg.Key, s.run, subj, payload)}
	}
	s.pending[req] = c
	s.stats.Requests++
	err = s.bus.Publish(ctx, &msg)
	if err != nil {
		delete(s.pending, req)
	}
	s.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("publishing a scoring request: %w", err)
	}
	timer := time.NewTimer(s.cfg.Timeout)
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
		return nil, fmt.Errorf("%w: %s did not answer within %v", ErrPartyDown, strings.Join(silent, ", "), s.cfg.Timeout)
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
		s.rejectLocked("subject", 0, fmt.Errorf("%w: subject %s", ErrMessage, subj))
		return
	}
	// Verified and decoded outside the lock: the requests being sent
	// need it.
	data := d.Data()
	if err := s.vers[m].check(d.Header(SigHeader), s.run, subj, data); err != nil {
		s.rejectLocked("signature", m, err)
		return
	}
	var a Answer
	if err := unmarshal(data, &a); err != nil {
		s.rejectLocked("malformed", m, err)
		return
	}
	if a.V != WireVersion || a.Party != m {
		s.rejectLocked("invalid", m, fmt.Errorf("%w: version %d, party %d on party %d's subject", ErrMessage, a.V, a.Party, m))
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
		s.reject("duplicate", m, fmt.Errorf("%w: a second answer of party %d to request %d", ErrMessage, m, a.Req))
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
		tmp := make([]float64, n*k)
		if err := a.Outputs(tmp, n, k); err != nil {
			s.reject("invalid", m, err)
			return
		}
		slot := (m - 1) * k
		for i := range n {
			copy(c.c[i*w+slot:i*w+slot+k], tmp[i*k:(i+1)*k])
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

// Score asks the parties for ids and combines their outputs. Calls that
// arrive while earlier ones are in flight are sent together in one request
// (up to MaxBatchIDs ids): each party then verifies one signature and signs
// one answer for all of them. A batch that names an unknown or refused id
// is sent again call by call, so that only the call with that id fails.
func (s *Scorer) Score(ctx context.Context, ids []string) ([]Prediction, error) {
	if s.queue == nil {
		return s.score(ctx, ids)
	}
	r := &scoreCall{ctx: ctx, ids: ids, done: make(chan scoreResult, 1)}
	select {
	case s.queue <- r:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
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
	inFlight    = 4    // batched requests in flight
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

// batch sends the queued calls, inFlight requests at a time, each holding
// every call that waited for a free slot.
func (s *Scorer) batch(ctx context.Context) {
	sem := make(chan struct{}, inFlight)
	for {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		var calls []*scoreCall
		select {
		case r := <-s.queue:
			calls = append(calls, r)
		case <-ctx.Done():
			return
		}
		n := len(calls[0].ids)
	drain:
		for n < MaxBatchIDs {
			select {
			case r := <-s.queue:
				calls = append(calls, r)
				n += len(r.ids)
			default:
				break drain
			}
		}
		go func() {
			defer func() { <-sem }()
			s.sendBatch(calls)
		}()
	}
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
