package aggregator

import (
	"context"
	"time"
)

// A signal (Ctrl-C, SIGTERM) that comes once a run is over, in its last
// flush say, does not interrupt it: the final seal and the flush go on,
// bounded by finalWait (a further signal quits at once), and the run is
// finished, not failed. Before, the flush was cut short and a finished
// run ended in "flush: broker: messages lost: ... context canceled".

// finalWait bounds the end of a run that is over: its final seal and
// last flush.
const finalWait = 30 * time.Second

// finalContext is ctx for the end of a run that is over: a signal (ctx
// done) does not cut it short.
func finalContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), finalWait)
}

// over says whether the run has ended as it should (its final round
// scored, no failure): a signal that comes now does not interrupt it.
func (a *Aggregator) over() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.phase == done && a.err == nil && a.res.Final.Final
}
