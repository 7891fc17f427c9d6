package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
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
// the middle of a run of separate processes (broker, aggregator, two
// parties) and restarts each with --resume; it kills a party for good;
// it stops the aggregator and a party with SIGTERM and resumes them; and
// it kills the broker and restarts it on its store. Every run has the
// trust layer on, as by default: its own keys, a broker that admits only
// their roster, signed and chained messages, and the parties' receipts.
//
// A killed and resumed run must end where an uninterrupted one would, and
// the test asserts it by what does not depend on the machine's speed:
// every run (the uninterrupted one too) makes exactly its --steps; the
// stream holds every message its senders published and no request is
// answered twice (the audit reads the senders' sequence numbers); the
// resumed aggregator applied requests again from the stream and every
// reply it computed again equals the recorded one (its restored state is
// the one it checkpointed); no receiver rejects a message; asyrevel
// audit verify finds the log intact with the parties' receipts; the
// process killed died of the signal; the broker's restart needed no
// participant restarted by hand. It asserts no accuracy tolerance (the
// interleaving of asynchronous updates moves a run's accuracy by tenths
// of a point, more on a busy machine): only that every run learned, far
// above chance.
//
// The runs are bounded by steps, not time, and --sim-compute puts a floor
// under each party's step, so that a run lasts at least a few seconds on
// any machine and the kill, KillAfter into training, finds it running; on
// a busy machine the kill comes earlier in the run, never after its end.
func TestKillAndResume(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	bin := testBinary(t)
	// A bound on a hang, within make test's -timeout 8m.
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
	// Two parties of 6 parameters: --sim-compute 500us makes a step of
	// each at least 3 ms, so 2,500 steps take 3.75 s or more (about 5 s
	// at load 17), and the kill comes 1.5 s in. The work of a run is
	// fixed: about 2.5 s of CPU, most of it per step.
	cfg := experiment.FaultConfig{
		Binary: bin, Dir: dir, Data: "synthetic:n=3000,d=12,test=1000,noise=0.02", Parties: 2,
		Steps: 2500, Batch: 16, Window: 2, KillAfter: 1500 * time.Millisecond, Down: 300 * time.Millisecond, Seed: 1, Log: log,
		PartyArgs: []string{"--sim-compute", "500us"},
	}
	// Every case, the broker's too: killed with -9 and restarted on its
	// store, with no participant restarted by hand (each resumes by
	// itself from its checkpoint and the stream).
	rows, err := experiment.Faults(ctx, cfg, experiment.FaultCases)
	if err != nil {
		t.Fatalf("%v (logs in %s)", err, cfg.Dir)
	}
	for _, r := range rows {
		t.Logf("%-11s accuracy %.2f%% (uninterrupted %.2f%%), %d steps in %.1fs, lost %d, duplicated %d, unanswered %d, recovery %.2fs, re-applied %d (%d differ), departed %d, paused %v, rejected %d, audit ok %v (%d problems, %d receipts)",
			r.Case, 100*r.Accuracy, 100*r.Uninterrupted, r.Steps, r.Seconds, r.Lost, r.Duplicated, r.Unanswered, r.RecoverySeconds, r.Reapplied, r.Mismatched, r.Departed, r.Paused,
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
		if r.Steps != cfg.Steps {
			t.Errorf("%s: %d steps, want --steps %d", r.Case, r.Steps, cfg.Steps)
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
		// It learned (chance is 50%; a run ends near 96%, the one without
		// a party from the kill on near 90%): a floor far below what the
		// interleaving of updates, or load, can move.
		if r.Accuracy < 0.8 {
			t.Errorf("%s: accuracy %.2f%%, want 80%% or more", r.Case, 100*r.Accuracy)
		}
		if (r.Case == experiment.FaultPartyGone) != (r.Departed == 1) {
			t.Errorf("%s: the summary lists %d departed parties", r.Case, r.Departed)
		}
		if r.Case == experiment.FaultBroker && r.Paused {
			t.Errorf("%s: the run paused and every participant was restarted by hand", r.Case)
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
