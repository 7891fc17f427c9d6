package aggregator

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/broker"
)

// The rate of a counter is the larger of its rate since the sample
// before and over the last second.
func TestRoomRate(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	var r rate
	if got := r.add(ms(0), 0); got != 0 {
		t.Errorf("first sample: rate %d, want 0", got)
	}
	if got := r.add(ms(100), 1000); got != 10000 {
		t.Errorf("1000 bytes in 0.1 s: rate %d, want 10000", got)
	}
	if got := r.add(ms(500), 5000); got != 10000 {
		t.Errorf("5000 bytes in 0.5 s: rate %d, want 10000", got)
	}
	// 1.2 s: the samples at 0 and 0.1 s are older than a second; the
	// rate is taken from the one at 0.5 s.
	if got := r.add(ms(1200), 12000); got != 10000 {
		t.Errorf("7000 bytes in 0.7 s: rate %d, want 10000", got)
	}
	if len(r) != 2 {
		t.Errorf("%d samples kept, want 2 (0.5 s and 1.2 s)", len(r))
	}
	// A pace that picks up is seen at once: 8000 bytes in the last 0.1 s
	// (15000 in 0.8 s over the last second).
	if got := r.add(ms(1300), 20000); got != 80000 {
		t.Errorf("8000 bytes in 0.1 s: rate %d, want 80000", got)
	}
	if got := r.add(ms(1400), 21000); got != 17777 {
		t.Errorf("16000 bytes in 0.9 s, 1000 in the last 0.1 s: rate %d, want 17777", got)
	}
	// A counter that did not grow over the last second has no rate.
	if got := r.add(ms(2500), 21000); got != 0 {
		t.Errorf("nothing in 1.1 s: rate %d, want 0", got)
	}
}

// The margin covers the reserve, half a second's traffic and an
// evaluation round, at most half the bound.
func TestRoomMargin(t *testing.T) {
	for _, c := range []struct {
		perSecond, evalRound, limit, want int64
	}{
		{0, 0, 1 << 30, roomFloor},
		{1 << 20, 0, 1 << 30, roomFloor + 512<<10},
		{1 << 20, 300 << 10, 1 << 30, roomFloor + 512<<10 + 300<<10},
		{64 << 20, 0, 8 << 20, 4 << 20}, // a tiny bound: paused half full
	} {
		if got := margin(c.perSecond, c.evalRound, c.limit); got != c.want {
			t.Errorf("margin(%d, %d, %d) = %d, want %d", c.perSecond, c.evalRound, c.limit, got, c.want)
		}
	}
}

// A pause for a nearly full stream is also a full stream to callers
// that branch on that.
func TestNearlyFullIsFull(t *testing.T) {
	err := fmt.Errorf("run: %w", fmt.Errorf("%w: it holds", ErrNearlyFull))
	if !errors.Is(err, ErrNearlyFull) || !errors.Is(err, broker.ErrStreamFull) || errors.Is(err, ErrPaused) {
		t.Errorf("%v: is nearly full %v, full %v, paused by its operator %v", err,
			errors.Is(err, ErrNearlyFull), errors.Is(err, broker.ErrStreamFull), errors.Is(err, ErrPaused))
	}
}

// stalledRoomer answers how full the stream is once, then never again
// (each later question waits for its context): a broker that answers
// late, or a watch whose ticks a busy host holds back.
type stalledRoomer struct {
	used, limit int64
	answers     chan struct{} // a token for each question answered
}

func (r *stalledRoomer) Room(ctx context.Context) (int64, int64, error) {
	select {
	case <-r.answers:
		return r.used, r.limit, nil
	default:
	}
	<-ctx.Done()
	return 0, 0, ctx.Err()
}

// The run pauses once the traffic since the watch's last look crosses
// the line, without waiting for another look. Before, only the watch's
// looks paused it: a stream that filled between two of them refused
// messages first (TestFullStreamGoesOnWithRoom at load 20).
func TestRoomLineHeldPerMessage(t *testing.T) {
	const limit = 8 << 20
	a := &Aggregator{phase: training}
	r := &stalledRoomer{used: 1 << 20, limit: limit, answers: make(chan struct{}, 1)}
	r.answers <- struct{}{} // the first question is answered
	full := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go a.watchRoom(ctx, r, full)
	// Wait for the line the first answer draws.
	for {
		a.mu.Lock()
		l := a.stats.room
		a.mu.Unlock()
		if l.full != nil {
			if l.used != 1<<20 || l.limit != limit || l.need <= 0 {
				t.Fatalf("line %+v", l)
			}
			break
		}
		time.Sleep(time.Millisecond)
	}
	a.mu.Lock()
	room := limit - a.stats.room.used - a.stats.room.need
	a.stats.through += room // up to the line: no pause yet
	a.holdRoom()
	a.mu.Unlock()
	select {
	case err := <-full:
		t.Fatalf("paused at the line itself: %v", err)
	default:
	}
	a.mu.Lock()
	a.stats.through++ // past it
	a.holdRoom()
	a.stats.through += 1 << 20 // asked once only
	a.holdRoom()
	a.mu.Unlock()
	select {
	case err := <-full:
		if !errors.Is(err, ErrNearlyFull) {
			t.Fatalf("pause cause %v, want ErrNearlyFull", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the traffic crossed the line and the run did not pause (the watch's next look never came)")
	}
	select {
	case err := <-full:
		t.Fatalf("a second pause: %v", err)
	default:
	}
}
