package broker

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A participant waiting for a broker that is not listening tries again
// every unreachablePause (a refused connection costs nothing, and
// training waits for the attempt after the broker's return); a broker
// that answers but is not ready is asked less and less often, up to
// dialPause.
func TestNextDialPause(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pause time.Duration
		err   error
		want  time.Duration
	}{
		{"no servers", 100 * time.Millisecond, fmt.Errorf("broker: connect: %w", nats.ErrNoServers), unreachablePause},
		{"refused", dialPause, fmt.Errorf("dial: %w", syscall.ECONNREFUSED), unreachablePause},
		{"not ready, growing", 50 * time.Millisecond, jetstream.ErrJetStreamNotEnabled, 100 * time.Millisecond},
		{"not ready, at the bound", 100 * time.Millisecond, nats.ErrTimeout, dialPause},
	} {
		if got := nextDialPause(tc.pause, tc.err); got != tc.want {
			t.Errorf("%s: %v after %v, want %v", tc.name, got, tc.pause, tc.want)
		}
	}
}
