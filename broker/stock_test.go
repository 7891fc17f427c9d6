package broker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/broker/bustest"
)

// The conformance suite against a stock nats-server binary (Debian's
// 2.9.10 where installed): the default design and the acked one, with the
// fallbacks for what an old server lacks.
func TestStockServerConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("short: the conformance suite of three designs against a stock nats-server")
	}
	url, version := bustest.StartStockServer(t)
	for _, d := range []broker.Design{broker.DefaultDesign, broker.DesignOrdered, broker.DesignAcked} {
		t.Run(string(d), func(t *testing.T) {
			bustest.Run(t, func(t *testing.T) bustest.Harness {
				run := newRun()
				return bustest.Harness{
					Prefix: broker.SubjectPrefix(run),
					Connect: func(t testing.TB, name string) broker.Bus {
						b := connectJSConfig(t, broker.JetStreamConfig{URL: url, Run: run, Name: name, Design: d})
						if f := b.Features(); f.Version != version {
							t.Errorf("features of %s: %+v", version, f)
						}
						return b
					},
				}
			})
		})
	}
}

// The server's version is read at connect, and what it lacks is said in
// one line.
func TestStockServerFeatures(t *testing.T) {
	url, version := bustest.StartStockServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := broker.ConnectJetStream(ctx, broker.JetStreamConfig{URL: url, Run: newRun()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	f := b.Features()
	want, err := broker.FeaturesOf(version)
	if err != nil {
		t.Fatal(err)
	}
	if f != want {
		t.Fatalf("features %+v, want %+v", f, want)
	}
	m := f.Missing()
	t.Logf("%s", m)
	if strings.HasPrefix(version, "2.9.") && (!strings.Contains(m, "several filters") || !strings.Contains(m, "compression")) {
		t.Errorf("missing features of %s: %q", version, m)
	}
}
