package run

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/schemas"
)

// ErrRunExists reports a run id whose stream already holds an earlier
// run's messages. A run id names one stream, the run's audit log: a second
// run under the same id would mix its messages with the first's, and the
// broker would drop those whose ids repeat (its duplicate window).
var ErrRunExists = errors.New("run id already used")

// where names the store of the network for messages: the embedded
// broker's directory or the external broker's URL.
func (n *network) where() string {
	switch {
	case n.store != "":
		return n.store
	case n.external != "":
		return "the broker at " + n.external
	}
	return "the broker's store"
}

// reused is the error for a run id that holds messages already.
func (n *network) reused(run string, count uint64, what string) error {
	fix := "asyrevel store rm --run " + run + " STORE on the broker's host, with the broker stopped"
	if n.store != "" {
		fix = "asyrevel store rm --run " + run + " " + n.store
	}
	return fmt.Errorf("%w: run %s already has %d %s in %s: choose another --run (every participant the same), "+
		"or remove the old run first (%s); to go on with it, give the same command with --resume (it needs the run's checkpoints)",
		ErrRunExists, run, count, what, n.where(), fix)
}

// count counts the messages of the run's stream that match filters. A
// transport design without a log (core) has nothing to count: 0.
func count(ctx context.Context, b broker.Bus, filters ...string) (uint64, error) {
	var sum uint64
	for _, f := range filters {
		v, err := b.Count(ctx, f)
		if errors.Is(err, broker.ErrUnsupported) {
			return 0, nil
		}
		if err != nil {
			return 0, fmt.Errorf("counting the run's messages: %w", err)
		}
		sum += v
	}
	return sum, nil
}

// checkFresh refuses to start a whole run (Train) on a stream that holds
// a run's messages already (hellos, outputs, replies, evaluations,
// controls; anything else under the run's prefix is not a run).
func (n *network) checkFresh(ctx context.Context, b broker.Bus, run string) error {
	c, err := count(ctx, b, schemas.Filter(run, schemas.KindHello), schemas.Filter(run, schemas.KindOutput),
		schemas.Filter(run, schemas.KindReply), schemas.Filter(run, schemas.KindEval), schemas.Filter(run, schemas.KindControl))
	if err != nil || c == 0 {
		return err
	}
	return n.reused(run, c, "messages")
}

// checkAggregator refuses to start an aggregator on a stream that holds an
// earlier aggregator's messages (its controls and replies). The parties'
// hellos may be there already: they may start first.
func (n *network) checkAggregator(ctx context.Context, b broker.Bus, run string) error {
	c, err := count(ctx, b, schemas.Filter(run, schemas.KindControl), schemas.Filter(run, schemas.KindReply))
	if err != nil || c == 0 {
		return err
	}
	return n.reused(run, c, "messages from an aggregator")
}

// checkParty decides how party m joins the run: it refuses a run that has
// started or ended (the aggregator's controls say so), and it returns the
// number of party m's messages already in the stream (an earlier attempt,
// refused, or another process with the same id), after which the new
// attempt numbers its own so that no message id repeats.
func (n *network) checkParty(ctx context.Context, b broker.Bus, run string, m int) (seqBase uint64, err error) {
	ctl, err := count(ctx, b, schemas.Filter(run, schemas.KindControl))
	if err != nil {
		return 0, err
	}
	if ctl > 0 {
		st, err := readControls(ctx, b, run, ctl, false)
		if err != nil {
			return 0, err
		}
		switch {
		case st.ended != "":
			return 0, fmt.Errorf("%w: run %s is over in %s (%s): choose another --run (every participant the same)",
				ErrRunExists, run, n.where(), st.ended)
		case st.started:
			return 0, fmt.Errorf("%w: run %s has started in %s, and party %d cannot join it anew: if it was this party's run, go on with it by giving the same command with --resume "+
				"(every participant the same; it needs their checkpoints), else choose another --run and start all participants again",
				ErrRunExists, run, n.where(), m)
		}
	}
	return count(ctx, b, schemas.Subject(run, schemas.KindHello, m), schemas.Subject(run, schemas.KindOutput, m), schemas.Subject(run, schemas.KindEval, m))
}

type ctlState struct {
	started bool
	ended   string // why, if the run stopped or was aborted
}

// readControls reads the first n control messages of the run; from the
// stream alone for the aggregator (streamOnly), whom the broker does not
// let subscribe to its own controls (a resume's check logged a permission
// violation).
func readControls(ctx context.Context, b broker.Bus, run string, n uint64, streamOnly bool) (ctlState, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var (
		mu   sync.Mutex
		st   ctlState
		seen uint64
		dec  = schemas.NewCodec()
		done = make(chan struct{})
		c    schemas.Control
	)
	sub, err := b.Subscribe(ctx, []string{schemas.Filter(run, schemas.KindControl)}, broker.SubscribeOptions{StreamOnly: streamOnly},
		func(_ context.Context, d broker.Delivery) {
			mu.Lock()
			defer mu.Unlock()
			if seen >= n {
				return
			}
			if dec.Unmarshal(d.Data(), &c) == nil {
				switch {
				case c.Op == schemas.CtlStart:
					st.started = true
				case c.Op == schemas.CtlStop:
					st.ended = "stopped: " + c.Reason
				case c.Op == schemas.CtlRefuse && c.Party == 0:
					st.ended = "aborted: " + c.Reason
				}
			}
			if seen++; seen == n {
				close(done)
			}
		})
	if err != nil {
		return st, fmt.Errorf("reading the run's control messages: %w", err)
	}
	defer sub.Close()
	select {
	case <-done:
	case <-ctx.Done():
		return st, fmt.Errorf("reading the run's %d control messages: %w", n, ctx.Err())
	}
	mu.Lock()
	defer mu.Unlock()
	return st, nil
}

// checkResume checks that the run's stream holds a run that started and
// has not ended: what --resume goes on with.
func (n *network) checkResume(ctx context.Context, b broker.Bus, run string) error {
	ctl, err := count(ctx, b, schemas.Filter(run, schemas.KindControl))
	if err != nil {
		return err
	}
	var st ctlState
	if ctl > 0 {
		if st, err = readControls(ctx, b, run, ctl, true); err != nil {
			return err
		}
	}
	switch {
	case st.ended != "":
		return fmt.Errorf("%w: run %s is over in %s (%s): nothing to resume", ErrConfig, run, n.where(), st.ended)
	case !st.started:
		return fmt.Errorf("%w: run %s has not started in %s: nothing to resume (start it without --resume)", ErrConfig, run, n.where())
	}
	return nil
}
