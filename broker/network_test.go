package broker_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/broker"
)

// A Network embeds the broker a run asks for, makes its connections and
// removes a temporary store when closed.
func TestNetworkEmbedded(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		cfg       broker.NetworkConfig
		want      string
		temporary bool
	}{
		{"memory", broker.NetworkConfig{Memory: true}, "memory", false},
		{"tcp", broker.NetworkConfig{Dir: t.TempDir()}, "jetstream-tcp", false},
		{"in-process, temporary store", broker.NetworkConfig{InProcess: true}, "jetstream-inprocess", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Run = newRun()
			n, err := broker.OpenNetwork(ctx, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			if n.Name() != tc.want || n.Temporary() != tc.temporary {
				t.Errorf("name %q temporary %v, want %q %v", n.Name(), n.Temporary(), tc.want, tc.temporary)
			}
			b, err := n.Connect(ctx, broker.Dial{Name: "aggregator", Participant: true})
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Publish(ctx, &broker.Message{Subject: "asyrevel." + tc.cfg.Run + ".x.1", Data: []byte("m")}); err != nil {
				t.Fatal(err)
			}
			if err := b.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if c, err := b.Count(ctx, "asyrevel."+tc.cfg.Run+".x.*"); err != nil && !errors.Is(err, broker.ErrUnsupported) || err == nil && c != 1 {
				t.Errorf("count %d, %v", c, err)
			}
			b.Close()
			dir := n.Dir()
			n.Close()
			n.Close() // twice is fine
			if _, err := os.Stat(dir); tc.temporary && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the temporary store %s outlived the network: %v", dir, err)
			}
		})
	}
}

// A connection that is not a participant's does not wait for a broker
// that is not there; a participant's waits up to Wait and says so.
func TestNetworkDialWait(t *testing.T) {
	ctx := context.Background()
	n, err := broker.OpenNetwork(ctx, broker.NetworkConfig{URL: "nats://127.0.0.1:1", Run: newRun(), Wait: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if _, err := n.Connect(ctx, broker.Dial{Name: "audit"}); err == nil {
		t.Fatal("connected to nothing")
	}
	_, err = n.Connect(ctx, broker.Dial{Name: "party-1", Participant: true})
	if err == nil || !strings.Contains(err.Error(), "--broker-wait") {
		t.Errorf("a participant's dial to nothing: %v", err)
	}
}
