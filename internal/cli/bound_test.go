package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/internal/freeport"
)

// A run on a broker of its own (asyrevel broker --roster) pauses, sealed
// and intact, when its stream nears its bound, and goes on once the
// broker is started again with a larger --max-store: the broker lifts
// the existing stream's bound before it admits anyone. Before, the bound
// was fixed when the stream was made, and every resume stopped full
// again.
func TestRosterBrokerRaisesBound(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("short")
	}
	const runID = "bound"
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	if code, _, errOut := runCLI(t, "keys", "--run", runID, "--parties", "2", "--out", keys); code != 0 {
		t.Fatalf("keys: exit %d: %s", code, errOut)
	}
	roster := filepath.Join(keys, "roster.json")
	store := filepath.Join(dir, "store")
	ports, err := freeport.Pick("127.0.0.1", 1)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	startBroker := func(maxStore string) func() result {
		bctx, stop := context.WithCancelCause(ctx)
		ch := goCLI(bctx, "broker", "--store", store, "--port", fmt.Sprint(ports[0]), "--roster", roster, "--max-store", maxStore)
		for end := time.Now().Add(patience); ; time.Sleep(50 * time.Millisecond) {
			if c, err := net.Dial("tcp", addr); err == nil {
				c.Close()
				break
			}
			select {
			case r := <-ch:
				t.Fatalf("broker --max-store %s: exit %d: %s%s", maxStore, r.code, r.out, r.errOut)
			default:
			}
			if time.Now().After(end) {
				t.Fatal("the broker does not listen")
			}
		}
		return func() result { stop(errors.New("interrupt")); return <-ch }
	}
	common := []string{"--nats", "nats://" + addr, "--run", runID, "--parties", "2", "--privacy", labelled, "--batch", "16", "--log", "warn", "--wait", "10s",
		"--roster", roster, "--checkpoint-dir", filepath.Join(dir, "ck"), "--checkpoint-every", "200ms", "--data", "synthetic:n=2000,d=8,test=400"}
	key := func(id string) []string { return []string{"--key", filepath.Join(keys, id+".nk")} }
	start := func(duration string, more ...string) []<-chan result {
		var rs []<-chan result
		for _, id := range []string{"1", "2"} {
			rs = append(rs, goCLI(ctx, slices.Concat([]string{"party", "--id", id, "--window", "2"}, key("party-"+id), common, more)...))
		}
		return append(rs, goCLI(ctx, slices.Concat([]string{"aggregator", "--duration", duration, "--eval-every", "500ms"}, key("aggregator"), common, more)...))
	}

	stop := startBroker("4MB")
	full := start("60s")
	agg := <-full[2]
	// Paused, not finished nor failed: every participant exits with the
	// pause's status (before: the aggregator 1, the parties 0).
	if agg.code != exitPaused || !strings.Contains(agg.errOut, "stream is nearly full") {
		t.Fatalf("aggregator on a 4 MB stream: exit %d after %v, want %d and the full stream named: %s%s", agg.code, agg.took, exitPaused, agg.out, agg.errOut)
	}
	t.Logf("aggregator after %v: %s", agg.took, strings.TrimSpace(agg.errOut))
	for i, ch := range full[:2] {
		if r := <-ch; r.code != exitPaused || !strings.Contains(r.out, "stream is nearly full") || !strings.Contains(r.errOut, "--resume") {
			t.Errorf("party %d on a nearly full stream: exit %d, want %d, the pause's reason and the command that goes on: %s%s", i+1, r.code, exitPaused, r.out, r.errOut)
		}
	}
	stop()
	// Paused before the bound: the log is sealed and holds every message
	// sent (a full stream refuses by size: a reply could be stored after
	// its refused request, and land before it once that was sent again).
	if code, out, errOut := runCLI(t, "audit", "verify", "--store", store, "--run", runID, "--roster", roster); code != 0 || !strings.Contains(out, "intact") {
		t.Errorf("audit verify after the pause: exit %d: %s%s", code, out, errOut)
	}

	stop = startBroker("64MB")
	resumed := start("3s", "--resume")
	for i, ch := range resumed {
		r := <-ch
		if r.code != 0 {
			t.Fatalf("participant %d resumed: exit %d: %s%s", i, r.code, r.out, r.errOut)
		}
		for _, l := range strings.Split(r.errOut, "\n") {
			if strings.Contains(l, "stream lacked") || strings.Contains(l, "held") {
				t.Logf("participant %d: %s", i, l)
			}
		}
	}
	b := stop()
	if !strings.Contains(b.out, "its stream's bound raised from") {
		t.Errorf("the broker does not say it raised the bound: %s%s", b.out, b.errOut)
	}
	code, out, errOut := runCLI(t, "audit", "verify", "--store", store, "--run", runID, "--roster", roster)
	if code != 0 || !strings.Contains(out, "intact") {
		t.Errorf("audit verify: exit %d: %s%s", code, out, errOut)
	}
}
