package run

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/asyrevel/asyrevel/broker"
)

// Healing: a participant of a run on a broker of its own (a separate
// process, another organisation's machine) rides out that broker's
// crash by itself. When its connection drops, its Bus stops publishing
// at once (broker.JetStreamConfig.EndOnLoss): nothing it sends after the
// loss can land in the stream behind messages the broker lost. The
// participant then stops, waits for the broker for up to BrokerWait
// (saying every few seconds that it does), and resumes from its latest
// checkpoint (kept in memory, and on disk with CheckpointDir) and the
// run's stream, exactly as a restart with --resume would: the stream
// says what was stored, the lost tail is computed and sent again in
// order, nothing is applied twice.

// errConnLost is the cause of a participant's context cancelled because
// its broker connection was lost.
var errConnLost = errors.New("the broker connection was lost")

// healable says whether participant role (0: the aggregator) of cfg
// resumes by itself after a lost broker connection: a single external
// broker, a wait for it, and an algorithm whose state checkpoints hold.
func (c *job) healable(role int) bool {
	if c.NATS == "" || strings.Contains(c.NATS, ",") || c.Bus == "memory" || c.BrokerWait <= 0 || c.CheckpointEvery < 0 {
		return false
	}
	algo, err := LookupAlgo(c.Algo)
	if err != nil || algo.Sync || algo.FirstOrder {
		return false
	}
	return role == 0 || c.hooks.Adversaries[role] == nil
}

// lossNotifier is a Bus that says when its connection was lost
// (broker.JetStream with EndOnLoss).
type lossNotifier interface{ Lost() <-chan struct{} }

// watchLoss returns a context cancelled with errConnLost when bus loses
// its broker connection, and its cancel function.
func watchLoss(ctx context.Context, bus broker.Bus) (context.Context, context.CancelCauseFunc) {
	lctx, cancel := context.WithCancelCause(ctx)
	if l, ok := bus.(lossNotifier); ok {
		go func() {
			select {
			case <-l.Lost():
				cancel(errConnLost)
			case <-lctx.Done():
			}
		}()
	}
	return lctx, cancel
}

// lostConn says whether a participant's run on lctx, which returned err,
// ended because its broker connection was lost (and not because ctx, the
// caller's, ended): a publish may fail on the loss before lctx is
// cancelled.
func lostConn(ctx, lctx context.Context, err error) bool {
	return ctx.Err() == nil && (errors.Is(context.Cause(lctx), errConnLost) || errors.Is(err, broker.ErrConnLost))
}

// healed records a resume after a lost connection that took d to find
// the broker again.
func (h *healState) healed(d time.Duration) {
	h.mu.Lock()
	h.out += d
	h.n++
	h.mu.Unlock()
}

// resumes is how many times the participant resumed by itself, and the
// time it spent without a connection then.
func (h *healState) resumes() (int, time.Duration) {
	if h == nil {
		return 0, 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n, h.out
}
