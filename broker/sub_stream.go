package broker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// streamDelivery is a delivery read from the stream through a consumer. It
// is reused for every delivery of one subscription.
type streamDelivery struct {
	msg jetstream.Msg
	seq uint64
	ack func(reply string) error // nil: Ack is a no-op
}

func (d *streamDelivery) Subject() string { return d.msg.Subject() }
func (d *streamDelivery) Data() []byte    { return d.msg.Data() }
func (d *streamDelivery) ID() string      { return senderID(d.Header(msgIDHeader)) }
func (d *streamDelivery) Seq() uint64     { return d.seq }

func (d *streamDelivery) Header(key string) string {
	if v := d.msg.Headers()[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func (d *streamDelivery) Ack() error {
	if d.ack == nil {
		return nil
	}
	return d.ack(d.msg.Reply())
}

// consumeOpts are the pull options of every consumer the Bus reads.
func (b *JetStream) consumeOpts(onErr func(jetstream.ConsumeContext, error)) []jetstream.PullConsumeOpt {
	return []jetstream.PullConsumeOpt{
		jetstream.PullMaxBytes(b.pullBytes),
		jetstream.PullExpiry(pullExpiry),
		jetstream.PullHeartbeat(pullHeartbeat),
		jetstream.ConsumeErrHandler(onErr),
	}
}

// orderedConfig is the configuration of an ordered consumer that starts
// where opts say.
func orderedConfig(filters []string, opts SubscribeOptions) jetstream.OrderedConsumerConfig {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: filters, InactiveThreshold: ephemeralInactive}
	switch {
	case opts.StartSeq > 0:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, opts.StartSeq
	case opts.Deliver == DeliverNew:
		cfg.DeliverPolicy = jetstream.DeliverNewPolicy
	}
	return cfg
}

// named sets the consumer's name prefix (JetStreamConfig.ConsumerName)
// from the subscription's filters (not the consumer's: on a server
// without multi-filter consumers that is every subject of the run).
func (b *JetStream) named(cfg jetstream.OrderedConsumerConfig, filters []string) jetstream.OrderedConsumerConfig {
	if b.consumerName != nil {
		cfg.NamePrefix = b.consumerName(filters)
	}
	return cfg
}

// orderedSub delivers from an ordered consumer without acks
// (DesignOrdered): an ephemeral AckNone consumer that it creates again,
// after the last stream sequence seen, whenever a delivery skips one (a
// gap in the consumer's sequence), its heartbeats stop, the connection
// comes back or the consumer is gone, as nats.go's ordered consumer does;
// the feed drops what it has seen already.
//
// It creates its consumers itself rather than through nats.go's ordered
// consumer, to name each one anew (orderedName): nats.go names the first
// consumer of every ordered consumer prefix_1, so a subscription made
// again took the name of the one it replaced, and in a cluster that one
// may live on a node that died (kill -9): the cluster keeps the dead
// node's consumer until it is seen offline (minutes), takes a create
// under its name as an update that only the dead node would answer, and
// the subscription waited for ever (experiment faults, cluster-node).
type orderedSub struct {
	consumerFeed
	ccMu      sync.Mutex // guards cons and cc, which restart replaces
	cons      jetstream.Consumer
	cc        jetstream.ConsumeContext
	watchMu   sync.Mutex
	stopWatch func() bool
	closeOne  sync.Once

	prefix  string           // the consumers' name prefix
	named   bool             // prefix is granted (JetStreamConfig.ConsumerName): names cycle through orderedLives
	serial  atomic.Uint64    // names taken (a prefix of its own)
	filters []string         // the consumer's filters
	opts    SubscribeOptions // where it started
	name    string           // the current consumer's name (hmu)
	dseq    uint64           // its last delivery sequence handed on (hmu)

	restartMu  sync.Mutex   // one restart at a time
	restartAsk atomic.Int64 // when the latest restart not yet made was asked for (monoNow; 0: none)
	createdAt  atomic.Int64 // when the attempt that made the running consumer began (monoNow)

	pending0 uint64 // messages its first consumer had to deliver when created
}

// pendingAtStart is how many messages the subscription had to deliver
// when it was made (its first consumer's pending count): known only when
// the consumer filters exactly as the subscription does (no client-side
// filter), so that every one of them reaches the handler.
func (s *orderedSub) pendingAtStart() (uint64, bool) { return s.pending0, s.match == nil }

// orderedLives is how many names the consumers of one name prefix take in
// turn (prefix_1 .. prefix_16), the names a roster's broker grants
// (trust.DefaultOrderedResets; TestOrderedLivesGranted checks they agree).
const orderedLives = 16

// orderedName is the next name of prefix's consumers: prefix_1, _2, ...,
// _orderedLives and _1 again, counted over every subscription of the Bus,
// so that a consumer created again never takes the name of the one it
// replaces, nor of one an earlier subscription left.
func (b *JetStream) orderedName(prefix string) string {
	b.namesMu.Lock()
	if b.names == nil {
		b.names = make(map[string]int)
	}
	n := b.names[prefix]%orderedLives + 1
	b.names[prefix] = n
	b.namesMu.Unlock()
	return prefix + "_" + strconv.Itoa(n)
}

func (s *orderedSub) nextName() string {
	if s.named {
		return s.bus.orderedName(s.prefix)
	}
	return s.prefix + "_" + strconv.FormatUint(s.serial.Add(1), 10)
}

// consumerConfig is the configuration of the consumer named name that
// starts where opts say, as nats.go's ordered consumer makes it.
func (s *orderedSub) consumerConfig(name string, opts SubscribeOptions) jetstream.ConsumerConfig {
	cfg := jetstream.ConsumerConfig{
		Name:              name,
		AckPolicy:         jetstream.AckNonePolicy,
		InactiveThreshold: ephemeralInactive,
		Replicas:          1,
		MemoryStorage:     true,
	}
	if len(s.filters) > 0 {
		setFilters(&cfg, s.filters)
	}
	switch {
	case opts.StartSeq > 0:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, opts.StartSeq
	case opts.Deliver == DeliverNew:
		cfg.DeliverPolicy = jetstream.DeliverNewPolicy
	}
	return cfg
}

// create creates the next consumer. A name some consumer holds already (of
// an earlier subscription or process, not yet gone) is refused at once
// (a create, never an update): it takes the next.
func (s *orderedSub) create(ctx context.Context, opts SubscribeOptions) (jetstream.Consumer, error) {
	var err error
	for range orderedLives {
		var cons jetstream.Consumer
		cons, err = s.bus.js.CreateConsumer(ctx, s.bus.stream, s.consumerConfig(s.nextName(), opts))
		if err == nil {
			return cons, nil
		}
		if !errors.Is(err, jetstream.ErrConsumerExists) && !errors.Is(err, jetstream.ErrConsumerNameAlreadyInUse) {
			return nil, err
		}
	}
	return nil, err
}

// consume starts delivery from cons, the subscription's current consumer.
func (s *orderedSub) consume(cons jetstream.Consumer) (jetstream.ConsumeContext, error) {
	s.hmu.Lock()
	s.name, s.dseq = cons.CachedInfo().Name, 0
	s.hmu.Unlock()
	return cons.Consume(s.onMsg, s.bus.consumeOpts(s.onConsumeErr)...)
}

// onMsg hands on the current consumer's deliveries in their order; a gap
// in its delivery sequence (a delivery lost on the way) restarts it.
func (s *orderedSub) onMsg(m jetstream.Msg) {
	name, dseq, ok := ackConsumerSeq(m.Reply())
	if lose := loseDelivery; lose != nil && lose(dseq) {
		return
	}
	s.hmu.Lock()
	defer s.hmu.Unlock()
	if !ok || name != s.name {
		return // a consumer replaced already
	}
	if dseq != s.dseq+1 {
		s.name = "" // its later deliveries are dropped too
		if !s.closed.Load() {
			s.bus.log.Debug().Str("consumer", name).Uint64("delivery", dseq).Uint64("want", s.dseq+1).Msg("ordered consumer: a delivery is missing, restarting it")
			go s.restart()
		}
		return
	}
	s.dseq = dseq
	s.deliverLocked(m)
}

// restartCreateWait bounds one attempt to create the consumer that
// replaces another: a create the cluster does not answer (its consumer
// placed on a node that died and is not seen offline yet, or sent while
// the cluster elects its leaders, when nobody answers it) is given up
// for a new name. It was 5 s: after the kill of a 3-node cluster's
// stream and metadata leader, the attempts sent during the elections
// went unanswered, and the one that followed the elections began up to
// 5 s after them (experiment faults, cluster-node: the consumers came
// back 11 to 13 s after the kill, the cluster 4 to 9 s after it). Then
// 2 s: a party's two consumers (replies, controls) came back up to 2.5 s
// apart, the first attempt after the elections of one beginning that much
// later than the other's, past the 2 s a split subscription waits to
// keep them in order (splitOrderWait): the control went out of order and
// an evaluation round waited for it. The first attempts now wait 1 s;
// later ones longer (restartAttemptWait), up to 5 s, so that a cluster
// slow to answer under load still gets the time an answer takes.
const restartCreateWait = 2 * time.Second

// restartAttemptWait bounds attempt n (from 0) to create a consumer that
// replaces another: 1 s for the first six (an election's few seconds),
// then 2, 4 and 5 s.
func restartAttemptWait(n int) time.Duration {
	return min(time.Second<<min(max(n-5, 0), 3), 5*time.Second)
}

// restartPause is the least time between two attempts: an attempt that
// failed at once (no responders) is not repeated in a tight loop.
const restartPause = 500 * time.Millisecond

// monoBase and monoNow order the restart asks and attempts of orderedSub
// on the monotonic clock.
var monoBase = time.Now()

func monoNow() int64 { return int64(time.Since(monoBase)) + 1 }

// beforeCreate, set by tests, runs before each attempt of restartOnce to
// create a consumer; an error fails the attempt as a create would.
var beforeCreate func(attempt int) error

// restart replaces the consumer with a new one, under a new name, that
// starts after the last sequence seen: after a reconnect, a gap, or when
// its heartbeats stop or it is gone (its node died). It retries until the
// new consumer runs or the subscription closes.
func (s *orderedSub) restart() {
	// One restart at a time; one asked for while another runs follows it
	// (a gap found by the new consumer's first deliveries must not be
	// lost: its later deliveries would all be dropped), unless it was
	// asked for before the attempt that made the new consumer began: that
	// one was about a consumer replaced already (its heartbeats stopped,
	// the watch found it gone). Made all the same, it replaced a consumer
	// just made, on every participant of a cluster whose node died, and
	// the split subscriptions' order waited for the replies again.
	for now := monoNow(); ; {
		at := s.restartAsk.Load()
		if at >= now || s.restartAsk.CompareAndSwap(at, now) {
			break // the latest ask is kept
		}
	}
	for s.restartMu.TryLock() {
		for !s.closed.Load() {
			at := s.restartAsk.Swap(0)
			if at == 0 {
				break
			}
			if at < s.createdAt.Load() {
				continue // the running consumer was made after it
			}
			s.restartOnce()
		}
		s.restartMu.Unlock()
		if s.restartAsk.Load() == 0 {
			return
		}
	}
}

// restartOnce replaces the consumer (see restart).
func (s *orderedSub) restartOnce() {
	// The consumer being replaced stops first, and is deleted (best
	// effort: its node may be gone, and then nobody answers).
	s.ccMu.Lock()
	s.cc.Stop()
	old := s.cons.CachedInfo().Name
	s.ccMu.Unlock()
	s.hmu.Lock()
	s.name = "" // its deliveries still on the way are dropped
	s.hmu.Unlock()
	go func() {
		if err := s.bus.deleteConsumerWithin(old, restartDeleteWait); err != nil {
			s.bus.log.Debug().Err(err).Str("consumer", old).Msg("restarting the ordered consumer: the old one was not deleted")
		}
	}()
	for attempt := 0; !s.closed.Load(); attempt++ {
		s.hmu.Lock()
		last := s.last
		s.hmu.Unlock()
		opts := s.opts
		if last > 0 {
			opts.StartSeq = last + 1
		}
		began := monoNow()
		var cons jetstream.Consumer
		var err error
		if hook := beforeCreate; hook != nil {
			err = hook(attempt)
		}
		if err == nil {
			ctx, cancel := context.WithTimeout(s.ctx, restartAttemptWait(attempt))
			cons, err = s.create(ctx, opts)
			cancel()
		}
		var cc jetstream.ConsumeContext
		if err == nil {
			cc, err = s.consume(cons)
			if err != nil {
				go s.bus.deleteConsumer(cons.CachedInfo().Name)
			}
		}
		if err == nil {
			s.createdAt.Store(began)
			s.ccMu.Lock()
			s.cons, s.cc = cons, cc
			s.ccMu.Unlock()
			if s.closed.Load() {
				cc.Stop()
			}
			s.bus.log.Debug().Uint64("from", opts.StartSeq).Int("attempt", attempt).Str("consumer", cons.CachedInfo().Name).Str("replaced", old).Msg("ordered consumer restarted")
			return
		}
		s.bus.log.Debug().Err(err).Int("attempt", attempt).Msg("restarting the ordered consumer")
		// An attempt that waited for its answer is followed at once.
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(restartPause - time.Duration(monoNow()-began)):
		}
	}
}

// restartOrdered restarts sub's ordered consumers after a reconnect: its
// own, or those of each filter of a split subscription (a roster's
// participant: SplitFilters), which were missed before and stalled a
// party whose node died.
func restartOrdered(sub Subscription) {
	switch s := sub.(type) {
	case *orderedSub:
		go s.restart()
	case *jsSub:
		if s.durable {
			// Deliveries sent while the connection was down are lost;
			// the later ones would not show it (resync).
			go s.resync()
		}
	case *splitSub:
		for _, in := range s.subs {
			restartOrdered(in)
		}
	}
}

// consumerFeed hands a consumer's messages to a Handler, one at a time
// and once each, from the first sequence asked for, filtered on the
// client where the server could not (before 2.10).
type consumerFeed struct {
	bus     *JetStream
	handler Handler
	match   []matcher // client-side filters (server without multi-filter consumers)
	ctx     context.Context
	cancel  context.CancelFunc

	hmu    sync.Mutex // held while the handler runs
	closed atomic.Bool
	lastAt atomic.Int64 // when the last message came (Unix ns)
	last   uint64       // stream sequence of the last message seen
	from   uint64       // first sequence to deliver (a server before 2.10 may start earlier)
	d      streamDelivery
}

func (f *consumerFeed) onMsg(m jetstream.Msg) {
	f.hmu.Lock()
	defer f.hmu.Unlock()
	f.deliverLocked(m)
}

// deliverLocked hands m to the handler (hmu held).
func (f *consumerFeed) deliverLocked(m jetstream.Msg) {
	if f.closed.Load() {
		return
	}
	f.lastAt.Store(time.Now().UnixNano())
	seq, ok := ackStreamSeq(m.Reply())
	if !ok || seq <= f.last {
		// Not a stream message, or a redelivery of what the handler
		// already had (redelivered after AckWait while still buffered).
		return
	}
	f.last = seq
	if seq < f.from || f.match != nil && !matchAny(f.match, m.Subject()) {
		// Not acked (DesignAcked): the next Ack of the handler covers it.
		return
	}
	f.bus.ctr.delivered(len(m.Data()))
	f.d.msg, f.d.seq = m, seq
	f.handler(f.ctx, &f.d)
	f.d.msg = nil
}

// stop ends deliveries (a handler call in progress goes on: see
// waitHandler).
func (f *consumerFeed) stop() {
	f.closed.Store(true)
	f.cancel()
}

// waitHandler waits for a handler call in progress.
func (f *consumerFeed) waitHandler() {
	f.hmu.Lock()
	//lint:ignore SA2001 taking the lock waits for the handler call that holds it
	f.hmu.Unlock()
}

func (b *JetStream) subscribeOrdered(ctx context.Context, filters []string, opts SubscribeOptions, h Handler) (Subscription, error) {
	if err := b.resolveNew(ctx, &opts); err != nil {
		return nil, err
	}
	cf, match := b.consumerFilters(filters)
	s := &orderedSub{consumerFeed: consumerFeed{bus: b, handler: h, match: match, from: opts.StartSeq}, filters: cf, opts: opts}
	if b.consumerName != nil {
		// Named as permissions grant it: by the subscription's filters
		// (not the consumer's: on a server without multi-filter
		// consumers that is every subject of the run).
		s.prefix, s.named = b.consumerName(filters), true
	} else {
		s.prefix = nuid.Next()
	}
	s.ctx, s.cancel = context.WithCancel(ctx)
	cons, err := s.create(ctx, opts)
	if err != nil {
		s.cancel()
		return nil, fmt.Errorf("broker: ordered consumer: %w", jetStreamMissing(err, b.feats.Version))
	}
	s.cons = cons
	s.pending0 = cons.CachedInfo().NumPending
	s.cc, err = s.consume(cons)
	if err != nil {
		s.cancel()
		b.deleteConsumer(cons.CachedInfo().Name)
		return nil, fmt.Errorf("broker: consume: %w", err)
	}
	s.watchMu.Lock()
	s.stopWatch = context.AfterFunc(ctx, func() { s.Close() })
	s.watchMu.Unlock()
	if b.replicas > 1 {
		go s.watch()
	}
	return s, nil
}

// orderedWatchEvery: how often an idle ordered consumer of a replicated
// stream checks that it still exists (watch).
const orderedWatchEvery = 2 * time.Second

// watch restarts the ordered consumer when the broker no longer knows it
// (its node died) twice in a row while nothing came for orderedWatchEvery:
// nats.go's pull requests to a consumer that is gone get "no responders",
// which keep its heartbeat check from ever firing; a party whose node
// stayed up waited 27 s for its replies (experiment faults, cluster-node)
// before the first error, and the split subscription gave up its order.
func (s *orderedSub) watch() {
	t := time.NewTicker(orderedWatchEvery)
	defer t.Stop()
	failures := 0
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		if s.closed.Load() {
			return
		}
		if time.Since(time.Unix(0, s.lastAt.Load())) < orderedWatchEvery {
			failures = 0
			continue
		}
		s.ccMu.Lock()
		cons := s.cons
		s.ccMu.Unlock()
		ctx, cancel := context.WithTimeout(s.ctx, orderedWatchEvery)
		_, err := cons.Info(ctx)
		cancel()
		if err == nil || s.ctx.Err() != nil {
			failures = 0
			continue
		}
		// Not found: its node is gone, restart at once; other errors
		// (no answer while the cluster elects) twice in a row.
		if failures++; failures >= 2 || errors.Is(err, jetstream.ErrConsumerNotFound) {
			failures = 0
			s.bus.log.Debug().Err(err).Msg("ordered consumer gone: restarting it")
			s.restart()
		}
	}
}

func (s *orderedSub) onConsumeErr(_ jetstream.ConsumeContext, err error) {
	if !s.closed.Load() {
		s.bus.log.Debug().Err(err).Msg("ordered consumer")
		if errors.Is(err, jetstream.ErrNoHeartbeat) || errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
			// Its node is gone (a cluster node died), or the consumer.
			go s.restart()
		}
	}
}

// Close stops delivery, waits for a handler call in progress and deletes
// the consumer.
func (s *orderedSub) Close() error {
	s.closeOne.Do(func() {
		s.stop()
		s.ccMu.Lock()
		cc, cons := s.cc, s.cons
		s.ccMu.Unlock()
		cc.Stop()
		s.waitHandler()
		s.watchMu.Lock()
		if s.stopWatch != nil {
			s.stopWatch()
		}
		s.watchMu.Unlock()
		select {
		case <-cc.Closed():
		case <-time.After(closeTimeout):
		}
		s.bus.deleteConsumer(cons.CachedInfo().Name)
		s.bus.forget(s)
	})
	return nil
}

// deleteConsumer removes an ephemeral consumer (best effort: it also
// expires by itself).
func (b *JetStream) deleteConsumer(name string) error {
	return b.deleteConsumerWithin(name, closeTimeout)
}

// restartDeleteWait bounds the deletion of the consumer an ordered
// subscription replaces: while a cluster elects a new metadata leader the
// deletion is not answered, and the new consumer should not wait long.
const restartDeleteWait = 2 * time.Second

// deleteConsumerWithin deletes consumer name, waiting at most d.
func (b *JetStream) deleteConsumerWithin(name string, d time.Duration) error {
	if name == "" || b.nc.IsClosed() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	err := b.js.DeleteConsumer(ctx, b.stream, name)
	if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("broker: delete consumer %s: %w", name, err)
	}
	return nil
}

// jsSub is a subscription on a JetStream consumer (DesignAcked): durable
// with AckAll, or ephemeral without acks. nats.go calls onMsg from the
// consume subscription's goroutine, one message at a time.
type jsSub struct {
	consumerFeed
	cons      jetstream.Consumer
	name      string // consumer name
	durable   bool
	ccMu      sync.Mutex // guards cc, which resync replaces
	cc        jetstream.ConsumeContext
	gen       uint64 // the Consume call whose deliveries count (hmu)
	dseq      uint64 // the last delivery sequence of gen handed on (hmu)
	resyncMu  sync.Mutex
	resyncing atomic.Bool
	watchMu   sync.Mutex
	stopWatch func() bool // ends the ctx watch; set once Consume runs

	amu      sync.Mutex // ack coalescing
	ackTimer *time.Timer
	ackArmed bool
	ackSent  bool   // the newest acked reply has been sent
	ackLast  string // reply subject of the newest acked delivery
	ackN     int    // acks since the last one sent
	ackErr   error

	closeOne sync.Once
	closeErr error
}

// subscribeAcked creates a consumer on the run's stream.
//
// A durable subscription is a durable consumer with AckAll: opening it
// again resumes after the last Ack (the consumer is reset to its ack floor
// if it had delivered beyond it). An ephemeral one is an in-memory consumer
// without acks (Ack is a no-op), deleted by Close.
func (b *JetStream) subscribeAcked(ctx context.Context, filters []string, opts SubscribeOptions, h Handler) (Subscription, error) {
	cf, match := b.consumerFilters(filters)
	cons, err := b.consumer(ctx, cf, opts)
	if err != nil {
		return nil, err
	}
	s := &jsSub{
		consumerFeed: consumerFeed{bus: b, handler: h, match: match},
		cons:         cons,
		name:         cons.CachedInfo().Name,
		durable:      opts.Durable != "",
	}
	if cfg := cons.CachedInfo().Config; cfg.DeliverPolicy == jetstream.DeliverByStartSequencePolicy {
		s.from = cfg.OptStartSeq
	}
	if s.durable {
		s.d.ack = s.ack
	}
	s.ctx, s.cancel = context.WithCancel(ctx)
	s.ackTimer = time.AfterFunc(time.Hour, s.ackTick)
	s.ackTimer.Stop()
	s.cc, err = s.consume(cons, cons.CachedInfo().Delivered.Consumer)
	if err != nil {
		s.cancel()
		s.deleteEphemeral()
		return nil, fmt.Errorf("broker: consume %s: %w", s.name, err)
	}
	s.watchMu.Lock()
	s.stopWatch = context.AfterFunc(ctx, func() { s.Close() })
	s.watchMu.Unlock()
	return s, nil
}

// resolveNew turns DeliverNew into an explicit start after the stream's
// last sequence, read from the stream's leader. The server's own
// DeliverNew policy takes the last sequence of the replica that hosts the
// consumer, which in a cluster may not yet have applied what the leader
// confirmed, and then delivers messages published before the subscription.
// An explicit start also lets a durable that was never acked be recreated
// where it began (a server before 2.14 has no reset API and reports an ack
// floor of 0 for it), and a restarted ordered consumer resume where the
// first began.
func (b *JetStream) resolveNew(ctx context.Context, opts *SubscribeOptions) error {
	if opts.StartSeq > 0 || opts.Deliver != DeliverNew {
		return nil
	}
	last, err := b.lastSeq(ctx)
	if err != nil {
		return err
	}
	opts.StartSeq = last + 1
	return nil
}

// consumer creates the subscription's consumer, or opens and prepares an
// existing durable one.
func (b *JetStream) consumer(ctx context.Context, filters []string, opts SubscribeOptions) (jetstream.Consumer, error) {
	if err := b.resolveNew(ctx, &opts); err != nil {
		return nil, err
	}
	cfg := jetstream.ConsumerConfig{AckWait: DefaultAckWait}
	setFilters(&cfg, filters)
	switch {
	case opts.StartSeq > 0:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, opts.StartSeq
	case opts.Deliver == DeliverNew:
		cfg.DeliverPolicy = jetstream.DeliverNewPolicy
	}
	if opts.Durable == "" {
		cfg.AckPolicy = jetstream.AckNonePolicy
		cfg.MemoryStorage = true
		cfg.InactiveThreshold = ephemeralInactive
		c, err := b.js.CreateConsumer(ctx, b.stream, cfg)
		if err != nil {
			return nil, fmt.Errorf("broker: create consumer: %w", jetStreamMissing(err, b.feats.Version))
		}
		return c, nil
	}
	cfg.Durable = opts.Durable
	cfg.Replicas = b.consumerReplicas
	cfg.AckPolicy = jetstream.AckAllPolicy
	cfg.MaxAckPending = maxAckPending
	for attempt := 0; ; attempt++ {
		c, err := b.js.Consumer(ctx, b.stream, opts.Durable)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			c, err = b.js.CreateConsumer(ctx, b.stream, cfg)
			if errors.Is(err, jetstream.ErrConsumerExists) && attempt == 0 {
				continue // created concurrently: open it
			}
			if err != nil {
				return nil, fmt.Errorf("broker: create durable %s: %w", opts.Durable, jetStreamMissing(err, b.feats.Version))
			}
			return c, nil
		}
		if err != nil {
			return nil, fmt.Errorf("broker: durable %s: %w", opts.Durable, err)
		}
		info := c.CachedInfo()
		if info.Config.AckPolicy != jetstream.AckAllPolicy {
			return nil, fmt.Errorf("%w: durable %s exists with ack policy %v", ErrInvalid, opts.Durable, info.Config.AckPolicy)
		}
		reset := info.Delivered.Stream > info.AckFloor.Stream || info.NumAckPending > 0
		if !sameFilters(info.Config, filters) {
			ucfg := info.Config
			setFilters(&ucfg, filters)
			if c, err = b.js.UpdateConsumer(ctx, b.stream, ucfg); err != nil {
				return nil, fmt.Errorf("broker: update durable %s: %w", opts.Durable, err)
			}
			reset = true
		}
		if reset {
			return b.resetDurable(ctx, c)
		}
		return c, nil
	}
}

// resetDurable makes a durable deliver again from its ack floor + 1: the
// messages it delivered beyond were buffered by a subscription that is
// gone, and the broker would otherwise redeliver them only after AckWait,
// behind newer ones. nats-server 2.14 has an API for it (ADR-60); with an
// older server the consumer is recreated to start there.
func (b *JetStream) resetDurable(ctx context.Context, c jetstream.Consumer) (jetstream.Consumer, error) {
	info := c.CachedInfo()
	if b.feats.ConsumerReset && !recreateOnReset {
		if _, err := b.js.ResetConsumer(ctx, b.stream, info.Name); err != nil {
			return nil, fmt.Errorf("broker: reset durable %s to its ack floor: %w", info.Name, err)
		}
		// Its delivery sequence starts again at 1 (CachedInfo says so).
		if _, err := c.Info(ctx); err != nil {
			return nil, fmt.Errorf("broker: durable %s after its reset: %w", info.Name, err)
		}
		return c, nil
	}
	cfg := info.Config
	start := info.AckFloor.Stream + 1
	if info.AckFloor.Stream == 0 && cfg.DeliverPolicy == jetstream.DeliverByStartSequencePolicy {
		start = cfg.OptStartSeq // never acked: where it began
	}
	cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
	cfg.OptStartSeq = start
	cfg.OptStartTime = nil
	if err := b.js.DeleteConsumer(ctx, b.stream, info.Name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, fmt.Errorf("broker: recreate durable %s: %w", info.Name, err)
	}
	c, err := createAfterDelete(ctx, b.js, b.stream, cfg)
	if err != nil {
		return nil, fmt.Errorf("broker: recreate durable %s: %w", info.Name, err)
	}
	return c, nil
}

// createAfterDelete creates a consumer just deleted under the same name.
// The server removes the old one's files while its last state flush may
// still be writing them, and a creation that lands in between fails with
// an internal error (seen in CI: "code=500 err_code=10012 ... rename
// .../obs/noack/o.dat.tmp .../o.dat: no such file or directory"). Such a
// failure is the server's and passes: ask again, a few times, with a short
// pause. Any other error, or ctx's end, is returned at once.
func createAfterDelete(ctx context.Context, js consumerCreator, stream string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	for attempt := 1; ; attempt++ {
		c, err := js.CreateConsumer(ctx, stream, cfg)
		var apiErr *jetstream.APIError
		if err == nil || attempt == recreateAttempts || !errors.As(err, &apiErr) || apiErr.Code < 500 {
			return c, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(time.Duration(attempt) * recreatePause):
		}
	}
}

// consumerCreator is the part of jetstream.JetStream createAfterDelete uses.
type consumerCreator interface {
	CreateConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error)
}

const (
	recreateAttempts = 5
	recreatePause    = 50 * time.Millisecond
)

// recreateOnReset forces the pre-2.14 path of resetDurable (tests).
var recreateOnReset = false

func setFilters(cfg *jetstream.ConsumerConfig, filters []string) {
	if len(filters) == 1 {
		cfg.FilterSubject, cfg.FilterSubjects = filters[0], nil
	} else {
		cfg.FilterSubject, cfg.FilterSubjects = "", append([]string(nil), filters...)
	}
}

func sameFilters(cfg jetstream.ConsumerConfig, filters []string) bool {
	have := cfg.FilterSubjects
	if cfg.FilterSubject != "" {
		have = []string{cfg.FilterSubject}
	}
	if len(have) != len(filters) {
		return false
	}
	for _, f := range filters {
		found := false
		for _, h := range have {
			found = found || h == f
		}
		if !found {
			return false
		}
	}
	return true
}

// consume starts delivery from the consumer, whose last delivery
// sequence is dseq: a durable's deliveries are checked for gaps
// (onDurableMsg), the deliveries of earlier Consume calls dropped.
func (s *jsSub) consume(cons jetstream.Consumer, dseq uint64) (jetstream.ConsumeContext, error) {
	if !s.durable {
		return cons.Consume(s.onMsg, s.bus.consumeOpts(s.onConsumeErr)...)
	}
	s.hmu.Lock()
	s.gen++
	gen := s.gen
	s.dseq = dseq
	s.hmu.Unlock()
	return cons.Consume(func(m jetstream.Msg) { s.onDurableMsg(gen, m) }, s.bus.consumeOpts(s.onConsumeErr)...)
}

// onDurableMsg hands on a durable's deliveries in their order. A gap in
// the delivery sequence is a delivery lost on the way (sent while the
// connection was down: a cluster node died): the later one is not handed
// on, since its Ack (AckAll) would acknowledge the lost one too and the
// broker would never send it again (a party's reply lost so stalled it
// after a fail-over, KILL="broker party" make compose-test); the consumer
// is reset to its ack floor instead (resync).
func (s *jsSub) onDurableMsg(gen uint64, m jetstream.Msg) {
	_, dseq, ok := ackConsumerSeq(m.Reply())
	if lose := loseDelivery; lose != nil && lose(dseq) {
		return
	}
	s.hmu.Lock()
	defer s.hmu.Unlock()
	if gen != s.gen || !ok {
		return // an earlier Consume's
	}
	if dseq != s.dseq+1 {
		if !s.closed.Load() && !s.resyncing.Load() {
			s.bus.log.Debug().Str("consumer", s.name).Uint64("delivery", dseq).Uint64("want", s.dseq+1).Msg("durable consumer: a delivery is missing, resetting it to its ack floor")
			s.resyncing.Store(true)
			go s.resync()
		}
		return
	}
	s.dseq = dseq
	s.deliverLocked(m)
}

// loseDelivery, set by tests, drops the deliveries it returns true for, as
// a connection lost on the way would.
var loseDelivery func(dseq uint64) bool

// resync resets a durable to its ack floor and consumes it again, after a
// gap in its deliveries or a reconnect: what was delivered beyond the
// floor comes again (the feed drops what the handler had). It retries
// until it succeeds or the subscription closes.
func (s *jsSub) resync() {
	s.resyncing.Store(true)
	s.resyncMu.Lock()
	defer s.resyncMu.Unlock()
	defer s.resyncing.Store(false)
	if !s.durable {
		return
	}
	s.ccMu.Lock()
	s.cc.Stop()
	s.ccMu.Unlock()
	s.hmu.Lock()
	s.gen++ // the stopped Consume's deliveries still on the way are dropped
	s.hmu.Unlock()
	for attempt := 0; !s.closed.Load(); attempt++ {
		ctx, cancel := context.WithTimeout(s.ctx, restartCreateWait)
		err := s.sendAckNow(ctx)
		var cons jetstream.Consumer
		if err == nil {
			cons, err = s.bus.js.Consumer(ctx, s.bus.stream, s.name)
		}
		if err == nil {
			cons, err = s.bus.resetDurable(ctx, cons)
		}
		cancel()
		var cc jetstream.ConsumeContext
		if err == nil {
			// Delivered again from the floor: the delivery sequence starts at 1.
			cc, err = s.consume(cons, 0)
		}
		if err == nil {
			s.ccMu.Lock()
			s.cons, s.cc = cons, cc
			s.ccMu.Unlock()
			if s.closed.Load() {
				cc.Stop()
			}
			s.bus.log.Debug().Int("attempt", attempt).Str("consumer", s.name).Msg("durable consumer reset to its ack floor")
			return
		}
		s.bus.log.Debug().Err(err).Int("attempt", attempt).Str("consumer", s.name).Msg("resetting the durable consumer")
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// sendAckNow sends the coalesced ack still waiting, synchronously: the
// floor a reset goes back to then holds every delivery the handler acked.
func (s *jsSub) sendAckNow(ctx context.Context) error {
	s.amu.Lock()
	last, sent := s.ackLast, s.ackSent
	if !sent && last != "" {
		s.ackN, s.ackSent = 0, true
	}
	s.amu.Unlock()
	if sent || last == "" {
		return nil
	}
	if _, err := s.bus.nc.RequestWithContext(ctx, last, ackAck); err != nil {
		return fmt.Errorf("broker: ack before the reset of %s: %w", s.name, err)
	}
	return nil
}

func (s *jsSub) onConsumeErr(_ jetstream.ConsumeContext, err error) {
	if s.closed.Load() {
		return
	}
	s.bus.log.Debug().Err(err).Str("consumer", s.name).Msg("consume")
}

func (s *jsSub) ack(reply string) error {
	s.amu.Lock()
	defer s.amu.Unlock()
	s.ackLast, s.ackSent = reply, false
	s.ackN++
	if s.ackN >= ackEvery {
		return s.sendAckLocked()
	}
	if !s.ackArmed {
		s.ackArmed = true
		s.ackTimer.Reset(ackDelay)
	}
	if err := s.ackErr; err != nil {
		s.ackErr = nil
		return err
	}
	return nil
}

func (s *jsSub) sendAckLocked() error {
	s.ackN, s.ackSent = 0, true
	if err := s.bus.nc.Publish(s.ackLast, ackAck); err != nil {
		return fmt.Errorf("broker: ack: %w", err)
	}
	return nil
}

func (s *jsSub) ackTick() {
	s.amu.Lock()
	defer s.amu.Unlock()
	s.ackArmed = false
	if !s.ackSent && s.ackLast != "" {
		if err := s.sendAckLocked(); err != nil && s.ackErr == nil {
			s.ackErr = err
		}
	}
}

// Close stops delivery, waits for a handler call in progress, and then
// confirms the last ack with the broker (durable) or deletes the consumer
// (ephemeral).
func (s *jsSub) Close() error {
	s.closeOne.Do(func() { s.closeErr = s.close() })
	return s.closeErr
}

func (s *jsSub) close() error {
	s.stop()
	s.resyncMu.Lock()
	//lint:ignore SA2001 a reset in progress ends first (it stops at closed)
	s.resyncMu.Unlock()
	s.ccMu.Lock()
	cc := s.cc
	s.ccMu.Unlock()
	cc.Stop()
	s.waitHandler()
	s.watchMu.Lock()
	if s.stopWatch != nil {
		s.stopWatch()
	}
	s.watchMu.Unlock()
	select {
	case <-cc.Closed():
	case <-time.After(closeTimeout):
	}
	var err error
	if s.durable {
		s.amu.Lock()
		s.ackTimer.Stop()
		s.ackArmed = false
		last := s.ackLast
		s.amu.Unlock()
		if last != "" {
			// A synchronous ack: when the reply arrives the broker has
			// applied it and every ack sent before, so a Subscribe that
			// follows resumes after it.
			ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
			if _, e := s.bus.nc.RequestWithContext(ctx, last, ackAck); e != nil {
				err = fmt.Errorf("broker: final ack of %s: %w", s.name, e)
			}
			cancel()
		}
	} else {
		err = s.deleteEphemeral()
	}
	s.bus.forget(s)
	return err
}

func (s *jsSub) deleteEphemeral() error {
	if s.durable {
		return nil
	}
	return s.bus.deleteConsumer(s.name)
}

// delivered reports what the subscription's consumer has delivered
// (splitSub): how many messages, the stream sequence of the last one and
// how many matching messages the stream holds beyond it.
func (s *orderedSub) delivered(ctx context.Context) (n, last, pending uint64, err error) {
	s.ccMu.Lock()
	cons := s.cons
	s.ccMu.Unlock()
	return consumerDelivered(ctx, cons)
}

func (s *jsSub) delivered(ctx context.Context) (n, last, pending uint64, err error) {
	s.ccMu.Lock()
	cons := s.cons
	s.ccMu.Unlock()
	return consumerDelivered(ctx, cons)
}

// start is the stream sequence the consumer had delivered when the
// subscription began (a resumed durable's position).
func (s *jsSub) start() uint64 {
	s.ccMu.Lock()
	cons := s.cons
	s.ccMu.Unlock()
	if info := cons.CachedInfo(); info != nil {
		return info.Delivered.Stream
	}
	return 0
}

func consumerDelivered(ctx context.Context, c jetstream.Consumer) (n, last, pending uint64, err error) {
	info, err := c.Info(ctx)
	if err != nil {
		return 0, 0, 0, err
	}
	return info.Delivered.Consumer, info.Delivered.Stream, info.NumPending, nil
}
