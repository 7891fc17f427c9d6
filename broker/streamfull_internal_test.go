package broker

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// A refusal for the stream's own bound names --max-store; one for the
// server's JetStream storage limit names that limit instead (before, both
// advised raising --max-store, which cannot help with the second).
func TestStreamFullNamesTheLimit(t *testing.T) {
	for _, c := range []struct {
		desc      string
		want, not string
	}{
		{"maximum bytes exceeded", "(the run's --max-store) and refuses", "max_file_store"},
		{"insufficient resources", "max_file_store", "Raise --max-store"},
	} {
		refused := &jetstream.APIError{Code: 503, ErrorCode: 10077, Description: c.desc}
		if !isStreamFull(refused) {
			t.Fatalf("%q: not seen as a full stream", c.desc)
		}
		err := streamFull(refused)
		if !errors.Is(err, ErrStreamFull) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), c.not) {
			t.Errorf("%q: %v; want ErrStreamFull, %q and not %q", c.desc, err, c.want, c.not)
		}
	}
}
