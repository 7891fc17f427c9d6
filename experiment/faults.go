package experiment

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/experiment/streamaudit"
	"github.com/asyrevel/asyrevel/internal/freeport"
	"github.com/asyrevel/asyrevel/run"
	"github.com/asyrevel/asyrevel/trust"
)

// Fault cases: what FaultRun kills, with kill -9, in the middle of a run
// whose broker, aggregator and parties are separate processes.
const (
	FaultNone       = "none"       // nothing: the uninterrupted run
	FaultAggregator = "aggregator" // the aggregator, restarted with --resume
	FaultParty      = "party"      // one party, restarted with --resume
	FaultPartyGone  = "party-gone" // one party, never restarted
	FaultSigterm    = "sigterm"    // SIGTERM to the aggregator and a party, both restarted with --resume
	// FaultBroker: the broker (a process of its own for this case), restarted on its store
	// and port; if it lost messages it had confirmed, the run pauses (--wait) and every
	// participant is restarted with --resume.
	FaultBroker = "broker"
)

// FaultCases lists the cases in the order the experiment runs them.
var FaultCases = []string{FaultNone, FaultAggregator, FaultParty, FaultPartyGone, FaultSigterm, FaultBroker}

// FaultConfig configures the fault experiment.
type FaultConfig struct {
	Binary  string // the asyrevel binary
	Dir     string // work folder: broker store, checkpoints, outputs, logs
	Data    string // --data (and Test, --test)
	Test    string
	Parties int
	Steps   int64 // --steps of every run
	Batch   int
	Window  int
	// KillAfter is how long after training starts the process is killed;
	// Down how long it stays dead before the restart.
	KillAfter, Down time.Duration
	// Broker lists the broker case's kills, each a run of its own
	// (kill after, down for); none: one, after KillAfter for Down.
	Broker []BrokerKill
	// CheckpointEvery is every participant's --checkpoint-every (default
	// 250ms); CheckpointAuto runs them with the command line's own
	// default instead (adaptive, ckpt.Every).
	CheckpointEvery time.Duration
	CheckpointAuto  bool
	// Party is the party killed (default 2).
	Party int
	// PartyArgs are more flags for every party, resumed ones too (a test
	// gives --sim-compute, a floor under each step's time that keeps a
	// run of --steps longer than KillAfter on a fast machine).
	PartyArgs []string
	Seed      uint64
	// NoTrust runs every participant without the trust layer (no keys,
	// a broker that admits anyone, no audit verify): only to compare.
	// By default each case makes its run's keys (asyrevel keys), starts
	// its own broker with --roster, gives the aggregator and the parties
	// their --key and --roster (the parties keep their receipts) and ends
	// with asyrevel audit verify over the run's stream.
	NoTrust bool
	Log     zerolog.Logger
}

// BrokerKill is one kill of the broker case: after how much training,
// and for how long the broker stays down.
type BrokerKill struct{ After, Down time.Duration }

// FaultRow is one case's outcome.
type FaultRow struct {
	Case string
	// KillAfter and Down: when the kill came (training time) and how long
	// the killed process stayed down before its restart.
	KillAfter, Down time.Duration
	// TrainingOnSeconds (cases that resume the aggregator): from the
	// restart of the killed process to the aggregator's log line saying
	// training goes on (a request answered live, not applied again), or
	// -1 if it did not say so.
	TrainingOnSeconds float64
	// ResumeRead is how many messages the aggregator's last resume read
	// from the stream, FromStart why it read them from the stream's start
	// ("" if it read from its checkpoint's floor).
	ResumeRead int64
	FromStart  string
	// EvalGap is the longest time between two points of the run's curve
	// (training seconds), EvalMedian the median one: a round that a fault
	// held up, and the spacing of the rounds after it, show in the first.
	EvalGap, EvalMedian float64
	// FirstEvalAfter (FaultClusterNode): from the cluster's return (the
	// stream grown again, RecoverySeconds after the kill) to the first
	// point of the curve after it, in seconds, against the run's
	// --eval-every (500 ms); -1 if none came, or not measured.
	FirstEvalAfter float64
	Accuracy       float64
	Uninterrupted  float64 // accuracy of the case FaultNone
	Steps          int64
	// Lost and Duplicated come from the stream (streamaudit.Audit):
	// messages a sender published that the stream lacks, and updates
	// applied twice (a second reply to one request) or repeated sequence
	// numbers.
	Lost, Duplicated int64
	Unanswered       int64
	// Killed: the process was seen to die of the signal sent.
	Killed bool
	// RecoverySeconds: from the restart of the killed process until it
	// was back at work (its recovery done, its log says so); 0 for the
	// cases without a restart.
	RecoverySeconds float64
	Reapplied       int64 // requests a resumed aggregator applied again from the stream
	Paused          bool  // FaultBroker: the run paused (messages lost) and every participant was resumed
	Mismatched      int64 // of those, replies that differ from the recorded ones
	Departed        int   // parties the summary lists as departed
	// Rejected counts the messages the receivers rejected: the
	// aggregator's (summary.json) and the parties' that ended (their last
	// line); a resumed participant must reject nothing.
	Rejected int64
	// Trust: the case ran with the trust layer; then AuditOK says
	// whether asyrevel audit verify (the run's roster and every party's
	// receipts folder) passed, AuditProblems how many problems it counted
	// and AuditReceipts how many receipts it verified.
	Trust         bool
	AuditOK       bool
	AuditProblems int64
	AuditReceipts int
	// Audit is audit verify's report (nil without the trust layer); its
	// file is c.Dir/RUN-audit.json.
	Audit   *trust.AuditReport
	Seconds float64
	Err     string // why the case did not end as it should ("" if it did)
}

// ErrAudit is the error of a case whose run ended but whose log
// asyrevel audit verify found not intact.
var ErrAudit = errors.New("audit verify: the log is not intact")

// proc is a child process whose log lines are watched.
type proc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	seen map[string]time.Time
	want []string
	last string // the last line that says how many messages it rejected
	done chan struct{}
	err  error
}

func (c *FaultConfig) start(ctx context.Context, name string, args ...string) (*proc, error) {
	logf, err := os.Create(filepath.Join(c.Dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, c.Binary, args...)
	if dir := os.Getenv("ASYREVEL_FAULTS_CPUPROFILE"); dir != "" {
		// A CPU profile of each process of the case, for where a
		// recovery's time goes (go tool pprof -tagfocus phase=recovery
		// on the aggregator's): one file each, not the one file
		// ASYREVEL_CPUPROFILE would name for every process.
		cmd.Env = append(os.Environ(), "ASYREVEL_CPUPROFILE="+filepath.Join(dir, name+".pprof"))
	}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw // both watched: the broker says where it listens on stdout
	p := &proc{cmd: cmd, seen: map[string]time.Time{}, done: make(chan struct{}),
		want: []string{"training starts", "resumed from the checkpoint", "listening on", trainingOnWords}}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			// Each line as read, with the time to the millisecond (the
			// participants' own stamps have seconds only): the recovery's
			// steps are timed from these.
			fmt.Fprintln(logf, time.Now().Format("15:04:05.000"), line)
			p.mu.Lock()
			if strings.Contains(line, " rejected; stopped:") {
				p.last = line
			}
			for _, w := range p.want {
				if _, ok := p.seen[w]; !ok && strings.Contains(line, w) {
					p.seen[w] = time.Now()
				}
			}
			p.mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() {
		err := cmd.Wait()
		pw.Close()
		<-scanned
		p.err = err
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

// when is the time the process logged a line containing s.
func (p *proc) when(s string) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.seen[s]
	return t, ok
}

// waitFor waits until the process logs s (or dies, or d passes).
func (p *proc) waitFor(s string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if _, ok := p.when(s); ok {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("the process ended before logging %q: %v", s, p.err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	return fmt.Errorf("no %q in the log within %v", s, d)
}

// wait waits for the end of the process.
func (p *proc) wait(ctx context.Context) error {
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// diedOf says whether the ended process was ended by sig.
func (p *proc) diedOf(sig syscall.Signal) bool {
	<-p.done
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}

// StartBroker starts `asyrevel broker` on a free port with its store in
// dir and returns its URL; stop ends it.
func StartBroker(ctx context.Context, bin, dir string) (url string, stop func(), err error) {
	cmd := exec.CommandContext(ctx, bin, "broker", "--store", filepath.Join(dir, "store"), "--port", "0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop = func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	f := strings.Fields(line)
	if err != nil || len(f) < 4 || !strings.HasPrefix(f[3], "nats://") {
		stop()
		return "", nil, fmt.Errorf("the broker said %q (%v)", line, err)
	}
	return f[3], stop, nil
}

// freePort returns a TCP port of loopback that was free a moment ago.
func freePort() (string, error) {
	p, err := freeport.Pick("127.0.0.1", 1)
	if err != nil {
		return "", err
	}
	return strconv.Itoa(p[0]), nil
}

// trainingOnWords is the aggregator's line once training goes on after a
// resume (aggregator.wentOn).
const trainingOnWords = "training goes on after the resume"

// rejectedRE reads the count of a participant's last line ("party 2: 9000
// steps, ..., 0 rejected; stopped: ...").
var rejectedRE = regexp.MustCompile(`(\d+) rejected; stopped:`)

// FaultRun runs one case as run id runID, with a broker process of its
// own (its store in c.Dir/RUN-store). With the trust layer (unless
// c.NoTrust) it makes the run's keys in c.Dir/RUN-keys (asyrevel keys),
// the broker admits only their roster, every participant (resumed ones
// too) runs with its --key and --roster, the parties keep their receipts
// in c.Dir/RUN-receipts, and once the broker has stopped asyrevel audit
// verify walks the run's stream: a log it finds not intact fails the case
// (ErrAudit, the row filled in all the same).
func FaultRun(ctx context.Context, c FaultConfig, kase, runID string) (FaultRow, error) {
	if slices.Contains(FaultClusterCases, kase) {
		return faultRunCluster(ctx, c, kase, runID) // faults_cluster.go
	}
	t0 := time.Now()
	row := FaultRow{Case: kase, Trust: !c.NoTrust, TrainingOnSeconds: -1, FirstEvalAfter: -1}
	if kase != FaultNone && kase != FaultPartyGone {
		row.KillAfter, row.Down = c.KillAfter, c.Down
	}
	if c.Party == 0 {
		c.Party = 2
	}
	var (
		store    = filepath.Join(c.Dir, runID+"-store")
		keys     = filepath.Join(c.Dir, runID+"-keys")
		roster   = filepath.Join(keys, "roster.json")
		receipts = filepath.Join(c.Dir, runID+"-receipts")
	)
	if !c.NoTrust {
		out, err := exec.CommandContext(ctx, c.Binary, "keys", "--run", runID, "--parties", strconv.Itoa(c.Parties), "--out", keys).CombinedOutput()
		if err != nil {
			return row, fmt.Errorf("%s: asyrevel keys: %w: %s", kase, err, strings.TrimSpace(string(out)))
		}
	}
	port, err := freePort()
	if err != nil {
		return row, err
	}
	brokerArgs := []string{"broker", "--store", store, "--port", port}
	if !c.NoTrust {
		brokerArgs = append(brokerArgs, "--roster", roster)
	}
	brk, err := c.start(ctx, runID+"-broker", brokerArgs...)
	if err != nil {
		return row, err
	}
	stopBroker := func() {
		select {
		case <-brk.done:
		default:
			_ = brk.cmd.Process.Signal(os.Interrupt)
			<-brk.done
		}
	}
	defer stopBroker()
	if err := brk.waitFor("listening on", 30*time.Second); err != nil {
		return row, fmt.Errorf("%s: broker: %w", kase, err)
	}
	url := "nats://127.0.0.1:" + port
	out := filepath.Join(c.Dir, runID)
	common := []string{"--nats", url, "--run", runID, "--privacy", "off", "--parties", strconv.Itoa(c.Parties), "--data", c.Data,
		"--batch", strconv.Itoa(c.Batch), "--seed", strconv.FormatUint(c.Seed, 10), "--log", faultsLogLevel(),
		"--checkpoint-dir", filepath.Join(c.Dir, "checkpoints"), "--checkpoint-every", c.checkpointEvery().String(), "--wait", "60s"}
	if c.Test != "" {
		common = append(common, "--test", c.Test)
	}
	if kase == FaultBroker {
		common = append(common, "--wait", "6s") // the pause after lost messages
	}
	aggArgs := append([]string{"aggregator", "--steps", strconv.FormatInt(c.Steps, 10), "--out", out, "--eval-every", "500ms"}, common...)
	if !c.NoTrust {
		aggArgs = append(aggArgs, "--key", filepath.Join(keys, trust.AggregatorID+".nk"), "--roster", roster)
	}
	if kase == FaultPartyGone {
		aggArgs = append(aggArgs, "--party-timeout", "1s")
	}
	partyArgs := func(m int) []string {
		a := append([]string{"party", "--id", strconv.Itoa(m), "--window", strconv.Itoa(c.Window)}, common...)
		a = append(a, c.PartyArgs...)
		if !c.NoTrust {
			a = append(a, "--key", filepath.Join(keys, trust.PartyID(m)+".nk"), "--roster", roster,
				"--receipts", filepath.Join(receipts, trust.PartyID(m)))
		}
		return a
	}
	parties := make([]*proc, c.Parties+1)
	var all []*proc
	defer func() {
		for _, p := range all {
			select {
			case <-p.done:
			default:
				_ = p.cmd.Process.Kill()
				<-p.done
			}
		}
	}()
	for m := 1; m <= c.Parties; m++ {
		p, err := c.start(ctx, fmt.Sprintf("%s-party-%d", runID, m), partyArgs(m)...)
		if err != nil {
			return row, err
		}
		parties[m] = p
		all = append(all, p)
	}
	agg, err := c.start(ctx, runID+"-aggregator", aggArgs...)
	if err != nil {
		return row, err
	}
	all = append(all, agg)
	if err := agg.waitFor("training starts", time.Minute); err != nil {
		return row, fmt.Errorf("%s: aggregator: %w", kase, err)
	}
	time.Sleep(c.KillAfter)
	var restarted time.Time // the restart of the process killed last
	restart := func(name string, args []string, victim *proc, sig syscall.Signal) (*proc, error) {
		_ = victim.cmd.Process.Signal(sig)
		if sig == syscall.SIGKILL {
			row.Killed = victim.diedOf(syscall.SIGKILL)
		} else {
			<-victim.done
			// Stopped by the signal with its state saved: paused (75,
			// asyrevel's status for a run that goes on with --resume).
			row.Killed = victim.cmd.ProcessState.ExitCode() == 75
		}
		if !row.Killed {
			return nil, fmt.Errorf("%s: %s did not die of %v: %v (log: %s)", kase, name, sig, victim.err, filepath.Join(c.Dir, name+".log"))
		}
		time.Sleep(c.Down)
		t := time.Now()
		p, err := c.start(ctx, name+"-resumed", append(args, "--resume")...)
		if err != nil {
			return nil, err
		}
		all = append(all, p)
		if err := p.waitFor("resumed from the checkpoint", time.Minute); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", kase, name, err)
		}
		at, _ := p.when("resumed from the checkpoint")
		row.RecoverySeconds += at.Sub(t).Seconds()
		restarted = t
		return p, nil
	}
	switch kase {
	case FaultAggregator:
		if agg, err = restart(runID+"-aggregator", aggArgs, agg, syscall.SIGKILL); err != nil {
			return row, err
		}
	case FaultParty:
		if parties[c.Party], err = restart(fmt.Sprintf("%s-party-%d", runID, c.Party), partyArgs(c.Party), parties[c.Party], syscall.SIGKILL); err != nil {
			return row, err
		}
	case FaultPartyGone:
		_ = parties[c.Party].cmd.Process.Kill()
		row.Killed = parties[c.Party].diedOf(syscall.SIGKILL)
		parties[c.Party] = nil
	case FaultBroker:
		_ = brk.cmd.Process.Kill()
		row.Killed = brk.diedOf(syscall.SIGKILL)
		if !row.Killed {
			return row, fmt.Errorf("%s: the broker did not die of kill -9", kase)
		}
		time.Sleep(c.Down)
		if brk, err = c.start(ctx, runID+"-broker-again", brokerArgs...); err != nil {
			return row, err
		}
		if err := brk.waitFor("listening on", 30*time.Second); err != nil {
			return row, fmt.Errorf("%s: broker restarted: %w", kase, err)
		}
		restarted = time.Now()
		if err := agg.wait(ctx); err == nil {
			// The participants resumed by themselves (or lost nothing):
			// recovery is the time from the broker's restart to the
			// aggregator's resume.
			if at, ok := agg.when("resumed from the checkpoint"); ok {
				row.RecoverySeconds = max(0, at.Sub(restarted).Seconds())
			}
			break
		}
		// Paused: every participant ends (the parties after --wait),
		// then all of them go on with --resume.
		row.Paused = true
		for m := 1; m <= c.Parties; m++ {
			_ = parties[m].wait(ctx)
		}
		for m := 1; m <= c.Parties; m++ {
			p, err := c.start(ctx, fmt.Sprintf("%s-party-%d-resumed", runID, m), append(partyArgs(m), "--resume")...)
			if err != nil {
				return row, err
			}
			parties[m] = p
			all = append(all, p)
		}
		if agg, err = c.start(ctx, runID+"-aggregator-resumed", append(aggArgs, "--resume")...); err != nil {
			return row, err
		}
		all = append(all, agg)
		if err := agg.waitFor("resumed from the checkpoint", time.Minute); err != nil {
			return row, fmt.Errorf("%s: aggregator: %w", kase, err)
		}
		at, _ := agg.when("resumed from the checkpoint")
		row.RecoverySeconds = at.Sub(restarted).Seconds()
	case FaultSigterm:
		if parties[c.Party], err = restart(fmt.Sprintf("%s-party-%d", runID, c.Party), partyArgs(c.Party), parties[c.Party], syscall.SIGTERM); err != nil {
			return row, err
		}
		if agg, err = restart(runID+"-aggregator", aggArgs, agg, syscall.SIGTERM); err != nil {
			return row, err
		}
	}
	if err := agg.wait(ctx); err != nil {
		return row, fmt.Errorf("%s: aggregator: %w (log: %s)", kase, err, filepath.Join(c.Dir, runID+"-aggregator*.log"))
	}
	for m := 1; m <= c.Parties; m++ {
		if p := parties[m]; p != nil {
			if err := p.wait(ctx); err != nil {
				return row, fmt.Errorf("%s: party %d: %w", kase, m, err)
			}
		}
	}
	if err := readFaultSummary(&row, out, all); err != nil {
		return row, fmt.Errorf("%s: %w", kase, err)
	}
	if at, ok := agg.when(trainingOnWords); ok && !restarted.IsZero() {
		row.TrainingOnSeconds = max(0, at.Sub(restarted).Seconds())
	}
	// The audits read the stopped broker's store.
	stopBroker()
	au, err := streamaudit.Store(ctx, store, runID, c.Parties)
	if err != nil {
		return row, fmt.Errorf("%s: reading the stream: %w", kase, err)
	}
	row.Lost, row.Duplicated, row.Unanswered = au.Lost+au.Orphans, au.Duplicated, au.Unanswered
	row.Seconds = time.Since(t0).Seconds()
	var auditErr error
	if !c.NoTrust {
		auditErr = c.auditVerify(ctx, &row, store, runID, roster, receipts)
	}
	c.Log.Info().Str("case", kase).Str("acc", fmt.Sprintf("%.2f%%", 100*row.Accuracy)).Int64("lost", row.Lost).
		Int64("duplicated", row.Duplicated).Float64("recovery_s", row.RecoverySeconds).Float64("training_on_s", row.TrainingOnSeconds).
		Int64("resume_read", row.ResumeRead).Str("from_start", row.FromStart).Int64("reapplied", row.Reapplied).
		Int64("rejected", row.Rejected).Bool("trust", row.Trust).Bool("audit_ok", row.AuditOK).Int64("audit_problems", row.AuditProblems).
		Msg("fault case done")
	if auditErr != nil {
		return row, fmt.Errorf("%s: %w", kase, auditErr)
	}
	return row, nil
}

// auditVerify runs asyrevel audit verify over the stopped run's store
// with its roster and every party's receipts folder, keeps its report in
// c.Dir/RUN-audit.json and fills in row's audit fields.
func (c *FaultConfig) auditVerify(ctx context.Context, row *FaultRow, store, runID, roster, receipts string) error {
	args := []string{"audit", "verify", "--store", store, "--run", runID, "--roster", roster, "--json"}
	if _, err := os.Stat(receipts); err == nil {
		args = append(args, "--receipts", receipts)
	}
	return c.auditVerifyArgs(ctx, row, runID, args)
}

// Faults runs every case of cases (FaultNone first: the others are
// compared with it), each with a broker process of its own.
func Faults(ctx context.Context, c FaultConfig, cases []string) ([]FaultRow, error) {
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return nil, err
	}
	var rows []FaultRow
	base := math.NaN()
	stamp := time.Now().UTC().Format("150405")
	type job struct {
		kase string
		c    FaultConfig
	}
	var jobs []job
	for _, k := range cases {
		if k != FaultBroker || len(c.Broker) == 0 {
			jobs = append(jobs, job{k, c})
			continue
		}
		for _, b := range c.Broker {
			cb := c
			cb.KillAfter, cb.Down = b.After, b.Down
			jobs = append(jobs, job{k, cb})
		}
	}
	for i, j := range jobs {
		k := j.kase
		r, err := FaultRun(ctx, j.c, k, fmt.Sprintf("faults-%s-%d-%s", stamp, i, strings.ReplaceAll(k, "-", "")))
		switch {
		case err == nil:
		case ctx.Err() != nil, k == FaultNone && !errors.Is(err, ErrAudit):
			return rows, err
		case errors.Is(err, ErrAudit):
			// The run ended: its figures stand, the case failed.
			c.Log.Error().Str("case", k).Err(err).Msg("fault case failed its audit")
			r.Err = err.Error()
		default:
			// Recorded, and the other cases run all the same.
			c.Log.Error().Str("case", k).Err(err).Msg("fault case failed")
			r = FaultRow{Case: k, Trust: r.Trust, Killed: r.Killed, Paused: r.Paused, Err: err.Error(), Accuracy: math.NaN(),
				KillAfter: r.KillAfter, Down: r.Down, TrainingOnSeconds: -1, FirstEvalAfter: -1}
		}
		if k == FaultNone {
			base = r.Accuracy
		}
		rows = append(rows, r)
	}
	for i := range rows {
		rows[i].Uninterrupted = base
	}
	return rows, nil
}

// WriteFaults writes dir/faults.csv.
func WriteFaults(dir string, rows []FaultRow) error {
	if len(rows) == 0 {
		return errors.New("no fault rows")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var recs [][]string
	for _, r := range rows {
		recs = append(recs, []string{r.Case, fmt.Sprintf("%.4f", r.Accuracy), fmt.Sprintf("%.4f", r.Uninterrupted),
			strconv.FormatInt(r.Lost, 10), strconv.FormatInt(r.Duplicated, 10), fmt.Sprintf("%.2f", r.RecoverySeconds),
			strconv.FormatInt(r.Steps, 10), strconv.FormatInt(r.Reapplied, 10), strconv.FormatInt(r.Mismatched, 10),
			strconv.FormatInt(r.Unanswered, 10), strconv.Itoa(r.Departed), strconv.FormatBool(r.Killed), strconv.FormatBool(r.Paused),
			strconv.FormatInt(r.Rejected, 10), strconv.FormatBool(r.Trust), auditCell(r), strconv.FormatInt(r.AuditProblems, 10),
			strconv.Itoa(r.AuditReceipts), fmt.Sprintf("%.3g", r.KillAfter.Seconds()), fmt.Sprintf("%.3g", r.Down.Seconds()),
			fmt.Sprintf("%.2f", r.TrainingOnSeconds), strconv.FormatInt(r.ResumeRead, 10), r.FromStart,
			fmt.Sprintf("%.2f", r.EvalGap), fmt.Sprintf("%.2f", r.EvalMedian), fmt.Sprintf("%.2f", r.FirstEvalAfter), r.Err})
	}
	return run.WriteCSV(filepath.Join(dir, "faults.csv"), []string{"case", "accuracy", "uninterrupted_accuracy", "lost", "duplicated",
		"recovery_seconds", "steps", "reapplied", "mismatched", "unanswered", "departed", "killed", "paused",
		"rejected", "trust", "audit_ok", "audit_problems", "audit_receipts", "kill_after_seconds", "down_seconds",
		"training_on_seconds", "resume_read", "read_from_start", "max_eval_gap_seconds", "median_eval_gap_seconds", "first_eval_after_seconds", "error"}, recs)
}

// checkpointEvery is the participants' --checkpoint-every (0: the
// adaptive default).
func (c *FaultConfig) checkpointEvery() time.Duration {
	if c.CheckpointAuto {
		return 0
	}
	if c.CheckpointEvery == 0 {
		return 250 * time.Millisecond
	}
	return c.CheckpointEvery
}

// checkpointText is the participants' checkpoint period, for the report.
func (c *FaultConfig) checkpointText() string {
	if e := c.checkpointEvery(); e != 0 {
		return "every " + e.String()
	}
	return "at the adaptive default period"
}

// faultsLogLevel is the participants' --log: info, or what
// ASYREVEL_FAULTS_LOG says (debug shows each checkpoint's cost and the
// consumers' restarts).
func faultsLogLevel() string {
	if l := os.Getenv("ASYREVEL_FAULTS_LOG"); l != "" {
		return l
	}
	return "info"
}

// curveTimes reads the times of the points of the run's curve.csv in out
// (training seconds).
func curveTimes(out string) ([]float64, error) {
	f, err := os.Open(filepath.Join(out, "curve.csv"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil || len(recs) < 1 {
		return nil, err
	}
	col := slices.Index(recs[0], "seconds")
	if col < 0 {
		return nil, errors.New("curve.csv has no seconds column")
	}
	var ts []float64
	for _, r := range recs[1:] {
		if t, err := strconv.ParseFloat(r[col], 64); err == nil {
			ts = append(ts, t)
		}
	}
	return ts, nil
}

// firstPointAfter is how long after at (training seconds) the first
// point of curve times ts came, or -1 if none did.
func firstPointAfter(ts []float64, at float64) float64 {
	for _, t := range ts {
		if t >= at {
			return t - at
		}
	}
	return -1
}

// evalGaps reads the run's curve.csv in out: the longest and the median
// time between two of its points (training seconds).
func evalGaps(out string) (longest, median float64, err error) {
	f, err := os.Open(filepath.Join(out, "curve.csv"))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil || len(recs) < 3 {
		return 0, 0, err
	}
	col := slices.Index(recs[0], "seconds")
	if col < 0 {
		return 0, 0, errors.New("curve.csv has no seconds column")
	}
	var gaps []float64
	prev := math.NaN()
	for _, r := range recs[1:] {
		t, err := strconv.ParseFloat(r[col], 64)
		if err != nil {
			continue
		}
		if !math.IsNaN(prev) {
			gaps = append(gaps, t-prev)
		}
		prev = t
	}
	if len(gaps) == 0 {
		return 0, 0, nil
	}
	slices.Sort(gaps)
	return gaps[len(gaps)-1], gaps[len(gaps)/2], nil
}

// auditCell is the audit_ok column: true or false with the trust layer,
// "-" without it (nothing to verify).
func auditCell(r FaultRow) string {
	if !r.Trust {
		return "-"
	}
	return strconv.FormatBool(r.AuditOK)
}

// readFaultSummary fills row from the run's summary.json in out and the
// rejections each process's last line counts.
func readFaultSummary(row *FaultRow, out string, all []*proc) error {
	var s run.Summary
	raw, err := os.ReadFile(filepath.Join(out, "summary.json"))
	if err == nil {
		err = json.Unmarshal(raw, &s)
	}
	if err != nil {
		return fmt.Errorf("summary: %w", err)
	}
	row.Accuracy, row.Steps, row.Departed = s.TestAccuracy, s.Steps, len(s.Departed)
	if r := s.Resumed; r != nil {
		row.Reapplied, row.Mismatched = r.Reapplied, r.Mismatched
		row.ResumeRead, row.FromStart = r.Read, r.FromStart
	}
	if row.EvalGap, row.EvalMedian, err = evalGaps(out); err != nil {
		return fmt.Errorf("curve: %w", err)
	}
	for _, v := range s.Rejected {
		row.Rejected += v
	}
	for _, p := range all {
		p.mu.Lock()
		if m := rejectedRE.FindStringSubmatch(p.last); m != nil {
			n, _ := strconv.ParseInt(m[1], 10, 64)
			row.Rejected += n
		}
		p.mu.Unlock()
	}
	return nil
}
