package broker_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/broker/bustest"
)

func TestMemoryConformance(t *testing.T) {
	bustest.Run(t, func(t *testing.T) bustest.Harness {
		hub := broker.NewMemoryHub()
		return bustest.Harness{
			Prefix:  "asyrevel.mem",
			Connect: func(_ testing.TB, name string) broker.Bus { return hub.Connect(name) },
		}
	})
}

// The default design (capture) over TCP and in-process, and every other
// NATS design in-process: one suite, each design held to what its
// Capabilities promise.
func TestJetStreamTCPConformance(t *testing.T) {
	runJetStreamSuite(t, false, broker.DefaultDesign)
}

func TestJetStreamInProcessConformance(t *testing.T) {
	runJetStreamSuite(t, true, broker.DefaultDesign)
}

func TestJetStreamCoreConformance(t *testing.T) {
	runJetStreamSuite(t, true, broker.DesignCore)
}

func TestJetStreamOrderedConformance(t *testing.T) {
	runJetStreamSuite(t, true, broker.DesignOrdered)
}

func TestJetStreamAckedConformance(t *testing.T) {
	runJetStreamSuite(t, true, broker.DesignAcked)
}

var runID atomic.Int64

// newRun returns a fresh run name: each is its own stream.
func newRun() string { return fmt.Sprintf("t%d", runID.Add(1)) }

// Setup waits up to a minute, not 10 s: creating a stream writes its
// metadata with O_SYNC and syncs the directory, and on a host where other
// test packages write hundreds of MB at once one such sync has taken more
// than 10 s (a CI run: "create or update stream: context deadline
// exceeded"). No timing is asserted here.
func startServer(t testing.TB) *broker.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := broker.StartServer(ctx, broker.ServerConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

func connectJS(t testing.TB, srv *broker.Server, inProcess bool, run, name string) *broker.JetStream {
	t.Helper()
	return connectJSConfig(t, broker.JetStreamConfig{Server: srv, InProcess: inProcess, Run: run, Name: name})
}

func connectDesign(t testing.TB, srv *broker.Server, inProcess bool, run, name string, d broker.Design) *broker.JetStream {
	t.Helper()
	return connectJSConfig(t, broker.JetStreamConfig{Server: srv, InProcess: inProcess, Run: run, Name: name, Design: d})
}

func connectJSConfig(t testing.TB, cfg broker.JetStreamConfig) *broker.JetStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := broker.ConnectJetStream(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func runJetStreamSuite(t *testing.T, inProcess bool, d broker.Design) {
	runJetStreamSuiteWith(t, func(t testing.TB, srv *broker.Server, run, name string) broker.Bus {
		return connectDesign(t, srv, inProcess, run, name, d)
	})
}

// runJetStreamSuiteWith runs the conformance suite on one embedded server,
// a fresh run per case, connecting participants with connect.
func runJetStreamSuiteWith(t *testing.T, connect func(t testing.TB, srv *broker.Server, run, name string) broker.Bus) {
	srv := startServer(t)
	bustest.Run(t, func(t *testing.T) bustest.Harness {
		run := newRun()
		return bustest.Harness{
			Prefix:  broker.SubjectPrefix(run),
			Connect: func(t testing.TB, name string) broker.Bus { return connect(t, srv, run, name) },
		}
	})
}

// The retrying publisher of fail-over (a client given several servers):
// message IDs of its own, one message in flight.
func TestJetStreamRetryConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("short: the conformance suite with fail-over publishing, twice")
	}
	for _, d := range []broker.Design{broker.DesignOrdered, broker.DesignAcked} {
		t.Run(string(d), func(t *testing.T) {
			runJetStreamSuiteWith(t, func(t testing.TB, srv *broker.Server, run, name string) broker.Bus {
				return connectJSConfig(t, broker.JetStreamConfig{Server: srv, Run: run, Name: name, Design: d, Retry: true})
			})
		})
	}
}

// The durable resume path for servers without the consumer reset API.
func TestJetStreamRecreateResetConformance(t *testing.T) {
	t.Cleanup(broker.ForceRecreateOnReset())
	runJetStreamSuite(t, true, broker.DesignAcked)
}
