package aggregator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asyrevel/asyrevel/broker"
)

// ErrNearlyFull is the cause of a run paused because its stream nearly
// holds as much as its bound allows: the run pauses while there is room
// to answer what is in flight and to seal the log; with a larger bound
// (--max-store) --resume goes on. errors.Is(ErrNearlyFull,
// broker.ErrStreamFull) holds: callers that branch on a full stream see
// this one too.
var ErrNearlyFull error = nearlyFull{}

type nearlyFull struct{}

func (nearlyFull) Error() string        { return "the run's stream is nearly full" }
func (nearlyFull) Is(target error) bool { return target == broker.ErrStreamFull }

// A stream at its bound refuses a message by its size: a reply, small,
// can still be stored after the larger request it answers was refused,
// and the log would hold an answer to a question it lacks (the request,
// sent again on resume, lands after it). So the aggregator pauses the
// run while the stream has room left for what a pause still sends.
const (
	// roomEvery is how often the aggregator asks how full its stream is.
	roomEvery = 100 * time.Millisecond
	// roomFloor is the least room left when the run pauses: the pause
	// control, the seal, the parties' countersignatures and checkpoint
	// notes fit in it many times.
	roomFloor = 64 << 10
	// roomAheadMs is how long, in milliseconds, the traffic may go on
	// at its pace after a check finds room: till the next check
	// (roomEvery), the pause control reaching the parties and the
	// requests in flight answered, five times over.
	roomAheadMs = 500
)

// roomer is a bus whose stream has a size bound (broker.JetStream).
type roomer interface {
	Room(ctx context.Context) (used, limit int64, err error)
}

// roomLine is the line past which the run pauses, as the room watch
// last measured it: the stream held used bytes when through (stepStats)
// was at, and the run pauses once used plus what went through the
// aggregator since passes limit less the margin. Each message the
// aggregator receives or publishes is held against it (a.mu held), so
// the pause does not wait for the watch's next look: on a busy host its
// ticks come late, and a stream that filled between two of them refused
// messages before the run paused (TestFullStreamGoesOnWithRoom at load
// 20).
type roomLine struct {
	full  chan<- error // nil: no line (no bound, or not measured yet)
	used  int64
	at    int64
	limit int64
	need  int64
	rate  int64 // the stream's bytes a second at the last look
	told  bool  // the pause was asked for
}

// holdRoom holds the traffic so far against the room line (a.mu held).
func (a *Aggregator) holdRoom() {
	l := &a.stats.room
	if l.full == nil || l.told || a.phase != training || a.stop.pausing {
		return
	}
	if used := l.used + a.stats.through - l.at; l.limit-used < l.need {
		l.told = true
		select {
		case l.full <- nearlyFullError(used, l.limit, l.need, l.rate):
		default:
		}
	}
}

// nearlyFullError is the cause of a pause for a stream nearly full.
func nearlyFullError(used, limit, need, perSecond int64) error {
	return fmt.Errorf("%w: it holds %s of its bound of %s, and a pause needs about %s (what it takes in over %d ms at %s a second, an evaluation round and a reserve; at most half the bound); a larger --max-store, or free disk space, gives it room",
		ErrNearlyFull, mib(used), mib(limit), mib(need), roomAheadMs, mib(perSecond))
}

// roomWatch samples how full the run's stream is, and how many bytes
// went through the aggregator (which sees every message of the run): the
// stream's rate needs two samples in training, the aggregator's is known
// from before its start.
type roomWatch struct {
	stream, through rate
}

// rate is a counter's samples over the last second, oldest first.
type rate []roomSample

type roomSample struct {
	at time.Time
	n  int64
}

// add records counter value n at now and returns the counter's rate a
// second: the larger of its rate since the sample before and over the
// last second (0 before a second sample). A run that speeds up (training
// after the join) is seen at its new pace at once.
func (r *rate) add(now time.Time, n int64) int64 {
	s := *r
	var perSecond int64
	if len(s) > 0 {
		perSecond = perSec(s[len(s)-1], now, n)
	}
	i := 0
	for i < len(s) && now.Sub(s[i].at) > time.Second {
		i++
	}
	s = append(s[:0], s[i:]...)
	if len(s) > 0 {
		perSecond = max(perSecond, perSec(s[0], now, n))
	}
	*r = append(s, roomSample{now, n})
	return perSecond
}

func perSec(from roomSample, now time.Time, n int64) int64 {
	if d := now.Sub(from.at).Seconds(); d > 0 && n > from.n {
		return int64(float64(n-from.n) / d)
	}
	return 0
}

// storeOverhead is about what the stream stores per message beside its
// payload (JetStream's record: subject, header, lengths, checksum).
const storeOverhead = 64

// margin is the room a pause needs: roomFloor, what the stream takes in
// over roomAheadMs at its pace (per second), and an evaluation round. It
// is at most half the bound: a tiny bound pauses the run half full.
func margin(perSecond, evalRound, limit int64) int64 {
	return min(roomFloor+perSecond*roomAheadMs/1000+evalRound, limit/2)
}

// watchRoom asks, every roomEvery while the run trains, how full its
// stream is, and sends on full an error wrapping ErrNearlyFull once the
// room left is below the margin. It runs beside Run's loop: the question
// goes to the broker, and a slow or refused answer must not hold the
// loop. A stream without a bound ends it.
func (a *Aggregator) watchRoom(ctx context.Context, r roomer, full chan<- error) {
	var w roomWatch
	tick := time.NewTicker(roomEvery)
	defer tick.Stop()
	told := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		a.mu.Lock()
		training, evalRound, through := a.phase == training && !a.stop.pausing, a.evalRound(), a.stats.through
		a.mu.Unlock()
		now := time.Now()
		local := w.through.add(now, through)
		if !training {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		used, limit, err := r.Room(cctx)
		cancel()
		switch {
		case errors.Is(err, broker.ErrUnsupported):
			return
		case err != nil:
			if !told {
				told = true
				a.cfg.Log.Debug().Err(err).Msg("asking how full the run's stream is")
			}
			continue
		case limit <= 0:
			return // no bound: nothing to watch
		}
		perSecond := max(w.stream.add(now, used), local)
		need := margin(perSecond, evalRound, limit)
		a.mu.Lock()
		l := &a.stats.room
		if !l.told {
			// The line the messages are held against until the next look
			// (the count through was taken before the question, so what
			// came meanwhile is counted twice: on the safe side), and the
			// traffic so far held against it at once.
			*l = roomLine{full: full, used: used, at: through, limit: limit, need: need, rate: perSecond}
			a.holdRoom()
		}
		asked := l.told
		a.mu.Unlock()
		if asked {
			return // the pause was asked for
		}
	}
}

func mib(b int64) string {
	return fmt.Sprintf("%.2f MiB", float64(b)/(1<<20))
}

// evalRound is the mean size of the evaluation rounds this process
// began (a.mu held).
func (a *Aggregator) evalRound() int64 {
	if a.eval.here == 0 {
		return 0
	}
	return a.eval.bytes / a.eval.here
}
