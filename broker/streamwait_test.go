package broker_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/broker"
)

// lockedLog is a log's writer safe for concurrent writes.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A participant that waits for the run's stream on a cluster with a node
// that does not answer names that node. Before, it said only "waiting
// for the run's stream to be created", and a replicated stream is not
// made while its nodes are not running.
func TestStreamWaitNamesTheNodeDown(t *testing.T) {
	srv := startServer(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "nats://" + l.Addr().String()
	l.Close()
	var log lockedLog
	logger := zerolog.New(&log)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		b, err := broker.ConnectJetStream(ctx, broker.JetStreamConfig{URL: srv.URL() + "," + down, Run: newRun(), Name: "party-1",
			NoCreate: true, WaitStream: true, Logger: &logger})
		if err == nil {
			b.Close()
		}
		done <- err
	}()
	for !strings.Contains(log.String(), "waiting for the run's stream") && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	<-done
	got := log.String()
	if !strings.Contains(got, "1 of 2 nodes answer; "+down+" does not") {
		t.Errorf("the node down is not named: %s", got)
	}
}
