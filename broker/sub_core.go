package broker

import (
	"context"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Tuning of the hand-over from the stream to the live feed.
const (
	// catchUpPoll is how often a catching-up subscription checks whether
	// it has read everything.
	catchUpPoll = 2 * time.Millisecond
	// catchUpMaxWait bounds, after the grace period, the wait for the
	// stream copies of the first live messages (a stream that lost them
	// would otherwise hold the subscription in catch-up for ever).
	catchUpMaxWait = 10 * time.Second
	// handoffKeep is how long after the hand-over a live message is
	// still compared with what the stream delivered.
	handoffKeep = 10 * time.Second
)

// coreSub delivers from core NATS subscriptions (DesignCapture,
// DesignCore): one per filter, all feeding one channel in the order the
// messages arrive on the connection, so each publisher's order is kept
// across subjects. The handler runs on the subscription's goroutine.
//
// With history (DesignCapture with DeliverAll or StartSeq) the live
// subscriptions are made first (at T, confirmed by a round trip), then an
// ordered consumer reads the stream from the start position and
// delivers, while live messages wait in a buffer. The stream has, for
// each subject, the messages sent before T followed by those sent after,
// and the live feed has those sent after T, in the same order (one
// publisher per subject, as in asyrevel). The subscription reads the
// stream until (1) at least CatchUpGrace after T it has delivered every
// message stored, so that what was routed before T has reached the
// stream, and (2) for every subject with buffered live messages it has
// delivered the stream's copy of the first one. Then it delivers the
// buffered live messages, skipping per subject those whose stream copies
// it delivered already, and goes on live. Messages after the hand-over
// carry no stream sequence (Seq 0).
//
// Live copies are recognised by a hash of subject, headers and payload,
// counted per subject: a live message is skipped while the stream
// delivered more copies of it than were skipped. Two publishers on one
// subject (a rogue beside the owner) may be interleaved differently on
// the live feed and in the stream; the counts do not depend on that
// order. Two byte-identical messages on one subject are told apart by
// how many copies the stream delivered (every asyrevel message carries
// its sender's sequence number, so a byte-identical one is a replay).
type coreSub struct {
	bus       *JetStream
	handler   Handler
	ctx       context.Context
	cancel    context.CancelFunc
	subs      []*nats.Subscription
	live      chan *nats.Msg
	done      chan struct{}
	watchMu   sync.Mutex
	stopWatch func() bool
	closeOne  sync.Once
	dropped   atomic.Uint64

	// history
	cons  jetstream.Consumer
	match []matcher
	feed  chan jetstream.Msg
	fed   chan struct{} // closed when the catch-up is over: the feed is no longer read
	cc    jetstream.ConsumeContext
	l0    uint64 // stream's last sequence before T
	start uint64 // first sequence asked for (0: all)
	t0    time.Time
	seed  maphash.Seed
	rec   map[string]handoff
	since time.Time // hand-over time
	keys  []string  // hash's header names, reused (the subscription's goroutine only)

	ld liveDelivery
	sd streamDelivery
}

// handoff is what the stream delivered on one subject after l0, to
// recognise the live copies: how many copies of each message (by hash)
// the stream delivered and no live copy has been skipped for yet.
type handoff map[uint64]int

func (b *JetStream) subscribeCore(ctx context.Context, filters []string, opts SubscribeOptions, h Handler, history bool) (Subscription, error) {
	s := &coreSub{bus: b, handler: h, live: make(chan *nats.Msg, b.subBuffer), done: make(chan struct{}), start: opts.StartSeq}
	if history {
		var err error
		if s.l0, err = b.lastSeq(ctx); err != nil {
			return nil, err
		}
		if opts.StartSeq == 0 && opts.Deliver == DeliverNew {
			s.start = s.l0 + 1
			opts.StartSeq = s.start
		}
	}
	unsub := func() {
		for _, ns := range s.subs {
			_ = ns.Unsubscribe()
		}
	}
	for _, f := range filters {
		ns, err := b.nc.ChanSubscribe(f, s.live)
		if err != nil {
			unsub()
			return nil, fmt.Errorf("broker: subscribe %s: %w", f, err)
		}
		s.subs = append(s.subs, ns)
	}
	// When the server answers, it routes to the subscriptions.
	if err := flushConn(ctx, b.nc); err != nil {
		unsub()
		return nil, fmt.Errorf("broker: subscribe: %w", err)
	}
	s.t0 = time.Now()
	s.ctx, s.cancel = context.WithCancel(ctx)
	if history {
		cf, match := b.consumerFilters(filters)
		fopts := opts
		if s.start > s.l0+1 {
			// Read from l0+1 anyway (delivering nothing before start), to
			// recognise the live copies of what precedes start.
			fopts.StartSeq = s.l0 + 1
		}
		cons, err := b.js.OrderedConsumer(ctx, b.stream, b.named(orderedConfig(cf, fopts), filters))
		if err == nil {
			s.cons, s.match = cons, match
			s.feed = make(chan jetstream.Msg, 512)
			s.fed = make(chan struct{})
			s.cc, err = cons.Consume(func(m jetstream.Msg) {
				select {
				case s.feed <- m:
				case <-s.fed:
				case <-s.ctx.Done():
				}
			}, b.consumeOpts(func(_ jetstream.ConsumeContext, err error) {
				b.log.Debug().Err(err).Msg("catch-up consumer")
			})...)
		}
		if err != nil {
			s.cancel()
			unsub()
			return nil, fmt.Errorf("broker: reading the stream to catch up: %w", jetStreamMissing(err, b.feats.Version))
		}
		s.seed = maphash.MakeSeed()
		s.rec = make(map[string]handoff)
	}
	b.subsMu.Lock()
	for _, ns := range s.subs {
		b.core[ns] = s
	}
	b.subsMu.Unlock()
	s.watchMu.Lock()
	s.stopWatch = context.AfterFunc(ctx, func() { s.Close() })
	s.watchMu.Unlock()
	go s.run()
	return s, nil
}

func (s *coreSub) run() {
	defer close(s.done)
	if s.cons != nil && !s.catchUp() {
		return
	}
	for {
		select {
		case m := <-s.live:
			s.deliverLive(m)
		case <-s.ctx.Done():
			return
		}
	}
}

// isBarrier reports a capture publisher's barrier (see capturePub): it
// reaches the live subscribers but is not a message of the log.
func isBarrier(m *nats.Msg) bool {
	if m.Header == nil {
		return false
	}
	_, ok := m.Header[expectedLastSeqHeader]
	return ok
}

func (s *coreSub) deliverLive(m *nats.Msg) {
	if s.ctx.Err() != nil || isBarrier(m) {
		return
	}
	if s.rec != nil && s.handoffDup(m) {
		return
	}
	s.bus.ctr.delivered(len(m.Data))
	s.ld.msg = m
	s.handler(s.ctx, &s.ld)
	s.ld.msg = nil
}

func (s *coreSub) hash(subject string, hdr nats.Header, data []byte) uint64 {
	var h maphash.Hash
	h.SetSeed(s.seed)
	h.WriteString(subject)
	h.WriteByte(0)
	if len(hdr) > 0 {
		keys := s.keys[:0]
		for k := range hdr {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		s.keys = keys
		for _, k := range keys {
			h.WriteString(k)
			h.WriteByte(0)
			for _, v := range hdr[k] {
				h.WriteString(v)
				h.WriteByte(0)
			}
		}
	}
	h.WriteByte(1)
	h.Write(data)
	return h.Sum64()
}

// catchUp reads the stream until it can hand over to the live feed (see
// coreSub); false if the subscription ended first.
func (s *coreSub) catchUp() bool {
	b := s.bus
	defer func() {
		close(s.fed)
		s.cc.Stop()
		name := s.cons.CachedInfo().Name
		go b.deleteConsumer(name)
	}()
	var buf []*nats.Msg
	first := map[string]uint64{} // hash of the first live message per subject
	found := map[string]bool{}   // its stream copy was delivered
	last := uint64(0)            // last stream sequence seen
	if s.start > 0 {
		last = min(s.start, s.l0+1) - 1
	}
	deadline := s.t0.Add(b.grace)
	giveUp := deadline.Add(catchUpMaxWait)
	tick := time.NewTicker(catchUpPoll)
	defer tick.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return false
		case m := <-s.live:
			if isBarrier(m) {
				continue
			}
			buf = append(buf, m)
			if _, ok := first[m.Subject]; !ok {
				h := s.hash(m.Subject, m.Header, m.Data)
				first[m.Subject] = h
				if s.rec[m.Subject][h] > 0 {
					found[m.Subject] = true
				}
			}
		case m := <-s.feed:
			seq, ok := ackStreamSeq(m.Reply())
			if !ok || seq <= last {
				continue
			}
			last = seq
			subj := m.Subject()
			if s.match != nil && !matchAny(s.match, subj) {
				continue
			}
			if seq > s.l0 {
				h := s.hash(subj, m.Headers(), m.Data())
				r := s.rec[subj]
				if r == nil {
					r = handoff{}
					s.rec[subj] = r
				}
				r[h]++
				if f, ok := first[subj]; ok && f == h {
					found[subj] = true
				}
			}
			if s.ctx.Err() != nil {
				return false
			}
			if seq < s.start {
				continue
			}
			b.ctr.delivered(len(m.Data()))
			s.sd.msg, s.sd.seq = m, seq
			s.handler(s.ctx, &s.sd)
			s.sd.msg = nil
		case now := <-tick.C:
			if now.Before(deadline) || len(s.feed) > 0 {
				continue
			}
			complete := len(found) == len(first)
			if !complete && now.Before(giveUp) {
				continue
			}
			if s.start > s.l0+1 && last < s.start {
				// Started beyond the stream's end: a live message may
				// come before start, and the live feed carries no
				// sequence to tell. Until the stream itself has delivered
				// a message at or after start, the live copies of what
				// precedes it may still be unread from the stream (and so
				// unrecognised). The stream's end is no proof: in a
				// cluster the consumer may sit on a replica that lags it
				// (a CI run got 77..99 for 99 while asking the leader).
				continue
			}
			info, err := s.cons.Info(s.ctx)
			if err != nil || info.NumPending > 0 || info.Delivered.Stream > last {
				continue
			}
			if !complete {
				var missing []string
				for subj := range first {
					if !found[subj] {
						missing = append(missing, subj)
					}
				}
				b.log.Warn().Strs("subjects", missing).Dur("waited", time.Since(s.t0)).
					Msg("catch-up: the stream lacks the first live messages of these subjects; going live anyway")
			}
			s.since = time.Now()
			b.log.Debug().Dur("took", s.since.Sub(s.t0)).Int("buffered", len(buf)).Uint64("last", last).Uint64("l0", s.l0).Msg("catch-up over: going live")
			for _, m := range buf {
				s.deliverLive(m)
			}
			return true
		}
	}
}

// handoffDup reports a live message whose stream copy the catch-up has
// delivered already.
func (s *coreSub) handoffDup(m *nats.Msg) bool {
	if time.Since(s.since) > handoffKeep {
		s.rec = nil
		return false
	}
	r := s.rec[m.Subject]
	if r == nil {
		return false
	}
	h := s.hash(m.Subject, m.Header, m.Data)
	n := r[h]
	if n == 0 {
		return false
	}
	if n == 1 {
		delete(r, h)
		if len(r) == 0 {
			delete(s.rec, m.Subject)
		}
	} else {
		r[h] = n - 1
	}
	return true
}

// fellBehind counts the deliveries nats.go dropped because the
// subscription's buffer was full.
func (s *coreSub) fellBehind() {
	var n uint64
	for _, ns := range s.subs {
		if d, err := ns.Dropped(); err == nil && d > 0 {
			n += uint64(d)
		}
	}
	if old := s.dropped.Swap(n); n > old {
		s.bus.ctr.dropped.Add(n - old)
		s.bus.log.Error().Uint64("dropped", n).Int("buffer", cap(s.live)).
			Msg("a subscription fell behind and lost live deliveries (the stream still has them with the capture design)")
	}
}

// Close stops delivery and waits for a handler call in progress.
func (s *coreSub) Close() error {
	s.closeOne.Do(func() {
		s.cancel()
		s.fellBehind()
		for _, ns := range s.subs {
			_ = ns.Unsubscribe()
		}
		<-s.done
		s.watchMu.Lock()
		s.stopWatch()
		s.watchMu.Unlock()
		b := s.bus
		b.subsMu.Lock()
		for _, ns := range s.subs {
			delete(b.core, ns)
		}
		b.subsMu.Unlock()
		b.forget(s)
	})
	return nil
}

// liveDelivery is a message straight from a publisher (no stream
// sequence). It is reused for every live delivery of one subscription.
type liveDelivery struct{ msg *nats.Msg }

func (d *liveDelivery) Subject() string { return d.msg.Subject }
func (d *liveDelivery) Data() []byte    { return d.msg.Data }
func (d *liveDelivery) ID() string      { return senderID(d.Header(msgIDHeader)) }
func (d *liveDelivery) Seq() uint64     { return 0 }
func (d *liveDelivery) Ack() error      { return nil }

func (d *liveDelivery) Header(key string) string {
	if v := d.msg.Header[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}
