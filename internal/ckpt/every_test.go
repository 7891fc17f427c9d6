package ckpt

import (
	"testing"
	"time"
)

func TestEvery(t *testing.T) {
	const ms = time.Millisecond
	for _, tc := range []struct {
		name        string
		every, took time.Duration
		want        time.Duration
	}{
		{"adaptive, no save yet", 0, 0, 250 * ms},
		{"adaptive, fast save", 0, 1 * ms, 250 * ms},
		{"adaptive, 5ms save: the floor", 0, 5 * ms, 250 * ms},
		{"adaptive, 20ms save", 0, 20 * ms, time.Second},
		{"adaptive, 100ms save", 0, 100 * ms, 5 * time.Second},
		{"adaptive, 200ms save: the cap", 0, 200 * ms, 10 * time.Second},
		{"adaptive, 1s save: the cap", 0, time.Second, 10 * time.Second},
		{"adaptive, huge save", 0, 1 << 62, 10 * time.Second},
		{"explicit 10s, fast save", 10 * time.Second, 1 * ms, 10 * time.Second},
		{"explicit 100ms, slow save", 100 * ms, time.Second, 100 * ms},
		{"explicit 1h", time.Hour, 0, time.Hour},
		{"never", -time.Second, time.Second, -time.Second},
	} {
		if got := Every(tc.every, tc.took); got != tc.want {
			t.Errorf("%s: Every(%v, %v) = %v, want %v", tc.name, tc.every, tc.took, got, tc.want)
		}
	}
}
