package broker_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/internal/freeport"
)

func TestSelfRoute(t *testing.T) {
	for _, c := range []struct {
		route, host string
		port        int
		want        bool
	}{
		{"nats://127.0.0.1:6222", "127.0.0.1", 6222, true},
		{"nats://127.0.0.1:6223", "127.0.0.1", 6222, false},
		{"nats://localhost:6222", "127.0.0.1", 6222, true},
		{"nats://127.0.0.1:6222", "0.0.0.0", 6222, true},
		{"nats://127.0.0.1:6222", "", 6222, true},
		{"nats://192.0.2.7:6222", "0.0.0.0", 6222, false}, // TEST-NET: not this machine
		{"nats://192.0.2.7:6222", "127.0.0.1", 6222, false},
		{"nats://no-such-host.invalid:6222", "127.0.0.1", 6222, false},
	} {
		u, err := url.Parse(c.route)
		if err != nil {
			t.Fatal(err)
		}
		if got := broker.SelfRoute(u, c.host, c.port); got != c.want {
			t.Errorf("SelfRoute(%s, %q, %d) = %v, want %v", c.route, c.host, c.port, got, c.want)
		}
	}
	node := broker.ClusterNode{Port: 6222, Routes: []string{"nats://127.0.0.1:6222", "nats://127.0.0.1:6223", "nats://127.0.0.1:6224"}}
	if got := broker.OtherRoutes(node, "127.0.0.1"); len(got) != 2 || strings.Contains(strings.Join(got, ","), ":6222") {
		t.Errorf("OtherRoutes = %v", got)
	}
}

// clusterNode starts node i (0-based) of a 3-node cluster of processes'
// kind (one server each, routes to all three listed on every node).
func clusterNode(t *testing.T, dir string, i int, routePorts []int, secret string) *broker.Server {
	t.Helper()
	s, err := startNode(dir, i, routePorts, secret)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

func startNode(dir string, i int, routePorts []int, secret string) (*broker.Server, error) {
	var routes []string
	for _, p := range routePorts {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return broker.StartServer(ctx, broker.ServerConfig{
		Dir: filepath.Join(dir, fmt.Sprintf("n%d", i+1)), Name: fmt.Sprintf("n%d", i+1),
		Cluster: broker.ClusterNode{Name: "down", Port: routePorts[i], Routes: routes, Secret: secret},
	})
}

// firstTwoNodes picks three route ports and starts nodes 1 and 2 on them.
// A port picked free can be taken by another process (another test
// package's outgoing connection) before its node listens: the start then
// fails at once (ErrServerStart) and is tried again on other ports.
func firstTwoNodes(t *testing.T, dir, secret string) (n1, n2 *broker.Server, ports []int) {
	t.Helper()
	for attempt := 0; ; attempt++ {
		var err error
		if ports, err = freeport.Pick("127.0.0.1", 3); err != nil {
			t.Fatal(err)
		}
		d := filepath.Join(dir, fmt.Sprint(attempt))
		if n1, err = startNode(d, 0, ports, secret); err == nil {
			if n2, err = startNode(d, 1, ports, secret); err != nil {
				n1.Shutdown()
			}
		}
		switch {
		case err == nil:
			t.Cleanup(n1.Shutdown)
			t.Cleanup(n2.Shutdown)
			return n1, n2, ports
		case errors.Is(err, broker.ErrServerStart) && attempt < 4:
			t.Logf("attempt %d: %v", attempt+1, err)
		default:
			t.Fatal(err)
		}
	}
}

// A fresh 3-node cluster with one node not started elects its JetStream
// leader (every node lists all three routes, its own too); a stream of 3
// replicas waits for the third node, with an error that says so
// (ClusterWait); a node with another route secret is refused as a route;
// the third node with the right one completes the cluster and the stream
// is made.
func TestClusterStartsWithNodeDown(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster in -short mode")
	}
	dir := t.TempDir()
	secret := "route-secret-of-the-test-0123456789"
	n1, n2, ports := firstTwoNodes(t, dir, secret)
	t0 := time.Now()
	for n1.State().Leader == "" || n2.State().Leader == "" {
		if time.Since(t0) > 3*time.Minute { // a bound on a hang, not on speed
			t.Fatalf("no JetStream leader %v after 2 of 3 nodes started: %+v %+v", time.Since(t0).Round(time.Second), n1.State(), n2.State())
		}
		time.Sleep(20 * time.Millisecond)
	}
	st := n1.State()
	t.Logf("leader %s after %v; node 1: %+v", st.Leader, time.Since(t0).Round(time.Millisecond), st)
	if len(st.Routed) != 1 || st.Routed[0] != "n2" {
		t.Errorf("node 1 routed to %v, want [n2]", st.Routed)
	}

	connect := func(d time.Duration) (*broker.JetStream, error) {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		return broker.ConnectJetStream(ctx, broker.JetStreamConfig{Server: n1, Run: "down", Replicas: 3})
	}
	_, err := connect(8 * time.Second) // ensureStream tries 5 times a second apart
	if err == nil {
		t.Fatal("a stream of 3 replicas was made on 2 nodes")
	}
	if why := broker.ClusterWait(err); !strings.Contains(why, "too few JetStream nodes") {
		t.Fatalf("ClusterWait(%v) = %q", err, why)
	}

	// A third node with another secret: refused, the stream still waits.
	intruder := clusterNode(t, t.TempDir(), 2, ports, "another-secret-0123456789")
	time.Sleep(2 * time.Second)
	if r := intruder.State().Routed; len(r) != 0 {
		t.Errorf("a node with another route secret is routed to %v", r)
	}
	if r := n1.State().Routed; len(r) != 1 {
		t.Errorf("node 1 routed to %v with an intruder about", r)
	}
	intruder.Shutdown()

	clusterNode(t, dir, 2, ports, secret)
	b, err := connect(2 * time.Minute)
	if err != nil {
		t.Fatalf("the stream with 3 nodes up: %v", err)
	}
	defer b.Close()
	if r := n1.State().Routed; len(r) != 2 {
		t.Errorf("node 1 routed to %v, want n2 and n3", r)
	}
	t.Logf("stream of 3 replicas made %v after the start", time.Since(t0).Round(time.Millisecond))
}

func TestNodesAnswering(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l2, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := "nats://" + l2.Addr().String()
	l2.Close()
	up := "nats://" + l.Addr().String()
	ctx := context.Background()
	if got := broker.NodesAnswering(ctx, []string{up}, time.Second); got != "" {
		t.Errorf("one URL: %q", got)
	}
	if got := broker.NodesAnswering(ctx, []string{up, dead}, time.Second); got != "1 of 2 nodes answer; "+dead+" does not" {
		t.Errorf("got %q", got)
	}
	if got := broker.NodesAnswering(ctx, []string{up, up}, time.Second); got != "all 2 nodes answer" {
		t.Errorf("got %q", got)
	}
}

// A cluster port in use is an error at once that names the port, not a
// wait for the whole start time (it was: the start's deadline, then
// "context deadline exceeded").
func TestStartServerPortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	for _, c := range []struct {
		name string
		cfg  broker.ServerConfig
	}{
		{"cluster", broker.ServerConfig{Cluster: broker.ClusterNode{Name: "busy", Port: port,
			Routes: []string{fmt.Sprintf("nats://127.0.0.1:%d", port), "nats://127.0.0.1:1"}}}},
		{"client", broker.ServerConfig{Port: port}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.Dir = t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			t0 := time.Now()
			s, err := broker.StartServer(ctx, c.cfg)
			if err == nil {
				s.Shutdown()
				t.Fatal("started on a port in use")
			}
			if !errors.Is(err, broker.ErrServerStart) || !strings.Contains(err.Error(), fmt.Sprint(port)) {
				t.Errorf("err = %v, want ErrServerStart naming port %d", err, port)
			}
			if d := time.Since(t0); d > 10*time.Second {
				t.Errorf("the error took %v", d)
			}
		})
	}
}
