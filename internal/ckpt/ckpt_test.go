package ckpt

import (
	"bytes"
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/broker"
)

type state struct {
	Version int
	W       []float64
	Counts  map[string]int64
}

func encode(t *testing.T, kind string, version int, s *state) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Encode(&buf, kind, version, s); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Decode gives back what Encode wrote, and refuses, with the error
// callers branch on, a file of another kind or version, cut short,
// altered or appended to; a bare gob file (written before the envelope)
// decodes as it is.
func TestDecode(t *testing.T) {
	want := &state{Version: 3, W: []float64{1, -2.5, 3e-9}, Counts: map[string]int64{"a": 1}}
	good := encode(t, "party", 3, want)
	var bare bytes.Buffer
	if err := gob.NewEncoder(&bare).Encode(want); err != nil {
		t.Fatal(err)
	}
	flip := bytes.Clone(good)
	flip[len(flip)/2] ^= 1
	for _, tc := range []struct {
		name   string
		data   []byte
		err    error
		legacy bool
	}{
		{"written", good, nil, false},
		{"bare gob", bare.Bytes(), nil, true},
		{"other kind", encode(t, "aggregator", 3, want), ErrFormat, false},
		{"other version", encode(t, "party", 4, want), ErrFormat, false},
		{"one byte changed", flip, ErrDamaged, false},
		{"cut short", good[:len(good)-1], ErrDamaged, false},
		{"no trailer", good[:20], ErrDamaged, false},
		{"header cut", good[:len(Magic)+3], ErrDamaged, false},
		{"appended to", append(bytes.Clone(good), 0), ErrDamaged, false},
		{"empty", nil, ErrDamaged, true},
		{"garbage", []byte("not a checkpoint"), ErrDamaged, true},
	} {
		var got state
		legacy, err := Decode(bytes.NewReader(tc.data), "party", 3, &got)
		switch {
		case !errors.Is(err, tc.err) || (err == nil) != (tc.err == nil):
			t.Errorf("%s: error %v, want %v", tc.name, err, tc.err)
		case legacy != tc.legacy:
			t.Errorf("%s: legacy %v", tc.name, legacy)
		case err == nil && !reflect.DeepEqual(&got, want):
			t.Errorf("%s: decoded %+v, want %+v", tc.name, got, want)
		}
	}
}

// Whatever the bytes, Decode returns an error or a state, never panics;
// what Encode writes of a decoded state decodes to it again.
func FuzzDecode(f *testing.F) {
	var buf bytes.Buffer
	_ = Encode(&buf, "party", 3, &state{Version: 3, W: []float64{1, 2}})
	f.Add(buf.Bytes())
	f.Add([]byte(Magic))
	f.Fuzz(func(t *testing.T, data []byte) {
		var s state
		if _, err := Decode(bytes.NewReader(data), "party", 3, &s); err != nil {
			return
		}
		var again bytes.Buffer
		if err := Encode(&again, "party", 3, &s); err != nil {
			t.Fatal(err)
		}
		var s2 state
		if _, err := Decode(&again, "party", 3, &s2); err != nil || !reflect.DeepEqual(s, s2) && !hasNaN(s.W) {
			t.Fatalf("decoded %+v, again %+v (%v)", s, s2, err)
		}
	})
}

func hasNaN(x []float64) bool {
	for _, v := range x {
		if v != v {
			return true
		}
	}
	return false
}

type bus struct{ flush error }

func (b *bus) Flush(context.Context) error                   { return b.flush }
func (b *bus) Count(context.Context, string) (uint64, error) { return 7, nil }

// Save hands the snapshot over only once the broker confirmed what it
// covers, and reports whether it was saved.
func TestSave(t *testing.T) {
	boom := errors.New("disk full")
	for _, tc := range []struct {
		name        string
		flush, hand error
		handed, ok  bool
	}{
		{"saved", nil, nil, true, true},
		{"connection lost", fmt.Errorf("flush: %w", broker.ErrConnLost), nil, false, false},
		{"not confirmed", context.DeadlineExceeded, nil, false, false},
		{"not written", nil, boom, true, false},
	} {
		handed := false
		ok, _ := Save(context.Background(), &bus{tc.flush}, zerolog.Nop(), func() error { handed = true; return tc.hand })
		if handed != tc.handed || ok != tc.ok {
			t.Errorf("%s: handed %v, saved %v; want %v, %v", tc.name, handed, ok, tc.handed, tc.ok)
		}
	}
	if n, ok := Probe(context.Background(), &bus{}, "x.>"); !ok || n != 7 {
		t.Errorf("probe: %d, %v", n, ok)
	}
}

// A save's cost to the run (the adaptive period's measure) is the work
// of its hand-over, not its waits: a hand-over that only waits (for the
// disk to sync the file, say) costs next to nothing. Before, Save timed
// the hand-over's wall time, and the disk's sync latency set the period.
func TestSaveCountsWorkNotWaits(t *testing.T) {
	if _, ok := threadCPU(); !ok {
		t.Skip("no thread CPU clock here: Save counts wall time")
	}
	const wait = 300 * time.Millisecond
	ok, took := Save(context.Background(), &bus{}, zerolog.Nop(), func() error { time.Sleep(wait); return nil })
	if !ok {
		t.Fatal("not saved")
	}
	// A sleep takes microseconds of CPU however busy the machine is; its
	// wall time is at least wait.
	if took >= wait {
		t.Errorf("a hand-over that slept %v cost %v: the wait was counted as work", wait, took)
	}
	// Work is counted.
	_, took = Save(context.Background(), &bus{}, zerolog.Nop(), func() error {
		for c0, _ := threadCPU(); ; {
			if c, _ := threadCPU(); c-c0 >= 20*time.Millisecond {
				return nil
			}
		}
	})
	if took < 20*time.Millisecond {
		t.Errorf("a hand-over that computed for 20ms of CPU cost %v", took)
	}
}
