package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// natsHeader is m's headers and ID as a NATS header (nil if none).
func natsHeader(m *Message) nats.Header {
	if len(m.Header) == 0 && m.ID == "" {
		return nil
	}
	h := make(nats.Header, len(m.Header)+1)
	for k, v := range m.Header {
		h[k] = []string{v}
	}
	if m.ID != "" {
		h[msgIDHeader] = []string{m.ID}
	}
	return h
}

// firstErr keeps the first failure until it is taken.
type firstErr struct {
	mu  sync.Mutex
	err error
}

func (e *firstErr) set(err error) {
	e.mu.Lock()
	if e.err == nil {
		e.err = err
	}
	e.mu.Unlock()
}

func (e *firstErr) take() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	err := e.err
	e.err = nil
	return err
}

// asyncPub publishes every message with an asynchronous JetStream ack
// through nats.go's PublishMsgAsync (DesignOrdered, DesignAcked). The
// window is a semaphore released by the ack and error handlers.
type asyncPub struct {
	b     *JetStream
	js    jetstream.JetStream
	slots chan struct{}
	errs  firstErr
	dups  atomic.Uint64

	// retry (fail-over, see JetStreamConfig.Retry): every message gets an
	// ID (the stream drops a second copy), stays in inflight until the
	// stream acknowledges it, and is published again when its ack times
	// out or the connection comes back after a loss; one message is in
	// flight at a time on each subject, and a control message alone
	// (order), which keeps each sender's messages in order.
	retry    bool
	order    *subjectOrder
	idPrefix string
	nextID   atomic.Uint64
	mu       sync.Mutex
	inflight map[string]*retryMsg
	retries  atomic.Uint64

	// known are the subjects the stream has answered on (replicated
	// streams only, see publish).
	known answeredSubjects

	// A flush waits until nats.go has nothing pending, which publishers
	// that never pause could put off for ever: while a flush waits, new
	// publishes wait for it (flushGate is closed when it returns).
	flushMu   sync.Mutex
	flushGate atomic.Pointer[chan struct{}]
}

// retryMsg is a message in flight under fail-over, and how often it was
// published again.
type retryMsg struct {
	msg   *nats.Msg
	first time.Time // first published
}

// Under fail-over a message is published again for up to retryFor (an
// election of a new stream leader takes seconds, more on a loaded host),
// retryPause after an error (at once after a timeout or a reconnect).
const (
	retryFor   = 2 * time.Minute
	retryPause = 250 * time.Millisecond
)

// retryIDPrefix starts the IDs the retrying publisher gives messages that
// had none: deliveries do not show them (Delivery.ID is the sender's).
const retryIDPrefix = "_r."

// senderID is a delivered message's ID as its sender gave it.
func senderID(id string) string {
	if strings.HasPrefix(id, retryIDPrefix) {
		return ""
	}
	return id
}

func newAsyncPub(b *JetStream, window int, retry bool) (*asyncPub, error) {
	p := &asyncPub{b: b, slots: make(chan struct{}, window), retry: retry}
	if retry {
		// One message at a time on each subject: the next is sent once
		// the stream has the one before, so that a message published
		// again after a loss cannot land behind a later one (the
		// receivers refuse sequences out of order). A control message
		// goes alone (subjectOrder).
		p.order = newSubjectOrder(b.prefix + "ctl")
	}
	timeout, pending := publishAckTimeout, window+1
	if retry {
		p.inflight = make(map[string]*retryMsg, window)
		p.idPrefix = retryIDPrefix + nuid.Next() + "."
		// A message and a copy of it may be pending at once.
		timeout, pending = publishAckTimeoutRetry, 2*window+1
	}
	var err error
	p.js, err = publisherJS(b, pending, timeout, p.onAck, p.onErr)
	return p, err
}

// publisherJS is a JetStream context for asynchronous publishes whose
// answers go to onAck and onErr; the window is the caller's to keep, so
// nats.go never stalls.
func publisherJS(b *JetStream, maxPending int, timeout time.Duration, onAck jetstream.MsgAckHandler, onErr jetstream.MsgErrHandler) (jetstream.JetStream, error) {
	js, err := jetstream.New(b.nc,
		jetstream.WithDefaultTimeout(apiTimeout),
		jetstream.WithPublishAsyncMaxPending(maxPending),
		jetstream.WithPublishAsyncTimeout(timeout),
		jetstream.WithPublishAsyncAckHandler(onAck),
		jetstream.WithPublishAsyncErrHandler(onErr))
	if err != nil {
		return nil, fmt.Errorf("broker: jetstream publisher: %w", err)
	}
	return js, nil
}

func (p *asyncPub) publish(ctx context.Context, m *Message) error {
	if g := p.flushGate.Load(); g != nil {
		select {
		case <-*g:
		case <-ctx.Done():
			return ctx.Err()
		case <-p.b.closing:
			return ErrClosed
		}
	}
	if p.b.replicas > 1 {
		// As with capturePub: a node may not yet know where a new
		// replicated stream listens, and a publish there gets "no
		// response from stream". The first message on a subject waits
		// until a barrier on it is answered.
		if err := p.known.ensure(ctx, p.js, m.Subject); err != nil {
			return err
		}
	}
	if p.retry {
		if err := p.order.acquire(ctx, p.b.closing, m.Subject); err != nil {
			return err
		}
	}
	select {
	case p.slots <- struct{}{}:
	default:
		select {
		case p.slots <- struct{}{}:
		case <-ctx.Done():
			p.unorder(m.Subject)
			return ctx.Err()
		case <-p.b.closing:
			p.unorder(m.Subject)
			return ErrClosed
		}
	}
	// PublishMsgAsync keeps the message until it is acknowledged (to send
	// it again after "no responders"): it gets its own copy.
	nm := &nats.Msg{Subject: m.Subject, Data: bytes.Clone(m.Data), Header: natsHeader(m)}
	if p.retry {
		id := m.ID
		if id == "" {
			id = p.idPrefix + strconv.FormatUint(p.nextID.Add(1), 36)
			if nm.Header == nil {
				nm.Header = make(nats.Header, 1)
			}
			nm.Header[msgIDHeader] = []string{id}
		}
		p.mu.Lock()
		p.inflight[id] = &retryMsg{msg: nm, first: time.Now()}
		p.mu.Unlock()
	}
	if _, err := p.js.PublishMsgAsync(nm); err != nil {
		if p.retry && p.b.nc.IsReconnecting() {
			return nil // kept in inflight: published again on reconnect
		}
		p.settle(nm)
		<-p.slots
		return fmt.Errorf("broker: publish %s: %w", m.Subject, err)
	}
	return nil
}

// settle removes a message from inflight; false if it was settled
// already (an answer to a second copy).
func (p *asyncPub) settle(m *nats.Msg) bool {
	if !p.retry {
		return true
	}
	id := m.Header.Get(msgIDHeader)
	p.mu.Lock()
	if _, ok := p.inflight[id]; !ok {
		p.mu.Unlock()
		return false
	}
	delete(p.inflight, id)
	p.mu.Unlock()
	p.order.release(m.Subject)
	return true
}

// unorder releases subject's place in the order of a message that was
// not published.
func (p *asyncPub) unorder(subject string) {
	if p.retry {
		p.order.release(subject)
	}
}

func (p *asyncPub) onAck(_ jetstream.JetStream, m *nats.Msg, ack *jetstream.PubAck) {
	p.b.streamAnswered()
	if !p.settle(m) {
		return
	}
	if ack.Duplicate {
		p.dups.Add(1)
	}
	<-p.slots
}

func (p *asyncPub) onErr(_ jetstream.JetStream, m *nats.Msg, err error) {
	var apiErr *jetstream.APIError
	if silence(err) {
		p.b.streamSilent(time.Now())
	} else if errors.As(err, &apiErr) {
		p.b.streamAnswered() // an answer, if a refusal
	}
	if p.retry && retryable(err) {
		pause := retryPause
		if errors.Is(err, jetstream.ErrAsyncPublishTimeout) {
			pause = 0
		}
		if p.republish(m.Header.Get(msgIDHeader), pause) {
			p.b.log.Debug().Err(err).Str("subject", m.Subject).Msg("publishing again")
			return
		}
	}
	if !p.settle(m) {
		return
	}
	if isDupInProcess(err) {
		p.dups.Add(1)
	} else {
		if isStreamFull(err) {
			err = streamFull(err)
		}
		p.errs.set(fmt.Errorf("broker: stream did not store a message on %s: %w", m.Subject, err))
	}
	<-p.slots
}

// retryable errors of a publish may pass with a leader or a connection
// back: no answer, no responders, a connection lost, the stream's
// cluster unavailable (503).
func retryable(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.Code == 503
	}
	return true
}

// republish publishes message id again after pause, unless it was
// settled, the connection is closed or the message has been in flight for
// retryFor; true if it will.
func (p *asyncPub) republish(id string, pause time.Duration) bool {
	if p.b.nc.IsClosed() {
		return false // Close's last flush goes on retrying until then
	}
	p.mu.Lock()
	rm, ok := p.inflight[id]
	p.mu.Unlock()
	if !ok || time.Since(rm.first) > retryFor {
		return false
	}
	p.retries.Add(1)
	// From the answer goroutine of nats.go: publishing there could wait
	// for the pending limit, which that goroutine frees.
	go func() {
		time.Sleep(pause)
		if _, err := p.js.PublishMsgAsync(rm.msg); err != nil && !p.b.nc.IsReconnecting() {
			p.onErr(p.js, rm.msg, err)
		}
	}()
	return true
}

// reconnected publishes every message in flight again: the ones written
// to the lost connection may never have reached the stream.
func (p *asyncPub) reconnected() {
	if !p.retry {
		return
	}
	p.mu.Lock()
	ids := make([]string, 0, len(p.inflight))
	for id := range p.inflight {
		ids = append(ids, id)
	}
	p.mu.Unlock()
	if len(ids) > 0 {
		p.b.log.Info().Int("messages", len(ids)).Msg("publishing the unacknowledged messages again after the reconnect (the stream drops copies)")
	}
	for _, id := range ids {
		p.republish(id, 0)
	}
}

// errCodeDupInProcess: a replicated stream is still storing a message
// with the same ID (JSStreamDuplicateMessageConflict): this one is a
// duplicate of it.
const errCodeDupInProcess = 10158

func isDupInProcess(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeDupInProcess
}

func (p *asyncPub) flush(ctx context.Context) error {
	p.flushMu.Lock()
	defer p.flushMu.Unlock()
	gate := make(chan struct{})
	p.flushGate.Store(&gate)
	defer func() {
		p.flushGate.Store(nil)
		close(gate)
	}()
	for {
		select {
		case <-p.js.PublishAsyncComplete():
		case <-ctx.Done():
			return ctx.Err()
		}
		// Under fail-over a message may be between a timeout and its
		// next copy: nats.go has nothing pending then.
		if p.unsettled() == 0 {
			return p.errs.take()
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (p *asyncPub) unsettled() int {
	if !p.retry {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.inflight)
}

func (p *asyncPub) pending() int       { return p.js.PublishAsyncPending() }
func (p *asyncPub) duplicates() uint64 { return p.dups.Load() }
func (p *asyncPub) takeErr() error     { return p.errs.take() }

// corePub publishes on core NATS with no stream (DesignCore). Flush is a
// round trip: when it returns the server has routed everything before it.
type corePub struct {
	nc  *nats.Conn
	mu  sync.Mutex
	msg nats.Msg
}

func (p *corePub) publish(_ context.Context, m *Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.msg.Subject, p.msg.Data, p.msg.Header = m.Subject, m.Data, natsHeader(m)
	err := p.nc.PublishMsg(&p.msg)
	p.msg.Data, p.msg.Header = nil, nil
	if err != nil {
		return fmt.Errorf("broker: publish %s: %w", m.Subject, err)
	}
	return nil
}

func (p *corePub) flush(ctx context.Context) error {
	if err := flushConn(ctx, p.nc); err != nil {
		return fmt.Errorf("broker: flush: %w", err)
	}
	return nil
}

// flushConn is a round trip to the server, bounded by ctx or, without a
// deadline, by apiTimeout.
func flushConn(ctx context.Context, nc *nats.Conn) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, apiTimeout)
		defer cancel()
	}
	return nc.FlushWithContext(ctx)
}

func (p *corePub) pending() int       { return 0 }
func (p *corePub) duplicates() uint64 { return 0 }
func (p *corePub) takeErr() error     { return nil }

// capturePub publishes on core NATS for the stream to capture
// (DesignCapture), with flow control by the stream's confirmed position.
//
// The server hands the messages of one connection to the stream in the
// order they were sent, and the stream stores them in that order. So
// when the stream acknowledges one message, it has processed every
// message the connection sent before it. Every MarkEvery-th message (and
// every message with an ID, so that its duplicate status is known) is
// published with a JetStream ack through nats.go's PublishMsgAsync: a
// marker. The window counts the messages after the last acknowledged
// marker; Publish blocks while it is full. Flush confirms the tail with a
// barrier: a publish on the last subject that the stream refuses to store
// (it expects a last sequence no stream has) and answers in order with
// its last sequence. Then it compares the stream's count of every subject
// published on with the messages sent there: a message the stream
// dropped (its ingest buffer overflowed, say) is reported (ErrLost), not
// lost silently.
type capturePub struct {
	b          *JetStream
	nc         *nats.Conn
	js         jetstream.JetStream
	window     uint64
	winBytes   uint64
	markEvery  int
	markBytes  uint64
	space      chan struct{} // signalled when confirmations arrive
	errs       firstErr
	dups       atomic.Uint64
	noVerify   atomic.Bool           // the stream's counts cannot be read (permissions)
	full       atomic.Pointer[error] // the stream refused a message: it is full (ErrStreamFull)
	verifyOnce sync.Once

	mu        sync.Mutex
	published uint64 // messages sent
	pubBytes  uint64
	largest   uint64 // the largest payload published (verify: a full stream?)
	confirmed uint64 // messages confirmed (published[:confirmed])
	confBytes uint64
	sinceMark int
	markB     uint64
	marks     map[*nats.Msg]mark
	last      string // subject of the last message sent
	noStream  bool   // a marker found no stream: publish nothing until a barrier gets through
	subjects  map[string]*subjectCount
	base      map[string]uint64 // the stream's count of each subject at connect
	msg       nats.Msg
}

type mark struct{ n, bytes uint64 }

// subjectCount is what was sent on one subject: base messages were in the
// stream when the Bus connected (others may add more: the check is
// conservative), n were sent, gone of them are not in the
// stream for a reason already known (reported duplicates, refusals,
// losses reported by an earlier check), verified of them were checked.
type subjectCount struct{ base, n, gone, verified uint64 }

// barrierSeq is the last sequence a barrier expects: no stream has it, so
// the stream refuses the barrier (error 10071) and stores nothing.
const (
	barrierSeq             = math.MaxUint64
	errCodeWrongLastSeq    = 10071
	expectedLastSeqHeader  = jetstream.ExpectedLastSeqHeader
	barrierReplicatedPause = 2 * time.Millisecond
	barrierReplicatedWait  = 500 * time.Millisecond
	// barrierAttempts bounds the barriers sent after timeouts (each
	// waits apiTimeout for its answer).
	barrierAttempts = 3
	// barrierNoLeaderPause: how long a barrier that found no stream
	// leader waits before it asks again, up to barrierNoLeaderAttempts
	// times (an election, or a node that has not yet learnt the stream's
	// interest from its routes).
	barrierNoLeaderPause    = 250 * time.Millisecond
	barrierNoLeaderAttempts = 40
	// markerGrace: after a barrier, how long Flush waits for the answers
	// to markers sent before it.
	markerGrace = 200 * time.Millisecond
	// stallBarrier: a publisher whose window stays full this long
	// confirms with a barrier.
	stallBarrier = time.Second
)

func newCapturePub(b *JetStream, cfg JetStreamConfig) (*capturePub, error) {
	p := &capturePub{
		b: b, nc: b.nc,
		window:    uint64(cfg.Window),
		winBytes:  uint64(cfg.WindowBytes),
		markEvery: min(cfg.MarkEvery, max(1, cfg.Window/4)),
		markBytes: uint64(max(1, cfg.WindowBytes/4)),
		space:     make(chan struct{}, 1),
		marks:     make(map[*nats.Msg]mark),
		subjects:  make(map[string]*subjectCount),
	}
	var err error
	if p.js, err = publisherJS(b, cfg.Window+1, publishAckTimeout, p.onAck, p.onErr); err != nil {
		return nil, err
	}
	// The per-subject counts the checks of Flush start from, read once:
	// no API call on the publishing path.
	ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
	defer cancel()
	if p.base, err = b.subjectCounts(ctx); err != nil {
		p.disableVerify(err)
	}
	return p, nil
}

func (p *capturePub) signal() {
	select {
	case p.space <- struct{}{}:
	default:
	}
}

func (p *capturePub) publish(ctx context.Context, m *Message) error {
	if err := p.full.Load(); err != nil {
		// Publishing on would only be lost: stop the publisher at once.
		return *err
	}
	if p.b.replicas > 1 {
		// A core publish that no stream takes is lost: in a cluster, a
		// node may not yet know where the replicated stream listens (its
		// replica not started, the interest not yet routed). The first
		// message on a subject waits until a barrier on it reaches the
		// stream, which then takes every later one.
		p.mu.Lock()
		_, known := p.subjects[m.Subject]
		p.mu.Unlock()
		if !known {
			if err := p.barrier(ctx, m.Subject); err != nil {
				return fmt.Errorf("broker: publish %s: the stream does not answer on it: %w", m.Subject, err)
			}
		}
	}
	size := uint64(len(m.Data))
	p.mu.Lock()
	var stall *time.Timer
	for {
		out := p.published - p.confirmed
		if !p.noStream && (out == 0 || out < p.window && p.pubBytes-p.confBytes+size <= p.winBytes) {
			break
		}
		p.mu.Unlock()
		if stall == nil {
			stall = time.NewTimer(stallBarrier)
			defer stall.Stop()
		}
		select {
		case <-p.space:
		case <-stall.C:
			// No marker answer for a while (a stream leader change can
			// swallow one): confirm with a barrier instead.
			p.settle(ctx)
			stall.Reset(stallBarrier)
		case <-ctx.Done():
			return ctx.Err()
		case <-p.b.closing:
			return ErrClosed
		}
		p.mu.Lock()
	}
	sc := p.subjects[m.Subject]
	if sc == nil {
		sc = &subjectCount{base: p.base[m.Subject]}
		p.subjects[m.Subject] = sc
	}
	marker := m.ID != "" || p.sinceMark+1 >= p.markEvery || p.markB+size >= p.markBytes
	p.published++
	p.pubBytes += size
	p.largest = max(p.largest, size)
	sc.n++
	var err error
	if marker {
		nm := &nats.Msg{Subject: m.Subject, Data: bytes.Clone(m.Data), Header: natsHeader(m)}
		p.marks[nm] = mark{p.published, p.pubBytes}
		// No retries: a marker that no stream took ("no responders") was
		// still delivered to the live subscribers.
		if _, err = p.js.PublishMsgAsync(nm, jetstream.WithRetryAttempts(0)); err != nil {
			delete(p.marks, nm)
		}
		p.sinceMark, p.markB = 0, 0
	} else {
		p.msg.Subject, p.msg.Data, p.msg.Header = m.Subject, m.Data, natsHeader(m)
		err = p.nc.PublishMsg(&p.msg)
		p.msg.Data, p.msg.Header = nil, nil
		p.sinceMark++
		p.markB += size
	}
	if err != nil {
		p.published--
		p.pubBytes -= size
		sc.n--
		p.mu.Unlock()
		return fmt.Errorf("broker: publish %s: %w", m.Subject, err)
	}
	p.last = m.Subject
	p.mu.Unlock()
	return nil
}

func (p *capturePub) disableVerify(err error) {
	p.noVerify.Store(true)
	p.verifyOnce.Do(func() {
		p.b.log.Warn().Err(err).Msg("cannot read the stream's per-subject counts: Flush checks confirmations only, not counts")
	})
}

// confirm records that the first n messages (bytes) are settled.
func (p *capturePub) confirmLocked(n, bytes uint64) {
	if n > p.confirmed {
		p.confirmed, p.confBytes = n, bytes
	}
}

func (p *capturePub) onAck(_ jetstream.JetStream, m *nats.Msg, ack *jetstream.PubAck) {
	p.mu.Lock()
	if ack.Duplicate {
		p.dups.Add(1)
		if sc := p.subjects[m.Subject]; sc != nil {
			sc.gone++
		}
	}
	if mk, ok := p.marks[m]; ok {
		delete(p.marks, m)
		p.confirmLocked(mk.n, mk.bytes)
	}
	p.mu.Unlock()
	p.signal()
}

func (p *capturePub) onErr(_ jetstream.JetStream, m *nats.Msg, err error) {
	p.mu.Lock()
	mk, ok := p.marks[m]
	if !ok {
		// Settled by a barrier already: the count check has its fate.
		p.mu.Unlock()
		return
	}
	delete(p.marks, m)
	// The window moves on; the failure is Flush's to report.
	p.confirmLocked(mk.n, mk.bytes)
	sc := p.subjects[m.Subject]
	if sc != nil {
		sc.gone++
	}
	if isDupInProcess(err) {
		// Stored by the stream in order like any other message, but not
		// again: a duplicate, and the ones before it are confirmed.
		p.dups.Add(1)
		p.mu.Unlock()
		p.signal()
		return
	}
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		// No answer from the stream (no leader, say): what is published
		// now would go nowhere, so publishing waits until a barrier gets
		// through (at most a window is lost, and reported).
		p.noStream = true
	}
	if isStreamFull(err) {
		err = streamFull(err)
		p.full.CompareAndSwap(nil, &err)
	}
	// Before the lock is released: a Flush that sees the marker settled
	// must find its error too. Set after it, the error missed that Flush
	// (whose count check skips the message, counted gone) and came with
	// the next one (TestCaptureRefusedMessagesReported, once in CI).
	p.errs.set(fmt.Errorf("%w: the stream did not store message %d (on %s): %w", ErrLost, mk.n, m.Subject, err))
	p.mu.Unlock()
	p.signal()
}

// streamFull wraps the stream's refusal of a message past its limit: its
// own bound (--max-store), or the server's storage limit for JetStream.
func streamFull(err error) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && strings.Contains(apiErr.Description, "insufficient resources") {
		// The server's limit, not the stream's: a stock nats-server
		// gives JetStream 75% of the free disk unless configured.
		return fmt.Errorf("%w: the broker's storage for JetStream is used up (the server's limit, max_file_store in its configuration: "+
			"by default 75%% of the disk space free when it started; not the run's --max-store) and it refuses new messages; "+
			"nothing stored was dropped. Raise the server's max_file_store, free disk space, or remove old runs' streams (%w)", ErrStreamFull, err)
	}
	return fmt.Errorf("%w: it holds as much as its limit allows (the run's --max-store) and refuses new messages; "+
		"nothing stored was dropped. Raise --max-store, train for fewer steps, or free disk space (%w)", ErrStreamFull, err)
}

// isStreamFull reports whether err is the stream's refusal of a message
// past its size limit.
func isStreamFull(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (strings.Contains(apiErr.Description, "maximum bytes exceeded") ||
		strings.Contains(apiErr.Description, "maximum messages exceeded") || strings.Contains(apiErr.Description, "insufficient resources"))
}

// settle confirms what was published so far with a barrier, and settles
// the markers before it whose answers did not come (the count check of
// the next Flush tells whether their messages are stored). A failed
// barrier changes nothing: the window stays full.
func (p *capturePub) settle(ctx context.Context) {
	p.mu.Lock()
	target, targetBytes, last := p.published, p.pubBytes, p.last
	p.mu.Unlock()
	bctx, cancel := context.WithTimeout(ctx, stallBarrier)
	err := p.barrier(bctx, last)
	cancel()
	if err != nil {
		p.b.log.Debug().Err(err).Msg("capture: barrier while the window is full")
		return
	}
	p.mu.Lock()
	p.confirmLocked(target, targetBytes)
	p.noStream = false
	for m, mk := range p.marks {
		if mk.n <= target {
			delete(p.marks, m)
		}
	}
	p.mu.Unlock()
	p.signal()
}

func (p *capturePub) flush(ctx context.Context) error {
	p.mu.Lock()
	target, targetBytes, confirmed, last := p.published, p.pubBytes, p.confirmed, p.last
	// What each subject had when the barrier left: publishers running
	// concurrently with Flush are not covered by it.
	sent := make(map[*subjectCount]uint64)
	for _, sc := range p.subjects {
		if sc.n > sc.verified {
			sent[sc] = sc.n
		}
	}
	p.mu.Unlock()
	if target > confirmed {
		if err := p.barrier(ctx, last); err != nil {
			return err
		}
		p.mu.Lock()
		p.confirmLocked(target, targetBytes)
		p.noStream = false
		p.mu.Unlock()
		p.signal()
	}
	// Markers before the barrier are settled by now, but their answers
	// may still be on their way to the ack handler (a refusal is worth
	// reporting with its reason). Those that do not come (a stream leader
	// change can swallow them) are settled here: the count check below
	// tells whether their messages are stored.
	wait := time.NewTimer(markerGrace)
	defer wait.Stop()
	for open := true; open; {
		p.mu.Lock()
		open = false
		for _, mk := range p.marks {
			open = open || mk.n <= target
		}
		p.mu.Unlock()
		if !open {
			break
		}
		select {
		case <-p.space:
		case <-time.After(time.Millisecond):
		case <-wait.C:
			p.mu.Lock()
			for m, mk := range p.marks {
				if mk.n <= target {
					delete(p.marks, m)
				}
			}
			p.mu.Unlock()
			open = false
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := p.errs.take(); err != nil {
		return err
	}
	return p.verify(ctx, sent)
}

// barrier waits until the stream has processed every message sent so far
// on this connection (see capturePub).
func (p *capturePub) barrier(ctx context.Context, subject string) error {
	for {
		n, err := answeredBarrier(ctx, p.js, subject)
		if err != nil || p.b.replicas <= 1 {
			return err
		}
		// A replicated stream answers before its replicas have agreed on
		// what came before: wait until its last sequence has reached the
		// one named in the answer ("wrong last sequence: N"). A leader
		// change may drop proposals counted in N: then ask again.
		deadline := time.Now().Add(barrierReplicatedWait)
		for time.Now().Before(deadline) {
			last, err := p.b.lastSeq(ctx)
			if err != nil {
				return err
			}
			if last >= n {
				return nil
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(barrierReplicatedPause):
			}
		}
	}
}

// answeredSubjects are the subjects a replicated stream has answered a
// barrier on. A node may not yet know where a new replicated stream
// listens, and a publish there gets "no response from stream": the first
// message on a subject waits until a barrier on it is answered.
type answeredSubjects struct {
	mu sync.Mutex
	m  map[string]struct{}
}

// ensure returns once the stream has answered on subject (at once if it
// has before).
func (a *answeredSubjects) ensure(ctx context.Context, js jetstream.JetStream, subject string) error {
	a.mu.Lock()
	_, ok := a.m[subject]
	a.mu.Unlock()
	if ok {
		return nil
	}
	if _, err := answeredBarrier(ctx, js, subject); err != nil {
		return fmt.Errorf("broker: publish %s: the stream does not answer on it: %w", subject, err)
	}
	a.mu.Lock()
	if a.m == nil {
		a.m = make(map[string]struct{})
	}
	a.m[subject] = struct{}{}
	a.mu.Unlock()
	return nil
}

// answeredBarrier sends barriers on subject until the stream answers one,
// asking again after timeouts (barrierAttempts) and, after a pause, when
// no replica answers (a leader being elected, or a node that has not yet
// learnt where the stream listens; barrierNoLeaderAttempts). It returns
// the stream's last sequence named in the refusal.
func answeredBarrier(ctx context.Context, js jetstream.JetStream, subject string) (uint64, error) {
	for attempt, noLeader := 1, 1; ; attempt++ {
		n, err := barrierOnce(ctx, js, subject)
		if err != nil && ctx.Err() == nil {
			switch {
			case attempt < barrierAttempts && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)):
				continue // a loaded or electing cluster: ask again
			case noLeader < barrierNoLeaderAttempts && errors.Is(err, jetstream.ErrNoStreamResponse):
				noLeader++
				// The answer comes at once: wait before asking again.
				select {
				case <-ctx.Done():
					return 0, ctx.Err()
				case <-time.After(barrierNoLeaderPause):
				}
				continue
			}
		}
		return n, err
	}
}

// barrierOnce sends one barrier and returns the stream's last sequence
// named in its refusal.
func barrierOnce(ctx context.Context, js jetstream.JetStream, subject string) (uint64, error) {
	msg := &nats.Msg{Subject: subject}
	_, err := js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequence(barrierSeq), jetstream.WithRetryAttempts(0))
	if err == nil {
		return 0, fmt.Errorf("broker: barrier on %s was stored", subject) // cannot happen: no stream has that sequence
	}
	var apiErr *jetstream.APIError
	if ctx.Err() != nil && !errors.As(err, &apiErr) {
		// Cut short (a signal): nothing is known lost.
		return 0, fmt.Errorf("broker: confirming the messages published on %s: %w", subject, err)
	}
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != errCodeWrongLastSeq {
		return 0, fmt.Errorf("%w: confirming the messages published on %s: %w", ErrLost, subject, err)
	}
	desc := apiErr.Description
	n, perr := strconv.ParseUint(strings.TrimSpace(desc[strings.LastIndexByte(desc, ':')+1:]), 10, 64)
	if perr != nil {
		return 0, fmt.Errorf("broker: barrier answer %q: %w", desc, perr)
	}
	return n, nil
}

// verify compares the stream's count of each subject with what was sent
// there before the barrier (sent).
func (p *capturePub) verify(ctx context.Context, sent map[*subjectCount]uint64) error {
	if p.noVerify.Load() || len(sent) == 0 {
		return nil
	}
	type check struct {
		subject string
		sc      *subjectCount
		n, want uint64
	}
	var checks []check
	p.mu.Lock()
	for s, sc := range p.subjects {
		if n, ok := sent[sc]; ok && n > sc.verified {
			checks = append(checks, check{s, sc, n, sc.base + n - min(sc.gone, n)})
		}
	}
	p.mu.Unlock()
	var errs []error
	for _, c := range checks {
		stored, err := p.b.count(ctx, c.subject)
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			p.disableVerify(err)
			return nil
		}
		// Other publishers on the same subject only add: fewer than
		// sent means some of ours are missing.
		p.mu.Lock()
		if stored < c.want {
			errs = append(errs, fmt.Errorf("%w: %s holds %d messages, %d were published there", ErrLost, c.subject, stored, c.want))
			c.sc.gone += c.want - stored // reported once
		}
		c.sc.verified = max(c.sc.verified, c.n)
		p.mu.Unlock()
	}
	if len(errs) == 0 {
		return nil
	}
	err := errors.Join(errs...)
	if p.atBound(ctx) {
		// Refused because the stream is full: only a marker's refusal
		// says so, and the missing ones need not have been markers.
		return streamFull(err)
	}
	return err
}

// recordSlack is what a stored record adds to a message's payload
// (subject, headers with a signature, the record's own fields), at most.
const recordSlack = 1 << 10

// atBound reports whether the run's stream has no room left for the
// largest message published: messages missing from it were refused
// because it is full.
func (p *capturePub) atBound(ctx context.Context) bool {
	info, err := p.b.streamInfo(ctx)
	if err != nil || info.Config.MaxBytes <= 0 {
		return false
	}
	p.mu.Lock()
	largest := p.largest
	p.mu.Unlock()
	return info.State.Bytes+largest+recordSlack > uint64(info.Config.MaxBytes)
}

func (p *capturePub) pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return int(p.published - p.confirmed)
}

func (p *capturePub) duplicates() uint64 { return p.dups.Load() }
func (p *capturePub) takeErr() error     { return p.errs.take() }
