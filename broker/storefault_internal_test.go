package broker

import (
	"errors"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// The server's log lines that say it could not write its store are
// recognised (nats-server 2.15's words, at warning or error level), the
// first one is kept, and nothing else counts. (A refusal past a stream's
// own bound is logged at debug level, which is not read: it is
// ErrStreamFull's, answered to the publisher.)
func TestStoreFaultLines(t *testing.T) {
	for _, tc := range []struct {
		line     string
		fault    bool
		diskFull bool
	}{
		{"Filestore [ASYREVEL_r] Critical write error: write /s/msgs/8.blk: no space left on device", true, true},
		{"JetStream failed to store a msg on stream '$G > ASYREVEL_r': write /s/msgs/2.blk: input/output error", true, false},
		{"JetStream out of file resources, will be DISABLED", true, true},
		{"RAFT [abc - S-R3F-x] Critical write error: write /s/_js_/S-R3F-x/msgs/1.blk: input/output error", true, false},
		{"File system permission denied while writing msg, disabling JetStream: open /s: permission denied while writing", true, false},
		{"Server is ready", false, false},
		{"JetStream cluster no metadata leader", false, false},
		{"Slow Consumer Detected: WriteDeadline of 10s exceeded", false, false},
	} {
		f := &storeFault{dir: "/s", done: make(chan struct{})}
		s := &Server{fault: f}
		f.note(tc.line)
		err := s.StoreErr()
		if (err != nil) != tc.fault {
			t.Errorf("%q: fault %v, want %v", tc.line, err, tc.fault)
			continue
		}
		if err == nil {
			select {
			case <-s.StoreFailed():
				t.Errorf("%q: StoreFailed closed without a fault", tc.line)
			default:
			}
			continue
		}
		if !errors.Is(err, ErrStoreWrite) || !strings.Contains(err.Error(), "/s") || !strings.Contains(err.Error(), tc.line) {
			t.Errorf("%q: %v: want ErrStoreWrite with the store and the server's words", tc.line, err)
		}
		if got := strings.Contains(err.Error(), "disk is full"); got != tc.diskFull {
			t.Errorf("%q: names a full disk %v, want %v", tc.line, got, tc.diskFull)
		}
		f.note("JetStream failed to store a msg on stream 'x': another error")
		if s.StoreErr() != err {
			t.Errorf("the first fault was replaced by a later one")
		}
	}
}

// Only the warning and error levels are read.
func TestStoreFaultLevels(t *testing.T) {
	f := &storeFault{dir: "/s", done: make(chan struct{})}
	l := serverLogger{l: new(zerolog.Logger), fault: f}
	line := "Filestore [X] Critical write error: no space left on device"
	l.Debugf("%s", line)
	l.Noticef("%s", line)
	l.Tracef("%s", line)
	if f.err != nil {
		t.Fatalf("a debug, notice or trace line counted: %v", f.err)
	}
	l.Warnf("%s", line)
	if !errors.Is(f.err, ErrStoreWrite) {
		t.Fatalf("a warning did not count: %v", f.err)
	}
}
