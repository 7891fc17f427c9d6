package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// batchPub is the fail-over publisher (JetStreamConfig.Retry) on a
// replicated stream that allows atomic batch publishing (nats-server 2.12
// and later): Publish queues the message, in publish order, and returns;
// one goroutine sends what is queued as one atomic batch (headers
// Nats-Batch-Id, Nats-Batch-Sequence, Nats-Batch-Commit), with one batch
// in flight at a time. A batch is stored whole or not at all, so a loss
// (a connection or a stream leader gone) can never leave a gap that a
// later message lands behind: the batch is sent again, whole, under a new
// batch ID, and every message keeps its Nats-Msg-Id so that a batch
// already stored is refused as a duplicate instead of stored twice. So
// one publisher's messages land in publish order across all subjects (the
// Bus contract), and the round trip of three copies (a few hundred
// microseconds) is paid once a batch instead of once a message: what a
// publisher sends while a batch is in flight goes in the next.
//
// Before, the fail-over publisher kept one message in flight per subject
// and Publish waited while its subject was busy, which stopped the
// aggregator (it sends every reply from the goroutine handling the
// request) for a round trip at a time (docs/cluster.md).
type batchPub struct {
	b      *JetStream
	nc     *nats.Conn
	js     jetstream.JetStream // for the barriers on new subjects
	window int

	idPrefix    string
	nextID      atomic.Uint64
	batchPrefix string
	nextBatch   atomic.Uint64

	mu       sync.Mutex
	queue    []*nats.Msg // waiting, in publish order
	inflight int         // messages of the batch being sent
	queued   uint64      // messages ever queued
	settled  uint64      // of them, stored or failed (publish order)
	changed  chan struct{}
	work     chan struct{} // a message was queued (capacity 1)
	kick     chan struct{} // reconnected: send the batch again now

	errs    firstErr
	dups    atomic.Uint64
	retries atomic.Uint64
	batches atomic.Uint64

	known answeredSubjects
}

// A batch holds at most batchMaxMsgs messages (the server's default limit
// is 1,000) and batchMaxBytes payload bytes.
const (
	batchMaxMsgs  = 1000
	batchMaxBytes = 4 << 20
)

// Atomic batch publishing's headers and the errors the publisher branches
// on (nats-server's errors.json).
const (
	batchIDHeader     = "Nats-Batch-Id"
	batchSeqHeader    = "Nats-Batch-Sequence"
	batchCommitHeader = "Nats-Batch-Commit"

	errCodeBatchIncomplete   = 10176 // JSAtomicPublishIncompleteBatchErr: a gap, sent again
	errCodeBatchHasDuplicate = 10201 // JSAtomicPublishContainsDuplicateMessageErr
)

func newBatchPub(b *JetStream, window int) (*batchPub, error) {
	p := &batchPub{
		b: b, nc: b.nc, window: window,
		idPrefix:    retryIDPrefix + nuid.Next() + ".",
		batchPrefix: nuid.Next() + ".",
		changed:     make(chan struct{}),
		work:        make(chan struct{}, 1),
		kick:        make(chan struct{}, 1),
	}
	var err error
	p.js, err = jetstream.New(b.nc, jetstream.WithDefaultTimeout(apiTimeout))
	if err != nil {
		return nil, fmt.Errorf("broker: jetstream publisher: %w", err)
	}
	go p.send()
	return p, nil
}

func (p *batchPub) publish(ctx context.Context, m *Message) error {
	// As asyncPub: the first message on a subject waits until the stream
	// answers on it (a node may not know the new stream yet).
	if err := p.known.ensure(ctx, p.js, m.Subject); err != nil {
		return err
	}
	h := make(nats.Header, len(m.Header)+4)
	for k, v := range m.Header {
		h[k] = []string{v}
	}
	id := m.ID
	if id == "" {
		id = p.idPrefix + strconv.FormatUint(p.nextID.Add(1), 36)
	}
	h[msgIDHeader] = []string{id}
	nm := &nats.Msg{Subject: m.Subject, Data: append([]byte(nil), m.Data...), Header: h}

	p.mu.Lock()
	for len(p.queue)+p.inflight >= p.window {
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-p.b.closing:
			return ErrClosed
		}
		p.mu.Lock()
	}
	p.queue = append(p.queue, nm)
	p.queued++
	p.mu.Unlock()
	select {
	case p.work <- struct{}{}:
	default:
	}
	return nil
}

// wake lets the waiters look again; p.mu is held.
func (p *batchPub) wake() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// send is the goroutine that sends the queued messages, a batch at a
// time, until the connection is closed.
func (p *batchPub) send() {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		p.mu.Lock()
		n, size := 0, 0
		for n < len(p.queue) && n < batchMaxMsgs && (n == 0 || size+len(p.queue[n].Data) <= batchMaxBytes) {
			size += len(p.queue[n].Data)
			n++
		}
		batch := p.queue[:n:n]
		p.queue = p.queue[n:]
		p.inflight = n
		p.mu.Unlock()
		if n == 0 {
			if p.nc.IsClosed() {
				return
			}
			select {
			case <-p.work:
			case <-tick.C:
			}
			continue
		}
		p.deliver(batch)
		p.mu.Lock()
		p.inflight = 0
		p.settled += uint64(n)
		p.wake()
		p.mu.Unlock()
	}
}

// deliver sends batch until the stream has stored it (or every message of
// it is a duplicate), or it fails for good, or for retryFor.
func (p *batchPub) deliver(batch []*nats.Msg) {
	first := time.Now()
	warned := false
	for {
		err := p.sendBatch(batch)
		if err == nil {
			return
		}
		if isBatchDuplicate(err) {
			// Some message of the batch is stored already: the batch was
			// (an answer lost), or a message repeats an ID the stream
			// has. Each alone then says which.
			if len(batch) == 1 {
				p.dups.Add(1)
				return
			}
			for _, m := range batch {
				p.deliver([]*nats.Msg{m})
			}
			return
		}
		if !retryable(err) && !isBatchIncomplete(err) && !isDupInProcess(err) || p.nc.IsClosed() || time.Since(first) > retryFor {
			if isStreamFull(err) {
				err = streamFull(err)
			}
			p.errs.set(fmt.Errorf("broker: stream did not store %d messages from %s on: %w", len(batch), batch[0].Subject, err))
			return
		}
		p.retries.Add(1)
		if !warned && time.Since(first) > batchWarnAfter {
			// Said once a batch, with the error: a publisher held this
			// long stalls its process (a party in a CI run stopped for
			// 30 s after a node's kill, and the debug lines were off).
			warned = true
			p.b.log.Warn().Err(err).Int("messages", len(batch)).Dur("trying", time.Since(first)).
				Msg("the stream has not stored a batch yet; still sending it again")
		} else {
			p.b.log.Debug().Err(err).Int("messages", len(batch)).Msg("publishing the batch again")
		}
		pause := retryPause
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, errKicked) {
			pause = 0
		}
		if pause > 0 {
			select {
			case <-time.After(pause):
			case <-p.kick:
			}
		}
	}
}

var errKicked = errors.New("broker: reconnected")

// batchWarnAfter is how long a batch may go unstored before the
// publisher says so (a fail-over takes a few seconds).
const batchWarnAfter = 10 * time.Second

// batchAck is the stream's answer to a batch's commit.
type batchAck struct {
	Error *struct {
		Code        int    `json:"code"`
		ErrCode     uint16 `json:"err_code"`
		Description string `json:"description"`
	} `json:"error"`
	Seq   uint64 `json:"seq"`
	Batch string `json:"batch"`
	Count int    `json:"count"`
}

// sendBatch sends batch once as an atomic batch and waits for its answer.
func (p *batchPub) sendBatch(batch []*nats.Msg) error {
	id := p.batchPrefix + strconv.FormatUint(p.nextBatch.Add(1), 36)
	last := len(batch) - 1
	for i, m := range batch {
		m.Header[batchIDHeader] = []string{id}
		m.Header[batchSeqHeader] = []string{strconv.Itoa(i + 1)}
		if i < last {
			delete(m.Header, batchCommitHeader)
			if err := p.nc.PublishMsg(m); err != nil {
				return err
			}
		}
	}
	batch[last].Header[batchCommitHeader] = []string{"1"}
	// Drop a kick from before this send: it concerns an earlier one.
	select {
	case <-p.kick:
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), publishAckTimeoutRetry)
	defer cancel()
	type answer struct {
		msg *nats.Msg
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		r, err := p.nc.RequestMsgWithContext(ctx, batch[last])
		ch <- answer{r, err}
	}()
	var a answer
	select {
	case a = <-ch:
	case <-p.kick:
		cancel()
		<-ch
		return errKicked
	}
	if a.err != nil {
		if errors.Is(a.err, nats.ErrNoResponders) {
			return jetstream.ErrNoStreamResponse
		}
		return a.err
	}
	var ack batchAck
	if err := json.Unmarshal(a.msg.Data, &ack); err != nil {
		return fmt.Errorf("broker: unreadable answer to a batch: %w", err)
	}
	if ack.Error != nil {
		return &jetstream.APIError{Code: ack.Error.Code, ErrorCode: jetstream.ErrorCode(ack.Error.ErrCode), Description: ack.Error.Description}
	}
	if ack.Batch != id || ack.Count != len(batch) {
		return fmt.Errorf("broker: the stream stored %d of a batch of %d (batch %q, sent %q)", ack.Count, len(batch), ack.Batch, id)
	}
	p.batches.Add(1)
	return nil
}

func isBatchDuplicate(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeBatchHasDuplicate
}

func isBatchIncomplete(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeBatchIncomplete
}

// reconnected: the batch in flight may have been written to the lost
// connection; it is sent again at once.
func (p *batchPub) reconnected() {
	p.mu.Lock()
	n := p.inflight
	p.mu.Unlock()
	if n > 0 {
		p.b.log.Info().Int("messages", n).Msg("sending the unconfirmed batch again after the reconnect (the stream drops copies)")
	}
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

func (p *batchPub) flush(ctx context.Context) error {
	p.mu.Lock()
	target := p.queued
	p.mu.Unlock()
	for {
		p.mu.Lock()
		if p.settled >= target {
			p.mu.Unlock()
			return p.errs.take()
		}
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (p *batchPub) pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue) + p.inflight
}

func (p *batchPub) duplicates() uint64 { return p.dups.Load() }
func (p *batchPub) takeErr() error     { return p.errs.take() }
