package cli

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/broker"
)

// fixedState is a cluster node whose state does not change.
type fixedState broker.ClusterState

func (f fixedState) State() broker.ClusterState { return broker.ClusterState(f) }

// A node without a JetStream leader says which of the other nodes run
// and which it reaches. Before, a node refused by the others (another
// --route-secret) said "1 of the 3 nodes up" while all 3 ran, and a
// node down was not named.
func TestWatchClusterNamesWhatIsTrue(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("short")
	}
	// Route ports that answer (nodes that run) and one that does not.
	listen := func() (string, func()) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		return "nats-route://" + l.Addr().String(), func() { l.Close() }
	}
	up1, close1 := listen()
	defer close1()
	up2, close2 := listen()
	defer close2()
	down, closeDown := listen()
	closeDown()
	for _, tc := range []struct {
		name   string
		others []string
		routed []string
		want   []string
		not    []string
	}{
		{name: "refused by both (another --route-secret)", others: []string{up1, up2},
			want: []string{"routes to none", "2 of the 2 other nodes answer", "2 of them hold no route with this node", "--route-secret"},
			not:  []string{"nodes up", "not: down"}},
		{name: "one down", others: []string{up1, down}, routed: []string{"n2"},
			want: []string{"routes to n2", "1 of the 2 other nodes answer", down + " not: down, or not started"},
			not:  []string{"--route-secret", "nodes up"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			var out syncBuffer
			done := make(chan struct{})
			go func() {
				defer close(done)
				watchCluster(ctx, fixedState{Routed: tc.routed}, &out, tc.others)
			}()
			for deadline := time.Now().Add(patience); !strings.Contains(out.String(), "no JetStream leader") && time.Now().Before(deadline); {
				time.Sleep(50 * time.Millisecond)
			}
			cancel()
			<-done
			got := out.String()
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("want %q in: %s", w, got)
				}
			}
			for _, w := range tc.not {
				if strings.Contains(got, w) {
					t.Errorf("%q in: %s", w, got)
				}
			}
			t.Log(strings.TrimSpace(got))
		})
	}
}
