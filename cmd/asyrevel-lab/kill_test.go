package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/experiment"
	"github.com/asyrevel/asyrevel/internal/memwatch"
	"github.com/asyrevel/asyrevel/trust"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
	binOut  []byte
)

// TestMain removes the binary testBinary built.
func TestMain(m *testing.M) {
	memwatch.Start() // a runaway fails at once with its stacks
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// testBinary builds the asyrevel-lab binary (every command of asyrevel,
// and the experiments) once for the tests that run it as separate
// processes.
func testBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := exec.Command("mktemp", "-d").Output()
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(string(dir[:len(dir)-1]), "asyrevel-lab")
		binOut, binErr = exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
	})
	if binErr != nil {
		t.Skipf("cannot build the binary: %v\n%s", binErr, binOut)
	}
	return binPath
}

// TestKillAndResume kills the aggregator, then a party, with kill -9 in
// the middle of a run of separate processes (broker, aggregator, three
// parties) and restarts each with --resume; it kills a party for good;
// and it stops the aggregator and a party with SIGTERM and resumes them.
// Every run has the trust layer on, as by default: its own keys, a broker
// that admits only their roster, signed and chained messages, and the
// parties' receipts. Each run must end within 0.3 percentage points of
// the uninterrupted runs' test accuracy (the mean of two), the stream must hold every
// message its senders published and no request may be answered twice
// (the audit reads the senders' sequence numbers), no receiver may reject
// a message, asyrevel audit verify must find the log intact with the
// parties' receipts, and the process killed must have died of the signal.
func TestKillAndResume(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	bin := testBinary(t)
	// A bound on a hang, within make test's -timeout 8m: 4 minutes ran
	// out in the uninterrupted case, its last, at load 6-10 (make test's
	// race pass beside the whole suite).
	ctx, cancel := context.WithTimeout(context.Background(), 7*time.Minute)
	defer cancel()
	log := zerolog.Nop()
	if testing.Verbose() {
		log = zerolog.New(zerolog.NewTestWriter(t))
	}
	// The processes' logs stay when the test fails, and their folder is
	// named in its output.
	dir, err := os.MkdirTemp("", "asyrevel-kill-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the processes' logs are kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	cfg := experiment.FaultConfig{
		Binary: bin, Dir: dir, Data: "synthetic:n=3000,d=12,test=4000,noise=0.02", Parties: 3,
		Steps: 30000, Batch: 16, Window: 2, KillAfter: 1500 * time.Millisecond, Down: 300 * time.Millisecond, Seed: 1, Log: log,
	}
	// Every case, the broker's too: killed with -9 and restarted on its
	// store, with no participant restarted by hand (each resumes by
	// itself from its checkpoint and the stream).
	cases := slices.Clone(experiment.FaultCases)
	// The uninterrupted run twice, first and last: one run's accuracy
	// varies with the interleaving of asynchronous updates (measured on
	// this machine: 97.02% to 97.25% over seven runs of the same
	// settings), and the cases are compared with the mean of the two.
	cases = append(cases, experiment.FaultNone)
	rows, err := experiment.Faults(ctx, cfg, cases)
	if err != nil {
		t.Fatalf("%v (logs in %s)", err, cfg.Dir)
	}
	var uninterrupted float64
	for _, r := range rows {
		if r.Case == experiment.FaultNone {
			uninterrupted += r.Accuracy / 2
		}
	}
	for i := range rows {
		rows[i].Uninterrupted = uninterrupted
	}
	for _, r := range rows {
		t.Logf("%-11s accuracy %.2f%% (uninterrupted %.2f%%), %d steps, lost %d, duplicated %d, unanswered %d, recovery %.2fs, re-applied %d (%d differ), departed %d, paused %v, rejected %d, audit ok %v (%d problems, %d receipts)",
			r.Case, 100*r.Accuracy, 100*r.Uninterrupted, r.Steps, r.Lost, r.Duplicated, r.Unanswered, r.RecoverySeconds, r.Reapplied, r.Mismatched, r.Departed, r.Paused,
			r.Rejected, r.AuditOK, r.AuditProblems, r.AuditReceipts)
		if r.Case == experiment.FaultPartyGone && departedTailOnly(r.Audit, 2) {
			// Known limit of amortised signing: the messages party 2 sent
			// after its last signature (at most 100 ms of its traffic)
			// stay unproven when it never comes back, and audit verify
			// says so (exit 1). Anything else fails the test.
			t.Logf("%s: audit verify: only party 2's unsealed tail: %s", r.Case, r.Err)
		} else if r.Err != "" {
			t.Errorf("%s: %s", r.Case, r.Err)
			continue
		} else if !r.Trust || !r.AuditOK || r.AuditProblems != 0 || r.AuditReceipts == 0 {
			t.Errorf("%s: trust layer %v, audit verify passed %v with %d problems and %d receipts verified", r.Case, r.Trust, r.AuditOK, r.AuditProblems, r.AuditReceipts)
		}
		if r.Rejected != 0 {
			t.Errorf("%s: the receivers rejected %d messages", r.Case, r.Rejected)
		}
		if r.Case != experiment.FaultNone && !r.Killed {
			t.Errorf("%s: the process was not killed", r.Case)
		}
		if r.Lost != 0 || r.Duplicated != 0 || r.Mismatched != 0 {
			t.Errorf("%s: %d lost, %d duplicated, %d replies computed again differ", r.Case, r.Lost, r.Duplicated, r.Mismatched)
		}
		if r.Case == experiment.FaultPartyGone {
			// Its columns are frozen from the kill on: training goes on
			// with the others, and still learns.
			if r.Accuracy < 0.8 {
				t.Errorf("%s: accuracy %.2f%% without the departed party", r.Case, 100*r.Accuracy)
			}
		} else if d := r.Uninterrupted - r.Accuracy; r.Case != experiment.FaultNone && d > 0.003 {
			// A recovery must not cost accuracy; a run that ends above the
			// uninterrupted ones (97.32% against 97.00% in one CI run: a
			// few test samples of the random draws) is no defect.
			t.Errorf("%s: accuracy %.2f%%, %.2f points below the uninterrupted runs' %.2f%%", r.Case, 100*r.Accuracy, 100*d, 100*r.Uninterrupted)
		}
		if (r.Case == experiment.FaultPartyGone) != (r.Departed == 1) {
			t.Errorf("%s: the summary lists %d departed parties", r.Case, r.Departed)
		}
		if r.Case == experiment.FaultBroker && (r.Paused || r.RecoverySeconds > 10) {
			t.Errorf("%s: paused %v (restarted by hand), recovery %.1f s after the broker's return (want at most 10 s)", r.Case, r.Paused, r.RecoverySeconds)
		}
		if r.Case == experiment.FaultAggregator && r.Reapplied == 0 {
			t.Errorf("%s: the resumed aggregator applied nothing again from the stream (killed right after a checkpoint?)", r.Case)
		}
	}
}

// departedTailOnly says whether the audit found the log not intact for
// one reason only: unsealed tails on subjects of party m (the messages it
// sent after its last signature before it was killed for good).
func departedTailOnly(rep *trust.AuditReport, m int) bool {
	if rep == nil || rep.Intact() || len(rep.Problems) == 0 || rep.Dropped > 0 {
		return false
	}
	suffix := "." + strconv.Itoa(m)
	for _, p := range rep.Problems {
		own := strings.HasPrefix(p.Subject, "asyrevel."+rep.Run+".") && strings.HasSuffix(p.Subject, suffix) &&
			!strings.HasSuffix(p.Subject, ".reply"+suffix)
		if p.Kind != trust.ProblemUnsealedTail || !own {
			return false
		}
	}
	return true
}
