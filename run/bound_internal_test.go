package run

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// The bound of a run's stream never exceeds the free space of the disk
// under its store. Before, the default was at least 64 MiB (on a 60 MB
// disk, more than the disk), and a --max-store above the free space was
// taken as given: the disk filled before the stream reached its bound,
// and the run stopped on the broker's write error instead of pausing.
func TestStoreBoundWithinFreeSpace(t *testing.T) {
	const mb = 1 << 20
	unknown := errors.New("free disk space unknown")
	for _, tc := range []struct {
		name    string
		free    int64
		freeErr error
		want    int64 // --max-store (0: the default, negative: none)
		atMost  int64 // the bound is at most this (0: no check)
		exact   int64 // the bound is this (0: no check)
		warned  bool  // a warning names --max-store
	}{
		{name: "default on a small disk", free: 60 * mb, atMost: 60 * mb},
		{name: "default on a large disk", free: 10_000 * mb, exact: 8_000 * mb},
		{name: "given above the free space", free: 1_000 * mb, want: 4_000 * mb, atMost: 1_000 * mb, warned: true},
		{name: "given within the free space", free: 1_000 * mb, want: 100 * mb, exact: 100 * mb},
		{name: "none", free: 1_000 * mb, want: -1, exact: -1},
		{name: "free space unknown, default", freeErr: unknown, exact: -1},
		{name: "free space unknown, given", freeErr: unknown, want: 4_000 * mb, exact: 4_000 * mb},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := freeSpace
			defer func() { freeSpace = old }()
			freeSpace = func(string) (int64, error) { return tc.free, tc.freeErr }
			var logged bytes.Buffer
			got := storeBound(t.TempDir(), "bound", tc.want, false, zerolog.New(&logged))
			if tc.atMost != 0 && (got > tc.atMost || got <= 0) {
				t.Errorf("bound %s on a disk with %s free (--max-store %d): want at most the free space", MB(got), MB(tc.free), tc.want)
			}
			if tc.exact != 0 && got != tc.exact {
				t.Errorf("bound %d, want %d", got, tc.exact)
			}
			if w := strings.Contains(logged.String(), "--max-store"); w != tc.warned {
				t.Errorf("warning naming --max-store: %v, want %v: %s", w, tc.warned, logged.String())
			}
		})
	}
}
