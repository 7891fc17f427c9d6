package broker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// The JetStream Bus publishes on core NATS and tracks the broker's
// answers itself, instead of through nats.go's PublishMsgAsync (which
// arms a timer and decodes a JSON ack per message, and allocates a
// future, a message and a reply subject for each).
//
// Two protocols, chosen per connection:
//
//   - Fast batches (nats-server 2.14+, stream with AllowBatchPublish): the
//     messages of a publisher form batches in gap-fail mode. The server
//     answers with a flow-control ack every N messages ("the messages up
//     to seq S are stored"), reports an error or a gap with the sequence
//     concerned and then ends the batch, and confirms the end of a batch
//     (commit) with a PubAck that counts the messages stored. A batch is
//     committed by Flush, after pubIdleCommit without publishing, and on
//     errors; the next message starts a new one.
//   - One ack per message (any server): the reply subject carries a
//     token, the ack is parsed without reflection.
//
// Both keep a copy of each message until it is confirmed, bound the
// unconfirmed messages by the Bus's window, and settle every message
// exactly once: confirmed, or failed with an error that Flush reports.
// A message is sent again when the broker says it was not stored (no
// responders: no stream or no stream leader yet, for up to
// pubNoRespBudget; its batch ended before it), and, if it has an ID (the
// broker's dedupe makes a second copy harmless), when its fate is unknown
// (no answer for pubStall, as when a clustered stream changes leader, or
// its batch vanished); at most pubMaxSends times. What is unconfirmed
// when the connection drops fails (as with nats.go): nothing is lost
// silently.

// Tuning of the publisher.
const (
	// pubIdleCommit: a batch with unconfirmed messages is committed after
	// this long without a publish, so that its tail is confirmed.
	pubIdleCommit = 5 * time.Millisecond
	// pubMaxFlow is the largest flow-control interval asked of the server
	// (it uses at most 500 divided by the number of publishing batches).
	pubMaxFlow = 500
	// pubMaxSends bounds the sends of one message.
	pubMaxSends = 5
	// pubNoRespBudget is how long a message is sent again while nothing
	// takes it ("no responders"), every pubRetryWait.
	pubNoRespBudget = 5 * time.Second
	pubRetryWait    = 250 * time.Millisecond
	// pubDupWait is the pause before sending again a message whose ID a
	// clustered stream is still storing.
	pubDupWait = 20 * time.Millisecond
	// pubStall: without any answer for this long, a batch is committed
	// (again), and a message with an ID is sent again (acks mode).
	pubStall = 2 * time.Second
	// pubCheckEvery is the period of the stall and timeout checks.
	pubCheckEvery = 250 * time.Millisecond
)

// Fast-batch protocol (nats-server stream.go, FastBatch). The reply subject
// of a message is <inbox>.<batch id>.<flow>.<gap mode>.<batch seq>.<op>.$FI.
const (
	fastSuffix   = ".$FI"
	fastOpStart  = "0"
	fastOpAppend = "1"
	fastOpEOB    = "3" // commit without a message of its own
	fastGapFail  = "fail"

	// Error codes (nats-server jetstream_errors_generated.go).
	errCodeBatchDisabled = 10205 // JSBatchPublishDisabledErr
	errCodeBatchUnknown  = 10208 // JSBatchPublishUnknownBatchIDErr
	errCodeBatchInflight = 10211 // JSBatchPublishTooManyInflight
	// A clustered stream is still storing a message with the same ID:
	// sent again a moment later, it is stored or reported duplicate.
	errCodeDupInProcess = 10158 // JSStreamDuplicateMessageConflict
)

type pubMode int

const (
	pubAcks pubMode = iota // one pub ack per message
	pubFast                // fast batches
)

// pubEntry is one unconfirmed message.
type pubEntry struct {
	subject string
	id      string
	hdr     []string // key, value, ... (the caller's strings; not its map)
	data    []byte   // own copy
	ep      *pubEpoch
	batch   *pubBatch // fast mode: its batch while in one
	seq     uint64    // batch sequence (fast) or reply token (acks)
	sends   int
	first   time.Time // first send
	sent    time.Time // last send
}

// pubBatch is one fast batch.
type pubBatch struct {
	id       string
	entries  []*pubEntry // by batch seq - 1; nil once settled or moved
	acked    int         // entries[:acked] are settled or moved
	ended    bool        // takes no more messages
	eobSeq   uint64      // the commit's batch sequence, once sent
	eobSends int
	heard    time.Time // last answer about the batch (or its start)
	sent     time.Time // last send in the batch (message or commit)
	last     string    // subject of its last message (the commit's)
}

// pubEpoch counts the unconfirmed messages published between two Flush
// calls.
type pubEpoch struct {
	n    int
	done chan struct{} // made when sealed, closed when n reaches 0
}

type publisher struct {
	nc    *nats.Conn
	slots chan struct{} // the Bus's window; released here
	dups  *atomic.Uint64
	log   *zerolog.Logger
	inbox string // reply subject prefix, ends with '.'
	flow  string // ".<flow>.fail."
	sub   *nats.Subscription

	mu      sync.Mutex
	mode    pubMode
	stopped bool
	free    []*pubEntry
	n       int // unconfirmed entries
	cur     *pubEpoch
	sealed  []*pubEpoch
	err     error // first failure since the last takeErr
	retry   []*pubEntry
	retryT  *time.Timer
	retryAt time.Time // zero: retryT not armed
	// acks mode
	token uint64
	pend  map[uint64]*pubEntry
	// fast mode
	batch    *pubBatch            // takes new messages; nil: start one
	batches  map[string]*pubBatch // not yet settled, by id
	batchPfx string
	batchN   uint64
	lastPub  time.Time
	idle     *time.Timer
	idleOn   bool
	check    *time.Timer
	checkOn  bool
	// reused for every send
	msg  nats.Msg
	hdr  nats.Header
	vals []string
	rbuf []byte
}

func newPublisher(nc *nats.Conn, mode pubMode, window int, slots chan struct{}, dups *atomic.Uint64, log *zerolog.Logger) (*publisher, error) {
	p := &publisher{
		nc:       nc,
		slots:    slots,
		dups:     dups,
		log:      log,
		inbox:    nc.NewInbox() + ".",
		flow:     "." + strconv.Itoa(max(1, min(pubMaxFlow, window/4))) + "." + fastGapFail + ".",
		mode:     mode,
		cur:      &pubEpoch{},
		pend:     make(map[uint64]*pubEntry),
		batches:  make(map[string]*pubBatch),
		batchPfx: strconv.FormatUint(rand.Uint64(), 36) + "-",
		hdr:      make(nats.Header),
	}
	p.idle = time.AfterFunc(time.Hour, p.onIdle)
	p.idle.Stop()
	p.check = time.AfterFunc(time.Hour, p.onCheck)
	p.check.Stop()
	p.retryT = time.AfterFunc(time.Hour, p.onRetry)
	p.retryT.Stop()
	sub, err := nc.Subscribe(p.inbox+">", p.onReply)
	if err != nil {
		return nil, fmt.Errorf("broker: subscribe to publish acks: %w", err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		sub.Unsubscribe()
		return nil, fmt.Errorf("broker: publish acks: %w", err)
	}
	p.sub = sub
	go p.watch(nc.StatusChanged(nats.RECONNECTING, nats.CLOSED))
	return p, nil
}

// publish sends m; the caller holds a window slot, which is released when
// the message is settled (or by the caller if publish fails).
func (p *publisher) publish(m *Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return ErrClosed
	}
	e := p.newEntryLocked(m)
	if err := p.sendLocked(e, time.Now()); err != nil {
		p.freeEntryLocked(e)
		return fmt.Errorf("broker: publish to %s: %w", m.Subject, err)
	}
	p.n++
	p.cur.n++
	e.ep = p.cur
	if p.mode == pubFast && !p.idleOn {
		p.idleOn = true
		p.idle.Reset(pubIdleCommit)
	}
	if !p.checkOn {
		p.checkOn = true
		p.check.Reset(pubCheckEvery)
	}
	return nil
}

func (p *publisher) newEntryLocked(m *Message) *pubEntry {
	var e *pubEntry
	if k := len(p.free); k > 0 {
		e = p.free[k-1]
		p.free = p.free[:k-1]
	} else {
		e = &pubEntry{}
	}
	e.subject, e.id = m.Subject, m.ID
	e.data = append(e.data[:0], m.Data...)
	e.hdr = e.hdr[:0]
	for k, v := range m.Header {
		e.hdr = append(e.hdr, k, v)
	}
	e.sends = 0
	return e
}

func (p *publisher) freeEntryLocked(e *pubEntry) {
	e.ep, e.batch = nil, nil
	e.subject, e.id = "", ""
	clear(e.hdr)
	if cap(e.data) > 64<<10 {
		e.data = nil
	}
	p.free = append(p.free, e)
}

// sendLocked hands e to the connection, in the current batch (fast) or
// under a new token (acks).
func (p *publisher) sendLocked(e *pubEntry, now time.Time) error {
	r := append(p.rbuf[:0], p.inbox...)
	var b *pubBatch
	if p.mode == pubFast {
		b = p.batch
		if b == nil {
			p.batchN++
			b = &pubBatch{id: p.batchPfx + strconv.FormatUint(p.batchN, 36), heard: now}
			p.batch = b
			p.batches[b.id] = b
		}
		b.entries = append(b.entries, e)
		e.batch, e.seq = b, uint64(len(b.entries))
		r = append(r, b.id...)
		r = append(r, p.flow...)
		r = strconv.AppendUint(r, e.seq, 10)
		if e.seq == 1 {
			r = append(r, "."+fastOpStart+fastSuffix...)
		} else {
			r = append(r, "."+fastOpAppend+fastSuffix...)
		}
	} else {
		p.token++
		e.seq = p.token
		r = strconv.AppendUint(r, e.seq, 10)
	}
	p.rbuf = r

	clear(p.hdr)
	p.vals = p.vals[:0]
	if e.id != "" {
		p.vals = append(p.vals, e.id)
	}
	for i := 1; i < len(e.hdr); i += 2 {
		p.vals = append(p.vals, e.hdr[i])
	}
	j := 0
	if e.id != "" {
		p.hdr[msgIDHeader] = p.vals[0:1:1]
		j = 1
	}
	for i := 0; i+1 < len(e.hdr); i += 2 {
		p.hdr[e.hdr[i]] = p.vals[j : j+1 : j+1]
		j++
	}
	p.msg.Subject = e.subject
	p.msg.Reply = string(r)
	p.msg.Data = e.data
	p.msg.Header = p.hdr
	err := p.nc.PublishMsg(&p.msg)
	p.msg.Data, p.msg.Reply = nil, ""
	if err != nil {
		if b != nil {
			b.entries = b.entries[:len(b.entries)-1]
			e.batch = nil
		}
		return err
	}
	if b != nil {
		b.last, b.sent = e.subject, now
	} else {
		p.pend[e.seq] = e
	}
	if e.sends == 0 {
		e.first = now
	}
	e.sends++
	e.sent = now
	p.lastPub = now
	return nil
}

// settleLocked ends e: confirmed (err == nil) or failed.
func (p *publisher) settleLocked(e *pubEntry, err error) {
	if err != nil {
		err = fmt.Errorf("broker: publish to %s: %w", e.subject, err)
		if p.err == nil {
			p.err = err
		}
		p.log.Warn().Err(err).Msg("asynchronous publish failed")
	}
	p.n--
	if ep := e.ep; ep != nil {
		ep.n--
		if ep.n == 0 && ep.done != nil {
			close(ep.done)
			p.sealed = slices.DeleteFunc(p.sealed, func(x *pubEpoch) bool { return x == ep })
		}
	}
	p.freeEntryLocked(e)
	<-p.slots
}

// resendLocked sends e again now, or fails it after pubMaxSends sends.
// The broker said e was not stored (or it has an ID, which makes a second
// copy harmless).
func (p *publisher) resendLocked(e *pubEntry, why error) {
	e.batch = nil
	if e.sends >= pubMaxSends {
		p.settleLocked(e, fmt.Errorf("not stored after %d sends: %w", e.sends, why))
		return
	}
	if err := p.sendLocked(e, time.Now()); err != nil {
		p.settleLocked(e, err)
	}
}

// inDoubtLocked handles a message that may or may not be stored: sent
// again if its ID makes a copy harmless, failed otherwise.
func (p *publisher) inDoubtLocked(e *pubEntry, why error) {
	if e.id == "" {
		e.batch = nil
		p.settleLocked(e, fmt.Errorf("unconfirmed, not sent again (no ID): %w", why))
		return
	}
	p.resendLocked(e, why)
}

// laterLocked sends e again after wait: nothing took it ("no responders",
// for up to pubNoRespBudget), or its ID is in process in a cluster.
func (p *publisher) laterLocked(e *pubEntry, why error, wait time.Duration) {
	e.batch = nil
	now := time.Now()
	if errors.Is(why, jetstream.ErrNoStreamResponse) && now.Sub(e.first) > pubNoRespBudget ||
		!errors.Is(why, jetstream.ErrNoStreamResponse) && e.sends >= pubMaxSends {
		p.settleLocked(e, why)
		return
	}
	p.retry = append(p.retry, e)
	if at := now.Add(wait); p.retryAt.IsZero() || at.Before(p.retryAt) {
		p.retryAt = at
		p.retryT.Reset(wait)
	}
}

func (p *publisher) onRetry() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.retryAt = time.Time{}
	if p.stopped {
		return
	}
	rs := p.retry
	p.retry = nil
	now := time.Now()
	for _, e := range rs {
		if err := p.sendLocked(e, now); err != nil {
			p.settleLocked(e, err)
		}
	}
}

// onReply handles the broker's answers on the inbox.
func (p *publisher) onReply(m *nats.Msg) {
	if len(m.Subject) <= len(p.inbox) {
		return
	}
	tail := m.Subject[len(p.inbox):]
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return
	}
	if strings.HasSuffix(tail, fastSuffix) {
		p.onFastReply(tail, m)
		return
	}
	tok, err := strconv.ParseUint(tail, 10, 64)
	if err != nil {
		return
	}
	e := p.pend[tok]
	if e == nil {
		return // settled already, or sent again under another token
	}
	delete(p.pend, tok)
	if noResponders(m) {
		p.laterLocked(e, jetstream.ErrNoStreamResponse, pubRetryWait)
		return
	}
	ack, err := parsePubAck(m.Data)
	switch {
	case err != nil:
		p.settleLocked(e, err)
	case ack.Error != nil && int(ack.Error.ErrorCode) == errCodeDupInProcess:
		p.laterLocked(e, ack.Error, pubDupWait)
	case ack.Error != nil:
		p.settleLocked(e, ack.Error)
	default:
		if ack.Duplicate {
			p.dups.Add(1)
		}
		p.settleLocked(e, nil)
	}
}

// onFastReply handles an answer about a fast batch: tail is
// <batch id>.<flow>.<gap>.<seq>.<op>.$FI, the reply subject of the
// message (or commit) the answer is about.
func (p *publisher) onFastReply(tail string, m *nats.Msg) {
	t := strings.Split(tail[:len(tail)-len(fastSuffix)], ".")
	if len(t) != 5 {
		return
	}
	b := p.batches[t[0]]
	seq, err := strconv.ParseUint(t[3], 10, 64)
	if b == nil || err != nil || seq == 0 {
		return // a settled batch: its late answers change nothing
	}
	b.heard = time.Now()
	k := int(min(seq, uint64(len(b.entries)+1))) - 1 // index of the message concerned
	if noResponders(m) {
		// Nothing took message seq (no stream, or no leader yet), nor
		// any later one of the batch: they go again later, in a new
		// batch. The earlier ones reached the stream; a commit at seq
		// gets them confirmed.
		p.endBatchLocked(b)
		for i := k; i < len(b.entries); i++ {
			if e := b.entries[i]; e != nil {
				b.entries[i] = nil
				p.laterLocked(e, jetstream.ErrNoStreamResponse, pubRetryWait)
			}
		}
		if b.eobSeq == 0 && seq > 1 {
			p.sendEOBLocked(b, seq)
		}
		p.maybeDropLocked(b)
		return
	}
	d := m.Data
	switch {
	case bytes.HasPrefix(d, []byte(`{"type":"ack"`)):
		if s, ok := jsonUint(d, `"seq":`); ok {
			p.confirmLocked(b, int(min(s, uint64(len(b.entries)))))
			p.maybeDropLocked(b)
		}
		return
	case bytes.HasPrefix(d, []byte(`{"type":"gap"`)):
		// Messages got lost on the way: the batch ends, and its PubAck
		// counts those stored.
		p.endBatchLocked(b)
		return
	case bytes.HasPrefix(d, []byte(`{"type":"err"`)):
		// Message seq failed; the batch ends and its PubAck follows.
		var fe struct {
			Seq   uint64              `json:"seq"`
			Error *jetstream.APIError `json:"error"`
		}
		if json.Unmarshal(d, &fe) != nil || fe.Error == nil {
			return
		}
		p.endBatchLocked(b)
		if i := int(fe.Seq) - 1; i >= b.acked && i < len(b.entries) {
			if e := b.entries[i]; e != nil {
				b.entries[i] = nil
				if int(fe.Error.ErrorCode) == errCodeDupInProcess {
					p.laterLocked(e, fe.Error, pubDupWait)
				} else {
					p.settleLocked(e, fe.Error)
				}
			}
		}
		return
	}
	ack, err := parsePubAck(d)
	if err != nil {
		return
	}
	p.endBatchLocked(b)
	delete(p.batches, b.id)
	if ack.Error == nil || ack.Batch != "" {
		// The batch's end: its first Count messages are stored (or were
		// duplicates), the later ones are not.
		if ack.Duplicate {
			p.dups.Add(1)
		}
		n := int(min(ack.Count, uint64(len(b.entries))))
		if ack.Batch == "" {
			n = k + 1
		}
		p.confirmLocked(b, n)
		why := error(errBatchEnded)
		if ack.Error != nil {
			why = ack.Error
		}
		p.resendFromLocked(b, n, why)
		return
	}
	// An error about message seq, not the batch's end: seq was not
	// stored, neither were later ones; the batch is gone (or never was),
	// so the fate of earlier unconfirmed ones is unknown.
	code := int(ack.Error.ErrorCode)
	if (code == errCodeBatchDisabled || code == errCodeBatchInflight) && p.mode == pubFast {
		// The stream does not take batches (any more), or too many:
		// one ack per message from now on.
		p.mode = pubAcks
		p.log.Warn().Err(ack.Error).Msg("no batch publishing; using one ack per message")
	}
	if k < len(b.entries) {
		if e := b.entries[k]; e != nil {
			b.entries[k] = nil
			switch code {
			case errCodeBatchDisabled, errCodeBatchInflight, errCodeBatchUnknown:
				p.resendLocked(e, ack.Error)
			case errCodeDupInProcess:
				p.laterLocked(e, ack.Error, pubDupWait)
			default:
				p.settleLocked(e, ack.Error)
			}
		}
	}
	p.resendFromLocked(b, k+1, ack.Error)
	for i := b.acked; i < min(k, len(b.entries)); i++ {
		if e := b.entries[i]; e != nil {
			b.entries[i] = nil
			p.inDoubtLocked(e, ack.Error)
		}
	}
}

var errBatchEnded = errors.New("batch ended before the message")

// confirmLocked confirms the batch's messages up to n.
func (p *publisher) confirmLocked(b *pubBatch, n int) {
	for ; b.acked < n; b.acked++ {
		if e := b.entries[b.acked]; e != nil {
			b.entries[b.acked] = nil
			p.settleLocked(e, nil)
		}
	}
}

// resendFromLocked sends the batch's unsettled messages from index i on
// again: the broker did not store them.
func (p *publisher) resendFromLocked(b *pubBatch, i int, why error) {
	for ; i < len(b.entries); i++ {
		if e := b.entries[i]; e != nil {
			b.entries[i] = nil
			p.resendLocked(e, why)
		}
	}
}

// endBatchLocked makes later messages go to a new batch.
func (p *publisher) endBatchLocked(b *pubBatch) {
	b.ended = true
	if p.batch == b {
		p.batch = nil
	}
}

// maybeDropLocked forgets an ended batch with nothing left to settle.
func (p *publisher) maybeDropLocked(b *pubBatch) {
	if !b.ended {
		return
	}
	for _, e := range b.entries[b.acked:] {
		if e != nil {
			return
		}
	}
	delete(p.batches, b.id)
}

// commitLocked commits the current batch (if it has messages): the broker
// confirms the rest of it with a PubAck.
func (p *publisher) commitLocked() {
	b := p.batch
	if b == nil || len(b.entries) == 0 {
		return
	}
	p.endBatchLocked(b)
	p.sendEOBLocked(b, uint64(len(b.entries))+1)
}

// sendEOBLocked sends the end-of-batch commit with batch sequence seq.
func (p *publisher) sendEOBLocked(b *pubBatch, seq uint64) {
	b.eobSeq = seq
	b.eobSends++
	b.sent = time.Now()
	r := append(p.rbuf[:0], p.inbox...)
	r = append(r, b.id...)
	r = append(r, p.flow...)
	r = strconv.AppendUint(r, seq, 10)
	r = append(r, "."+fastOpEOB+fastSuffix...)
	p.rbuf = r
	if err := p.nc.PublishRequest(b.last, string(r), nil); err != nil {
		p.log.Debug().Err(err).Msg("batch commit")
	}
}

// onIdle commits the current batch once no message was published for
// pubIdleCommit.
func (p *publisher) onIdle() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.idleOn = false
	if p.stopped || p.batch == nil {
		return
	}
	if d := time.Since(p.lastPub); d < pubIdleCommit {
		p.idleOn = true
		p.idle.Reset(pubIdleCommit - d)
		return
	}
	p.commitLocked()
}

// onCheck deals with silence: a batch that got no answer for pubStall is
// committed (again); after pubMaxSends commits, or for a message without
// a batch (acks mode), what has an ID is sent again; what is unconfirmed
// after publishAckTimeout fails.
func (p *publisher) onCheck() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.checkOn = false
	if p.stopped {
		return
	}
	now := time.Now()
	for tok, e := range p.pend {
		switch {
		case now.Sub(e.first) > publishAckTimeout:
			delete(p.pend, tok)
			p.settleLocked(e, jetstream.ErrAsyncPublishTimeout)
		case now.Sub(e.sent) > pubStall && e.id != "" && e.sends < pubMaxSends:
			delete(p.pend, tok)
			p.resendLocked(e, jetstream.ErrAsyncPublishTimeout)
		}
	}
	for _, b := range p.batches {
		for i := b.acked; i < len(b.entries); i++ {
			if e := b.entries[i]; e != nil && now.Sub(e.first) > publishAckTimeout {
				b.entries[i] = nil
				p.settleLocked(e, jetstream.ErrAsyncPublishTimeout)
			}
		}
		p.maybeDropLocked(b)
		if now.Sub(b.heard) < pubStall || now.Sub(b.sent) < pubStall {
			continue
		}
		switch {
		case b.eobSeq == 0:
			p.endBatchLocked(b)
			p.sendEOBLocked(b, uint64(len(b.entries))+1)
		case b.eobSends < pubMaxSends:
			p.sendEOBLocked(b, b.eobSeq)
		default:
			delete(p.batches, b.id)
			for i := b.acked; i < len(b.entries); i++ {
				if e := b.entries[i]; e != nil {
					b.entries[i] = nil
					p.inDoubtLocked(e, jetstream.ErrAsyncPublishTimeout)
				}
			}
		}
	}
	if p.n > 0 {
		p.checkOn = true
		p.check.Reset(pubCheckEvery)
	}
}

// watch fails what is unconfirmed when the connection drops: the answers
// may never come (nats.go does the same with its asynchronous publishes).
func (p *publisher) watch(ch chan nats.Status) {
	for st := range ch {
		p.failAll(nats.ErrDisconnected)
		if st == nats.CLOSED {
			return
		}
	}
}

// failAll fails every unconfirmed message with err.
func (p *publisher) failAll(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failAllLocked(err)
}

func (p *publisher) failAllLocked(err error) {
	for tok, e := range p.pend {
		delete(p.pend, tok)
		p.settleLocked(e, err)
	}
	for id, b := range p.batches {
		for i := b.acked; i < len(b.entries); i++ {
			if e := b.entries[i]; e != nil {
				b.entries[i] = nil
				p.settleLocked(e, err)
			}
		}
		delete(p.batches, id)
	}
	p.batch = nil
	rs := p.retry
	p.retry = nil
	for _, e := range rs {
		p.settleLocked(e, err)
	}
}

// seal closes the current epoch, commits the current batch and returns
// every epoch to wait for.
func (p *publisher) seal() []*pubEpoch {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur.n > 0 {
		p.cur.done = make(chan struct{})
		p.sealed = append(p.sealed, p.cur)
		p.cur = &pubEpoch{}
	}
	if p.mode == pubFast {
		p.commitLocked()
	}
	return slices.Clone(p.sealed)
}

func (p *publisher) takeErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	err := p.err
	p.err = nil
	return err
}

func (p *publisher) pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// stop fails what is left (the connection is closing) and stops the
// timers.
func (p *publisher) stop(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failAllLocked(err)
	p.stopped = true
	p.idle.Stop()
	p.check.Stop()
	p.retryT.Stop()
}

func noResponders(m *nats.Msg) bool {
	return len(m.Data) == 0 && m.Header.Get("Status") == "503"
}

// pubAck is the broker's answer to a publish.
type pubAck struct {
	Error     *jetstream.APIError
	Duplicate bool
	Batch     string
	Count     uint64
}

// parsePubAck reads a PubAck ({"stream":"S","seq":N[,"duplicate":true]
// [,"batch":"id","count":C]}) without reflection, and an error answer
// ({"error":{...},...}) with encoding/json.
func parsePubAck(d []byte) (pubAck, error) {
	var a pubAck
	if !bytes.HasPrefix(d, []byte(`{"stream":`)) {
		var r struct {
			Error *jetstream.APIError `json:"error"`
			Batch string              `json:"batch"`
			Count uint64              `json:"count"`
		}
		if err := json.Unmarshal(d, &r); err != nil || (r.Error == nil && r.Batch == "") {
			return a, jetstream.ErrInvalidJSAck
		}
		a.Error, a.Batch, a.Count = r.Error, r.Batch, r.Count
		return a, nil
	}
	if bytes.Contains(d, []byte(`"error":`)) {
		return parsePubAckSlow(d)
	}
	if _, ok := jsonUint(d, `"seq":`); !ok {
		return a, jetstream.ErrInvalidJSAck
	}
	a.Duplicate = bytes.Contains(d, []byte(`"duplicate":true`)) || bytes.Contains(d, []byte(`"duplicate": true`))
	if i := bytes.Index(d, []byte(`"batch":"`)); i >= 0 {
		rest := d[i+len(`"batch":"`):]
		if j := bytes.IndexByte(rest, '"'); j >= 0 {
			a.Batch = string(rest[:j])
		}
		a.Count, _ = jsonUint(d, `"count":`)
	}
	return a, nil
}

func parsePubAckSlow(d []byte) (pubAck, error) {
	var r struct {
		Error     *jetstream.APIError `json:"error"`
		Duplicate bool                `json:"duplicate"`
		Batch     string              `json:"batch"`
		Count     uint64              `json:"count"`
	}
	if err := json.Unmarshal(d, &r); err != nil || r.Error == nil {
		return pubAck{}, jetstream.ErrInvalidJSAck
	}
	return pubAck{Error: r.Error, Duplicate: r.Duplicate, Batch: r.Batch, Count: r.Count}, nil
}

// jsonUint reads the unsigned number after key in a flat JSON object.
func jsonUint(d []byte, key string) (uint64, bool) {
	i := bytes.Index(d, []byte(key))
	if i < 0 {
		return 0, false
	}
	d = d[i+len(key):]
	for len(d) > 0 && d[0] == ' ' {
		d = d[1:]
	}
	var v uint64
	n := 0
	for ; n < len(d) && d[n] >= '0' && d[n] <= '9'; n++ {
		v = v*10 + uint64(d[n]-'0')
	}
	return v, n > 0
}
