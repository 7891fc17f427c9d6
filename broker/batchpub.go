package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
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
	renamed atomic.Uint64 // messages sent again under a new ID (stuck in process)
	twice   atomic.Uint64 // of them, found stored under the old ID too

	known answeredSubjects

	// Of the send goroutine alone: the stream sequence of the last
	// message stored (every later batch lands after it), and whether the
	// server refused this user the stream's messages (no probe then).
	lastSeq     uint64
	probeDenied bool

	// answer, if set (tests), answers a send of batch in the stream's
	// place when its second result is true.
	answer func(batch []*nats.Msg) (error, bool)
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
	floor := p.lastSeq // the batch lands after this
	warned := false
	var inProcess time.Time // since when the stream answers only 10158
	var oldIDs []string     // the first message's IDs before a rename
	kept := false           // said that a caller's ID is kept
	for {
		sent := time.Now()
		err := p.sendBatch(batch)
		var apiErr *jetstream.APIError
		switch {
		case silence(err):
			p.b.streamSilent(sent)
		case err == nil || errors.As(err, &apiErr):
			p.b.streamAnswered()
		}
		if err == nil {
			if oldIDs != nil {
				p.checkTwice(batch, floor, oldIDs)
			}
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
		if !isDupInProcess(err) {
			inProcess = time.Time{}
		} else if inProcess.IsZero() {
			inProcess = time.Now()
		} else if time.Since(inProcess) >= dupStallAfter {
			inProcess = time.Time{}
			if p.unstick(batch, floor, &oldIDs, &kept) {
				return
			}
		}
		if !retryable(err) && !isBatchIncomplete(err) && !isDupInProcess(err) || p.nc.IsClosed() || time.Since(first) > retryFor {
			if isStreamFull(err) {
				err = streamFull(err)
			}
			if isDupInProcess(err) {
				err = fmt.Errorf("%w (the stream keeps the message's ID %s as still being stored, as a stream leader change can leave it, until its dedupe window drops it)", err, batch[0].Header.Get(msgIDHeader))
			}
			p.b.streamAnswered() // publishing has failed for good: no longer an outage
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

// dupStallAfter is how long the stream may answer a batch only with
// "duplicate message id is in process" (10158) before the publisher looks
// whether the message is stored. A copy sent while the first is being
// stored gets that answer for a moment; but a stream leader change can
// leave an ID marked in process that no entry will ever complete
// (nats-server clears such marks only from the end of its list, up to the
// first message stored after them), and then every copy gets it until the
// stream's dedupe window (2 minutes) drops the ID.
var dupStallAfter = 5 * time.Second

// unstick handles a batch the stream keeps answering with 10158: if the
// stream holds its first message (the batch is stored whole or not at
// all), the batch is done, as a duplicate; otherwise, if every message has
// an ID of the publisher's own making, each gets a new one (its old is
// added to *old) and the batch is sent again. True if the batch is done.
// A caller's own IDs are kept: the publisher goes on until retryFor.
func (p *batchPub) unstick(batch []*nats.Msg, floor uint64, old *[]string, kept *bool) bool {
	m := batch[0]
	id := m.Header.Get(msgIDHeader)
	ids := append(*old, id)
	stored, err := p.findStored(m.Subject, floor, 0, ids)
	if err == nil && stored != "" {
		p.dups.Add(uint64(len(batch)))
		p.b.log.Info().Str("id", stored).Int("messages", len(batch)).
			Msg("the stream holds the batch it kept calling in process (error 10158): done")
		return true
	}
	for _, m := range batch {
		if !strings.HasPrefix(m.Header.Get(msgIDHeader), retryIDPrefix) {
			if *kept {
				return false
			}
			*kept = true
			p.b.log.Warn().Str("id", id).AnErr("unread", err).
				Msg("the stream keeps the batch's message ID as in process (error 10158) and does not hold the message (unless it could not be read); the caller's ID is kept, so the publisher waits until the stream's dedupe window drops it")
			return false
		}
	}
	for _, m := range batch {
		m.Header[msgIDHeader] = []string{p.idPrefix + strconv.FormatUint(p.nextID.Add(1), 36)}
	}
	*old = ids
	p.renamed.Add(uint64(len(batch)))
	ev := p.b.log.Warn().Str("id", id).Str("new", batch[0].Header.Get(msgIDHeader)).Int("messages", len(batch))
	if err == nil {
		ev.Msg("the stream keeps the batch's message ID as in process (error 10158) but does not hold it: sending the batch again under new IDs")
	} else {
		ev.Err(err).Msg("the stream keeps the batch's message ID as in process (error 10158) and could not be read to see whether it holds it: sending the batch again under new IDs (should the stream hold both copies, a receiver that checks its sender's sequence refuses the second)")
	}
	return false
}

// checkTwice looks, once a renamed batch is stored, whether a copy under
// an old ID landed too (before it: an entry still on its way when the
// batch was renamed is stored before the renamed one, or never), and says
// so: the stream then holds the batch twice.
func (p *batchPub) checkTwice(batch []*nats.Msg, floor uint64, oldIDs []string) {
	// Below the renamed batch's last message: its own IDs are new.
	stored, err := p.findStored(batch[0].Subject, floor, p.lastSeq, oldIDs)
	switch {
	case err != nil:
		p.b.log.Warn().Err(err).Int("messages", len(batch)).Strs("old", oldIDs).
			Msg("a batch sent again under new IDs is stored; whether a copy under an old ID is stored too is unknown (the stream could not be read): if so, a receiver that checks its sender's sequence refuses the second")
	case stored != "":
		p.twice.Add(uint64(len(batch)))
		p.b.log.Warn().Int("messages", len(batch)).Str("old", stored).
			Msg("the stream holds a batch twice: the copy under its old ID, kept in process (10158), was stored after all; a receiver that checks its sender's sequence refuses the second")
	}
}

// Looking for a message in the stream (STREAM.MSG.GET, answered by the
// stream's leader, the server that answers 10158): at most probeMsgs
// messages on the subject, each asked within probeTimeout (a user denied
// the call gets no answer).
const probeMsgs = 1000

var probeTimeout = 2 * time.Second

// storedMsg is the stream's answer to a message get.
type storedMsg struct {
	Message *struct {
		Seq    uint64 `json:"seq"`
		Header []byte `json:"hdrs"`
	} `json:"message"`
	Error *struct {
		Code    int    `json:"code"`
		ErrCode uint16 `json:"err_code"`
	} `json:"error"`
}

// findStored looks among the stream's messages on subject after sequence
// floor (and before sequence below, unless 0) for one whose Nats-Msg-Id is
// in ids: the ID found, or "", or why the stream could not be read through.
func (p *batchPub) findStored(subject string, floor, below uint64, ids []string) (string, error) {
	if p.probeDenied {
		return "", errProbeDenied
	}
	// The last message on the subject first: in the common cases the one
	// looked for, or none after floor.
	seq, id, err := p.getMsg(fmt.Appendf(nil, `{"last_by_subj":%q}`, subject))
	if err != nil || seq <= floor {
		return "", err
	}
	last := seq
	if (below == 0 || seq < below) && slices.Contains(ids, id) {
		return id, nil
	}
	seq = floor
	for range probeMsgs {
		if seq, id, err = p.getMsg(fmt.Appendf(nil, `{"seq":%d,"next_by_subj":%q}`, seq+1, subject)); err != nil {
			return "", err
		}
		if seq == 0 || seq >= last || below != 0 && seq >= below {
			return "", nil
		}
		if slices.Contains(ids, id) {
			return id, nil
		}
	}
	return "", fmt.Errorf("broker: more than %d messages on %s to look through", probeMsgs, subject)
}

// errProbeDenied: the server refused this user the stream's messages.
var errProbeDenied = errors.New("broker: this user may not read the stream's messages")

// getMsg asks the stream for a message: its sequence (0: none) and ID.
func (p *batchPub) getMsg(req []byte) (uint64, string, error) {
	r, err := p.nc.Request("$JS.API.STREAM.MSG.GET."+p.b.stream, req, probeTimeout)
	if err != nil {
		if errors.Is(err, nats.ErrPermissionViolation) || p.b.deniedAPI("STREAM.MSG.GET") != "" {
			p.probeDenied = true
			return 0, "", errProbeDenied
		}
		return 0, "", fmt.Errorf("broker: message get: %w", err)
	}
	var sm storedMsg
	if err := json.Unmarshal(r.Data, &sm); err != nil {
		return 0, "", fmt.Errorf("broker: unreadable answer to a message get: %w", err)
	}
	switch {
	case sm.Error != nil && sm.Error.Code == 404:
		return 0, "", nil
	case sm.Error != nil:
		return 0, "", fmt.Errorf("broker: message get: error %d (%d)", sm.Error.Code, sm.Error.ErrCode)
	case sm.Message == nil || sm.Message.Seq == 0:
		return 0, "", errors.New("broker: message get: no message in the answer")
	}
	return sm.Message.Seq, headerValue(sm.Message.Header, msgIDHeader), nil
}

// headerValue is header key's value in a stored message's raw headers
// ("NATS/1.0\r\nKey: value\r\n...").
func headerValue(raw []byte, key string) string {
	for line := range bytes.SplitSeq(raw, []byte("\r\n")) {
		k, v, ok := bytes.Cut(line, []byte(":"))
		if ok && strings.EqualFold(string(bytes.TrimSpace(k)), key) {
			return string(bytes.TrimSpace(v))
		}
	}
	return ""
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
	if p.answer != nil {
		if err, ok := p.answer(batch); ok {
			return err
		}
	}
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
	p.lastSeq = max(p.lastSeq, ack.Seq)
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
