package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// JetStreamConfig configures a connection to a run's JetStream stream.
type JetStreamConfig struct {
	// URL of the NATS server (nats://host:port). Empty means Server.URL().
	URL string
	// Server is an embedded server to connect to (optional).
	Server *Server
	// InProcess connects through the in-process pipe to Server instead of
	// TCP. Requires Server.
	InProcess bool
	// Run names the run: stream StreamName(Run), subjects
	// SubjectPrefix(Run)+".>". Letters, digits, '-' and '_' only.
	Run string
	// Name is the client connection name (shown in server monitoring).
	Name string
	// User and Password authenticate the connection (optional).
	User, Password string
	// MaxPending bounds the asynchronous publish window: Publish blocks
	// while this many messages wait for the broker's ack. Default 4096.
	MaxPending int
	// Duplicates is the stream's dedupe window for message IDs. Default 2m.
	Duplicates time.Duration
	// Replicas is the stream's replication factor. Default 1.
	Replicas int
	// ConsumerReplicas is the replication factor of the durable
	// consumers this connection creates (the state that lets a durable
	// subscription resume). 0 means the stream's. On a 3-node cluster
	// with an R3 stream, 1 nearly doubles the steps per second of the
	// training pipeline (each replica of a consumer rewrites its state
	// file up to 10 times a second and replicates every ack), at a cost:
	// a durable whose node is down cannot resume until the node is back.
	// The stream itself stays replicated.
	ConsumerReplicas int
	// PerMessageAcks publishes with one broker ack per message instead of
	// fast batches (which nats-server 2.14+ offers, and the Bus uses by
	// default when it creates or updates the stream: the broker then
	// confirms every N messages). With fast batches the broker drops a
	// duplicate ID without saying so: Duplicates counts only the
	// duplicates it reports (always, with PerMessageAcks). NoCreate and
	// older servers imply PerMessageAcks.
	PerMessageAcks bool
	// NoCreate uses the run's stream as it is and does not create or
	// update it, for users without stream-admin permissions.
	NoCreate bool
	// PullBytes bounds the bytes each subscription buffers ahead of its
	// Handler. Default 8 MiB; always at least twice the server's max
	// payload (a pull request must fit the largest message).
	PullBytes int
	// Options are extra nats.go connection options (credentials, TLS,
	// reconnect policy, custom inbox prefix, dialer), applied after the
	// Bus's own but before the wire counter of Stats, which wraps the
	// dialer or in-process provider they leave.
	Options []nats.Option
	// Logger receives asynchronous connection and consumer errors; nil
	// means silent.
	Logger *zerolog.Logger
}

// Defaults and tuning of the JetStream Bus.
const (
	defaultMaxPending = 4096
	defaultDuplicates = 2 * time.Minute
	defaultPullBytes  = 8 << 20

	// publishAckTimeout fails an asynchronous publish whose ack does not
	// come back; Flush then reports it.
	publishAckTimeout = 30 * time.Second
	// closeTimeout bounds the network work of Close (final flush, final
	// ack, consumer deletion).
	closeTimeout = 10 * time.Second

	// Acks of a durable subscription are coalesced: with AckAll, acking
	// the newest acked delivery acknowledges all earlier ones. One ack is
	// sent every ackEvery calls to Ack, or ackDelay after the first unsent
	// one, whichever comes first; Close sends the last one synchronously.
	ackEvery = 256
	ackDelay = 5 * time.Millisecond
	// maxAckPending is far above what one subscription buffers (PullBytes)
	// so that the broker never stops a durable subscription that acks.
	maxAckPending = 1 << 20
	// ephemeralInactive lets the server remove an ephemeral consumer whose
	// client vanished without Close.
	ephemeralInactive = time.Minute
	// A pull request that goes nowhere (a cluster whose consumer leader is
	// not in place yet answers "no responders") is sent again when no
	// heartbeat came for two pullHeartbeat periods; nats.go's default
	// (15 s) would stall a new subscription that long.
	pullHeartbeat = time.Second
	pullExpiry    = 10 * time.Second
	// apiTimeout bounds a JetStream API call (stream and consumer
	// management) when ctx has no deadline; a replicated consumer takes
	// a leader election.
	apiTimeout = 10 * time.Second
)

const msgIDHeader = jetstream.MsgIDHeader

var ackAck = []byte("+ACK")

// StreamName is the name of the run's stream: ASYREVEL_<run>.
func StreamName(run string) string { return "ASYREVEL_" + run }

// SubjectPrefix is the subject prefix of the run: asyrevel.<run>. The
// stream captures SubjectPrefix(run)+".>".
func SubjectPrefix(run string) string { return "asyrevel." + run }

// JetStream is a Bus on a run's NATS JetStream stream. One JetStream is
// one NATS connection (one participant).
type JetStream struct {
	nc        *nats.Conn
	js        jetstream.JetStream
	run       string
	stream    string
	prefix    string // SubjectPrefix(run) + "."
	pullBytes int
	log       zerolog.Logger

	consumerReplicas int

	streamMu sync.Mutex
	st       jetstream.Stream

	slots   chan struct{} // publish window
	pub     *publisher
	ctr     counters
	dups    atomic.Uint64
	closing chan struct{}

	closeMu  sync.RWMutex // Publish hand-offs hold it for reading
	closed   atomic.Bool
	closeOne sync.Once

	subsMu sync.Mutex
	subs   map[*jsSub]struct{}
}

var _ Bus = (*JetStream)(nil)

// ConnectJetStream connects to NATS and creates or updates the run's stream
// (limits retention, file storage, DenyDelete, DenyPurge, dedupe window).
// Several participants may connect at once.
func ConnectJetStream(ctx context.Context, cfg JetStreamConfig) (*JetStream, error) {
	if err := checkName("run", cfg.Run); err != nil {
		return nil, err
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = defaultMaxPending
	}
	if cfg.Duplicates <= 0 {
		cfg.Duplicates = defaultDuplicates
	}
	if cfg.Replicas <= 0 {
		cfg.Replicas = 1
	}
	if cfg.ConsumerReplicas < 0 || cfg.ConsumerReplicas > cfg.Replicas {
		return nil, fmt.Errorf("%w: %d consumer replicas for %d stream replicas", ErrInvalid, cfg.ConsumerReplicas, cfg.Replicas)
	}
	if cfg.PullBytes <= 0 {
		cfg.PullBytes = defaultPullBytes
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b := &JetStream{
		run:     cfg.Run,
		stream:  StreamName(cfg.Run),
		prefix:  SubjectPrefix(cfg.Run) + ".",
		log:     zerolog.Nop(),
		slots:   make(chan struct{}, cfg.MaxPending),
		closing: make(chan struct{}),
		subs:    make(map[*jsSub]struct{}),

		consumerReplicas: cfg.ConsumerReplicas,
	}
	if cfg.Logger != nil {
		b.log = cfg.Logger.With().Str("run", cfg.Run).Str("conn", cfg.Name).Logger()
	}

	url := cfg.URL
	if url == "" && cfg.Server != nil {
		url = cfg.Server.URL()
	}
	opts := []nats.Option{
		nats.Name(cfg.Name),
		nats.ClosedHandler(b.onConnClosed),
		nats.ErrorHandler(b.onConnError),
	}
	if cfg.User != "" {
		opts = append(opts, nats.UserInfo(cfg.User, cfg.Password))
	}
	if cfg.InProcess {
		if cfg.Server == nil {
			return nil, fmt.Errorf("%w: InProcess needs Server", ErrInvalid)
		}
		opts = append(opts, nats.InProcessServer(cfg.Server.InProcess()))
		if url == "" {
			url = nats.DefaultURL // never dialled: the pipe is used instead
		}
	}
	if url == "" {
		return nil, fmt.Errorf("%w: neither URL nor Server given", ErrInvalid)
	}
	opts = append(opts, cfg.Options...)
	opts = append(opts, countWire(&b.ctr))
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("broker: connect %s: %w", url, err)
	}
	b.nc = nc
	b.pullBytes = max(cfg.PullBytes, 2*int(nc.MaxPayload())+64<<10)
	b.js, err = jetstream.New(nc, jetstream.WithDefaultTimeout(apiTimeout))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("broker: jetstream: %w", err)
	}
	fast := !cfg.NoCreate && !cfg.PerMessageAcks && serverAtLeast(nc.ConnectedServerVersion(), 2, 14)
	if !cfg.NoCreate {
		if err := b.ensureStream(ctx, cfg, fast); err != nil {
			nc.Close()
			return nil, err
		}
	}
	mode := pubAcks
	if fast {
		mode = pubFast
	}
	if b.pub, err = newPublisher(nc, mode, cfg.MaxPending, b.slots, &b.dups, &b.log); err != nil {
		nc.Close()
		return nil, err
	}
	return b, nil
}

// ensureStream creates the run's stream or updates it to cfg. A concurrent
// creation with a slightly different configuration makes the create fail
// with "name already in use"; the next round then updates.
func (b *JetStream) ensureStream(ctx context.Context, cfg JetStreamConfig, batches bool) error {
	scfg := jetstream.StreamConfig{
		Name:         b.stream,
		Description:  "asyrevel run " + cfg.Run,
		Subjects:     []string{SubjectPrefix(cfg.Run) + ".>"},
		Retention:    jetstream.LimitsPolicy,
		Storage:      jetstream.FileStorage,
		Discard:      jetstream.DiscardOld,
		MaxMsgs:      -1,
		MaxBytes:     -1,
		MaxMsgSize:   -1,
		MaxConsumers: -1,
		Replicas:     cfg.Replicas,
		Duplicates:   cfg.Duplicates,
		DenyDelete:   true,
		DenyPurge:    true,
		// Fast batch publishing (nats-server 2.14+); a publisher that
		// does not use it is not affected.
		AllowBatchPublish: batches,
	}
	var err error
	for range 5 {
		var st jetstream.Stream
		st, err = b.js.CreateOrUpdateStream(ctx, scfg)
		if err == nil {
			b.st = st
			if cfg.Replicas > 1 {
				return b.waitStreamLeader(ctx, cfg.Replicas)
			}
			return nil
		}
		if !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			break
		}
	}
	return fmt.Errorf("broker: create or update stream %s: %w", b.stream, err)
}

// waitStreamLeader waits until the replicated stream has a leader and
// every replica is current, so that the first publishes find it ready.
func (b *JetStream) waitStreamLeader(ctx context.Context, replicas int) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		info, err := b.st.Info(ctx)
		if err == nil && info.Cluster != nil && info.Cluster.Leader != "" && len(info.Cluster.Replicas) >= replicas-1 {
			current := 0
			for _, r := range info.Cluster.Replicas {
				if r.Current {
					current++
				}
			}
			if current >= replicas-1 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = ctx.Err()
			}
			return fmt.Errorf("broker: stream %s has no leader with %d current replicas: %w", b.stream, replicas, err)
		case <-t.C:
		}
	}
}

// Run is the run name.
func (b *JetStream) Run() string { return b.run }

// Conn is the underlying NATS connection.
func (b *JetStream) Conn() *nats.Conn { return b.nc }

// Stats returns the connection's traffic counters.
func (b *JetStream) Stats() Stats { return b.ctr.stats() }

// Duplicates is the number of messages published on this connection that
// the broker acknowledged as duplicates (same ID within the window) and
// did not store again.
func (b *JetStream) Duplicates() uint64 { return b.dups.Load() }

// Publish hands m to the broker asynchronously. It blocks while MaxPending
// messages are unacknowledged, until ctx is done. Failures of the
// asynchronous part are reported by Flush. A duplicate ID is not an error
// here; see Duplicates.
func (b *JetStream) Publish(ctx context.Context, m *Message) error {
	if b.closed.Load() {
		return ErrClosed
	}
	if err := checkMessage(m); err != nil {
		return err
	}
	if !strings.HasPrefix(m.Subject, b.prefix) {
		return fmt.Errorf("%w: subject %q is outside run %s", ErrInvalid, m.Subject, b.run)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case b.slots <- struct{}{}:
	default:
		select {
		case b.slots <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		case <-b.closing:
			return ErrClosed
		}
	}
	b.closeMu.RLock()
	if b.closed.Load() {
		b.closeMu.RUnlock()
		<-b.slots
		return ErrClosed
	}
	err := b.pub.publish(m)
	b.closeMu.RUnlock()
	if err != nil {
		<-b.slots
		return err
	}
	b.ctr.published(len(m.Data))
	return nil
}

// onConnClosed fails what is still unacknowledged: nats.go forgets pending
// acks when the connection closes for good.
func (b *JetStream) onConnClosed(*nats.Conn) {
	if b.pub != nil {
		b.pub.failAll(nats.ErrConnectionClosed)
	}
}

func (b *JetStream) onConnError(_ *nats.Conn, sub *nats.Subscription, err error) {
	ev := b.log.Warn().Err(err)
	if sub != nil {
		ev = ev.Str("subject", sub.Subject)
	}
	ev.Msg("nats asynchronous error")
}

// Flush waits until every message published before the call is
// acknowledged by the broker, and returns the first asynchronous failure
// since the previous Flush.
func (b *JetStream) Flush(ctx context.Context) error {
	if b.closed.Load() {
		return ErrClosed
	}
	return b.flush(ctx)
}

func (b *JetStream) flush(ctx context.Context) error {
	for _, ep := range b.pub.seal() {
		select {
		case <-ep.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return b.pub.takeErr()
}

// Count is the number of stored messages whose subject matches filter (it
// asks the broker for per-subject counts; the cost grows with the number
// of distinct subjects, not of messages).
func (b *JetStream) Count(ctx context.Context, filter string) (uint64, error) {
	if b.closed.Load() {
		return 0, ErrClosed
	}
	if err := b.checkRunFilter(filter); err != nil {
		return 0, err
	}
	st, err := b.streamHandle(ctx)
	if err != nil {
		return 0, err
	}
	if filter == b.prefix+">" {
		info, err := st.Info(ctx)
		if err != nil {
			return 0, fmt.Errorf("broker: stream info: %w", err)
		}
		return info.State.Msgs, nil
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return 0, fmt.Errorf("broker: stream info: %w", err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n, nil
}

func (b *JetStream) streamHandle(ctx context.Context) (jetstream.Stream, error) {
	b.streamMu.Lock()
	defer b.streamMu.Unlock()
	if b.st == nil {
		st, err := b.js.Stream(ctx, b.stream)
		if err != nil {
			return nil, fmt.Errorf("broker: stream %s: %w", b.stream, err)
		}
		b.st = st
	}
	return b.st, nil
}

func (b *JetStream) checkRunFilter(filter string) error {
	if err := checkFilter(filter); err != nil {
		return err
	}
	if !strings.HasPrefix(filter, b.prefix) {
		return fmt.Errorf("%w: filter %q is outside run %s", ErrInvalid, filter, b.run)
	}
	return nil
}

// Subscribe creates a consumer on the run's stream and delivers to h.
//
// A durable subscription is a durable consumer with AckAll: opening it
// again resumes after the last Ack (the consumer is reset to its ack floor
// if it had delivered beyond it). An ephemeral one is an in-memory consumer
// without acks (Ack is a no-op), deleted by Close.
func (b *JetStream) Subscribe(ctx context.Context, filters []string, opts SubscribeOptions, h Handler) (Subscription, error) {
	if b.closed.Load() {
		return nil, ErrClosed
	}
	if h == nil {
		return nil, fmt.Errorf("%w: nil handler", ErrInvalid)
	}
	if err := checkFilters(filters); err != nil {
		return nil, err
	}
	for _, f := range filters {
		if err := b.checkRunFilter(f); err != nil {
			return nil, err
		}
	}
	if opts.Durable != "" {
		if err := checkName("durable", opts.Durable); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cons, err := b.consumer(ctx, filters, opts)
	if err != nil {
		return nil, err
	}
	s := &jsSub{
		bus:     b,
		name:    cons.CachedInfo().Name,
		durable: opts.Durable != "",
		handler: h,
	}
	s.d.sub = s
	s.ctx, s.cancel = context.WithCancel(ctx)
	s.ackTimer = time.AfterFunc(time.Hour, s.ackTick)
	s.ackTimer.Stop()
	s.cc, err = cons.Consume(s.onMsg,
		jetstream.PullMaxBytes(b.pullBytes),
		jetstream.PullExpiry(pullExpiry),
		jetstream.PullHeartbeat(pullHeartbeat),
		jetstream.ConsumeErrHandler(s.onConsumeErr))
	if err != nil {
		s.cancel()
		s.deleteEphemeral()
		return nil, fmt.Errorf("broker: consume %s: %w", s.name, err)
	}
	s.watchMu.Lock()
	s.stopWatch = context.AfterFunc(ctx, func() { s.Close() })
	s.watchMu.Unlock()

	b.subsMu.Lock()
	b.subs[s] = struct{}{}
	b.subsMu.Unlock()
	if b.closed.Load() {
		s.Close()
		return nil, ErrClosed
	}
	return s, nil
}

// consumer creates the subscription's consumer, or opens and prepares an
// existing durable one.
func (b *JetStream) consumer(ctx context.Context, filters []string, opts SubscribeOptions) (jetstream.Consumer, error) {
	cfg := jetstream.ConsumerConfig{AckWait: DefaultAckWait}
	setFilters(&cfg, filters)
	if opts.Deliver == DeliverNew {
		cfg.DeliverPolicy = jetstream.DeliverNewPolicy
	}
	if opts.Durable == "" {
		cfg.AckPolicy = jetstream.AckNonePolicy
		cfg.MemoryStorage = true
		cfg.InactiveThreshold = ephemeralInactive
		c, err := b.js.CreateConsumer(ctx, b.stream, cfg)
		if err != nil {
			return nil, fmt.Errorf("broker: create consumer: %w", err)
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
				return nil, fmt.Errorf("broker: create durable %s: %w", opts.Durable, err)
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
	if serverAtLeast(b.nc.ConnectedServerVersion(), 2, 14) && !recreateOnReset {
		if _, err := b.js.ResetConsumer(ctx, b.stream, info.Name); err != nil {
			return nil, fmt.Errorf("broker: reset durable %s to its ack floor: %w", info.Name, err)
		}
		return c, nil
	}
	cfg := info.Config
	cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
	cfg.OptStartSeq = info.AckFloor.Stream + 1
	cfg.OptStartTime = nil
	if err := b.js.DeleteConsumer(ctx, b.stream, info.Name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, fmt.Errorf("broker: recreate durable %s: %w", info.Name, err)
	}
	c, err := b.js.CreateConsumer(ctx, b.stream, cfg)
	if err != nil {
		return nil, fmt.Errorf("broker: recreate durable %s: %w", info.Name, err)
	}
	return c, nil
}

// recreateOnReset forces the pre-2.14 path of resetDurable (tests).
var recreateOnReset = false

// serverAtLeast reports whether a NATS server version "x.y.z[-...]" is at
// least major.minor.
func serverAtLeast(version string, major, minor int) bool {
	var x, y int
	if _, err := fmt.Sscanf(version, "%d.%d", &x, &y); err != nil {
		return false
	}
	return x > major || x == major && y >= minor
}

func setFilters(cfg *jetstream.ConsumerConfig, filters []string) {
	if len(filters) == 1 {
		cfg.FilterSubject, cfg.FilterSubjects = filters[0], nil
	} else {
		cfg.FilterSubject, cfg.FilterSubjects = "", slices.Clone(filters)
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
		if !slices.Contains(have, f) {
			return false
		}
	}
	return true
}

// Close closes the subscriptions, waits (at most 10 s, and not at all while
// disconnected) for unacknowledged publishes, and closes the connection. The first call returns what went
// wrong on the way (a failed publish, final ack or consumer deletion);
// later calls return nil.
func (b *JetStream) Close() error {
	var err error
	b.closeOne.Do(func() { err = b.close() })
	return err
}

func (b *JetStream) close() error {
	close(b.closing)
	b.closeMu.Lock()
	b.closed.Store(true)
	b.closeMu.Unlock()

	b.subsMu.Lock()
	subs := make([]*jsSub, 0, len(b.subs))
	for s := range b.subs {
		subs = append(subs, s)
	}
	b.subsMu.Unlock()
	var errs []error
	for _, s := range subs {
		errs = append(errs, s.Close())
	}
	if b.nc.IsConnected() {
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		if err := b.flush(ctx); err != nil {
			errs = append(errs, fmt.Errorf("broker: flush on close: %w", err))
		}
	} else {
		// Disconnected (reconnecting): acks may never come; do not wait.
		if err := b.pub.takeErr(); err != nil {
			errs = append(errs, err)
		}
		if n := b.pub.pending(); n > 0 {
			errs = append(errs, fmt.Errorf("broker: closing while disconnected: %d publishes unconfirmed", n))
		}
	}
	b.pub.stop(nats.ErrConnectionClosed)
	b.nc.Close()
	return errors.Join(errs...)
}

// jsSub is a subscription on a JetStream consumer. nats.go calls onMsg
// from the consume subscription's goroutine, one message at a time.
type jsSub struct {
	bus       *JetStream
	name      string // consumer name
	durable   bool
	handler   Handler
	ctx       context.Context
	cancel    context.CancelFunc
	cc        jetstream.ConsumeContext
	watchMu   sync.Mutex
	stopWatch func() bool // ends the ctx watch; set once Consume runs

	hmu    sync.Mutex // held while the handler runs
	closed atomic.Bool
	last   uint64 // stream sequence of the last delivery handed out
	d      jsDelivery

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

func (s *jsSub) onMsg(m jetstream.Msg) {
	s.hmu.Lock()
	if s.closed.Load() {
		s.hmu.Unlock()
		return
	}
	seq, ok := ackStreamSeq(m.Reply())
	if !ok || seq <= s.last {
		// Not a stream message, or a redelivery of what the handler
		// already had (redelivered after AckWait while still buffered).
		s.hmu.Unlock()
		return
	}
	s.last = seq
	s.bus.ctr.delivered(len(m.Data()))
	s.d.msg, s.d.seq = m, seq
	s.handler(s.ctx, &s.d)
	s.d.msg = nil
	s.hmu.Unlock()
}

func (s *jsSub) onConsumeErr(_ jetstream.ConsumeContext, err error) {
	if s.closed.Load() {
		return
	}
	s.bus.log.Debug().Err(err).Str("consumer", s.name).Msg("consume")
}

func (s *jsSub) ack(reply string) error {
	if !s.durable {
		return nil
	}
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
	s.closed.Store(true)
	s.cancel()
	s.cc.Stop()
	s.hmu.Lock() // wait for the handler call in progress
	s.hmu.Unlock()
	s.watchMu.Lock()
	if s.stopWatch != nil {
		s.stopWatch()
	}
	s.watchMu.Unlock()
	select {
	case <-s.cc.Closed():
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
	b := s.bus
	b.subsMu.Lock()
	delete(b.subs, s)
	b.subsMu.Unlock()
	return err
}

func (s *jsSub) deleteEphemeral() error {
	if s.durable || s.bus.nc.IsClosed() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	err := s.bus.js.DeleteConsumer(ctx, s.bus.stream, s.name)
	if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("broker: delete consumer %s: %w", s.name, err)
	}
	return nil
}

// jsDelivery is reused for every delivery of one subscription.
type jsDelivery struct {
	sub *jsSub
	msg jetstream.Msg
	seq uint64
}

func (d *jsDelivery) Subject() string          { return d.msg.Subject() }
func (d *jsDelivery) Data() []byte             { return d.msg.Data() }
func (d *jsDelivery) ID() string               { return d.msg.Headers().Get(msgIDHeader) }
func (d *jsDelivery) Header(key string) string { return d.msg.Headers().Get(key) }
func (d *jsDelivery) Seq() uint64              { return d.seq }
func (d *jsDelivery) Ack() error               { return d.sub.ack(d.msg.Reply()) }

// ackStreamSeq extracts the stream sequence from a JetStream reply subject:
//
//	$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<tm>.<pending>
//	$JS.ACK.<domain>.<account>.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<tm>.<pending>[.<token>]
func ackStreamSeq(reply string) (uint64, bool) {
	const pre = "$JS.ACK."
	if !strings.HasPrefix(reply, pre) {
		return 0, false
	}
	var idx int
	switch n := strings.Count(reply, ".") + 1; {
	case n == 9:
		idx = 5
	case n >= 11:
		idx = 7
	default:
		return 0, false
	}
	s := reply[len(pre):]
	for range idx - 2 {
		s = s[strings.IndexByte(s, '.')+1:]
	}
	if i := strings.IndexByte(s, '.'); i >= 0 {
		s = s[:i]
	}
	if s == "" {
		return 0, false
	}
	var v uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
	}
	return v, true
}
