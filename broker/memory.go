package broker

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"
)

// MemoryHub is an in-memory message log with the semantics of a run's
// JetStream stream: every message is kept (the audit log), stream
// sequences start at 1, IDs are deduplicated within a window, durable
// subscriptions resume after their last Ack. Participants each get a Bus
// handle from Connect. It is the no-broker baseline and the Bus of fast
// tests. A MemoryHub holds every subject; it has no run prefix.
type MemoryHub struct {
	window time.Duration
	start  time.Time // monotonic base for dedupe expiry

	mu       sync.Mutex
	blocks   [][]memMsg // message seq s is blocks[(s-1)/memBlock][(s-1)%memBlock]
	last     uint64     // last stream sequence
	data     []byte     // arena for small payloads
	kv       []string   // arena for header key/value pairs
	subjects map[string]*memSubject
	// Dedupe: IDs inside the window, by hash, mapped to the sequence of the
	// message carrying them (compared on a hit, so a hash collision is
	// never taken for a duplicate; colliding IDs go to idc). Keys and
	// values hold no pointers: the garbage collector does not scan them.
	seed     maphash.Seed
	ids      map[uint64]uint64
	idc      map[string]uint64
	idq      []memID // the same IDs, oldest first, from idq[idqHead]
	idqHead  int
	subs     []*memSub // live subscriptions, for fan-out
	durables map[string]*memDurable
}

const (
	memBlock      = 1024      // messages per log block
	memArena      = 256 << 10 // bytes per payload arena chunk
	memArenaLimit = 4 << 10   // larger payloads get their own allocation
	memKVArena    = 1024      // strings per header arena chunk
	memScan       = 4096      // log entries scanned per lock hold during catch-up
)

type memMsg struct {
	seq     uint64
	subject string
	id      string
	hdr     []string // key, value, key, value, ...
	data    []byte
}

type memSubject struct {
	name string
	n    uint64
}

type memID struct {
	hash    uint64
	seq     uint64
	expires time.Duration // since hub.start
}

type memDurable struct {
	floor  uint64 // last acknowledged stream sequence
	active bool
}

// MemoryOption configures a MemoryHub.
type MemoryOption func(*MemoryHub)

// NewMemoryHub returns an empty hub.
func NewMemoryHub(opts ...MemoryOption) *MemoryHub {
	h := &MemoryHub{
		window:   defaultDuplicates,
		start:    time.Now(),
		subjects: make(map[string]*memSubject),
		seed:     maphash.MakeSeed(),
		ids:      make(map[uint64]uint64),
		durables: make(map[string]*memDurable),
	}
	for _, o := range opts {
		o(h)
	}
	return h
}

// Connect returns a new participant handle on the hub. name is for
// diagnostics. Closing the handle closes only its own subscriptions.
func (h *MemoryHub) Connect(name string) *MemoryBus {
	return &MemoryBus{hub: h, name: name, subs: make(map[*memSub]struct{})}
}

// Len is the number of stored messages (the last stream sequence).
func (h *MemoryHub) Len() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last
}

// msgLocked returns the stored message with sequence seq (1..last).
func (h *MemoryHub) msgLocked(seq uint64) *memMsg {
	i := seq - 1
	return &h.blocks[i/memBlock][i%memBlock]
}

// storeLocked appends m to the log and returns the stored copy, or nil if
// m.ID is a duplicate within the window.
func (h *MemoryHub) storeLocked(m *Message) *memMsg {
	if m.ID != "" && !h.rememberIDLocked(m.ID) {
		return nil
	}
	i := h.last
	if i%memBlock == 0 {
		h.blocks = append(h.blocks, make([]memMsg, memBlock))
	}
	h.last++
	sm := &h.blocks[i/memBlock][i%memBlock]
	sm.seq = h.last
	sm.id = m.ID
	subj := h.subjects[m.Subject]
	if subj == nil {
		subj = &memSubject{name: m.Subject}
		h.subjects[m.Subject] = subj
	}
	subj.n++
	sm.subject = subj.name
	switch n := len(m.Data); {
	case n == 0:
	case n > memArenaLimit:
		sm.data = append([]byte(nil), m.Data...)
	default:
		if cap(h.data)-len(h.data) < n {
			h.data = make([]byte, 0, memArena)
		}
		off := len(h.data)
		h.data = append(h.data, m.Data...)
		sm.data = h.data[off:len(h.data):len(h.data)]
	}
	if n := 2 * len(m.Header); n > 0 {
		if cap(h.kv)-len(h.kv) < n {
			h.kv = make([]string, 0, max(memKVArena, n))
		}
		off := len(h.kv)
		for k, v := range m.Header {
			h.kv = append(h.kv, k, v)
		}
		sm.hdr = h.kv[off:len(h.kv):len(h.kv)]
	}
	return sm
}

// rememberIDLocked records id for the message about to be stored as
// last+1, or returns false if id is stored within the window.
func (h *MemoryHub) rememberIDLocked(id string) bool {
	now := time.Since(h.start)
	h.expireIDsLocked(now)
	seq := h.last + 1
	hash := maphash.String(h.seed, id)
	if old, ok := h.ids[hash]; !ok {
		h.ids[hash] = seq
	} else {
		if h.msgLocked(old).id == id {
			return false
		}
		if _, ok := h.idc[id]; ok {
			return false
		}
		if h.idc == nil {
			h.idc = make(map[string]uint64)
		}
		h.idc[id] = seq
	}
	h.idq = append(h.idq, memID{hash: hash, seq: seq, expires: now + h.window})
	return true
}

func (h *MemoryHub) expireIDsLocked(now time.Duration) {
	for h.idqHead < len(h.idq) && h.idq[h.idqHead].expires <= now {
		e := h.idq[h.idqHead]
		if h.ids[e.hash] == e.seq {
			delete(h.ids, e.hash)
		} else if id := h.msgLocked(e.seq).id; h.idc[id] == e.seq {
			delete(h.idc, id)
		}
		h.idqHead++
	}
	if h.idqHead > 1024 && h.idqHead > len(h.idq)/2 {
		n := copy(h.idq, h.idq[h.idqHead:])
		h.idq = h.idq[:n]
		h.idqHead = 0
	}
}

// MemoryBus is one participant's handle on a MemoryHub. It implements Bus.
// Publish is synchronous: when it returns nil the message is stored and
// fanned out, so Flush has nothing to wait for.
type MemoryBus struct {
	hub  *MemoryHub
	name string
	dups atomic.Uint64
	ctr  counters

	closed atomic.Bool
	mu     sync.Mutex
	subs   map[*memSub]struct{}
}

var _ Bus = (*MemoryBus)(nil)

// Name is the name given to Connect.
func (b *MemoryBus) Name() string { return b.name }

// Design is DesignMemory.
func (b *MemoryBus) Design() Design { return DesignMemory }

// Duplicates is the number of messages this handle published whose ID was
// already stored within the dedupe window.
func (b *MemoryBus) Duplicates() uint64 { return b.dups.Load() }

// Publish stores m and hands it to every matching live subscription. It
// returns ErrDuplicate if m.ID was stored within the dedupe window.
func (b *MemoryBus) Publish(ctx context.Context, m *Message) error {
	if b.closed.Load() {
		return ErrClosed
	}
	if err := checkMessage(m); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	h := b.hub
	h.mu.Lock()
	sm := h.storeLocked(m)
	if sm == nil {
		h.mu.Unlock()
		b.dups.Add(1)
		return ErrDuplicate
	}
	for _, s := range h.subs {
		if !s.match(sm.subject) {
			continue
		}
		s.queue = append(s.queue, sm)
		if len(s.queue) == 1 {
			select {
			case s.wake <- struct{}{}:
			default:
			}
		}
	}
	h.mu.Unlock()
	b.ctr.published(len(m.Data))
	return nil
}

// Stats returns the handle's traffic counters (the Wire fields are zero:
// there is no wire).
func (b *MemoryBus) Stats() Stats { return b.ctr.stats() }

// Flush returns nil: Publish is synchronous.
func (b *MemoryBus) Flush(ctx context.Context) error {
	if b.closed.Load() {
		return ErrClosed
	}
	return ctx.Err()
}

// Count is the number of stored messages whose subject matches filter.
func (b *MemoryBus) Count(ctx context.Context, filter string) (uint64, error) {
	if b.closed.Load() {
		return 0, ErrClosed
	}
	if err := checkFilter(filter); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	h := b.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	var n uint64
	for _, s := range h.subjects {
		if SubjectMatch(filter, s.name) {
			n += s.n
		}
	}
	return n, nil
}

// Subscribe starts a subscription; see Bus. A durable name may have only
// one live subscription at a time (ErrInvalid otherwise).
func (b *MemoryBus) Subscribe(ctx context.Context, filters []string, opts SubscribeOptions, hd Handler) (Subscription, error) {
	if b.closed.Load() {
		return nil, ErrClosed
	}
	if hd == nil {
		return nil, fmt.Errorf("%w: nil handler", ErrInvalid)
	}
	if err := checkFilters(filters); err != nil {
		return nil, err
	}
	if opts.Durable != "" {
		if err := checkName("durable", opts.Durable); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := &memSub{
		hub:      b.hub,
		bus:      b,
		durable:  opts.Durable,
		handler:  hd,
		wake:     make(chan struct{}, 1),
		finished: make(chan struct{}),
	}
	for _, f := range filters {
		s.filters = append(s.filters, newMatcher(f))
	}
	s.ctx, s.cancel = context.WithCancel(ctx)
	s.stopWatch = context.AfterFunc(ctx, s.stop)
	s.d.sub = s

	h := b.hub
	h.mu.Lock()
	start := uint64(1)
	switch {
	case opts.StartSeq > 0:
		start = opts.StartSeq
	case opts.Deliver == DeliverNew:
		start = h.last + 1
	}
	if s.durable != "" {
		d := h.durables[s.durable]
		switch {
		case d == nil:
			h.durables[s.durable] = &memDurable{floor: start - 1, active: true}
		case d.active:
			h.mu.Unlock()
			s.stopWatch()
			s.cancel()
			return nil, fmt.Errorf("%w: durable %q already has a live subscription", ErrInvalid, s.durable)
		default:
			d.active = true
			start = d.floor + 1
		}
		s.acked = start - 1
	}
	s.next, s.end, s.from = start, h.last, start
	if opts.StartSeq > 0 {
		for seq := start; seq <= h.last; seq++ {
			if s.match(h.msgLocked(seq).subject) {
				s.pending0++
			}
		}
		s.counted = true
	}
	h.subs = append(h.subs, s)
	h.mu.Unlock()

	b.mu.Lock()
	b.subs[s] = struct{}{}
	b.mu.Unlock()
	go s.run()
	if b.closed.Load() {
		// Close may have missed s; closing twice is harmless.
		s.Close()
		return nil, ErrClosed
	}
	return s, nil
}

// Close closes the handle's subscriptions; further calls return ErrClosed.
func (b *MemoryBus) Close() error {
	if b.closed.Swap(true) {
		return nil
	}
	b.mu.Lock()
	subs := make([]*memSub, 0, len(b.subs))
	for s := range b.subs {
		subs = append(subs, s)
	}
	b.mu.Unlock()
	for _, s := range subs {
		s.Close()
	}
	return nil
}

// memSub is a live subscription on a MemoryHub. One goroutine (run)
// delivers: first the stored messages in [next, end] (catch-up, read from
// the log in chunks), then the live queue filled by Publish.
type memSub struct {
	hub       *MemoryHub
	bus       *MemoryBus
	filters   []matcher
	durable   string
	handler   Handler
	ctx       context.Context
	cancel    context.CancelFunc
	stopWatch func() bool
	stopped   atomic.Bool
	wake      chan struct{}
	finished  chan struct{}

	queue []*memMsg // guarded by hub.mu

	pending0 uint64 // stored messages it had to deliver when made (StartSeq only)
	counted  bool

	// Owned by the run goroutine.
	next, end uint64 // catch-up range
	from      uint64 // first sequence to deliver
	acked     uint64
	buf       []byte
	d         memDelivery
}

func (s *memSub) pendingAtStart() (uint64, bool) { return s.pending0, s.counted }

func (s *memSub) match(subject string) bool {
	for _, m := range s.filters {
		if m.match(subject) {
			return true
		}
	}
	return false
}

// stop ends delivery without waiting.
func (s *memSub) stop() {
	s.stopped.Store(true)
	s.cancel()
}

// Close stops delivery and waits for the delivering goroutine to finish.
func (s *memSub) Close() error {
	s.stop()
	<-s.finished
	s.stopWatch()
	return nil
}

func (s *memSub) run() {
	defer s.exit()
	var batch []*memMsg
	for !s.stopped.Load() {
		h := s.hub
		h.mu.Lock()
		catching := s.next <= s.end
		if catching {
			batch = s.scanLocked(batch[:0])
		} else {
			batch, s.queue = s.queue, batch[:0]
		}
		h.mu.Unlock()
		for _, m := range batch {
			if s.stopped.Load() {
				return
			}
			s.deliver(m)
		}
		if len(batch) == 0 && !catching {
			select {
			case <-s.wake:
			case <-s.ctx.Done():
				return
			}
		}
	}
}

// scanLocked appends matching stored messages from the catch-up range.
func (s *memSub) scanLocked(batch []*memMsg) []*memMsg {
	h := s.hub
	stop := min(s.end, s.next+memScan-1)
	for seq := s.next; seq <= stop; seq++ {
		if m := h.msgLocked(seq); s.match(m.subject) {
			batch = append(batch, m)
		}
	}
	s.next = stop + 1
	return batch
}

func (s *memSub) deliver(m *memMsg) {
	if m.seq < s.from {
		return
	}
	d := &s.d
	d.m = m
	d.data = nil
	if len(m.data) > 0 {
		// Each subscriber gets its own copy, as over the network: a
		// handler that writes into Data must not alter the log.
		s.buf = append(s.buf[:0], m.data...)
		d.data = s.buf
	}
	s.bus.ctr.delivered(len(m.data))
	s.handler(s.ctx, d)
	d.m, d.data = nil, nil
	if cap(s.buf) > 1<<20 {
		s.buf = nil
	}
}

func (s *memSub) exit() {
	h := s.hub
	h.mu.Lock()
	for i, x := range h.subs {
		if x == s {
			last := len(h.subs) - 1
			h.subs[i] = h.subs[last]
			h.subs[last] = nil
			h.subs = h.subs[:last]
			break
		}
	}
	if s.durable != "" {
		d := h.durables[s.durable]
		d.floor = max(d.floor, s.acked)
		d.active = false
	}
	h.mu.Unlock()
	s.bus.mu.Lock()
	delete(s.bus.subs, s)
	s.bus.mu.Unlock()
	s.cancel()
	close(s.finished)
}

// memDelivery is reused for every delivery of one subscription.
type memDelivery struct {
	sub  *memSub
	m    *memMsg
	data []byte
}

func (d *memDelivery) Subject() string { return d.m.subject }
func (d *memDelivery) Data() []byte    { return d.data }
func (d *memDelivery) ID() string      { return d.m.id }
func (d *memDelivery) Seq() uint64     { return d.m.seq }

func (d *memDelivery) Header(key string) string {
	h := d.m.hdr
	for i := 0; i+1 < len(h); i += 2 {
		if h[i] == key {
			return h[i+1]
		}
	}
	if key == msgIDHeader {
		return d.m.id
	}
	return ""
}

func (d *memDelivery) Ack() error {
	if d.sub.durable != "" {
		d.sub.acked = d.m.seq
	}
	return nil
}
