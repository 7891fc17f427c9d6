package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/rs/zerolog"
)

// ClusterConfig configures an embedded JetStream cluster: Nodes NATS
// servers in this process, routed to each other on loopback.
type ClusterConfig struct {
	// Dir is the parent of the nodes' store directories (Dir/node-1, ...).
	// Required.
	Dir string
	// Nodes is the number of servers; 0 means 3. A stream with Replicas R
	// needs at least R nodes, and a majority of the nodes must be up for
	// the cluster to work.
	Nodes int
	// Host is the client and route listen address; "" means 127.0.0.1.
	Host string
	// Name is the cluster name; "" means "asyrevel".
	Name string
	// MaxMemory, MaxStore and MaxPayload apply to every node, as in
	// ServerConfig.
	MaxMemory, MaxStore int64
	MaxPayload          int32
	// Logger receives every node's log (with a "node" field); nil means
	// silent.
	Logger *zerolog.Logger
	// Configure, if not nil, may adjust each node's options last (i is
	// 0-based).
	Configure func(i int, o *server.Options)
}

// Cluster is an embedded JetStream cluster.
type Cluster struct {
	servers []*Server
}

// Defaults of the embedded cluster.
const (
	defaultClusterNodes = 3
	defaultClusterName  = "asyrevel"
	defaultClusterWait  = 30 * time.Second
)

// StartCluster starts cfg.Nodes embedded NATS servers with JetStream
// clustering (server names asyrevel-1..N, a store directory each, routes
// between all of them) and waits until every node accepts connections,
// the JetStream meta group has a leader that sees every node online, and
// every node is current with it, for at most the time left on ctx (30 s if
// ctx has no deadline). Client connections may go to any node (URLs,
// Servers). A stream with Replicas 3 (JetStreamConfig.Replicas) is then
// placed on three nodes; ConnectJetStream waits for its leader. Call
// Shutdown to stop the cluster.
func StartCluster(ctx context.Context, cfg ClusterConfig) (*Cluster, error) {
	if cfg.Dir == "" {
		return nil, fmt.Errorf("%w: cluster store dir is required", ErrInvalid)
	}
	if cfg.Nodes == 0 {
		cfg.Nodes = defaultClusterNodes
	}
	if cfg.Nodes < 1 {
		return nil, fmt.Errorf("%w: %d cluster nodes", ErrInvalid, cfg.Nodes)
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.Name == "" {
		cfg.Name = defaultClusterName
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultClusterWait)
		defer cancel()
	}
	var err error
	for attempt := 0; attempt < clusterAttempts; attempt++ {
		// Each attempt gets a share of the time left, so that one that
		// hangs (a port picked below taken by another process in the
		// meantime leaves a node waiting for its listener) leaves time
		// for another.
		// The first attempts get 60% of what is left (18 s of the default
		// 30 s), the last all of it.
		dl, _ := ctx.Deadline()
		budget := time.Until(dl)
		if attempt < clusterAttempts-1 {
			budget = budget * 6 / 10
		}
		actx, cancel := context.WithTimeout(ctx, budget)
		var c *Cluster
		c, err = startCluster(actx, cfg)
		cancel()
		if err == nil {
			return c, nil
		}
		if ctx.Err() != nil || errors.Is(err, ErrInvalid) {
			break
		}
	}
	return nil, err
}

// clusterAttempts bounds the attempts to start a cluster.
const clusterAttempts = 3

func startCluster(ctx context.Context, cfg ClusterConfig) (*Cluster, error) {
	// Route ports are fixed before the start so that every node can list
	// all the others (the JetStream meta group sizes itself on them);
	// client ports are picked with them so that no node's client listener
	// takes another's route port.
	ports, err := freePorts(cfg.Host, 2*cfg.Nodes)
	if err != nil {
		return nil, err
	}
	clientPorts, ports := ports[cfg.Nodes:], ports[:cfg.Nodes]
	routes := make([]string, cfg.Nodes)
	for i, p := range ports {
		routes[i] = "nats://" + net.JoinHostPort(cfg.Host, strconv.Itoa(p))
	}
	c := &Cluster{servers: make([]*Server, cfg.Nodes)}
	errs := make([]error, cfg.Nodes)
	var wg sync.WaitGroup
	for i := range cfg.Nodes {
		opts := serverOptions(ServerConfig{
			Dir:        filepath.Join(cfg.Dir, "node-"+strconv.Itoa(i+1)),
			Host:       cfg.Host,
			MaxMemory:  cfg.MaxMemory,
			MaxStore:   cfg.MaxStore,
			MaxPayload: cfg.MaxPayload,
			Logger:     cfg.Logger,
		})
		opts.ServerName = "asyrevel-" + strconv.Itoa(i+1)
		opts.Port = clientPorts[i]
		opts.Cluster = server.ClusterOpts{
			Name: cfg.Name,
			Host: cfg.Host,
			Port: ports[i],
			// Loopback: compressing costs CPU and saves nothing.
			Compression: server.CompressionOpts{Mode: server.CompressionOff},
		}
		for j, r := range routes {
			if j != i {
				opts.Routes = append(opts.Routes, server.RoutesFromStr(r)...)
			}
		}
		if cfg.Configure != nil {
			cfg.Configure(i, opts)
		}
		var logger *zerolog.Logger
		if cfg.Logger != nil {
			l := cfg.Logger.With().Str("node", opts.ServerName).Logger()
			logger = &l
		}
		wg.Go(func() {
			c.servers[i], errs[i] = startNATS(ctx, opts, logger)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.Shutdown()
		return nil, fmt.Errorf("broker: start cluster: %w", err)
	}
	if err := c.waitReady(ctx); err != nil {
		c.Shutdown()
		return nil, err
	}
	return c, nil
}

// waitReady waits for a JetStream meta leader that every node follows and
// that sees every node online.
func (c *Cluster) waitReady(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		leaders, current, peers := 0, 0, 0
		for _, s := range c.servers {
			if s.ns.JetStreamIsLeader() {
				leaders++
				// The nodes the leader sees online with JetStream: a
				// stream is placed only on those.
				peers = len(s.ns.JetStreamClusterPeers())
			}
			if s.ns.JetStreamIsCurrent() {
				current++
			}
		}
		if leaders == 1 && current == len(c.servers) && peers == len(c.servers) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("broker: cluster not ready (%d meta leaders, %d of %d nodes current, %d seen online): %w",
				leaders, current, len(c.servers), peers, ctx.Err())
		case <-t.C:
		}
	}
}

// freePorts picks n free TCP ports on host.
func freePorts(host string, n int) ([]int, error) {
	ports := make([]int, 0, n)
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("broker: pick a port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// URLs are the nodes' client URLs, in node order.
func (c *Cluster) URLs() []string {
	urls := make([]string, len(c.servers))
	for i, s := range c.servers {
		urls[i] = s.URL()
	}
	return urls
}

// Servers are the nodes, in node order: connect to one with
// JetStreamConfig.Server (over TCP or in-process).
func (c *Cluster) Servers() []*Server { return c.servers }

// Shutdown stops every node and waits until they have stopped. Safe to
// call more than once.
func (c *Cluster) Shutdown() {
	var wg sync.WaitGroup
	for _, s := range c.servers {
		if s != nil {
			wg.Go(s.Shutdown)
		}
	}
	wg.Wait()
}
