package memwatch

import (
	"testing"
	"time"
)

func TestCeiling(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		bad  bool
	}{
		{"", DefaultCeiling, false}, {"off", 0, false}, {"0", 0, false}, {"4096", 4096, false},
		{"512MiB", 512 << 20, false}, {"6GiB", 6 << 30, false}, {"-1", 0, true}, {"lots", 0, true}, {"1e9", 0, true},
	} {
		got, err := Ceiling(tc.in)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("Ceiling(%q) = %d, %v", tc.in, got, err)
		}
	}
}

// The watcher fires once the memory in use passes the ceiling, and not
// before.
func TestWatchFires(t *testing.T) {
	fired := make(chan int64, 1)
	go watch(1, time.Millisecond, func(u int64) { fired <- u })
	select {
	case u := <-fired:
		if u <= 1 {
			t.Errorf("fired at %d bytes", u)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("a ceiling of 1 byte did not fire")
	}
	quiet := make(chan int64, 1)
	go watch(1<<50, time.Millisecond, func(u int64) { quiet <- u })
	select {
	case u := <-quiet:
		t.Fatalf("a ceiling of 1 PiB fired at %d bytes", u)
	case <-time.After(50 * time.Millisecond):
	}
}
