package ratelog

import (
	"time"

	"github.com/rs/zerolog"
)

// Limiter decides, per key, whether an event is logged. The zero value is
// not usable; New makes one. It is not safe for concurrent use: callers
// hold their own lock (the aggregator's and the party's handlers do).
type Limiter struct {
	burst  int
	period time.Duration
	now    func() time.Time
	keys   map[string]*state
}

type state struct {
	seen       int       // events in the burst
	last       time.Time // when the last logged event after the burst was
	suppressed int64
}

// MaxKeys bounds the keys a Limiter tracks (the last is shared by all
// further keys), so a stream of distinct keys cannot grow it without bound.
const MaxKeys = 256

const overflowKey = "\x00other"

// The limits of rejection logs, shared by the aggregator and the party:
// each party and reason is logged in full up to RejectBurst times, then at
// most once per RejectPeriod, with the count suppressed since.
const (
	RejectBurst  = 20
	RejectPeriod = 5 * time.Second
)

// NewRejections returns a Limiter with the rejection logs' limits.
func NewRejections() *Limiter { return New(RejectBurst, RejectPeriod) }

// New returns a Limiter that logs the first burst events of each key, then
// at most one per period.
func New(burst int, period time.Duration) *Limiter {
	return &Limiter{burst: burst, period: period, now: time.Now, keys: map[string]*state{}}
}

// Allow reports whether an event of key should be logged, and if so how
// many events of key were suppressed since the last logged one.
func (l *Limiter) Allow(key string) (ok bool, suppressed int64) {
	st := l.keys[key]
	if st == nil {
		if len(l.keys) >= MaxKeys-1 { // one left for the shared state
			key = overflowKey
			st = l.keys[key]
		}
		if st == nil {
			st = &state{}
			l.keys[key] = st
		}
	}
	if st.seen < l.burst {
		st.seen++
		return true, 0
	}
	now := l.now()
	if !st.last.IsZero() && now.Sub(st.last) < l.period {
		st.suppressed++
		return false, 0
	}
	st.last = now
	suppressed, st.suppressed = st.suppressed, 0
	return true, suppressed
}

// Warn returns log's warning event for an event of key, carrying the
// count suppressed since the last one logged, or nil when the limit holds
// (zerolog's methods on a nil event do nothing, so the caller's chain
// stays as it is).
func (l *Limiter) Warn(log zerolog.Logger, key string) *zerolog.Event {
	ok, suppressed := l.Allow(key)
	if !ok {
		return nil
	}
	ev := log.Warn()
	if suppressed > 0 {
		ev = ev.Int64("suppressed", suppressed)
	}
	return ev
}
