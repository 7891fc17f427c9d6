package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// ServerConfig configures an embedded NATS server with JetStream.
type ServerConfig struct {
	// Dir is the JetStream store directory. Required.
	Dir string
	// Host is the client listen address; "" means 127.0.0.1.
	Host string
	// Port is the client port; 0 picks a free port.
	Port int
	// NoListen serves in-process connections only (no TCP listener);
	// URL then returns "".
	NoListen bool
	// MaxMemory caps JetStream memory storage; 0 means 256 MiB. The run
	// streams use file storage; memory holds ephemeral consumer state.
	MaxMemory int64
	// MaxStore caps JetStream file storage; 0 leaves the server's default
	// (a share of the free disk space).
	MaxStore int64
	// MaxPayload is the largest message the server accepts; 0 means 4 MiB
	// (NATS's default is 1 MB, too tight for a 1 MiB payload plus headers).
	MaxPayload int32
	// Logger receives the server's log; nil means silent.
	Logger *zerolog.Logger
	// SharedStoreLock is for readers of a stopped run's store: the server
	// takes a shared lock on the store (see LockStore) and creates no lock
	// file. By default it takes the store exclusively.
	SharedStoreLock bool
	// ScrubDamaged is for readers too: a store with damaged records (see
	// CheckStore) is opened as a scrubbed copy in a temporary folder,
	// without them, and Damage lists them. By default StartServer refuses
	// a damaged store with ErrStoreDamaged.
	ScrubDamaged bool
	// Configure, if not nil, may adjust the server options last (users and
	// permissions, TLS, cluster). Use with care: the fields above are
	// already set.
	Configure func(*server.Options)

	// Name is the server's name; "" means "asyrevel". Every node of a
	// cluster needs its own.
	Name string
	// Cluster, if its Name is set, makes the server a node of a JetStream
	// cluster (one node per process, the others reached by Routes).
	Cluster ClusterNode
}

// ClusterNode is a server's place in a JetStream cluster of separate
// processes (asyrevel broker --cluster-name). A stream with Replicas 3
// needs three nodes, and a majority of the nodes must be up.
type ClusterNode struct {
	// Name is the cluster's name, the same on every node.
	Name string
	// Host and Port are where this node listens for routes from the
	// others; Host "" means the client host, Port 0 means 6222.
	Host string
	Port int
	// Routes are the other nodes' route URLs (nats://host:port). A route
	// to this node itself is allowed and left out (its port is Port and
	// its host one of this machine's addresses), so every node may be
	// given the same list: the JetStream meta group of a new cluster
	// sizes itself on the routes, and a route to itself counted would
	// make a 3-node cluster wait for all three nodes (SelfRoute).
	Routes []string
	// Secret, if not "", authenticates the routes: this node admits as a
	// route only a node that presents it, and presents it to the others
	// (trust.ReadRouteSecret). Every node needs the same.
	Secret string
	// TLS, if not nil, makes the routes TLS connections with this
	// configuration (trust.RouteTLS: each node presents its certificate
	// and verifies the other's, both ways).
	TLS *tls.Config
}

// DefaultClusterPort is the route port of a cluster node.
const DefaultClusterPort = 6222

// Server is an embedded NATS server with JetStream enabled.
type Server struct {
	ns         *server.Server
	url        string
	unlock     func() error // releases the store lock (StartServer)
	maxPayload int32
	storeDir   string
	damage     StoreCheck // what CheckStore found in the store
	scrubbed   string     // the scrubbed copy's folder, removed at Shutdown
	fault      *storeFault
}

// ErrStoreWrite reports a server that could not write to its store (a
// full disk, a file system gone read-only): the messages it was sent
// since are not stored, and it says so only in its log.
var ErrStoreWrite = errors.New("broker: the server cannot write its store")

// storeFault keeps the first store write failure the server logged.
type storeFault struct {
	dir  string
	once sync.Once
	err  error
	done chan struct{}
}

// storeFailures are the server's log lines (nats-server 2.15) that say
// it could not write its store: a message not stored (an I/O error,
// logged and not answered to the publisher), a write error of a store or
// a raft log, and JetStream disabled on a full disk or a permission
// error.
var storeFailures = []string{
	"failed to store a msg",
	"Critical write error",
	"no space left on device",
	"resources, will be DISABLED",
	"permission denied while writing",
	"permission denied when flushing",
}

// note records msg if it reports a store write failure.
func (f *storeFault) note(msg string) {
	if f == nil {
		return
	}
	for _, p := range storeFailures {
		if strings.Contains(msg, p) {
			f.once.Do(func() {
				hint := ""
				if strings.Contains(msg, "no space left") || strings.Contains(msg, "resources, will be DISABLED") {
					hint = ": the disk is full; free space on it"
				}
				f.err = fmt.Errorf("%w (store %s)%s: %s", ErrStoreWrite, f.dir, hint, msg)
				close(f.done)
			})
			return
		}
	}
}

// StoreFailed is closed when the server first fails to write its store
// (see StoreErr).
func (s *Server) StoreFailed() <-chan struct{} { return s.fault.done }

// StoreErr is the server's first store write failure, wrapping
// ErrStoreWrite with the server's own words, or nil.
func (s *Server) StoreErr() error {
	select {
	case <-s.fault.done:
		return s.fault.err
	default:
		return nil
	}
}

// Defaults of the embedded server.
const (
	defaultServerMaxMemory  = 256 << 20
	defaultServerMaxPayload = 4 << 20
	defaultServerStartWait  = 10 * time.Second
	readyPoll               = 50 * time.Millisecond
)

// ErrServerStart is returned by StartServer when the embedded server
// cannot open one of its listeners (a client or cluster port in use, an
// address not on this machine).
var ErrServerStart = errors.New("broker: embedded server cannot start")

// StartServer starts an embedded NATS server with JetStream (file store in
// cfg.Dir) and waits until it accepts connections, for at most the time
// left on ctx (10 s if ctx has no deadline). It installs no signal
// handlers. Call Shutdown to stop it.
func StartServer(ctx context.Context, cfg ServerConfig) (*Server, error) {
	if cfg.Dir == "" {
		return nil, fmt.Errorf("%w: server store dir is required", ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, r := range cfg.Cluster.Routes {
		if err := checkRoute(r); err != nil {
			return nil, err
		}
	}
	opts := serverOptions(cfg)
	if cfg.Configure != nil {
		cfg.Configure(opts)
	}
	unlock, err := LockStore(opts.StoreDir, cfg.SharedStoreLock)
	if err != nil {
		return nil, err
	}
	check, err := CheckStore(opts.StoreDir)
	if err != nil {
		unlock()
		return nil, err
	}
	scrubbed, storeDir := "", opts.StoreDir
	if err := check.Err(opts.StoreDir); err != nil {
		if !cfg.ScrubDamaged {
			unlock()
			return nil, fmt.Errorf("%w (`asyrevel audit verify --store %s` reports what is intact; `asyrevel store repair %s NEWDIR` copies it)", err, cfg.Dir, cfg.Dir)
		}
		if scrubbed, err = os.MkdirTemp("", "asyrevel-scrubbed-"); err != nil {
			unlock()
			return nil, err
		}
		if _, err := ScrubStore(opts.StoreDir, filepath.Join(scrubbed, "store")); err != nil {
			os.RemoveAll(scrubbed)
			unlock()
			return nil, err
		}
		opts.StoreDir = filepath.Join(scrubbed, "store")
	}
	s, err := startNATS(ctx, opts, cfg.Logger)
	if err != nil {
		if scrubbed != "" {
			os.RemoveAll(scrubbed)
		}
		unlock()
		return nil, err
	}
	s.unlock = unlock
	s.damage = check
	s.scrubbed = scrubbed
	s.storeDir = storeDir
	return s, nil
}

// checkRoute checks a route URL (nats://host:port).
func checkRoute(r string) error {
	u, err := url.Parse(strings.TrimSpace(r))
	if err == nil && (u.Host == "" || u.Port() == "") {
		err = errors.New("want nats://host:port")
	}
	if err != nil {
		return fmt.Errorf("%w: route %q: %v", ErrInvalid, r, err)
	}
	return nil
}

// serverOptions are the options of an embedded server for cfg.
func serverOptions(cfg ServerConfig) *server.Options {
	opts := &server.Options{
		ServerName:         "asyrevel",
		Host:               cfg.Host,
		Port:               cfg.Port,
		DontListen:         cfg.NoListen,
		JetStream:          true,
		StoreDir:           cfg.Dir,
		JetStreamMaxMemory: cfg.MaxMemory,
		JetStreamMaxStore:  cfg.MaxStore,
		MaxPayload:         cfg.MaxPayload,
		NoSigs:             true,
		NoLog:              cfg.Logger == nil,
	}
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if opts.Port == 0 {
		opts.Port = server.RANDOM_PORT
	}
	if opts.JetStreamMaxMemory == 0 {
		opts.JetStreamMaxMemory = defaultServerMaxMemory
	}
	if opts.MaxPayload == 0 {
		opts.MaxPayload = defaultServerMaxPayload
	}
	if cfg.Name != "" {
		opts.ServerName = cfg.Name
	}
	if c := cfg.Cluster; c.Name != "" {
		opts.Cluster = server.ClusterOpts{Name: c.Name, Host: c.Host, Port: c.Port}
		if opts.Cluster.Host == "" {
			opts.Cluster.Host = opts.Host
		}
		if opts.Cluster.Port == 0 {
			opts.Cluster.Port = DefaultClusterPort
		}
		applyRouteAuth(&opts.Cluster, c.Secret, c.TLS)
		for _, u := range otherRoutes(c.Routes, opts.Cluster.Host, opts.Cluster.Port) {
			opts.Routes = append(opts.Routes, withRouteUser(u, c.Secret))
		}
	}
	return opts
}

// startNATS starts a server with opts and waits until it accepts
// connections, for at most the time left on ctx (10 s without deadline).
func startNATS(ctx context.Context, opts *server.Options, logger *zerolog.Logger) (*Server, error) {
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("broker: new server: %w", err)
	}
	// The server reports a listener it cannot open (a port in use) only
	// through its logger's Fatalf; without it ReadyForConnections would
	// wait out the whole start time. A logger is always set for that.
	fatal := make(chan string, 1)
	fault := &storeFault{dir: opts.StoreDir, done: make(chan struct{})}
	debug, trace := false, false
	l := zerolog.Nop()
	if logger != nil {
		l = *logger
		debug = logger.GetLevel() <= zerolog.DebugLevel
		trace = logger.GetLevel() <= zerolog.TraceLevel
	}
	ns.SetLoggerV2(serverLogger{l: &l, fatal: fatal, fault: fault}, debug, trace, false)
	ns.Start()
	wait := defaultServerStartWait
	if dl, ok := ctx.Deadline(); ok {
		wait = time.Until(dl)
	}
	stop := func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	}
	for end := time.Now().Add(wait); !ns.ReadyForConnections(readyPoll); {
		select {
		case msg := <-fatal:
			stop()
			return nil, fmt.Errorf("%w: %s", ErrServerStart, msg)
		default:
		}
		if err := ctx.Err(); err != nil {
			stop()
			return nil, err
		}
		if time.Now().After(end) {
			stop()
			return nil, errors.New("broker: embedded server not ready for connections")
		}
	}
	if !ns.JetStreamEnabled() {
		ns.Shutdown()
		ns.WaitForShutdown()
		return nil, fmt.Errorf("broker: embedded server started without JetStream (store dir %q)", opts.StoreDir)
	}
	if err := globalJetStream(ns, opts); err != nil {
		stop()
		return nil, err
	}
	s := &Server{ns: ns, maxPayload: opts.MaxPayload, storeDir: opts.StoreDir, fault: fault}
	if !opts.DontListen {
		s.url = ns.ClientURL()
	}
	return s, nil
}

// globalJetStream gives the global account JetStream when the options
// configure other accounts too (an auditor's: trust.ConfigureServer). A
// server alone in its global account enables it there by itself; with
// other accounts only those configured for it, which options cannot say
// of the global account. The global account holds the runs' streams (the
// store's $G folder), whatever accounts the server has.
func globalJetStream(ns *server.Server, opts *server.Options) error {
	if len(opts.Accounts) == 0 || ns.GlobalAccount().JetStreamEnabled() {
		return nil
	}
	if err := ns.GlobalAccount().EnableJetStream(nil, nil); err != nil {
		return fmt.Errorf("broker: JetStream for the global account: %w", err)
	}
	return nil
}

// URL is the server's client URL (nats://host:port), or "" without a
// listener.
func (s *Server) URL() string { return s.url }

// MaxPayload is the largest message the server accepts.
func (s *Server) MaxPayload() int32 { return s.maxPayload }

// StoreDir is the server's JetStream store directory.
func (s *Server) StoreDir() string { return s.storeDir }

// InProcess returns the provider for in-process connections, to use with
// nats.InProcessServer (or JetStreamConfig.InProcess).
func (s *Server) InProcess() nats.InProcessConnProvider { return s.ns }

// NATS returns the underlying server, for monitoring and tests.
func (s *Server) NATS() *server.Server { return s.ns }

// Shutdown stops the server and waits until it has stopped. Connections
// are closed; clients see them drop. Safe to call more than once.
func (s *Server) Shutdown() {
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
	if s.unlock != nil {
		s.unlock()
		s.unlock = nil
	}
	if s.scrubbed != "" {
		os.RemoveAll(s.scrubbed)
		s.scrubbed = ""
	}
}

// Damage is what the check of the store at start found: the damaged
// records a ScrubDamaged server left out of its copy, torn tails, and
// blocks it could not read.
func (s *Server) Damage() StoreCheck { return s.damage }

// serverLogger adapts zerolog to the nats-server Logger interface.
type serverLogger struct {
	l     *zerolog.Logger
	fatal chan<- string // the first fatal message, for startNATS
	fault *storeFault   // the first store write failure
}

func (g serverLogger) Noticef(format string, v ...any) { g.l.Info().Msgf(format, v...) }

func (g serverLogger) Warnf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	g.l.Warn().Msg(msg)
	g.fault.note(msg)
}

func (g serverLogger) Errorf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	g.l.Error().Msg(msg)
	g.fault.note(msg)
}

func (g serverLogger) Debugf(format string, v ...any) { g.l.Debug().Msgf(format, v...) }
func (g serverLogger) Tracef(format string, v ...any) { g.l.Trace().Msgf(format, v...) }

// Fatalf logs at fatal level without exiting: zerolog's Fatal would call
// os.Exit inside the embedding process.
func (g serverLogger) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	g.l.WithLevel(zerolog.FatalLevel).Msg(msg)
	if g.fatal != nil {
		select {
		case g.fatal <- msg:
		default:
		}
	}
}
