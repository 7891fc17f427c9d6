package broker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// A batch whose message ID the stream keeps calling "in process" (error
// 10158) does not hold the fail-over publisher for good. nats-server can
// leave such a mark behind a stream leader change (or store the message
// before marking it) and then answers every copy so until its dedupe
// window (2 minutes) drops the ID; the publisher, and every message queued
// behind the batch, waited that long (a party's flush timed out after a
// node's kill). The stream's answer is played here in the stream's place
// (a race in the server cannot be called up on demand); the stream, the
// cluster, the reads of the stream and a user denied them are real. Before
// the fix every case's Flush waited until its deadline.
func TestBatchStuckInProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster in -short mode")
	}
	defer func(d time.Duration) { dupStallAfter = d }(dupStallAfter)
	dupStallAfter = 100 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The publisher "pub" may not read the stream's messages, as a
	// participant with keys (trust.Grants); "admin" may.
	c, err := StartCluster(ctx, ClusterConfig{Dir: t.TempDir(), Configure: func(_ int, o *server.Options) {
		o.Users = []*server.User{
			{Username: "pub", Password: "pub", Permissions: &server.Permissions{
				Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: []string{"$JS.API.STREAM.MSG.GET.>", "$JS.API.DIRECT.GET.>"}}}},
			{Username: "admin", Password: "admin"},
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()
	for _, tc := range []struct {
		name string
		// stored: the first copy of "b" is stored, its answer lost;
		// late: it is stored only when its copy under a new ID is sent;
		// denied: the publisher may not read the stream.
		stored, late, denied bool
		want                 string // the stream's messages
		renamed              uint64
		twice                uint64
	}{
		{name: "stored", stored: true, want: "a b c"},
		{name: "lost", want: "a b c", renamed: 1},
		{name: "stored-late", late: true, want: "a b b c", renamed: 1, twice: 1},
		// Not looked at: sent again all the same (a receiver refuses
		// the second copy by its sender's sequence).
		{name: "denied-stored", denied: true, stored: true, want: "a b b c", renamed: 1},
		{name: "denied-lost", denied: true, want: "a b c", renamed: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := "stuck" + strings.ReplaceAll(tc.name, "-", "")
			user := "admin"
			if tc.denied {
				user = "pub"
				// The denied read is never answered: wait less for
				// it (the outcome is the same either way).
				defer func(d time.Duration) { probeTimeout = d }(probeTimeout)
				probeTimeout = 300 * time.Millisecond
			}
			l := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)
			b, err := ConnectJetStream(ctx, JetStreamConfig{URL: strings.Join(c.URLs(), ","), Run: run, Name: "pub", User: user, Password: user,
				Replicas: 3, Design: DesignOrdered, Retry: true, Logger: &l})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			reader, err := nats.Connect(c.URLs()[0], nats.UserInfo("admin", "admin"))
			if err != nil {
				t.Fatal(err)
			}
			defer reader.Close()
			p := b.batchPub.Load()
			if p == nil {
				t.Fatal("no batch publisher on a 3-node cluster")
			}
			var stuck string
			var first *nats.Msg // the first copy of "b", if stored late
			passing := false
			send := func(batch []*nats.Msg) {
				passing = true
				defer func() { passing = false }()
				if err := p.sendBatch(batch); err != nil {
					t.Errorf("storing the first copy: %v", err)
				}
			}
			hook := func(batch []*nats.Msg) (error, bool) {
				if passing || len(batch) != 1 || string(batch[0].Data) != "b" {
					return nil, false
				}
				id := batch[0].Header.Get(msgIDHeader)
				switch {
				case stuck == "":
					stuck = id
					if tc.stored {
						send(batch)
					}
					if tc.late {
						first = &nats.Msg{Subject: batch[0].Subject, Data: batch[0].Data, Header: nats.Header{msgIDHeader: {id}}}
					}
					return nats.ErrTimeout, true // the answer lost
				case id == stuck:
					return &jetstream.APIError{Code: 409, ErrorCode: errCodeDupInProcess, Description: "duplicate message id is in process"}, true
				case first != nil:
					send([]*nats.Msg{first})
					first = nil
				}
				return nil, false
			}
			p.mu.Lock()
			p.answer = hook
			p.mu.Unlock()
			subject := SubjectPrefix(run) + ".out.1"
			for _, d := range []string{"a", "b", "c"} {
				if err := b.Publish(ctx, &Message{Subject: subject, Data: []byte(d)}); err != nil {
					t.Fatal(err)
				}
				// Each alone in its batch. Before the fix, "b" held the
				// publisher until the deadline.
				fctx, fcancel := context.WithTimeout(ctx, 20*time.Second)
				err := b.Flush(fctx)
				fcancel()
				if err != nil {
					t.Fatalf("flush after %q: %v", d, err)
				}
			}
			js, err := jetstream.New(reader)
			if err != nil {
				t.Fatal(err)
			}
			st, err := js.Stream(ctx, StreamName(run))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for seq := uint64(1); ; seq++ {
				m, err := st.GetMsg(ctx, seq)
				if err != nil {
					break
				}
				got = append(got, string(m.Data))
			}
			if g := strings.Join(got, " "); g != tc.want {
				t.Errorf("stream holds %q, want %q", g, tc.want)
			}
			if n := p.renamed.Load(); n != tc.renamed {
				t.Errorf("%d messages renamed, want %d", n, tc.renamed)
			}
			if n := p.twice.Load(); n != tc.twice {
				t.Errorf("%d messages found stored twice, want %d", n, tc.twice)
			}
		})
	}
}
