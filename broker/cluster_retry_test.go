package broker_test

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/asyrevel/asyrevel/broker"
)

// The fail-over publisher (a client given every node's URL) with many
// messages in flight through two stream leader changes: every message is
// stored once, each subject's in the order sent, and each control message
// after every message sent before it and before every message sent after.
func TestClusterRetryOrder(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster in -short mode")
	}
	c := startCluster(t)
	run := newRun()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	b, err := broker.ConnectJetStream(ctx, broker.JetStreamConfig{URL: strings.Join(c.URLs(), ","), Run: run, Name: "pub", Design: broker.DesignOrdered})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	admin := connectNode(t, c.Servers()[1], false, run, "admin")
	prefix := broker.SubjectPrefix(run) + "."
	const n = 3000
	subject := func(i int) string {
		if i%97 == 96 {
			return prefix + "ctl"
		}
		return prefix + "reply." + strconv.Itoa(1+i%4)
	}
	start := time.Now()
	for i := range n {
		if i == n/3 || i == 2*n/3 {
			r, err := admin.Conn().Request("$JS.API.STREAM.LEADER.STEPDOWN."+broker.StreamName(run), nil, 5*time.Second)
			if err != nil || !bytes.Contains(r.Data, []byte(`"success":true`)) {
				t.Logf("stepdown: %v", err)
			}
		}
		if err := b.Publish(ctx, &broker.Message{Subject: subject(i), ID: fmt.Sprintf("%s.m.%d", run, i), Data: []byte(strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	t.Logf("%d messages through 2 leader changes in %v", n, time.Since(start).Round(time.Millisecond))

	js, err := jetstream.New(admin.Conn())
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, broker.StreamName(run))
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != n {
		t.Fatalf("%d stored, %d sent", info.State.Msgs, n)
	}
	pos := make([]int, n) // stream position of message i
	last := map[string]int{}
	for seq := uint64(1); seq <= n; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		i, err := strconv.Atoi(string(m.Data))
		if err != nil || i < 0 || i >= n || subject(i) != m.Subject {
			t.Fatalf("seq %d: %q on %s", seq, m.Data, m.Subject)
		}
		if prev, ok := last[m.Subject]; ok && prev >= i {
			t.Fatalf("%s: message %d stored after %d", m.Subject, i, prev)
		}
		last[m.Subject] = i
		pos[i] = int(seq)
	}
	for i := range n {
		if subject(i) != prefix+"ctl" {
			continue
		}
		for j := range n {
			if j < i && pos[j] > pos[i] || j > i && pos[j] < pos[i] {
				t.Fatalf("control message %d at %d, message %d at %d", i, pos[i], j, pos[j])
			}
		}
	}
}

// The fail-over publisher on a cluster does not wait for the stream while
// publishing: messages on one subject queue behind the batch in flight
// (before, Publish waited for each message's three-copy acknowledgement
// while its subject was busy, and at most one was unconfirmed), and Flush
// then finds every one stored, in order.
func TestClusterRetryPublishDoesNotWait(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster in -short mode")
	}
	c := startCluster(t)
	run := newRun()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, err := broker.ConnectJetStream(ctx, broker.JetStreamConfig{URL: strings.Join(c.URLs(), ","), Run: run, Name: "pub", Design: broker.DesignOrdered})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	subject := broker.SubjectPrefix(run) + ".reply.1"
	if err := b.Publish(ctx, &broker.Message{Subject: subject, Data: []byte("0")}); err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 200
	most := 0
	for i := 1; i <= n; i++ {
		if err := b.Publish(ctx, &broker.Message{Subject: subject, Data: []byte(strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
		most = max(most, broker.UnconfirmedPublishes(b))
	}
	if most < 2 {
		t.Errorf("at most %d message unconfirmed while publishing %d on one subject: Publish waits for the stream", most, n)
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if p := broker.UnconfirmedPublishes(b); p != 0 {
		t.Errorf("%d unconfirmed after Flush", p)
	}
	admin := connectNode(t, c.Servers()[1], false, run, "admin")
	js, err := jetstream.New(admin.Conn())
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, broker.StreamName(run))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i <= n; i++ {
		m, err := st.GetMsg(ctx, uint64(i+1))
		if err != nil {
			t.Fatalf("message %d: %v", i+1, err)
		}
		if string(m.Data) != strconv.Itoa(i) {
			t.Fatalf("stream sequence %d holds %q, want %d (publish order)", i+1, m.Data, i)
		}
	}
	t.Logf("at most %d unconfirmed", most)
}
