package ratelog

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

func TestLimiter(t *testing.T) {
	clock := time.Unix(1000, 0)
	l := New(3, time.Second)
	l.now = func() time.Time { return clock }
	type step struct {
		advance    time.Duration
		key        string
		ok         bool
		suppressed int64
	}
	steps := []step{
		{0, "a", true, 0}, {0, "a", true, 0}, {0, "a", true, 0}, // the burst
		{0, "a", true, 0},                      // the first after the burst starts the period
		{0, "a", false, 0}, {0, "a", false, 0}, // suppressed
		{0, "b", true, 0}, // keys are apart
		{500 * time.Millisecond, "a", false, 0},
		{500 * time.Millisecond, "a", true, 3}, // a period later: logged, with the count
		{0, "a", false, 0},
		{10 * time.Second, "a", true, 1},
		{10 * time.Second, "a", true, 0},
	}
	for i, s := range steps {
		clock = clock.Add(s.advance)
		ok, n := l.Allow(s.key)
		if ok != s.ok || n != s.suppressed {
			t.Fatalf("step %d (%s): got (%v, %d), want (%v, %d)", i, s.key, ok, n, s.ok, s.suppressed)
		}
	}
}

// A flood is logged a bounded number of times, however long it is, and
// every event is either logged or counted.
func TestLimiterFloodIsBounded(t *testing.T) {
	clock := time.Unix(0, 0)
	l := New(5, time.Second)
	l.now = func() time.Time { return clock }
	var logged, reported int64
	const events = 100000
	for i := range events {
		clock = clock.Add(time.Millisecond) // 1000 events a second for 100 s
		if ok, n := l.Allow("flood"); ok {
			logged++
			reported += n
		}
		_ = i
	}
	if logged > 5+100+1 {
		t.Fatalf("logged %d of %d events; want at most 106", logged, events)
	}
	if logged+reported+pending(l) != events {
		t.Fatalf("logged %d + reported suppressed %d + pending %d != %d events", logged, reported, pending(l), events)
	}
}

// pending returns the events suppressed and not yet reported, over all keys.
func pending(l *Limiter) int64 {
	var n int64
	for _, st := range l.keys {
		n += st.suppressed
	}
	return n
}

// Distinct keys cannot grow the limiter without bound.
func TestLimiterKeysAreBounded(t *testing.T) {
	l := New(1, time.Hour)
	logged := 0
	for i := range 10000 {
		if ok, _ := l.Allow(fmt.Sprint("key", i)); ok {
			logged++
		}
	}
	if len(l.keys) > MaxKeys {
		t.Fatalf("%d keys tracked; want at most %d", len(l.keys), MaxKeys)
	}
	if logged > MaxKeys+1 {
		t.Fatalf("logged %d events of distinct keys; want at most %d", logged, MaxKeys+1)
	}
}

func ExampleLimiter() {
	l := New(2, time.Minute)
	for range 5 {
		ok, _ := l.Allow("bad-signature")
		fmt.Println(ok)
	}
	// Output:
	// true
	// true
	// true
	// false
	// false
}

// Warn logs within the limit, with the suppressed count, and nothing
// beyond it.
func TestWarn(t *testing.T) {
	clock := time.Unix(0, 0)
	l := New(1, time.Second)
	l.now = func() time.Time { return clock }
	var buf bytes.Buffer
	log := zerolog.New(&buf)
	for range 4 {
		l.Warn(log, "k").Str("reason", "decode").Msg("rejected message")
	}
	clock = clock.Add(2 * time.Second)
	l.Warn(log, "k").Msg("rejected message")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[2], `"suppressed":2`) || !strings.Contains(lines[0], `"level":"warn"`) {
		t.Fatalf("logged:\n%s", buf.String())
	}
}
