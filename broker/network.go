package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// NetworkConfig says which broker the participants of a run talk
// through, and how each of their connections is made: the in-process
// memory hub, an external server, or a server or cluster this process
// embeds.
type NetworkConfig struct {
	// Memory: the in-process memory bus (MemoryHub); the fields below
	// do not apply.
	Memory bool
	// URL is an external server's URL (a comma-separated list for a
	// cluster's nodes); "" embeds a server (or Cluster nodes).
	URL string
	// Dir is the embedded broker's store; "" is a temporary folder,
	// removed by Close.
	Dir string
	// Cluster, above 0, embeds a JetStream cluster of this many nodes
	// over TCP instead of one server; the run's stream is replicated on
	// min(3, Cluster) of them.
	Cluster int
	// InProcess connects to the embedded server in-process instead of
	// over TCP loopback.
	InProcess bool
	// ClusterURLs: a connection to an embedded cluster dials every
	// node's URL, its home node first (the fail-over publisher), as
	// separate processes would; else it connects to its node's server.
	ClusterURLs bool
	// Configure, if set, adjusts each embedded server's options last
	// (its users and their permissions).
	Configure func(*server.Options)
	// MaxPayload is the embedded broker's largest message (0: the
	// server's default).
	MaxPayload int32

	// Run, Design, Persist, Compression, MaxBytes and MaxMsgSize are
	// those of every connection's stream (JetStreamConfig). Persist
	// PersistDefault is PersistSync on an external broker: a broker of
	// its own can be killed while the participants go on, and it then
	// writes each message before it acknowledges it, so that the log
	// has no hole mid-subject. The embedded broker dies with its run,
	// and a resume re-sends the tail it lost: it keeps the faster
	// asynchronous writes.
	Run         string
	Design      Design
	Persist     Persist
	Compression Compression
	MaxBytes    int64
	MaxMsgSize  int32
	// Wait is how long a participant's connection waits for its broker
	// to be reachable and its JetStream available (0: not at all).
	Wait time.Duration
	// TLS, if set, secures the connections to an external broker.
	TLS *tls.Config
	// Log receives the connections' and the waits' messages.
	Log *zerolog.Logger
}

// Dial is one connection of a Network.
type Dial struct {
	// Name names the connection (a participant's id, "audit", ...).
	Name string
	// Participant: the connection of a run's participant, which waits
	// for the broker up to NetworkConfig.Wait; any other (reading the
	// stream's counts at the end, say) finds a broker that is gone at
	// once.
	Participant bool
	// EndOnLoss, on an external broker: the connection ends when it is
	// lost (JetStreamConfig.EndOnLoss).
	EndOnLoss bool
	// URL, if set, is dialled instead of the broker's own (a proxy that
	// delays the link); not for an embedded cluster.
	URL string
	// Authorize, if set, adds the connection's credentials to jc. A
	// broker that authenticates nobody (nats.ErrNkeysNotSupported) is
	// then dialled again without them, with a warning.
	Authorize func(jc *JetStreamConfig)
}

// Network is the broker a run talks through: it starts the embedded
// server or cluster (or nothing, for an external broker or the memory
// bus), and makes each participant's connection. Close stops what it
// started.
type Network struct {
	cfg     NetworkConfig
	name    string
	hub     *MemoryHub
	srv     *Server
	cluster *Cluster
	next    int  // the cluster node the next connection goes to
	told    bool // the server's missing features were logged
	url     string
	dir     string // the embedded broker's store
	tmp     string // a temporary store, removed by Close
	closed  bool
}

// serverMaxStore is the embedded broker's cap of all its streams: the
// streams' own bounds (NetworkConfig.MaxBytes) are what limits them.
const serverMaxStore = 1 << 50

// OpenNetwork starts the broker that cfg describes, if it is embedded.
func OpenNetwork(ctx context.Context, cfg NetworkConfig) (*Network, error) {
	n := &Network{cfg: cfg}
	if n.cfg.Log == nil {
		nop := zerolog.Nop()
		n.cfg.Log = &nop
	}
	if cfg.Memory {
		n.name = "memory"
		n.hub = NewMemoryHub()
		return n, nil
	}
	if cfg.URL != "" {
		n.name, n.url = "jetstream-external", cfg.URL
		return n, nil
	}
	n.dir = cfg.Dir
	if n.dir == "" {
		tmp, err := os.MkdirTemp("", "asyrevel-store-")
		if err != nil {
			return nil, err
		}
		n.tmp, n.dir = tmp, tmp
	}
	if cfg.Cluster > 0 {
		cc := ClusterConfig{Dir: n.dir, Nodes: cfg.Cluster, MaxStore: serverMaxStore}
		if cfg.Configure != nil {
			cc.Configure = func(_ int, o *server.Options) { cfg.Configure(o) }
		}
		c, err := StartCluster(ctx, cc)
		if err != nil {
			n.Close()
			return nil, fmt.Errorf("starting the embedded %d-node cluster: %w", cfg.Cluster, err)
		}
		n.cluster = c
		n.name = "jetstream-cluster"
		return n, nil
	}
	// Each run's stream has its own bound (MaxBytes), which the server
	// reserves: the server's own cap must not refuse it.
	srv, err := StartServer(ctx, ServerConfig{Dir: n.dir, Configure: cfg.Configure, MaxPayload: cfg.MaxPayload, MaxStore: serverMaxStore})
	if err != nil {
		n.Close()
		return nil, fmt.Errorf("starting the embedded broker: %w", err)
	}
	n.srv, n.url = srv, srv.URL()
	n.name = "jetstream-tcp"
	if cfg.InProcess {
		n.name = "jetstream-inprocess"
	}
	return n, nil
}

// Name names the broker for a run's summary: memory, jetstream-external,
// jetstream-cluster, jetstream-tcp or jetstream-inprocess.
func (n *Network) Name() string { return n.name }

// URL is the broker's client URL: the external broker's, or the embedded
// server's ("" for the memory bus and an embedded cluster).
func (n *Network) URL() string { return n.url }

// Server is the embedded server (nil without one).
func (n *Network) Server() *Server { return n.srv }

// Cluster is the embedded cluster (nil without one).
func (n *Network) Cluster() *Cluster { return n.cluster }

// Embedded reports a broker this process runs (a server or a cluster).
func (n *Network) Embedded() bool { return n.srv != nil || n.cluster != nil }

// Servers are the embedded broker's servers: the server, or every node of
// the cluster (none for an external broker or the memory bus).
func (n *Network) Servers() []*Server {
	var out []*Server
	if n.cluster != nil {
		out = append(out, n.cluster.Servers()...)
	}
	if n.srv != nil {
		out = append(out, n.srv)
	}
	return out
}

// Connect makes connection d to the broker. On the memory bus it is a
// MemoryBus, else a *JetStream.
func (n *Network) Connect(ctx context.Context, d Dial) (Bus, error) {
	if n.hub != nil {
		return n.hub.Connect(d.Name), nil
	}
	external := n.srv == nil && n.cluster == nil
	jc := JetStreamConfig{
		URL: n.url, Server: n.srv, InProcess: n.cfg.InProcess && n.srv != nil,
		Run: n.cfg.Run, Name: d.Name, Design: n.cfg.Design, Logger: n.cfg.Log,
		Persist: n.cfg.Persist, Compression: n.cfg.Compression,
		MaxBytes: n.cfg.MaxBytes, MaxMsgSize: n.cfg.MaxMsgSize,
		EndOnLoss: d.EndOnLoss && external,
	}
	if jc.Persist == PersistDefault && external {
		jc.Persist = PersistSync // see NetworkConfig.Persist
	}
	if n.cluster != nil {
		// Participants spread over the nodes, over TCP; the stream is
		// replicated on up to three of them.
		nodes := n.cluster.Servers()
		jc.Server, jc.URL = nodes[n.next%len(nodes)], ""
		jc.Replicas = min(3, len(nodes))
		if n.cfg.ClusterURLs {
			urls := n.cluster.URLs()
			for i := range urls {
				jc.URL = strings.TrimPrefix(jc.URL+","+urls[(n.next+i)%len(urls)], ",")
			}
			jc.Server = nil
		}
		n.next++
	}
	if n.cfg.TLS != nil && external {
		jc.Options = append(jc.Options, nats.Secure(n.cfg.TLS))
	}
	if d.URL != "" && n.cluster == nil {
		jc.URL, jc.Server, jc.InProcess = d.URL, nil, false
	}
	plain := jc
	if d.Authorize != nil {
		d.Authorize(&jc)
	}
	b, err := n.dial(ctx, d, jc)
	if d.Authorize != nil && errors.Is(err, nats.ErrNkeysNotSupported) {
		// A broker that authenticates nobody: the messages' signatures
		// are the only proof of who sent them.
		n.cfg.Log.Warn().Str("conn", d.Name).Msg("the broker does not authenticate participants (no users configured): anyone can publish on the run's subjects; signatures still prove the senders")
		b, err = n.dial(ctx, d, plain)
	}
	if errors.Is(err, nats.ErrNoServers) {
		return nil, fmt.Errorf("connecting %s to the broker: %w (is a broker running there? asyrevel broker starts one)", d.Name, err)
	}
	if err != nil {
		return nil, fmt.Errorf("connecting %s to the broker: %w", d.Name, err)
	}
	if !n.told {
		n.told = true
		if m := b.Features().Missing(); m != "" {
			n.cfg.Log.Info().Msg(m)
		}
	}
	return b, nil
}

// dial connects to the broker, a participant waiting for it for up to
// NetworkConfig.Wait: a participant started before its broker, or while
// a cluster has no JetStream leader yet, retries with a growing pause
// and says every few seconds what it waits for.
func (n *Network) dial(ctx context.Context, d Dial, jc JetStreamConfig) (*JetStream, error) {
	wait := n.cfg.Wait
	if !d.Participant {
		// Reading the stream's counts at the end, say: a broker gone
		// then is reported at once, the summary written without them.
		wait = min(wait, 0)
	}
	t0 := time.Now()
	pause, told := 50*time.Millisecond, time.Time{}
	for {
		b, err := ConnectJetStream(ctx, jc)
		why := waitable(err)
		if why == "" || wait <= 0 || time.Since(t0) >= wait {
			if why != "" && wait > 0 {
				return nil, fmt.Errorf("%w (waited %v for it: --broker-wait)", err, time.Since(t0).Round(time.Second))
			}
			return b, err
		}
		if time.Since(told) >= 5*time.Second {
			told = time.Now()
			where := n.url
			if where == "" {
				where = "the embedded broker"
			}
			if nodes := NodesAnswering(ctx, ServerURLs(n.url), time.Second); nodes != "" {
				why += " (" + nodes + ")"
			}
			n.cfg.Log.Warn().Str("conn", d.Name).Str("waited", time.Since(t0).Round(time.Second).String()).Str("for", wait.String()).
				Msgf("%s at %s %s: retrying (--broker-wait)", "broker", where, why)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the broker: %w", context.Cause(ctx))
		case <-time.After(pause):
		}
		pause = nextDialPause(pause, err)
	}
}

// dialPause bounds the pause between two attempts to reach the broker: a
// refused connection costs next to nothing, and training waits for the
// attempt after the broker's return (a second was most of the time from
// a broker's return to training, experiment faults). Where nothing
// listens (a broker restarting) the pause stays at unreachablePause: the
// wait for the next attempt was 20 to 170 ms of a return after the
// broker's (issue 35), and an attempt costs a refused connection. A
// broker that answers but is not ready (a cluster electing its leader)
// is asked at most every dialPause.
const (
	dialPause        = 150 * time.Millisecond
	unreachablePause = 50 * time.Millisecond
)

// nextDialPause is the pause after pause before the attempt after one
// that failed with err.
func nextDialPause(pause time.Duration, err error) time.Duration {
	if errors.Is(err, nats.ErrNoServers) || errors.Is(err, syscall.ECONNREFUSED) {
		return unreachablePause
	}
	return min(2*pause, dialPause)
}

// waitable says why err is worth waiting out ("" if it is not): no
// broker listening yet, or a JetStream that is not available yet (a
// cluster without a metadata leader).
func waitable(err error) string {
	var apiErr *jetstream.APIError
	switch {
	case err == nil:
		return ""
	case errors.Is(err, nats.ErrNoServers), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, nats.ErrConnectionClosed):
		return "unreachable (not started yet, or restarting?)"
	case ClusterWait(err) != "":
		// A cluster without a leader, or missing a node its stream needs.
		return ClusterWait(err)
	case errors.As(err, &apiErr) && apiErr.Code == 503:
		return "has no JetStream available yet (a cluster still electing its leader, or missing a node?)"
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return "does not answer its JetStream API yet"
	}
	return ""
}

// WatchStore returns ctx, cancelled with the embedded broker's store
// error (ErrStoreWrite) as its cause when a server of n fails to write
// its store (a full disk): what the participants publish after that is
// not stored, so a run stops at once, as on Ctrl-C, with the checkpoints
// taken before, rather than training on unrecorded until a flush reports
// the messages lost. The function stops the watch.
func (n *Network) WatchStore(ctx context.Context) (context.Context, func()) {
	servers := n.Servers()
	if len(servers) == 0 {
		return ctx, func() {}
	}
	wctx, cancel := context.WithCancelCause(ctx)
	for _, srv := range servers {
		go func() {
			select {
			case <-srv.StoreFailed():
				err := srv.StoreErr()
				n.cfg.Log.Error().Err(err).Msg("the broker cannot write the run's stream: stopping the run; its last checkpoint stands")
				cancel(err)
			case <-wctx.Done():
			}
		}()
	}
	return wctx, func() { cancel(nil) }
}

// Close stops the embedded broker and removes a temporary store. It may
// be called more than once.
func (n *Network) Close() {
	if n.closed {
		return
	}
	n.closed = true
	if n.srv != nil {
		n.srv.Shutdown()
	}
	if n.cluster != nil {
		n.cluster.Shutdown()
	}
	if n.tmp != "" {
		os.RemoveAll(n.tmp)
	}
}

// RaiseStreamBound lifts the size bound of run's stream in the store at
// dir to max bytes (max < 0: no bound), never lowering it, and returns
// the bound before and whether it changed; a store without the run's
// stream is left alone. The broker's users may not change a stream (an
// update could also shorten the log), so this runs on the store alone,
// before its broker starts: a server of its own, in-process only,
// without users, stopped at once (0.2 to 0.6 s on a 445 MB store).
// maxPayload is the server's largest message (0: the default).
func RaiseStreamBound(ctx context.Context, dir, run string, max int64, maxPayload int32) (before int64, raised bool, err error) {
	srv, err := StartServer(ctx, ServerConfig{Dir: dir, NoListen: true, MaxStore: serverMaxStore, MaxPayload: maxPayload})
	if err != nil {
		return 0, false, fmt.Errorf("reading the store to raise the stream's bound: %w", err)
	}
	defer srv.Shutdown()
	bus, err := ConnectJetStream(ctx, JetStreamConfig{Server: srv, InProcess: true, Run: run, Name: "bound", NoCreate: true})
	if err != nil {
		return 0, false, nil // no such run here: the resume's own checks say so
	}
	defer bus.Close()
	before, raised, err = bus.RaiseMaxBytes(ctx, max)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return before, false, nil
	}
	return before, raised, err
}

// WireBytes sums the bytes both ways on the buses' broker connections.
func WireBytes(buses ...Bus) int64 {
	var n int64
	for _, b := range buses {
		if st, ok := BusStats(b); ok {
			n += int64(st.WireIn + st.WireOut)
		}
	}
	return n
}

// Dropped sums the live deliveries lost by the buses' subscriptions.
func Dropped(buses ...Bus) int64 {
	var n int64
	for _, b := range buses {
		if st, ok := BusStats(b); ok {
			n += int64(st.Dropped)
		}
	}
	return n
}
