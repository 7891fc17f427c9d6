package cli

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/observe"
	"github.com/asyrevel/asyrevel/run"
	"github.com/asyrevel/asyrevel/trust"
)

// brokerFlags are the flags of asyrevel broker.
type brokerFlags struct {
	store, host, name, clusterName, routes, log, roster string
	metrics                                             string
	routeSecret                                         string
	tls                                                 trust.TLSFiles
	port, clusterPort                                   int
	routeTLS                                            bool
	maxStore, maxMsg                                    sizeFlag
}

func newBrokerFlags(fs *flag.FlagSet) *brokerFlags {
	f := &brokerFlags{}
	fs.StringVar(&f.store, "store", "asyrevel-store", "store directory (the runs' audit logs)")
	fs.StringVar(&f.host, "host", "127.0.0.1", "address to listen on (clients and, in a cluster, routes)")
	fs.IntVar(&f.port, "port", 4222, "port to listen on (0 = any free port)")
	fs.StringVar(&f.name, "server-name", "", "this server's name, unique in its cluster (default asyrevel, or in a cluster\nthe host name)")
	fs.StringVar(&f.clusterName, "cluster-name", "", "join a JetStream cluster of this name: three brokers with the same name and\nroutes to each other keep every run's stream on three nodes")
	fs.IntVar(&f.clusterPort, "cluster-port", broker.DefaultClusterPort, "port for routes from the other nodes (with --cluster-name)")
	fs.StringVar(&f.log, "log", "warn", "the server's log level: debug, info, warn, error (info shows the cluster's\nroutes and leader elections)")
	fs.StringVar(&f.tls.Cert, "tls-cert", "", "PEM `FILE` of the broker's certificate: clients must then connect with TLS\n(with --tls-key)")
	fs.StringVar(&f.tls.Key, "tls-key", "", "PEM `FILE` of the private key of --tls-cert")
	fs.StringVar(&f.tls.CA, "tls-ca", "", "PEM `FILE` of the authorities that sign the clients' certificates: mutual TLS,\nevery client must present one (with --tls-cert)")
	fs.StringVar(&f.roster, "roster", "", "the run's roster.json (`FILE`): admit only its participants (asyrevel keys)")
	fs.Var(&f.maxStore, "max-store", "with --roster: bound of the run's stream, e.g. 20GB (none: unbounded; default:\n80% of the disk space free at the store, within the server's share of it). Given\nagain at a restart, a larger bound lifts the bound of the run's existing stream\n(never lowers it): a run stopped because its stream was full goes on with --resume")
	fs.Var(&f.maxMsg, "max-msg", "with --roster: the largest message the broker takes and the run's stream stores,\ne.g. 2MB (default: the run's largest as its roster tells, the alignment's\nchunks: about 600 KB); the participants of a run whose messages are larger\n(a batch over about 26,000 samples) say so when they start")
	fs.StringVar(&f.routes, "routes", "", "the cluster's route URLs, comma-separated, e.g.\nnats://n1:6222,nats://n2:6222,nats://n3:6222 (this node's own may be listed)")
	fs.StringVar(&f.routeSecret, "route-secret", "", "the cluster's route secret (`FILE`, asyrevel keys route): admit as routes only\nthe nodes that present it, and present it to them; every node needs the same")
	fs.StringVar(&f.metrics, "metrics", "", "serve the broker's Prometheus metrics at http://`ADDR`/metrics (e.g. 0.0.0.0:7777 for a\nscraper elsewhere: connections, messages, JetStream streams, storage, each stream's\nsize), and nats-server's own JSON monitoring (/varz, /jsz, /connz, /routez,\n/accountz, /healthz) on the same address")
	fs.BoolVar(&f.routeTLS, "route-tls", false, "routes over mutual TLS too, with --tls-cert, --tls-key and --tls-ca: each node\npresents its certificate (naming the host of its route URL) and checks the other's")
	return f
}

func cmdBroker(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("broker", "asyrevel broker [--store DIR] [--port N] [--roster FILE] [--cluster-name C --routes URL,URL --server-name N]\n\n"+
		"Runs an embedded NATS server with JetStream until interrupted, for runs whose\n"+
		"aggregator and parties are separate processes. It prints the URL to give them.\n"+
		"With --roster it serves that run alone: it admits only the roster's participants\n"+
		"(each with its --key), each allowed only its own subjects, and creates the run's\n"+
		"stream, which no participant can delete, purge or change.\n"+
		"Three brokers started with the same --cluster-name and --routes to each other\n"+
		"form a JetStream cluster: give the clients every node's URL (--nats URL1,URL2,URL3)\n"+
		"and the run's stream is kept on three nodes; a client whose node dies fails over.", stderr)
	f := newBrokerFlags(fs)
	config := fs.String("config", "", "run file (YAML): its top-level keys and its broker section set these flags;\nflags given here win")
	id := fs.Int("id", 0, "with --config: this broker's entry of the run file's broker section")
	if err := fs.Parse(args); err != nil {
		return usageErr(err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if *config != "" {
		rf, err := loadRunFile(*config)
		if err != nil {
			return err
		}
		if err := rf.apply(fs, "broker", *id); err != nil {
			return err
		}
	}
	if f.routes != "" && f.clusterName == "" {
		return fmt.Errorf("%w: --routes needs --cluster-name", errUsage)
	}
	if (f.routeSecret != "" || f.routeTLS) && f.clusterName == "" {
		return fmt.Errorf("%w: --route-secret and --route-tls need --cluster-name", errUsage)
	}
	lvl, err := zerolog.ParseLevel(f.log)
	if err != nil || f.log == "" {
		return fmt.Errorf("%w: --log %q", errUsage, f.log)
	}
	logger := newLogger(stderr, lvl, false)
	cfg := broker.ServerConfig{Dir: f.store, Host: f.host, Port: f.port, Name: f.name, Logger: &logger}
	if f.clusterName != "" {
		if cfg.Name == "" {
			cfg.Name, _ = os.Hostname()
		}
		cfg.Cluster = broker.ClusterNode{Name: f.clusterName, Port: f.clusterPort, Routes: broker.ServerURLs(f.routes)}
		if f.routeSecret != "" {
			secret, err := trust.ReadRouteSecret(f.routeSecret)
			if err != nil {
				return fmt.Errorf("%w: --route-secret: %w", errUsage, err)
			}
			cfg.Cluster.Secret = secret
		}
		if f.routeTLS {
			tc, err := trust.RouteTLS(f.tls)
			if err != nil {
				return fmt.Errorf("%w: --route-tls: %w", errUsage, err)
			}
			cfg.Cluster.TLS = tc
		}
	}
	if err := os.MkdirAll(f.store, 0o755); err != nil {
		return err
	}
	st, err := run.OpenStore(f.store)
	if err != nil {
		return fmt.Errorf("--store %s: %w", f.store, err)
	}
	if len(st.Runs) > 0 {
		fmt.Fprintf(stderr, "the store holds %s already, %s (asyrevel store list %s; a run id cannot be used twice)\n", plural(len(st.Runs), "run"), run.MB(st.Bytes), f.store)
	}
	var rb *run.RosterBroker
	if f.roster != "" {
		r, err := trust.ReadRoster(f.roster)
		if err != nil {
			return fmt.Errorf("--roster: %w", err)
		}
		if rb, err = run.NewRosterBroker(r); err != nil {
			return err
		}
		cfg.Configure = rb.Configure
		// Nothing larger than the run's largest message, on the
		// connection and in the stream.
		rb.MaxMsgSize = run.RosterMaxMessage(r)
		if f.maxMsg < 0 {
			return fmt.Errorf("%w: --max-msg takes a size (e.g. 2MB)", errUsage)
		}
		if f.maxMsg > 0 {
			rb.MaxMsgSize = int32(min(int64(f.maxMsg), 1<<30))
		}
		cfg.MaxPayload = rb.MaxMsgSize
		if f.maxStore != 0 {
			// The operator's own bound: the server's default share of the
			// disk (three quarters of what is free) must not refuse it.
			rb.MaxBytes, cfg.MaxStore = int64(f.maxStore), 1<<50
			before, raised, err := broker.RaiseStreamBound(ctx, f.store, r.Run, int64(f.maxStore), 0)
			if err != nil {
				return fmt.Errorf("--max-store: %w", err)
			}
			if raised {
				to := "none"
				if f.maxStore > 0 {
					to = run.MB(int64(f.maxStore))
				}
				fmt.Fprintf(stdout, "run %s: its stream's bound raised from %s to %s (--max-store)\n", r.Run, run.MB(before), to)
			}
		}
	} else if f.maxStore != 0 || f.maxMsg != 0 {
		return fmt.Errorf("%w: --max-store and --max-msg bound the run's stream that --roster makes", errUsage)
	}
	if f.tls.Enabled() {
		tc, err := trust.ServerTLS(f.tls)
		if err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		cfg.Configure = withTLS(cfg.Configure, tc)
	}
	srv, err := broker.StartServer(ctx, cfg)
	if err != nil {
		return err
	}
	var metricsURL string
	if f.metrics != "" {
		ms, err := serveBrokerMetrics(f.metrics, srv)
		if err != nil {
			srv.Shutdown()
			return fmt.Errorf("--metrics: %w", err)
		}
		defer ms.Close()
		defer fmt.Fprintf(stdout, "broker metrics on %s stopped\n", ms.URL("/metrics"))
		metricsURL = ms.URL("/metrics")
	}
	switch {
	case rb != nil && f.clusterName != "":
		// The stream is created once the cluster has formed: the other
		// nodes may not run yet.
		rb.Replicas = clusterReplicas(cfg.Cluster, f.host)
		fmt.Fprintf(stdout, "run %s: admitting only the %d participants of %s; its stream is created on %d nodes once the cluster has formed\n",
			rb.Roster.Run, len(rb.Roster.Participants), f.roster, rb.Replicas)
		go rb.CreateStreamWhenReady(ctx, srv, func(err error) {
			if err != nil && ctx.Err() == nil {
				logger.Error().Err(err).Msg("creating the run's stream")
				return
			}
			sealWhenOver(ctx, rb, srv, stdout, logger)
		})
	case rb != nil:
		if err := rb.CreateStream(ctx, srv); err != nil {
			srv.Shutdown()
			return err
		}
		fmt.Fprintf(stdout, "run %s: admitting only the %d participants of %s\n", rb.Roster.Run, len(rb.Roster.Participants), f.roster)
		go sealWhenOver(ctx, rb, srv, stdout, logger)
	}
	if f.clusterName != "" {
		auth := "routes not authenticated: --route-secret"
		switch {
		case cfg.Cluster.Secret != "" && cfg.Cluster.TLS != nil:
			auth = "routes authenticated by secret and TLS"
		case cfg.Cluster.Secret != "":
			auth = "routes authenticated by secret"
		case cfg.Cluster.TLS != nil:
			auth = "routes authenticated by TLS"
		}
		fmt.Fprintf(stdout, "broker listening on %s (store %s; node %s of cluster %s, routes on port %d to %s; %s); interrupt to stop\n",
			srv.URL(), f.store, cfg.Name, f.clusterName, f.clusterPort, strings.Join(cfg.Cluster.Routes, ","), auth)
		go watchCluster(ctx, srv, stdout, broker.OtherRoutes(cfg.Cluster, f.host))
	} else {
		fmt.Fprintf(stdout, "broker listening on %s (store %s); interrupt to stop\n", srv.URL(), f.store)
	}
	if metricsURL != "" {
		fmt.Fprintf(stdout, "broker metrics on %s (nats-server's monitoring: /varz, /jsz, /connz, /routez, /healthz)\n", metricsURL)
	}
	stopWords.Store(ptr("stopping the broker: its store keeps every stream as written; connected participants wait for it (--broker-wait) and go on when it is started again on the same --store (again to quit at once)"))
	defer stopWords.Store(nil)
	select {
	case <-ctx.Done():
	case <-srv.StoreFailed():
		// Going on would take messages and store none of them: stop,
		// so that the participants see a broker outage, wait for it
		// (--broker-wait) and resume from what the store holds once it
		// is started again with room.
		srv.Shutdown()
		fmt.Fprintln(stdout, "broker stopped: it cannot write its store")
		return fmt.Errorf("%w\nStart it again on the same --store once the store can be written (free space): the participants wait for it (--broker-wait) and go on by themselves", srv.StoreErr())
	}
	srv.Shutdown()
	fmt.Fprintln(stdout, "broker stopped")
	return nil
}

// sealWhenOver seals the run's stream once its run is over (the final
// seal and the parties' receipts of it are stored), and says so.
func sealWhenOver(ctx context.Context, rb *run.RosterBroker, srv *broker.Server, out io.Writer, logger zerolog.Logger) {
	sealed, err := rb.SealWhenOver(ctx, srv)
	switch {
	case err != nil && ctx.Err() == nil:
		logger.Error().Err(err).Msg("sealing the run's stream once its run is over")
	case sealed:
		fmt.Fprintf(out, "run %s is over: its stream is sealed (it stores nothing more; audit verify reads it)\n", rb.Roster.Run)
	}
}

// withTLS adds a TLS configuration to a server's options after next.
func withTLS(next func(*server.Options), tc *tls.Config) func(*server.Options) {
	return func(o *server.Options) {
		if next != nil {
			next(o)
		}
		o.TLSConfig, o.TLS = tc, true
		o.TLSVerify = tc.ClientAuth == tls.RequireAndVerifyClientCert
		o.TLSTimeout = 2
	}
}

// clusterReplicas is how many nodes keep a run's stream in the cluster of
// node: the nodes its routes name and itself, at most three.
func clusterReplicas(node broker.ClusterNode, host string) int {
	return min(3, len(broker.OtherRoutes(node, host))+1)
}

// clusterNode is what watchCluster reads of its node (*broker.Server).
type clusterNode interface {
	State() broker.ClusterState
}

// watchCluster says on out when this node's cluster gets a JetStream
// leader, and every 10 s while it has none, what it waits for: others are
// its routes to the other nodes (OtherRoutes).
func watchCluster(ctx context.Context, srv clusterNode, out io.Writer, others []string) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	start, told, leader := time.Now(), time.Time{}, ""
	nodes := len(others) + 1
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st := srv.State()
		switch {
		case st.Leader != "" && st.Leader != leader:
			fmt.Fprintf(out, "cluster: JetStream leader %s; routes to %s (this node and %d of the %d others reach each other)\n",
				st.Leader, orNone(st.Routed), len(st.Routed), len(others))
		case st.Leader == "" && time.Since(told) >= 10*time.Second && time.Since(start) >= 3*time.Second:
			told = time.Now()
			fmt.Fprintf(out, "cluster: no JetStream leader for %v: %s; a cluster needs %d of its %d nodes running and routed to each other to elect one (participants wait: --broker-wait)\n",
				time.Since(start).Round(time.Second), clusterReach(ctx, st, others), nodes/2+1, nodes)
		}
		leader = st.Leader
	}
}

// clusterReach says which of a node's other nodes (their routes: others)
// run and which it reaches: a node that answers on its route port but
// holds no route with this one refused it (another --route-secret, or
// TLS), which is not the same as a node down.
func clusterReach(ctx context.Context, st broker.ClusterState, others []string) string {
	up, down := broker.RoutesAnswering(ctx, others, time.Second)
	words := fmt.Sprintf("routes to %s; %d of the %d other nodes answer on their route ports", orNone(st.Routed), len(up), len(others))
	if len(down) > 0 {
		words += " (" + strings.Join(down, ", ") + " not: down, or not started)"
	}
	if refused := len(up) - len(st.Routed); refused > 0 {
		words += fmt.Sprintf(", and %d of them hold no route with this node (do they have another --route-secret, or --route-tls, than this one?)", refused)
	}
	return words
}

// orNone is the names, or "none".
func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// serveBrokerMetrics serves the metrics of srv on addr: observe's broker
// collector and the Go runtime's, and nats-server's JSON monitoring.
func serveBrokerMetrics(addr string, srv *broker.Server) (*observe.Server, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(observe.NewBrokerCollector(srv), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return observe.Listen(addr, observe.BrokerHandler(reg, srv))
}
