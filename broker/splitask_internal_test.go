package broker

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"

	"github.com/rs/zerolog"
)

// hungReporter is an earlier filter's subscription whose first position
// ask gets no answer (a consumer that died with its node) and whose later
// asks say every message is handed over.
type hungReporter struct{ asks atomic.Int32 }

func (h *hungReporter) Close() error { return nil }

func (h *hungReporter) delivered(ctx context.Context) (n, last, pending uint64, err error) {
	if h.asks.Add(1) == 1 {
		<-ctx.Done()
		return 0, 0, 0, ctx.Err()
	}
	return 0, 0, 0, nil
}

// TestSplitWaitAsksAgainAfterUnansweredAsk: a position ask that gets no
// answer must not hold the later filter's delivery until the wait gives
// up; it is asked again, and the answer of the consumer made meanwhile
// ends the wait in order. On the code before, the one ask waited 10 s,
// past the 2 s wait, and the delivery went out of order with a warning.
func TestSplitWaitAsksAgainAfterUnansweredAsk(t *testing.T) {
	var logs bytes.Buffer
	h := &hungReporter{}
	s := &splitSub{bus: &JetStream{log: zerolog.New(&logs)}, subs: []Subscription{h, nil}}
	s.seen = make([]atomic.Uint64, 2)
	s.n = make([]atomic.Uint64, 2)
	s.waitEarlier(context.Background(), 1, 100)
	if got := h.asks.Load(); got < 2 {
		t.Errorf("the earlier filter's position was asked %d times, want a second ask after the unanswered one", got)
	}
	if bytes.Contains(logs.Bytes(), []byte("out of stream order")) {
		t.Errorf("the delivery went out of order: %s", logs.String())
	}
}
