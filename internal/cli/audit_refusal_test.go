package cli

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// audit verify --nats against a broker that admits only the run's keys
// names the fix: read as the run's auditor with --key. Before, it failed
// with a bare "Authorization Violation".
func TestAuditVerifyRefusedNamesKey(t *testing.T) {
	t.Parallel()
	keys := t.TempDir()
	if code, _, errOut := runCLI(t, "keys", "--run", "refused", "--parties", "2", "--auditor", "--out", keys); code != 0 {
		t.Fatal(errOut)
	}
	roster := filepath.Join(keys, "roster.json")
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	port := freePort(t)
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	bctx, stop := context.WithCancel(ctx)
	done := goCLI(bctx, "broker", "--roster", roster, "--port", strconv.Itoa(port), "--store", t.TempDir())
	defer func() { stop(); <-done }()
	waitPort(t, port)

	code, _, errOut := runCLI(t, "audit", "verify", "--nats", url, "--run", "refused", "--roster", roster)
	if code == 0 || !strings.Contains(errOut, "--key auditor.nk") || !strings.Contains(errOut, "--auditor") {
		t.Errorf("without a key: exit %d, stderr %q: want the fix (--key auditor.nk, keys --auditor)", code, errOut)
	}
	// A key the broker does not admit (a fresh one, not in the roster).
	stranger := filepath.Join(t.TempDir(), "stranger.nk")
	if code, _, errOut := runCLI(t, "keys", "--id", "party-1", "--out", stranger); code != 0 {
		t.Fatal(errOut)
	}
	code, _, errOut = runCLI(t, "audit", "verify", "--nats", url, "--run", "refused", "--roster", roster, "--key", stranger)
	if code == 0 || !strings.Contains(errOut, "refused the key "+stranger) {
		t.Errorf("with a key not in the roster: exit %d, stderr %q", code, errOut)
	}
}
