package run

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asyrevel/asyrevel/broker"
)

// finish counts the run's messages in the stream into s, measures the
// store, adds the warnings and writes the outputs if cfg asks for them. It
// closes the network. An interrupted run (ctx done, and the run cut
// short: s.Interrupted) is finished all the same, and returned with an
// error wrapping ErrInterrupted; a run that had ended when the signal
// came (in its last flush, say) is finished, not interrupted.
func (n *network) finish(ctx context.Context, cfg *job, s *Summary, prog *progress) (*Summary, error) {
	var interrupted error
	wait := 30 * time.Second // the broker answers at once, unless it is gone
	if ctx.Err() != nil {
		if s.Interrupted != "" {
			interrupted = fmt.Errorf("%w: %w", ErrInterrupted, context.Cause(ctx))
		}
		// Counting and writing must not stop with ctx; they are quick.
		ctx, wait = context.WithoutCancel(ctx), 10*time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var err error
	s.MessagesStored = -1
	if broker.Design(cfg.Design).Capabilities().Log {
		if s.Stream, s.StreamBytes, err = n.counts(ctx, cfg.Run); err != nil {
			// The broker is gone: the summary is written all the same,
			// without the stream's counts, and says why.
			cfg.hooks.Log.Error().Err(err).Msg("the run's stream could not be counted (is the broker gone?); the summary is written without its counts")
			s.Warnings = append(s.Warnings, "the stream could not be counted after the run: "+err.Error())
		}
	}
	if c := s.Stream; c != nil {
		s.MessagesStored = int64(c.Hello + c.Outputs + c.Replies + c.Evals + c.Control + c.Receipts)
		if s.MessagesSent > 0 {
			s.Lost = s.MessagesSent - s.MessagesStored
		}
	}
	n.close()
	if n.store != "" {
		s.Store = n.store
		if s.StoreBytes, _, err = dirSize(n.store); err != nil {
			return nil, err
		}
	}
	prog.finish(s)
	if cfg.Out != "" {
		if err := WriteOutputs(cfg.Out, s); err != nil {
			if interrupted != nil {
				// The cause comes first (a full disk fails both).
				s.OutputsErr = err.Error()
				return s, fmt.Errorf("%w (and the outputs: %w)", interrupted, err)
			}
			return nil, err
		}
	}
	return s, interrupted
}

// finishPaused is finish for a run the aggregator paused (Result.Paused;
// its error cause): the part that ran, with an error wrapping
// ErrInterrupted and cause.
func (n *network) finishPaused(ctx context.Context, cfg *job, s *Summary, prog *progress, cause error) (*Summary, error) {
	sum, err := n.finish(ctx, cfg, s, prog)
	if err != nil && !errors.Is(err, ErrInterrupted) && errors.Is(err, ErrNoSummary) {
		// The pause comes first, the outputs it could not write after.
		s.OutputsErr = err.Error()
		return s, fmt.Errorf("%w: %w (and the outputs: %w)", ErrInterrupted, cause, err)
	}
	if err != nil {
		return sum, err
	}
	return sum, fmt.Errorf("%w: %w", ErrInterrupted, cause)
}
