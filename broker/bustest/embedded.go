package bustest

import (
	"context"
	"testing"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/internal/freeport"
)

// Embedded starts an embedded nats-server with JetStream on a free
// loopback port, its store in a temporary directory, and connects to run
// on it over TCP as name. Both end with the test.
func Embedded(t testing.TB, run, name string) *broker.JetStream {
	t.Helper()
	ctx := context.Background()
	ports, err := freeport.Pick("127.0.0.1", 1)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := broker.StartServer(ctx, broker.ServerConfig{Dir: t.TempDir(), Port: ports[0]})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	js, err := broker.ConnectJetStream(ctx, broker.JetStreamConfig{Server: srv, Run: run, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { js.Close() })
	return js
}
