package run

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/asyrevel/asyrevel/broker"
)

// A finished run's stream is sealed: nothing lands in it afterwards, not
// a message on the run's subjects nor a server's answer to a request whose
// reply subject lies in the run. Before, 2,000 such answers landed in a
// finished run's stream in a second.
func TestFinishedRunIsSealed(t *testing.T) {
	out := t.TempDir()
	if _, err := Train(context.Background(), smallRun(t, func(c *Config) {
		c.Out = out
		c.Run = "done"
	}), Hooks{}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	srv, err := broker.StartServer(ctx, broker.ServerConfig{Dir: filepath.Join(out, "stream")})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, broker.StreamName("done"))
	if err != nil {
		t.Fatal(err)
	}
	before := st.CachedInfo().State.Msgs
	if !st.CachedInfo().Config.Sealed {
		t.Errorf("the finished run's stream is not sealed")
	}
	for range 50 {
		_ = nc.PublishRequest("$JS.API.STREAM.INFO."+broker.StreamName("done"), "asyrevel.done.ctl", nil)
	}
	// Stored, it would come after those answers.
	if _, err := js.Publish(ctx, "asyrevel.done.ctl", []byte("late")); err == nil {
		t.Errorf("a message was stored in the finished run's stream")
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != before {
		t.Errorf("the finished run's stream grew from %d to %d messages", before, info.State.Msgs)
	}
	// A publisher of the project's is told, where the stream would drop
	// its messages without a word (scoring with the run's models, say).
	b, err := broker.ConnectJetStream(ctx, broker.JetStreamConfig{Server: srv, Run: "done", Name: "late"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Publish(ctx, &broker.Message{Subject: "asyrevel.done.score", Data: []byte("x")}); !errors.Is(err, broker.ErrSealed) {
		t.Errorf("publishing on the sealed run: %v, want ErrSealed", err)
	}
}
