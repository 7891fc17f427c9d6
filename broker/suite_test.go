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

func TestJetStreamTCPConformance(t *testing.T) {
	runJetStreamSuite(t, false)
}

func TestJetStreamInProcessConformance(t *testing.T) {
	runJetStreamSuite(t, true)
}

var runID atomic.Int64

// newRun returns a fresh run name: each is its own stream.
func newRun() string { return fmt.Sprintf("t%d", runID.Add(1)) }

func startServer(t testing.TB) *broker.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
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

func connectJSConfig(t testing.TB, cfg broker.JetStreamConfig) *broker.JetStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := broker.ConnectJetStream(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func runJetStreamSuite(t *testing.T, inProcess bool) {
	runJetStreamSuiteWith(t, func(t testing.TB, srv *broker.Server, run, name string) broker.Bus {
		return connectJS(t, srv, inProcess, run, name)
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

// The suite with one broker ack per message instead of fast batches.
func TestJetStreamPerMessageAcksConformance(t *testing.T) {
	runJetStreamSuiteWith(t, func(t testing.TB, srv *broker.Server, run, name string) broker.Bus {
		b := connectJSConfig(t, broker.JetStreamConfig{Server: srv, InProcess: true, Run: run, Name: name, PerMessageAcks: true})
		if broker.UsesFastBatches(b) {
			t.Fatal("fast batches despite PerMessageAcks")
		}
		return b
	})
}

// The durable resume path for servers without the consumer reset API.
func TestJetStreamRecreateResetConformance(t *testing.T) {
	t.Cleanup(broker.ForceRecreateOnReset())
	runJetStreamSuite(t, true)
}
