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
// the JetStream meta group has a leader and every node is current with it,
// for at most the time left on ctx (30 s if ctx has no deadline). Client
// connections may go to any node (URLs). Call Shutdown to stop it.
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
	for attempt := 0; attempt < 3; attempt++ {
		var c *Cluster
		if c, err = startCluster(ctx, cfg); err == nil {
			return c, nil
		}
		if ctx.Err() != nil || !errors.Is(err, errRoutePort) {
			break
		}
		// A route port picked below was taken in the meantime: again.
	}
	return nil, err
}

var errRoutePort = errors.New("broker: route port taken")

func startCluster(ctx context.Context, cfg ClusterConfig) (*Cluster, error) {
	// Route ports are fixed before the start so that every node can list
	// all the others (the JetStream meta group sizes itself on them).
	ports, err := freePorts(cfg.Host, cfg.Nodes)
	if err != nil {
		return nil, err
	}
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
		if ctx.Err() == nil && portTaken(cfg.Host, ports) {
			return nil, fmt.Errorf("%w: %v", errRoutePort, err)
		}
		return nil, fmt.Errorf("broker: start cluster: %w", err)
	}
	if err := c.waitReady(ctx); err != nil {
		c.Shutdown()
		return nil, err
	}
	return c, nil
}

// waitReady waits for a JetStream meta leader that every node follows.
func (c *Cluster) waitReady(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		leaders, current := 0, 0
		for _, s := range c.servers {
			if s.ns.JetStreamIsLeader() {
				leaders++
			}
			if s.ns.JetStreamIsCurrent() {
				current++
			}
		}
		if leaders == 1 && current == len(c.servers) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("broker: cluster not ready (%d meta leaders, %d of %d nodes current): %w",
				leaders, current, len(c.servers), ctx.Err())
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
			return nil, fmt.Errorf("broker: pick a route port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// portTaken reports whether one of ports cannot be listened on.
func portTaken(host string, ports []int) bool {
	for _, p := range ports {
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
		if err != nil {
			return true
		}
		l.Close()
	}
	return false
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
