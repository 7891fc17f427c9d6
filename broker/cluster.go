package broker

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/asyrevel/asyrevel/internal/freeport"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
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
	// RouteSecret authenticates the routes between the nodes (see
	// ClusterNode.Secret); "" means a random one, made for this cluster.
	RouteSecret string
	// RouteTLS, if not nil, makes the routes TLS connections (see
	// ClusterNode.TLS).
	RouteTLS *tls.Config
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
	if cfg.RouteSecret == "" {
		secret, err := newRouteSecret()
		if err != nil {
			return nil, err
		}
		cfg.RouteSecret = secret
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
		applyRouteAuth(&opts.Cluster, cfg.RouteSecret, cfg.RouteTLS)
		for j, r := range routes {
			if j != i {
				for _, u := range server.RoutesFromStr(r) {
					opts.Routes = append(opts.Routes, withRouteUser(u, cfg.RouteSecret))
				}
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
	ports, err := freeport.Pick(host, n)
	if err != nil {
		return nil, fmt.Errorf("broker: pick a port: %w", err)
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

// RouteUser is the user name a cluster's nodes present to each other with
// their route secret (ClusterNode.Secret).
const RouteUser = "asyrevel-route"

// newRouteSecret makes a random route secret for an embedded cluster.
func newRouteSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("broker: route secret: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// applyRouteAuth makes a node admit as routes only the nodes that present
// secret (none if ""), over TLS with tc (none if nil).
func applyRouteAuth(c *server.ClusterOpts, secret string, tc *tls.Config) {
	if secret != "" {
		c.Username, c.Password = RouteUser, secret
		c.AuthTimeout = 2
	}
	if tc != nil {
		c.TLSConfig, c.TLSTimeout = tc, 2
	}
}

// withRouteUser is route u with the route user and secret, unless it has
// credentials of its own or secret is "".
func withRouteUser(u *url.URL, secret string) *url.URL {
	if secret == "" || u.User != nil {
		return u
	}
	c := *u
	c.User = url.UserPassword(RouteUser, secret)
	return &c
}

// SelfRoute says whether route u leads to this node: a node that routes
// on host:port (host "" or unspecified: every address of the machine).
// The JetStream meta group of a new cluster expects as many nodes as
// there are routes (at least two): a 3-node cluster whose nodes each
// count a route to themselves expects three, and as its empty logs elect
// no leader with less than every expected vote, it does not start with
// a node down. Without the route to itself it expects two and elects a
// leader with a majority; the third node joins when it starts.
func SelfRoute(u *url.URL, host string, port int) bool {
	if u == nil || u.Port() != strconv.Itoa(port) {
		return false
	}
	h := u.Hostname()
	if h == host {
		return true
	}
	ips, err := net.LookupIP(h)
	if err != nil {
		return false
	}
	listen := net.ParseIP(host)
	anyAddr := host == "" || listen != nil && listen.IsUnspecified()
	var local []net.IP
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				local = append(local, n.IP)
			}
		}
	}
	for _, ip := range ips {
		if listen != nil && !anyAddr && ip.Equal(listen) {
			return true
		}
		if anyAddr {
			for _, l := range local {
				if ip.Equal(l) {
					return true
				}
			}
		}
	}
	if listen == nil && !anyAddr {
		// A host name of its own: the same addresses.
		if mine, err := net.LookupIP(host); err == nil {
			for _, ip := range ips {
				for _, m := range mine {
					if ip.Equal(m) {
						return true
					}
				}
			}
		}
	}
	return false
}

// otherRoutes are the routes of list that do not lead to this node
// (SelfRoute), parsed.
func otherRoutes(list []string, host string, port int) []*url.URL {
	var out []*url.URL
	for _, r := range list {
		for _, u := range server.RoutesFromStr(r) {
			if !SelfRoute(u, host, port) {
				out = append(out, u)
			}
		}
	}
	return out
}

// OtherRoutes are the routes of node that lead to other nodes, for a node
// whose clients listen on host (its routes too, unless node.Host says
// otherwise).
func OtherRoutes(node ClusterNode, host string) []string {
	h, p := node.Host, node.Port
	if h == "" {
		h = host
	}
	if p == 0 {
		p = DefaultClusterPort
	}
	var out []string
	for _, u := range otherRoutes(node.Routes, h, p) {
		out = append(out, u.String())
	}
	return out
}

// ClusterState is what a node of a cluster knows of it.
type ClusterState struct {
	// Leader is the JetStream meta leader's name ("" while there is none).
	Leader string
	// Size is the meta group's expected size, Quorum the votes it needs.
	Size, Quorum int
	// Routed are the names of the other nodes this node has routes to.
	Routed []string
}

// State is what node s knows of its cluster.
func (s *Server) State() ClusterState {
	var st ClusterState
	if jsz, err := s.ns.Jsz(&server.JSzOptions{}); err == nil && jsz.Meta != nil {
		st.Leader, st.Size, st.Quorum = jsz.Meta.Leader, jsz.Meta.Size, jsz.Meta.QuorumNeeded
	}
	if rz, err := s.ns.Routez(&server.RoutezOptions{}); err == nil {
		seen := map[string]bool{}
		for _, r := range rz.Routes {
			if r.RemoteName != "" && !seen[r.RemoteName] {
				seen[r.RemoteName] = true
				st.Routed = append(st.Routed, r.RemoteName)
			}
		}
	}
	slices.Sort(st.Routed)
	return st
}

// errCodeNoLeader: JetStream has no meta leader (JSClusterNotAvailErr,
// code 503).
const errCodeNoLeader = 10008

// ClusterWait says why err, from connecting to a cluster, is worth
// waiting out ("" if it is not a cluster's): no JetStream leader (fewer
// than a majority of the nodes run, or they are still electing), or too
// few nodes for the stream's replicas (a node of the cluster is down).
// NodesAnswering says which nodes those are.
func ClusterWait(err error) string {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return ""
	}
	switch {
	case apiErr.ErrorCode == errCodeNoPeers:
		return "has too few JetStream nodes running for the run's stream (it keeps a copy on each of 3 nodes, or as many as URLs given): a node of the cluster is down, or its routes are refused (a different --route-secret?)"
	case apiErr.ErrorCode == errCodeNoLeader || apiErr.Code == 503:
		return "has no JetStream leader: a cluster elects one once a majority of its nodes run and reach each other (are the others started, with routes to this one and the same --route-secret?)"
	}
	return ""
}

// NodesAnswering says which of urls accept a TCP connection within
// timeout ("2 of 3 nodes answer; nats://c:4222 does not"), "" for fewer
// than two URLs.
func NodesAnswering(ctx context.Context, urls []string, timeout time.Duration) string {
	if len(urls) < 2 {
		return ""
	}
	up := answering(ctx, urls, "4222", timeout)
	var down []string
	for i, ok := range up {
		if !ok {
			down = append(down, urls[i])
		}
	}
	switch len(down) {
	case 0:
		return fmt.Sprintf("all %d nodes answer", len(urls))
	case 1:
		return fmt.Sprintf("%d of %d nodes answer; %s does not", len(urls)-1, len(urls), down[0])
	}
	return fmt.Sprintf("%d of %d nodes answer; %s do not", len(urls)-len(down), len(urls), strings.Join(down, ", "))
}

// answering says which of urls accept a TCP connection within timeout
// (port: the default port of a URL without one).
func answering(ctx context.Context, urls []string, port string, timeout time.Duration) []bool {
	up := make([]bool, len(urls))
	var wg sync.WaitGroup
	for i, u := range urls {
		pu, err := url.Parse(u)
		if err != nil || pu.Host == "" {
			continue
		}
		host := pu.Host
		if pu.Port() == "" {
			host = net.JoinHostPort(pu.Hostname(), port)
		}
		wg.Go(func() {
			d := net.Dialer{Timeout: timeout}
			if c, err := d.DialContext(ctx, "tcp", host); err == nil {
				c.Close()
				up[i] = true
			}
		})
	}
	wg.Wait()
	return up
}

// RoutesAnswering says which of a node's routes to the other nodes
// (OtherRoutes) accept a TCP connection within timeout: the nodes that
// run, whether or not they accept this node's route.
func RoutesAnswering(ctx context.Context, routes []string, timeout time.Duration) (up, down []string) {
	for i, ok := range answering(ctx, routes, strconv.Itoa(DefaultClusterPort), timeout) {
		if ok {
			up = append(up, routes[i])
		} else {
			down = append(down, routes[i])
		}
	}
	return up, down
}
