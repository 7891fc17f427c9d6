package broker

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// flakyCreator fails its first fails creations with err, then answers.
type flakyCreator struct {
	fails int
	err   error
	calls int
}

func (f *flakyCreator) CreateConsumer(context.Context, string, jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	f.calls++
	if f.calls <= f.fails {
		return nil, f.err
	}
	return nil, nil
}

// A durable recreated for its reset (servers before 2.14) may meet the
// server still removing the old one's files: an internal error that passes
// (a CI run failed on it: "code=500 err_code=10012 ... rename
// .../o.dat.tmp .../o.dat: no such file or directory"). It is asked
// again; an error of the request itself is not.
func TestCreateAfterDeleteRetriesServerErrors(t *testing.T) {
	internal := &jetstream.APIError{Code: 500, ErrorCode: 10012, Description: "rename o.dat.tmp o.dat: no such file or directory"}
	bad := &jetstream.APIError{Code: 400, ErrorCode: 10013, Description: "consumer name in subject does not match durable name in request"}
	for _, c := range []struct {
		name      string
		fails     int
		err       error
		wantCalls int
		wantErr   bool
	}{
		{"internal once", 1, internal, 2, false},
		{"internal always", 100, internal, recreateAttempts, true},
		{"bad request", 1, bad, 1, true},
		{"not an API error", 1, errors.New("nats: timeout"), 1, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &flakyCreator{fails: c.fails, err: c.err}
			_, err := createAfterDelete(context.Background(), f, "S", jetstream.ConsumerConfig{Durable: "d"})
			if (err != nil) != c.wantErr || f.calls != c.wantCalls {
				t.Fatalf("calls %d err %v; want calls %d, error %v", f.calls, err, c.wantCalls, c.wantErr)
			}
			if err != nil && !errors.Is(err, c.err) {
				t.Fatalf("error %v does not wrap %v", err, c.err)
			}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f := &flakyCreator{fails: 100, err: internal}
	if _, err := createAfterDelete(ctx, f, "S", jetstream.ConsumerConfig{}); err == nil || f.calls != 1 {
		t.Fatalf("cancelled: calls %d err %v; want one call and its error", f.calls, err)
	}
}
