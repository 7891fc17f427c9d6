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
	// Design is how messages travel; "" means DefaultDesign
	// (DesignCapture). DesignMemory is not a NATS design (ErrInvalid).
	Design Design
	// Window bounds what a publisher may have unconfirmed by the stream:
	// Publish blocks while Window messages or WindowBytes payload bytes
	// wait for the stream's confirmation. Defaults 1024 and 1 MiB. Each
	// connection's window is part of the stream's ingest buffer (100,000
	// messages and 128 MiB on a stock server): keep the sum of the
	// participants' windows below it.
	Window, WindowBytes int
	// MarkEvery (DesignCapture): every MarkEvery-th message (and every
	// message with an ID) is published with a stream acknowledgement
	// that confirms it and all before it. Default Window/16, at least 1.
	MarkEvery int
	// Duplicates is the stream's dedupe window for message IDs. Default 2m.
	Duplicates time.Duration
	// Replicas is the stream's replication factor. Default 1.
	Replicas int
	// ConsumerReplicas is the replication factor of the durable
	// consumers this connection creates (DesignAcked). 0 means the
	// stream's. On a 3-node cluster with an R3 stream, 1 nearly doubles
	// the steps per second of the acked design, at a cost: a durable
	// whose node is down cannot resume until the node is back.
	ConsumerReplicas int
	// Compression of the stream's store when the Bus creates it.
	Compression Compression
	// MaxBytes bounds the run's stream when the Bus creates it: once it
	// holds that many bytes, the stream refuses new messages (it never
	// discards old ones: the log is the audit trail) and publishes fail
	// with ErrStreamFull. 0 means no limit.
	MaxBytes int64
	// MaxMsgSize is the largest message the run's stream stores, when
	// the Bus creates it; larger ones (a junk flood) are refused. 0 means
	// no limit.
	MaxMsgSize int32
	// Persist is when the stream writes a message to its files, when the
	// Bus creates it.
	Persist Persist
	// NoCreate uses the run's stream as it is and does not create or
	// update it, for users without stream-admin permissions.
	NoCreate bool
	// CreateOnly creates the run's stream if it does not exist and never
	// updates it: an existing stream is used as it is, for users allowed
	// to create the stream but not to change it (a changed limit would
	// shorten the audit log).
	CreateOnly bool
	// ConsumerName, if set, gives the name prefix of the ordered consumer
	// a subscription with these filters creates (nats.go names its lives
	// prefix_1, prefix_2, ...), so that broker permissions can grant
	// consumers by name (package trust). nil: random names. With it, the
	// ephemeral subscriptions of DesignAcked are ordered consumers too
	// (AckNone either way), named so.
	ConsumerName func(filters []string) string
	// SplitFilters makes a subscription with several filters that needs
	// stream consumers (DesignOrdered, DesignAcked, and DesignCapture
	// when it reads history) create one consumer per filter, each named
	// for its one filter (ConsumerName, DurableName), so that broker
	// permissions can restrict what each consumer reads: the server
	// checks a consumer's filter only when it is the one filter in the
	// create request's subject. Each filter keeps its stream order; a
	// delivery of a later filter comes after the earlier filters'
	// messages before it in the stream, but may come after later ones
	// too (see splitSub); the Handler is still called one delivery at a
	// time.
	SplitFilters bool
	// DurableName, with SplitFilters, names the durable consumer of
	// filter for a subscription with Durable durable; nil means
	// durable-<k> with k the filter's third token (the kind of message:
	// "party-1-reply" for durable party-1 and asyrevel.R.reply.1).
	DurableName func(durable, filter string) string
	// WaitStream, with NoCreate, waits (until ctx is done) for the run's
	// stream to be created by someone else instead of failing at once,
	// for participants who may not create it (a party, when the
	// aggregator or the broker's operator creates it).
	WaitStream bool
	// LiveNew (DesignCapture): a DeliverNew subscription goes live at
	// once instead of first reading the stream for what was routed just
	// before it subscribed, for users whose permissions let them create
	// no consumer over its filters. What a participant publishes only
	// after its subscription is confirmed (a party's hello, and so every
	// message addressed to it) is not concerned.
	LiveNew bool
	// PullBytes bounds the bytes each stream subscription buffers ahead
	// of its Handler. Default 8 MiB; always at least twice the server's
	// max payload (a pull request must fit the largest message).
	PullBytes int
	// SubscribeBuffer (DesignCapture, DesignCore) bounds the live
	// deliveries a subscription holds for its Handler. A subscription
	// that falls further behind loses deliveries (counted in
	// Stats.Dropped and logged). Default 32,768 (256 KiB of pointers a
	// subscription).
	SubscribeBuffer int
	// CatchUpGrace (DesignCapture): a subscription that replays history
	// reads the stream for at least this long before it hands over to
	// the live feed, so that messages routed just before it subscribed
	// have reached the stream. Default 200ms.
	CatchUpGrace time.Duration
	// Options are extra nats.go connection options (credentials, TLS,
	// reconnect policy, custom inbox prefix, dialer), applied after the
	// Bus's own but before the wire counter of Stats, which wraps the
	// dialer or in-process provider they leave.
	Options []nats.Option
	// Retry (DesignOrdered, DesignAcked) makes publishing survive the
	// loss of a connection or of the stream's leader: every message gets
	// an ID, and one whose acknowledgement does not come within 5 s, or
	// was in flight when the connection was lost, is published again (the
	// stream's dedupe window drops a second copy), one message at a time
	// on each subject and a control message alone (subjectOrder).
	// On by default when URL lists several servers (a cluster's nodes).
	Retry bool
	// EndOnLoss ends the Bus's publishing when its connection drops: from
	// then on Publish and Flush fail with ErrConnLost, nats.go buffers
	// nothing while it reconnects, and Lost is closed. A single broker
	// killed with messages in flight loses the tail of what it had not
	// written; a publisher that went on after the reconnect would put new
	// messages behind that hole. With EndOnLoss the participant instead
	// starts again from its checkpoint on a new connection, re-sending
	// in order what the stream lacks (package run). Not for fail-over
	// across a cluster's nodes (Retry).
	EndOnLoss bool
	// Logger receives asynchronous connection and consumer errors; nil
	// means silent.
	Logger *zerolog.Logger
}

// Compression chooses the stream's store compression.
type Compression int

const (
	// CompressionDefault is DefaultCompression.
	CompressionDefault Compression = iota
	// CompressionNone stores messages as they are.
	CompressionNone
	// CompressionS2 compresses the store with S2 (server 2.10+; an older
	// server stores uncompressed and ServerFeatures says so).
	CompressionS2
)

// DefaultCompression is what CompressionDefault means: none. S2 makes
// the store about 40% smaller (a9a, batch 1: 115 to 148 bytes a step
// against 207 to 344; batch 64: 1,700 against 2,550 to 3,270) but costs
// 13% more CPU a step at batch 1 and 31% at batch 64 (the server
// compresses each message block when it closes it): more than the 5% of
// steps per second it may cost to be on by default (`asyrevel experiment
// throughput --variants capture-tcp,capture-s2-tcp`).
var DefaultCompression = CompressionNone

// Persist chooses when the stream writes messages to its files.
type Persist int

const (
	// PersistDefault is DefaultPersist.
	PersistDefault Persist = iota
	// PersistSync writes each message to the store file (the operating
	// system's cache) before the stream acknowledges it: the server's
	// default. A crash of the broker's process loses nothing
	// acknowledged; a power cut loses what was not synced (every 2
	// minutes by default).
	PersistSync
	// PersistAsync lets a flusher write messages shortly after they are
	// acknowledged, many per write (server 2.12+; an older server
	// persists synchronously and ServerFeatures says so). A crash of the
	// broker's process can lose the messages of the last few
	// milliseconds; with DesignCapture the live deliveries do not wait
	// for the stream anyway, and a replicated stream (Replicas > 1)
	// flushes this way whatever the setting.
	PersistAsync
)

// DefaultPersist is what PersistDefault means (see the throughput
// experiment: synchronous writes cost the capture design about half of
// its steps per second at batch 1).
var DefaultPersist = PersistAsync

// Defaults and tuning of the JetStream Bus.
const (
	defaultWindow          = 1024
	defaultWindowBytes     = 1 << 20
	defaultDuplicates      = 2 * time.Minute
	defaultPullBytes       = 8 << 20
	defaultSubscribeBuffer = 1 << 15
	defaultCatchUpGrace    = 200 * time.Millisecond

	// publishAckTimeout fails an asynchronous publish whose ack does not
	// come back; Flush then reports it.
	publishAckTimeout = 30 * time.Second
	// publishAckTimeoutRetry is the ack timeout under fail-over
	// (JetStreamConfig.Retry): the message is then published again.
	publishAckTimeoutRetry = 5 * time.Second
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

// JetStream is a Bus on a run's NATS stream (or, with DesignCore, on core
// NATS alone). One JetStream is one NATS connection (one participant).
type JetStream struct {
	nc        *nats.Conn
	js        jetstream.JetStream
	design    Design
	feats     ServerFeatures
	run       string
	stream    string
	prefix    string // SubjectPrefix(run) + "."
	replicas  int
	pullBytes int
	subBuffer int
	grace     time.Duration
	log       zerolog.Logger

	consumerReplicas int
	consumerName     func([]string) string
	durableName      func(durable, filter string) string
	denied           atomic.Pointer[string] // the last permission violation the server reported
	splitFilters     bool
	liveNew          bool

	streamMu sync.Mutex
	st       jetstream.Stream

	pub        publisher
	ctr        counters
	reconnects atomic.Uint64
	// retryPub is the retrying publisher (JetStreamConfig.Retry), for the
	// reconnect handler, which may run before pub is set.
	retryPub atomic.Pointer[asyncPub]
	batchPub atomic.Pointer[batchPub] // the same, batching (replicated streams)
	closing  chan struct{}

	closeMu  sync.RWMutex // Publish holds it for reading
	closed   atomic.Bool
	closeOne sync.Once

	// sealed: the run's stream was sealed when this connection found it
	// (its run is over): Publish refuses with ErrSealed, where the
	// stream would drop the message without a word.
	sealed atomic.Bool

	subsMu    sync.Mutex
	subs      map[Subscription]struct{}
	namesMu   sync.Mutex
	names     map[string]int                  // the last name taken of each prefix (orderedName)
	core      map[*nats.Subscription]*coreSub // for slow-consumer reports
	downSince atomic.Int64                    // unix ns of the disconnection in progress, 0 while connected
	endOnLoss bool
	url       string        // the server URLs given (comma-separated)
	lost      chan struct{} // closed when the connection drops (endOnLoss)
	lostOnce  sync.Once
	outage    atomic.Int64 // ns the connection was down, over the closed outages
	// silentSince: unix ns since when the stream has answered none of
	// this connection's publishes while the connection was up (a
	// cluster's stream without a leader), 0 while it answers.
	silentSince atomic.Int64
	spansMu     sync.Mutex
	spans       [outageSpans][2]int64 // the last closed outages (unix ns from, to), a ring
	nspans      int                   // outages closed so far
}

// outageSpans is how many closed outages OutageSince remembers.
const outageSpans = 16

var _ Bus = (*JetStream)(nil)

// publisher is how a design publishes.
type publisher interface {
	// publish sends m (copying what it keeps) or blocks while the window
	// is full, until ctx is done or the Bus closes.
	publish(ctx context.Context, m *Message) error
	// flush waits until everything published so far is confirmed and
	// returns the first failure since the last flush.
	flush(ctx context.Context) error
	// pending is the number of messages not yet confirmed.
	pending() int
	// duplicates counts messages the stream reported as duplicates.
	duplicates() uint64
	// takeErr returns and clears the first failure.
	takeErr() error
}

// ConnectJetStream connects to NATS, checks the server (version 2.9 or
// newer, JetStream) and, unless the design has no stream or NoCreate is
// set, creates or updates the run's stream (limits retention, file
// storage, DenyDelete, DenyPurge, dedupe window, compression). Several
// participants may connect at once.
func ConnectJetStream(ctx context.Context, cfg JetStreamConfig) (*JetStream, error) {
	if err := checkName("run", cfg.Run); err != nil {
		return nil, err
	}
	design, err := ParseDesign(string(cfg.Design))
	if err != nil {
		return nil, err
	}
	if design == DesignMemory {
		return nil, fmt.Errorf("%w: design %q has no broker: use NewMemoryHub", ErrInvalid, design)
	}
	if cfg.Window <= 0 {
		cfg.Window = defaultWindow
	}
	if cfg.WindowBytes <= 0 {
		cfg.WindowBytes = defaultWindowBytes
	}
	if cfg.MarkEvery <= 0 {
		cfg.MarkEvery = max(1, cfg.Window/16)
	}
	if cfg.Duplicates <= 0 {
		cfg.Duplicates = defaultDuplicates
	}
	if cfg.Replicas <= 0 {
		// A client given several servers (a cluster's nodes) replicates
		// the stream on up to three of them.
		cfg.Replicas = min(3, max(1, len(ServerURLs(cfg.URL))))
	}
	if len(ServerURLs(cfg.URL)) > 1 {
		cfg.Retry = true // fail-over between the servers
	}
	if cfg.ConsumerReplicas < 0 || cfg.ConsumerReplicas > cfg.Replicas {
		return nil, fmt.Errorf("%w: %d consumer replicas for %d stream replicas", ErrInvalid, cfg.ConsumerReplicas, cfg.Replicas)
	}
	if cfg.PullBytes <= 0 {
		cfg.PullBytes = defaultPullBytes
	}
	if cfg.SubscribeBuffer <= 0 {
		cfg.SubscribeBuffer = defaultSubscribeBuffer
	}
	if cfg.CatchUpGrace <= 0 {
		cfg.CatchUpGrace = defaultCatchUpGrace
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b := &JetStream{
		design:    design,
		run:       cfg.Run,
		stream:    StreamName(cfg.Run),
		prefix:    SubjectPrefix(cfg.Run) + ".",
		replicas:  cfg.Replicas,
		subBuffer: cfg.SubscribeBuffer,
		grace:     cfg.CatchUpGrace,
		log:       zerolog.Nop(),
		closing:   make(chan struct{}),
		lost:      make(chan struct{}),
		endOnLoss: cfg.EndOnLoss && !cfg.Retry,
		subs:      make(map[Subscription]struct{}),
		core:      make(map[*nats.Subscription]*coreSub),

		consumerReplicas: cfg.ConsumerReplicas,
		consumerName:     cfg.ConsumerName,
		durableName:      cfg.DurableName,
		splitFilters:     cfg.SplitFilters,
		liveNew:          cfg.LiveNew,
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
		nats.ErrorHandler(b.onConnError),
		nats.ReconnectHandler(b.onReconnect),
		nats.DisconnectErrHandler(b.onDisconnect),
		// Fail over: a client keeps reconnecting, to the next server of
		// its list (or one the cluster told it about) at once, to one it
		// tried last after ReconnectWait; the runtimes' own waits
		// (--wait) decide when to give up on a run.
		nats.MaxReconnects(-1),
		nats.ReconnectWait(reconnectWait),
		// The first URL of a list is this client's home node (the one
		// its organisation runs, say); the others are for fail-over.
		nats.DontRandomize(),
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
	if b.endOnLoss {
		// Nothing published while disconnected is sent after the
		// reconnect: it would land behind what the broker lost.
		opts = append(opts, nats.ReconnectBufSize(-1))
	}
	opts = append(opts, cfg.Options...)
	opts = append(opts, countWire(&b.ctr))
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("broker: connect %s: %w", url, err)
	}
	b.nc, b.url = nc, url
	fail := func(err error) (*JetStream, error) {
		nc.Close()
		return nil, err
	}
	if b.feats, err = featuresOf(nc.ConnectedServerVersion()); err != nil {
		return fail(err)
	}
	b.pullBytes = max(cfg.PullBytes, 2*int(nc.MaxPayload())+64<<10)
	b.js, err = jetstream.New(nc, jetstream.WithDefaultTimeout(apiTimeout))
	if err != nil {
		return fail(fmt.Errorf("broker: jetstream: %w", err))
	}
	if design != DesignCore {
		switch {
		case cfg.NoCreate && cfg.WaitStream:
			err = b.waitStream(ctx)
		case cfg.NoCreate:
			_, err = b.streamHandle(ctx)
		default:
			err = b.ensureStream(ctx, cfg)
		}
		if err == nil && (cfg.NoCreate || cfg.CreateOnly) {
			// A replicated stream another made, or just created: the
			// first publishes must find its leader (publishes that time
			// out are sent again, and may then land out of order).
			if info := b.st.CachedInfo(); info != nil && info.Config.Replicas > 1 {
				err = b.waitStreamLeader(ctx, info.Config.Replicas)
			}
		}
		if err != nil {
			return fail(err)
		}
		if b.st != nil {
			if info := b.st.CachedInfo(); info != nil && info.Config.Sealed {
				b.sealed.Store(true)
			}
		}
	}
	switch design {
	case DesignCore:
		b.pub = &corePub{nc: nc}
	case DesignCapture:
		b.pub, err = newCapturePub(b, cfg)
	case DesignOrdered, DesignAcked:
		if cfg.Retry && cfg.Replicas > 1 && b.feats.AtomicPublish {
			var bp *batchPub
			if bp, err = newBatchPub(b, cfg.Window); err == nil {
				b.pub = bp
				b.batchPub.Store(bp)
			}
			break
		}
		fallthrough
	default:
		var ap *asyncPub
		if ap, err = newAsyncPub(b, cfg.Window, cfg.Retry); err == nil {
			b.pub = ap
			if cfg.Retry {
				b.retryPub.Store(ap)
			}
		}
	}
	if err != nil {
		return fail(err)
	}
	if m := b.feats.Missing(); m != "" {
		b.log.Debug().Msg(m)
	}
	return b, nil
}

// jetStreamMissing turns "JetStream is off" into a clear ErrServer.
func jetStreamMissing(err error, version string) error {
	if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) ||
		errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("%w: nats-server %s has no JetStream for this account: start it with -js (or jetstream {} in its configuration)", ErrServer, version)
	}
	return err
}

// allReplicasGrace: how long a connect waits for the last replicas of a
// stream that has a quorum.
const allReplicasGrace = 2 * time.Second

// errCodeNoPeers: a replicated stream found too few peers online
// (JSClusterNoPeersErrF); creation is tried again after noPeersPause.
const (
	errCodeNoPeers = 10005
	noPeersPause   = time.Second
)

// ensureStream creates the run's stream or updates it to cfg. A concurrent
// creation with a slightly different configuration makes the create fail
// with "name already in use"; the next round then updates.
func (b *JetStream) ensureStream(ctx context.Context, cfg JetStreamConfig) error {
	scfg := jetstream.StreamConfig{
		Name:         b.stream,
		Description:  "asyrevel run " + cfg.Run,
		Subjects:     []string{SubjectPrefix(cfg.Run) + ".>"},
		Retention:    jetstream.LimitsPolicy,
		Storage:      jetstream.FileStorage,
		Discard:      jetstream.DiscardNew,
		MaxMsgs:      -1,
		MaxBytes:     -1,
		MaxMsgSize:   -1,
		MaxConsumers: -1,
		Replicas:     cfg.Replicas,
		Duplicates:   cfg.Duplicates,
		DenyDelete:   true,
		DenyPurge:    true,
		// Messages may be read one by one (an auditor's right, trust:
		// Roster.Auditors); participants' permissions deny it.
		AllowDirect: true,
		// The fail-over publisher sends atomic batches to a replicated
		// stream (batchPub); asynchronous persistence (R1 only) refuses it.
		AllowAtomicPublish: cfg.Replicas > 1 && b.feats.AtomicPublish,
	}
	if cfg.MaxBytes > 0 {
		scfg.MaxBytes = cfg.MaxBytes
	}
	if cfg.MaxMsgSize > 0 {
		scfg.MaxMsgSize = cfg.MaxMsgSize
	}
	// A replicated stream flushes asynchronously anyway (its raft log
	// backs it) and refuses the setting.
	if p := cfg.Persist; b.feats.AsyncPersist && cfg.Replicas == 1 && (p == PersistAsync || p == PersistDefault && DefaultPersist == PersistAsync) {
		scfg.PersistMode = jetstream.AsyncPersistMode
	}
	if c := cfg.Compression; b.feats.Compression && (c == CompressionS2 || c == CompressionDefault && DefaultCompression == CompressionS2) {
		scfg.Compression = jetstream.S2Compression
	}
	var err error
	if cfg.CreateOnly {
		for {
			// A cluster that is forming leaves requests unanswered: ask
			// again until ctx is done.
			actx, cancel := context.WithTimeout(ctx, streamWaitAsk)
			err = b.createOnly(actx, scfg)
			cancel()
			if err == nil || ctx.Err() != nil || !unanswered(err) {
				return err
			}
			if d := b.deniedAPI("STREAM.CREATE"); d != "" {
				return fmt.Errorf("broker: stream %s does not exist, and this user may not create it (%s): whoever runs the broker creates it, or gives the aggregator the right (asyrevel keys server-config without --no-stream-create)", b.stream, d)
			}
			if d := b.deniedAPI("STREAM.INFO"); d != "" {
				return fmt.Errorf("broker: stream %s: this user may not read its info (%s)", b.stream, d)
			}
			b.log.Info().Err(err).Str("stream", b.stream).Msg("the broker does not answer yet; asking again")
		}
	}
	for range 5 {
		var st jetstream.Stream
		st, err = b.createOrUpdate(ctx, scfg)
		if err == nil {
			b.st = st
			if cfg.Replicas > 1 {
				return b.waitStreamLeader(ctx, cfg.Replicas)
			}
			return nil
		}
		// A clustered server may leave concurrent creations of one
		// replicated stream unanswered (seen with 2.15: five processes
		// connecting at once to a 3-node cluster, two timed out): the
		// next round finds the stream made by another.
		timedOut := ctx.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout))
		// A peer that missed heartbeats (a loaded host) is offline for a
		// moment: "no suitable peers for placement". Wait and try again.
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeNoPeers && ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(noPeersPause):
			}
			continue
		}
		if !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) && !timedOut {
			break
		}
	}
	return fmt.Errorf("broker: create or update stream %s: %w", b.stream, jetStreamMissing(err, b.feats.Version))
}

// createOnly creates the stream if it is missing, and never changes it.
func (b *JetStream) createOnly(ctx context.Context, scfg jetstream.StreamConfig) error {
	// Look first: a user allowed to read the stream's info but not to
	// create it uses an existing stream without trying.
	if _, err := b.streamHandle(ctx); err == nil || !errors.Is(err, jetstream.ErrStreamNotFound) {
		return err
	}
	st, err := b.js.CreateStream(ctx, scfg)
	if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return fmt.Errorf("broker: create stream %s: %w", b.stream, jetStreamMissing(err, b.feats.Version))
	}
	if err == nil {
		b.streamMu.Lock()
		b.st = st
		b.streamMu.Unlock()
	}
	_, err = b.streamHandle(ctx)
	return err
}

// createOrUpdate creates the stream, or updates it where it differs from
// scfg. Replicated, a creation gets a share of the API timeout, so that one
// the cluster leaves unanswered leaves time for another round.
func (b *JetStream) createOrUpdate(ctx context.Context, scfg jetstream.StreamConfig) (jetstream.Stream, error) {
	if scfg.Replicas <= 1 {
		if st, err := b.js.Stream(ctx, scfg.Name); err == nil {
			if st.CachedInfo().Config.Sealed {
				return st, nil // a run that is over: read as it is
			}
			keepFixed(&scfg, st.CachedInfo().Config)
		}
		return b.js.CreateOrUpdateStream(ctx, scfg)
	}
	actx, cancel := context.WithTimeout(ctx, apiTimeout/4)
	defer cancel()
	if st, err := b.js.Stream(actx, scfg.Name); err == nil {
		got := st.CachedInfo().Config
		if got.Sealed || got.Replicas == scfg.Replicas && slices.Equal(got.Subjects, scfg.Subjects) && got.DenyDelete && got.DenyPurge {
			return st, nil // made by another participant of the run
		}
		keepFixed(&scfg, got)
	}
	return b.js.CreateOrUpdateStream(actx, scfg)
}

// keepFixed carries over to scfg what the stream's creator chose and a
// later participant must not change: the persistence mode (the server
// refuses to change it) and the stream's bounds (a participant that
// joins or resumes later must not shrink or lift them).
func keepFixed(scfg *jetstream.StreamConfig, got jetstream.StreamConfig) {
	scfg.PersistMode = got.PersistMode
	scfg.MaxBytes, scfg.MaxMsgSize = got.MaxBytes, got.MaxMsgSize
}

// waitStreamLeader waits until the replicated stream has a leader and all
// its replicas current, or a quorum of them for allReplicasGrace, so that
// the first publishes find it ready.
func (b *JetStream) waitStreamLeader(ctx context.Context, replicas int) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	var quorum time.Time // when a quorum was first seen
	for {
		info, err := b.st.Info(ctx)
		if err == nil && info.Cluster != nil && info.Cluster.Leader != "" && len(info.Cluster.Replicas) >= replicas-1 {
			current := 0
			for _, r := range info.Cluster.Replicas {
				if r.Current {
					current++
				}
			}
			// Every replica current: each has subscribed to the
			// stream's subjects on its node, so a first publish there
			// finds the stream ("no responders" otherwise, seen in
			// TestCluster). A quorum with the leader takes messages
			// too: after a grace, for a node may be down for good.
			if current == replicas-1 {
				return nil
			}
			if current >= replicas/2 {
				if quorum.IsZero() {
					quorum = time.Now()
				} else if time.Since(quorum) >= allReplicasGrace {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = ctx.Err()
			}
			return fmt.Errorf("broker: stream %s has no leader with a quorum of its %d replicas: %w", b.stream, replicas, err)
		case <-t.C:
		}
	}
}

// Run is the run name.
func (b *JetStream) Run() string { return b.run }

// Design is the transport design of the Bus.
func (b *JetStream) Design() Design { return b.design }

// Features are the features of the server the Bus is connected to.
func (b *JetStream) Features() ServerFeatures { return b.feats }

// Conn is the underlying NATS connection.
func (b *JetStream) Conn() *nats.Conn { return b.nc }

// Stats returns the connection's traffic counters.
func (b *JetStream) Stats() Stats {
	s := b.ctr.stats()
	s.Reconnects = b.reconnects.Load()
	return s
}

// Duplicates is the number of messages published on this connection that
// the broker acknowledged as duplicates (same ID within the window) and
// did not store again.
func (b *JetStream) Duplicates() uint64 { return b.pub.duplicates() }

// Publish hands m to the broker. It blocks while the publish window is
// full (messages the stream has not confirmed yet), until ctx is done.
// Failures of the asynchronous part are reported by Flush. A duplicate ID
// is not an error here; see Duplicates.
func (b *JetStream) Publish(ctx context.Context, m *Message) error {
	if b.closed.Load() {
		return ErrClosed
	}
	if b.endOnLoss && (b.isLost() || b.nc.IsReconnecting()) {
		b.markLost()
		return ErrConnLost
	}
	if err := checkMessage(m); err != nil {
		return err
	}
	if !strings.HasPrefix(m.Subject, b.prefix) {
		return fmt.Errorf("%w: subject %q is outside run %s", ErrInvalid, m.Subject, b.run)
	}
	if b.sealed.Load() {
		return fmt.Errorf("%w: stream %s stores nothing more; a new run, or scoring a run's models, needs a run id or a store of its own", ErrSealed, b.stream)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	b.closeMu.RLock()
	if b.closed.Load() {
		b.closeMu.RUnlock()
		return ErrClosed
	}
	err := b.pub.publish(ctx, m)
	b.closeMu.RUnlock()
	if err != nil {
		if b.endOnLoss && (b.isLost() || b.nc.IsReconnecting() || errors.Is(err, nats.ErrReconnectBufExceeded)) {
			b.markLost()
			return fmt.Errorf("%w: %w", ErrConnLost, err)
		}
		return err
	}
	b.ctr.published(len(m.Data))
	return nil
}

func (b *JetStream) onConnError(_ *nats.Conn, sub *nats.Subscription, err error) {
	if sub != nil && errors.Is(err, nats.ErrSlowConsumer) {
		b.subsMu.Lock()
		cs := b.core[sub]
		b.subsMu.Unlock()
		if cs != nil {
			cs.fellBehind()
			return
		}
	}
	if errors.Is(err, nats.ErrPermissionViolation) || strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
		b.denied.Store(new(err.Error()))
	}
	ev := b.log.Warn().Err(err)
	if sub != nil {
		ev = ev.Str("subject", sub.Subject)
	}
	ev.Msg("nats asynchronous error")
}

// reconnectWait is the pause before a server is tried again.
const reconnectWait = 250 * time.Millisecond

// ServerURLs splits a comma-separated list of server URLs (as nats.Connect
// takes it), dropping empty entries.
func ServerURLs(list string) []string {
	var urls []string
	for _, u := range strings.Split(list, ",") {
		if u = strings.TrimSpace(u); u != "" {
			urls = append(urls, u)
		}
	}
	return urls
}

// onDisconnect logs a lost connection; nats.go reconnects on its own.
func (b *JetStream) onDisconnect(nc *nats.Conn, err error) {
	if b.closed.Load() || nc.IsClosed() {
		return
	}
	b.streamAnswered() // the disconnection's own outage takes over
	b.downSince.CompareAndSwap(0, time.Now().UnixNano())
	if b.endOnLoss {
		b.markLost()
		b.log.Warn().Err(err).Msg("lost the broker connection: publishing stops; the participant starts again from its checkpoint once the broker is back")
		return
	}
	b.log.Warn().Err(err).Msg("lost the broker connection; reconnecting (to another node of a cluster if there is one)")
}

// markLost ends publishing (EndOnLoss) and closes Lost.
func (b *JetStream) markLost() {
	b.lostOnce.Do(func() { close(b.lost) })
}

func (b *JetStream) isLost() bool {
	select {
	case <-b.lost:
		return true
	default:
		return false
	}
}

// Lost is closed when a Bus with EndOnLoss loses its connection (never
// otherwise): its publishing has ended, see JetStreamConfig.EndOnLoss.
func (b *JetStream) Lost() <-chan struct{} { return b.lost }

// Unreachable reports since when the connection to the broker has been
// down, or the run's stream has answered none of its publishes while it
// was up (zero while both are well): the runtimes then blame the broker,
// not the participants that it keeps from them.
func (b *JetStream) Unreachable() time.Time {
	if t := b.downSince.Load(); t != 0 {
		return time.Unix(0, t)
	}
	if t := b.silentSince.Load(); t != 0 {
		return time.Unix(0, t)
	}
	return time.Time{}
}

// Outage is the time the broker has been unreachable so far, as
// Unreachable says, over every outage (the current one included). A
// cluster's fail-over can leave the connection up and the stream without
// a leader for seconds: that time is an outage too, not the cost of what
// waited for it (issue 35: an evaluation round that spanned it spaced the
// next ones out by nine times its length).
func (b *JetStream) Outage() time.Duration {
	d := time.Duration(b.outage.Load())
	now := time.Now().UnixNano()
	if t := b.downSince.Load(); t != 0 {
		d += time.Duration(now - t)
	} else if t := b.silentSince.Load(); t != 0 {
		d += time.Duration(now - t)
	}
	return d
}

// OutageSince is the part of Outage that lies after t: a silence of the
// stream becomes known only when a publish sent before it gets no answer,
// so what was spent waiting since t is read from the outages' spans, not
// from the growth of Outage (which would charge the whole silence).
func (b *JetStream) OutageSince(t time.Time) time.Duration {
	from, now := t.UnixNano(), time.Now().UnixNano()
	var d int64
	b.spansMu.Lock()
	for i := range min(b.nspans, outageSpans) {
		sp := b.spans[i]
		d += max(sp[1]-max(sp[0], from), 0)
	}
	b.spansMu.Unlock()
	if s := b.downSince.Load(); s != 0 {
		d += max(now-max(s, from), 0)
	} else if s := b.silentSince.Load(); s != 0 {
		d += max(now-max(s, from), 0)
	}
	return time.Duration(d)
}

// closeOutage ends an outage that began at since (unix ns).
func (b *JetStream) closeOutage(since int64) {
	now := time.Now().UnixNano()
	b.outage.Add(max(now-since, 0))
	b.spansMu.Lock()
	b.spans[b.nspans%outageSpans] = [2]int64{since, now}
	b.nspans++
	b.spansMu.Unlock()
}

// streamSilent records that the stream left a publish sent at t without
// an answer while the connection was up (the publishers call it).
func (b *JetStream) streamSilent(t time.Time) {
	if b.downSince.Load() != 0 {
		return // counted as the disconnection
	}
	if b.silentSince.CompareAndSwap(0, t.UnixNano()) && b.downSince.Load() != 0 {
		b.silentSince.CompareAndSwap(t.UnixNano(), 0) // disconnected meanwhile
	}
}

// streamAnswered ends a silence of the stream (streamSilent) and adds it
// to the outage.
func (b *JetStream) streamAnswered() {
	if b.silentSince.Load() == 0 {
		return
	}
	if t := b.silentSince.Swap(0); t != 0 {
		b.closeOutage(t)
	}
}

// silence reports whether err says the stream did not answer a publish
// (no leader to answer, no answer in time, or JetStream unavailable), not
// that it refused it.
func silence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, jetstream.ErrAsyncPublishTimeout) || errors.Is(err, nats.ErrNoResponders) ||
		errors.As(err, &apiErr) && apiErr.Code == 503
}

// onReconnect: on the core designs a subscription misses what was
// published while the connection was down.
func (b *JetStream) onReconnect(nc *nats.Conn) {
	b.reconnects.Add(1)
	if t := b.downSince.Swap(0); t != 0 {
		b.closeOutage(t)
	}
	b.log.Info().Str("server", nc.ConnectedUrlRedacted()).Str("node", nc.ConnectedServerName()).Msg("reconnected to the broker")
	if p := b.retryPub.Load(); p != nil {
		p.reconnected()
	}
	if p := b.batchPub.Load(); p != nil {
		p.reconnected()
	}
	// Ordered consumers start again after what they delivered (every
	// design has them: DesignOrdered, and the stream reads and the named
	// ephemeral subscriptions of the others).
	b.subsMu.Lock()
	for sub := range b.subs {
		restartOrdered(sub)
	}
	b.subsMu.Unlock()
	if b.design == DesignCore || b.design == DesignCapture {
		b.log.Error().Str("design", string(b.design)).
			Msg("reconnected to the broker: live deliveries published while disconnected are missing (the stream has them)")
	}
}

// Flush waits until every message published before the call is confirmed
// by the stream, and returns the first failure since the previous Flush.
func (b *JetStream) Flush(ctx context.Context) error {
	if b.closed.Load() {
		return ErrClosed
	}
	if !b.endOnLoss {
		return b.pub.flush(ctx)
	}
	if b.isLost() {
		return ErrConnLost
	}
	// A flush in progress when the connection drops ends at once: what
	// it waits for may never come.
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-b.lost:
			cancel()
		case <-stop:
		}
	}()
	err := b.pub.flush(fctx)
	if err != nil && b.isLost() {
		return fmt.Errorf("%w: %w", ErrConnLost, err)
	}
	return err
}

// Count is the number of stored messages whose subject matches filter (it
// asks the broker for per-subject counts; the cost grows with the number
// of distinct subjects, not of messages). DesignCore has no stream:
// ErrUnsupported.
func (b *JetStream) Count(ctx context.Context, filter string) (uint64, error) {
	if b.closed.Load() {
		return 0, ErrClosed
	}
	if err := b.checkRunFilter(filter); err != nil {
		return 0, err
	}
	if b.design == DesignCore {
		return 0, fmt.Errorf("%w: count: design %s keeps no log", ErrUnsupported, b.design)
	}
	return b.count(ctx, filter)
}

// RaiseMaxBytes raises the size bound of the run's stream to max bytes
// (max <= 0: no bound), never lowering it: a run that stopped because
// its stream was full (ErrStreamFull) goes on once the operator allows
// more. It returns the bound before (-1: none) and whether it changed.
// It needs the right to update the stream (the broker's operator).
func (b *JetStream) RaiseMaxBytes(ctx context.Context, max int64) (before int64, raised bool, err error) {
	info, err := b.streamInfo(ctx)
	if err != nil {
		return 0, false, err
	}
	cfg := info.Config
	before = cfg.MaxBytes
	if before <= 0 || max > 0 && max <= before {
		return before, false, nil
	}
	if max <= 0 {
		max = -1
	}
	cfg.MaxBytes = max
	if _, err := b.js.UpdateStream(ctx, cfg); err != nil {
		return before, false, fmt.Errorf("broker: raising stream %s's bound from %d to %d bytes: %w", b.stream, before, max, err)
	}
	return before, true, nil
}

// ErrSealed reports a run's stream that is sealed: its run is over and
// it stores nothing more (JetStream's sealed streams are read-only for
// good).
var ErrSealed = errors.New("broker: the run's stream is sealed (its run is over)")

// Seal seals the run's stream: from then on the broker stores nothing in
// it, neither a participant's message nor a server's answer to a request
// that names a reply subject inside the run, and nobody can unseal it
// (nats-server refuses the update). Call it once the run is over: after the
// aggregator's final seal and the parties' receipts of it. It needs the
// right to update the stream (the broker's operator). A stream sealed
// already is left as it is.
func (b *JetStream) Seal(ctx context.Context) error {
	info, err := b.streamInfo(ctx)
	if err != nil {
		return err
	}
	cfg := info.Config
	if cfg.Sealed {
		return nil
	}
	cfg.Sealed = true
	if _, err := b.js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("broker: sealing stream %s: %w", b.stream, err)
	}
	return nil
}

// MaxMsgSize is the largest message the run's stream stores (0 or
// less: no bound of its own).
func (b *JetStream) MaxMsgSize(ctx context.Context) (int32, error) {
	info, err := b.streamInfo(ctx)
	if err != nil {
		return 0, err
	}
	return info.Config.MaxMsgSize, nil
}

// Sealed reports whether the run's stream is sealed (Seal).
func (b *JetStream) Sealed(ctx context.Context) (bool, error) {
	info, err := b.streamInfo(ctx)
	if err != nil {
		return false, err
	}
	return info.Config.Sealed, nil
}

// Room is how many bytes the run's stream holds and its bound (limit
// -1: none): the aggregator pauses the run while there is still room
// to seal it. A full stream refuses a message by its size, so a small
// reply can be stored after its larger request was refused; only a
// pause before the bound keeps every answer after its question.
// DesignCore has no stream: ErrUnsupported.
func (b *JetStream) Room(ctx context.Context) (used, limit int64, err error) {
	if b.closed.Load() {
		return 0, 0, ErrClosed
	}
	if b.design == DesignCore {
		return 0, 0, fmt.Errorf("%w: room: design %s keeps no log", ErrUnsupported, b.design)
	}
	info, err := b.streamInfo(ctx)
	if err != nil {
		return 0, 0, err
	}
	limit = info.Config.MaxBytes
	if limit <= 0 {
		limit = -1
	}
	return int64(info.State.Bytes), limit, nil
}

func (b *JetStream) count(ctx context.Context, filter string) (uint64, error) {
	if filter == b.prefix+">" {
		info, err := b.streamInfo(ctx)
		if err != nil {
			return 0, err
		}
		return info.State.Msgs, nil
	}
	info, err := b.streamInfo(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return 0, err
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n, nil
}

// subjectCounts is the stream's message count of each of the run's
// subjects.
func (b *JetStream) subjectCounts(ctx context.Context) (map[string]uint64, error) {
	info, err := b.streamInfo(ctx, jetstream.WithSubjectFilter(b.prefix+">"))
	if err != nil {
		return nil, err
	}
	if info.State.Subjects == nil {
		return map[string]uint64{}, nil
	}
	return info.State.Subjects, nil
}

// lastSeq is the stream's last sequence.
func (b *JetStream) lastSeq(ctx context.Context) (uint64, error) {
	info, err := b.streamInfo(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.LastSeq, nil
}

// streamInfo asks for the run's stream's configuration and state.
func (b *JetStream) streamInfo(ctx context.Context, opts ...jetstream.StreamInfoOpt) (*jetstream.StreamInfo, error) {
	st, err := b.streamHandle(ctx)
	if err != nil {
		return nil, err
	}
	info, err := st.Info(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("broker: stream info: %w", err)
	}
	return info, nil
}

func (b *JetStream) streamHandle(ctx context.Context) (jetstream.Stream, error) {
	b.streamMu.Lock()
	defer b.streamMu.Unlock()
	if b.st == nil {
		st, err := b.js.Stream(ctx, b.stream)
		if err != nil {
			return nil, fmt.Errorf("broker: stream %s: %w", b.stream, jetStreamMissing(err, b.feats.Version))
		}
		b.st = st
	}
	return b.st, nil
}

// waitStream waits for the run's stream to exist, asking every
// streamWaitPoll, and says in the log what it waits for, again every
// streamWaitNotice.
func (b *JetStream) waitStream(ctx context.Context) error {
	var told time.Time
	for {
		// One request at a time for a while: a cluster that is forming
		// leaves requests unanswered.
		actx, cancel := context.WithTimeout(ctx, streamWaitAsk)
		_, err := b.streamHandle(actx)
		cancel()
		if err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrStreamNotFound) && !(ctx.Err() == nil && unanswered(err)) {
			return err
		}
		if d := b.deniedAPI("STREAM.INFO"); d != "" {
			return fmt.Errorf("broker: stream %s: this user may not read its info (%s)", b.stream, d)
		}
		if time.Since(told) >= streamWaitNotice {
			told = time.Now()
			b.tellStreamWait(ctx)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("broker: waiting for stream %s to be created: %w", b.stream, ctx.Err())
		case <-time.After(streamWaitPoll):
		}
	}
}

// tellStreamWait says what waitStream waits for: the run's stream, and,
// on a cluster with a node that does not answer, that node (a replicated
// stream is made only once its nodes run).
func (b *JetStream) tellStreamWait(ctx context.Context) {
	const msg = "waiting for the run's stream to be created (by the aggregator, or by whoever runs the broker)"
	nodes := NodesAnswering(ctx, ServerURLs(b.url), time.Second)
	if nodes != "" && !strings.HasPrefix(nodes, "all ") {
		b.log.Warn().Str("stream", b.stream).Str("nodes", nodes).
			Msg("waiting for the run's stream to be created: " + nodes + " (a replicated stream is made once its nodes run: start it, or check its routes and --route-secret)")
		return
	}
	ev := b.log.Info().Str("stream", b.stream)
	if nodes != "" {
		ev = ev.Str("nodes", nodes)
	}
	ev.Msg(msg)
}

// deniedAPI returns the server's last permission violation if it names
// one of the run stream's JetStream API calls ("" if none).
func (b *JetStream) deniedAPI(calls ...string) string {
	d := b.denied.Load()
	if d == nil {
		return ""
	}
	for _, c := range calls {
		if strings.Contains(*d, "$JS.API."+c+"."+b.stream+`"`) {
			return *d
		}
	}
	return ""
}

// streamWaitPoll is how often waitStream asks for the stream, and
// streamWaitAsk how long it waits for an answer.
const (
	streamWaitPoll   = 100 * time.Millisecond
	streamWaitAsk    = 2 * time.Second
	streamWaitNotice = 10 * time.Second // waitStream says again what it waits for
)

// unanswered reports an API request that timed out.
func unanswered(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)
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

// consumerFilters are the filters of a consumer for a subscription's
// filters, and the matchers the client must apply itself when the server
// cannot filter on several subjects (nats-server 2.9): then the consumer
// reads every subject of the run.
func (b *JetStream) consumerFilters(filters []string) ([]string, []matcher) {
	if len(filters) == 1 || b.feats.MultiFilter {
		return slices.Clone(filters), nil
	}
	ms := make([]matcher, len(filters))
	for i, f := range filters {
		ms[i] = newMatcher(f)
	}
	return []string{b.prefix + ">"}, ms
}

func matchAny(ms []matcher, subject string) bool {
	for _, m := range ms {
		if m.match(subject) {
			return true
		}
	}
	return false
}

// Subscribe starts delivering to h; how depends on the design:
//
//   - DesignCapture: core NATS subscriptions (one per filter, delivered in
//     the order they arrive on the connection); with DeliverAll or
//     StartSeq the stream is read first and the subscription hands over
//     to the live feed once caught up.
//   - DesignCore: core NATS subscriptions only (no history).
//   - DesignOrdered: an ordered consumer without acks.
//   - DesignAcked: a durable consumer with AckAll (resumes after the last
//     Ack), or an ephemeral one without acks.
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
	if opts.StartSeq > 0 && !b.design.Capabilities().StartSeq {
		return nil, fmt.Errorf("%w: start sequence on design %s", ErrUnsupported, b.design)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// In a cluster the interest of a new core subscription reaches the
	// other nodes a moment later: what their clients publish meanwhile
	// comes from the stream (see coreSub).
	history := b.design == DesignCapture &&
		(opts.StartSeq > 0 || opts.Deliver == DeliverAll || (b.nc.ConnectedClusterName() != "" && !b.liveNew))
	var s Subscription
	var err error
	if b.splitFilters && len(filters) > 1 && (b.design == DesignOrdered || b.design == DesignAcked || history) {
		s, err = b.subscribeSplit(ctx, filters, opts, h, history)
	} else {
		s, err = b.subscribeDesign(ctx, filters, opts, h, history)
	}
	if err != nil {
		return nil, err
	}
	b.subsMu.Lock()
	b.subs[s] = struct{}{}
	b.subsMu.Unlock()
	if b.closed.Load() {
		s.Close()
		return nil, ErrClosed
	}
	return s, nil
}

// subscribeDesign subscribes as the Bus's design does.
func (b *JetStream) subscribeDesign(ctx context.Context, filters []string, opts SubscribeOptions, h Handler, history bool) (Subscription, error) {
	switch b.design {
	case DesignCore:
		return b.subscribeCore(ctx, filters, opts, h, false)
	case DesignCapture:
		if opts.StreamOnly && history {
			return b.subscribeOrdered(ctx, filters, opts, h)
		}
		return b.subscribeCore(ctx, filters, opts, h, history)
	case DesignOrdered:
		return b.subscribeOrdered(ctx, filters, opts, h)
	}
	if opts.Durable == "" && b.consumerName != nil {
		// An ephemeral consumer without acks by a name that permissions
		// can grant: an ordered consumer is that.
		return b.subscribeOrdered(ctx, filters, opts, h)
	}
	return b.subscribeAcked(ctx, filters, opts, h)
}

// splitSub is a subscription over several filters made of one
// subscription per filter (JetStreamConfig.SplitFilters). Its Handler
// calls are serialised, and a delivery of a later filter waits until the
// earlier filters' consumers have handed over every message before it in
// the stream (a party's control after the replies it follows); deliveries
// of the first filter never wait. The wait asks the broker for the
// earlier consumers' positions, so it suits later filters that carry
// few messages, and it gives up after splitOrderWait.
type splitSub struct {
	bus *JetStream
	mu  sync.Mutex // held during a Handler call
	// subs has a place for each filter from the start: filter i's
	// deliveries read the places before i (waitEarlier) while later
	// filters subscribe, so the slice never grows. A place is set before
	// the next filter subscribes, and so before any delivery that reads it.
	subs []Subscription
	seen []atomic.Uint64 // by filter: the stream sequence last handed to the Handler
	n    []atomic.Uint64 // by filter: deliveries handed to the Handler
	once sync.Once
	err  error
}

// splitOrderWait bounds how long a delivery of a split subscription waits
// for the earlier filters' deliveries before it.
const splitOrderWait = 2 * time.Second

// splitOrderAsk is how often a waiting delivery asks the broker for an
// earlier filter's consumer position.
const splitOrderAsk = 10 * time.Millisecond

// splitAskTimeout bounds one such ask (a consumer's info comes back in a
// millisecond or two on a live broker). An ask can go to a consumer that
// died with its node: one of a cluster's stream leader, just before the
// consumer is made again. Waiting apiTimeout (10 s) for that answer held
// a party's evaluation control back 10 s after a fail-over (issue 35);
// asking again reaches the consumer made meanwhile.
const splitAskTimeout = 250 * time.Millisecond

// deliveredReporter is a subscription whose consumer can say what it has
// delivered (orderedSub, jsSub).
type deliveredReporter interface {
	delivered(ctx context.Context) (n, last, pending uint64, err error)
}

// waitEarlier waits until the filters before i have handed over every
// message with a stream sequence below seq.
func (s *splitSub) waitEarlier(ctx context.Context, i int, seq uint64) {
	deadline := time.Now().Add(splitOrderWait)
	for j := 0; j < i; j++ {
		dr, ok := s.subs[j].(deliveredReporter)
		if !ok {
			continue // no sequences to order by (DesignCapture's live feed)
		}
		target := seq - 1
		var asked time.Time
		for s.seen[j].Load() < target {
			if time.Since(asked) >= splitOrderAsk {
				asked = time.Now()
				actx, cancel := context.WithTimeout(ctx, min(splitAskTimeout, max(time.Until(deadline), time.Millisecond)))
				n, last, pending, err := dr.delivered(actx)
				cancel()
				if err == nil && pending == 0 {
					// The stream held seq when the broker answered, and
					// so every earlier message of filter j, all of which
					// the consumer has delivered: wait only for those to
					// be handed over.
					if n == 0 || s.n[j].Load() >= n {
						break
					}
					target = min(target, last)
				}
			}
			if ctx.Err() != nil {
				return
			}
			if time.Now().After(deadline) {
				s.bus.log.Warn().Uint64("seq", seq).Int("filter", i).Msg("split subscription: delivered out of stream order after waiting")
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// subscribeSplit subscribes to each filter on its own. DeliverNew is
// resolved once, so that every filter starts at the same stream position.
func (b *JetStream) subscribeSplit(ctx context.Context, filters []string, opts SubscribeOptions, h Handler, history bool) (Subscription, error) {
	if b.design != DesignCapture || opts.Deliver == DeliverNew {
		if err := b.resolveNew(ctx, &opts); err != nil {
			return nil, err
		}
	}
	s := &splitSub{bus: b, subs: make([]Subscription, len(filters)), seen: make([]atomic.Uint64, len(filters)), n: make([]atomic.Uint64, len(filters))}
	for i, f := range filters {
		one := func(ctx context.Context, d Delivery) {
			seq := d.Seq()
			if i > 0 && seq > 0 {
				s.waitEarlier(ctx, i, seq)
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			h(ctx, d)
			if seq > 0 {
				s.seen[i].Store(seq)
			}
			s.n[i].Add(1)
		}
		o := opts
		if o.Durable != "" {
			o.Durable = b.splitDurable(o.Durable, f)
			if err := checkName("durable", o.Durable); err != nil {
				s.Close()
				return nil, err
			}
		}
		sub, err := b.subscribeDesign(ctx, []string{f}, o, one, history)
		if err != nil {
			s.Close()
			return nil, err
		}
		if js, ok := sub.(*jsSub); ok {
			s.seen[i].Store(js.start()) // a resumed durable's position
		}
		s.subs[i] = sub
	}
	return s, nil
}

// splitDurable names the durable consumer of filter f of a split
// subscription with durable name d.
func (b *JetStream) splitDurable(d, f string) string {
	if b.durableName != nil {
		return b.durableName(d, f)
	}
	tok := f
	if parts := strings.SplitN(f, ".", 4); len(parts) >= 3 {
		tok = parts[2]
	}
	return d + "-" + tok
}

// Close closes every filter's subscription.
func (s *splitSub) Close() error {
	s.once.Do(func() {
		var errs []error
		for _, sub := range s.subs {
			if sub != nil { // a filter that failed to subscribe, and those after it
				errs = append(errs, sub.Close())
			}
		}
		s.err = errors.Join(errs...)
	})
	return s.err
}

func (b *JetStream) forget(s Subscription) {
	b.subsMu.Lock()
	delete(b.subs, s)
	b.subsMu.Unlock()
}

// Close closes the subscriptions, waits (at most 10 s, and not at all while
// disconnected) for unconfirmed publishes, and closes the connection. The
// first call returns what went wrong on the way (a failed publish, final
// ack or consumer deletion); later calls return nil.
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
	subs := make([]Subscription, 0, len(b.subs))
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
		if err := b.pub.flush(ctx); err != nil {
			errs = append(errs, fmt.Errorf("broker: flush on close: %w", err))
		}
	} else {
		// Disconnected (reconnecting): confirmations may never come; do
		// not wait.
		if err := b.pub.takeErr(); err != nil {
			errs = append(errs, err)
		}
		if n := b.pub.pending(); n > 0 {
			errs = append(errs, fmt.Errorf("broker: closing while disconnected: %d publishes unconfirmed", n))
		}
	}
	b.nc.Close()
	return errors.Join(errs...)
}

// ackConsumerSeq reads the consumer's name and the delivery's consumer
// sequence from a JetStream ack subject (see ackStreamSeq), without
// allocating.
func ackConsumerSeq(reply string) (consumer string, seq uint64, ok bool) {
	const pre = "$JS.ACK."
	if !strings.HasPrefix(reply, pre) {
		return "", 0, false
	}
	var idx int // token index of the consumer's name
	switch n := strings.Count(reply, ".") + 1; {
	case n == 9:
		idx = 3
	case n >= 11:
		idx = 5
	default:
		return "", 0, false
	}
	s := reply[len(pre):]
	for range idx - 2 {
		s = s[strings.IndexByte(s, '.')+1:]
	}
	i := strings.IndexByte(s, '.')
	consumer, s = s[:i], s[i+1:]
	// delivered count, stream sequence, then the consumer sequence
	for range 2 {
		s = s[strings.IndexByte(s, '.')+1:]
	}
	if i := strings.IndexByte(s, '.'); i >= 0 {
		s = s[:i]
	}
	if s == "" || consumer == "" {
		return "", 0, false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return "", 0, false
		}
		seq = seq*10 + uint64(c-'0')
	}
	return consumer, seq, true
}

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
