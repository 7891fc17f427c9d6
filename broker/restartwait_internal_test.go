package broker

import (
	"testing"
	"time"
)

// TestRestartAttemptWait: the first attempts to remake a consumer after
// its node died give up on an unanswered create within half the time a
// split subscription keeps a party's control in order (splitOrderWait),
// so that a party's two consumers come back close enough together to keep
// it; later attempts wait longer, up to the cap, for a cluster slow to
// answer under load. With the single 2 s wait before, a party's reply
// consumer came back up to 2.5 s after its control consumer, and the
// control went out of order.
func TestRestartAttemptWait(t *testing.T) {
	var total time.Duration
	for n := 0; n < 6; n++ {
		w := restartAttemptWait(n)
		if w > splitOrderWait/2 {
			t.Errorf("attempt %d waits %v, want at most %v during an election", n, w, splitOrderWait/2)
		}
		total += w
	}
	if total < 5*time.Second {
		t.Errorf("the first six attempts span %v, less than an election takes (5 s)", total)
	}
	prev := time.Duration(0)
	for n := 0; n < 40; n++ {
		w := restartAttemptWait(n)
		if w < prev {
			t.Errorf("attempt %d waits %v, less than attempt %d's %v", n, w, n-1, prev)
		}
		prev = w
	}
	if prev != 5*time.Second {
		t.Errorf("later attempts wait %v, want 5 s (a create's answer under load)", prev)
	}
}
