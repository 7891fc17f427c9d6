package experiment

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/trust"
)

// Fault cases of a 3-node broker cluster (three `asyrevel broker`
// processes with --cluster-name, --routes and the run's --route-secret;
// every participant given the three URLs, its home node first). They take
// longer than the others and are not in FaultCases: run them by name.
const (
	// FaultClusterNode: the node that leads the run's stream is killed
	// with -9 in the middle of the run and not restarted; the others
	// elect a new leader and the participants fail over.
	FaultClusterNode = "cluster-node"
	// FaultClusterDown: the cluster starts with its third node down;
	// the two others elect their leader, the participants wait (saying
	// why: the stream keeps three copies), and the third node starts
	// Down later.
	FaultClusterDown = "cluster-down"
)

// clusterCaseLimit bounds a cluster case.
const clusterCaseLimit = 10 * time.Minute

// FaultClusterCases are the cluster's fault cases.
var FaultClusterCases = []string{FaultClusterNode, FaultClusterDown}

// IsFaultCase says whether kase is a fault case (FaultCases or
// FaultClusterCases).
func IsFaultCase(kase string) bool {
	return slices.Contains(FaultCases, kase) || slices.Contains(FaultClusterCases, kase)
}

// clusterWaitWords are what a participant waiting for a cluster says
// (run: --broker-wait, broker.ClusterWait).
var clusterWaitWords = []string{"too few JetStream nodes", "has no JetStream leader"}

// faultRunCluster runs a cluster case as FaultRun does a case of one
// broker: the run's keys with an auditor's and the route secret, three
// broker nodes with the roster, the aggregator and the parties, the fault,
// the run to its end, then asyrevel audit verify over the live cluster
// (as the auditor: a node's store read alone holds no stream, the
// cluster's metadata places it). Lost and Duplicated are the audit's
// counts of gaps and of duplicates or replays.
func faultRunCluster(ctx context.Context, c FaultConfig, kase, runID string) (FaultRow, error) {
	t0 := time.Now()
	row := FaultRow{Case: kase, Trust: true, TrainingOnSeconds: -1, FirstEvalAfter: -1}
	if kase == FaultClusterNode {
		row.KillAfter = c.KillAfter
	} else {
		row.Down = c.Down
	}
	// A case that stalls ends (its processes killed) rather than hangs.
	ctx, cancel := context.WithTimeout(ctx, clusterCaseLimit)
	defer cancel()
	if c.NoTrust {
		return row, fmt.Errorf("%s: the cluster cases run with the trust layer only (keys, roster, route secret)", kase)
	}
	if c.Party == 0 {
		c.Party = 2
	}
	var (
		keys     = filepath.Join(c.Dir, runID+"-keys")
		roster   = filepath.Join(keys, "roster.json")
		receipts = filepath.Join(c.Dir, runID+"-receipts")
		secret   = filepath.Join(keys, trust.RouteSecretFile)
		auditor  = filepath.Join(keys, trust.AuditorID+".nk")
	)
	out, err := exec.CommandContext(ctx, c.Binary, "keys", "--run", runID, "--parties", strconv.Itoa(c.Parties), "--out", keys,
		"--auditor", "--route").CombinedOutput()
	if err != nil {
		return row, fmt.Errorf("%s: asyrevel keys: %w: %s", kase, err, strings.TrimSpace(string(out)))
	}
	var clientPorts, routePorts, urls, routes []string
	for range 3 {
		cp, err := freePort()
		if err != nil {
			return row, err
		}
		rp, err := freePort()
		if err != nil {
			return row, err
		}
		clientPorts, routePorts = append(clientPorts, cp), append(routePorts, rp)
		urls = append(urls, "nats://127.0.0.1:"+cp)
		routes = append(routes, "nats://127.0.0.1:"+rp)
	}
	nodeName := func(i int) string { return "n" + strconv.Itoa(i+1) }
	nodeArgs := func(i int) []string {
		return []string{"broker", "--store", filepath.Join(c.Dir, runID+"-"+nodeName(i)), "--port", clientPorts[i],
			"--cluster-name", "faults", "--server-name", nodeName(i), "--cluster-port", routePorts[i],
			"--routes", strings.Join(routes, ","), "--route-secret", secret, "--roster", roster, "--log", "warn"}
	}
	nodes := make([]*proc, 3)
	var all []*proc
	defer func() {
		for _, p := range all {
			select {
			case <-p.done:
			default:
				_ = p.cmd.Process.Signal(os.Interrupt)
				select {
				case <-p.done:
				case <-time.After(10 * time.Second):
					_ = p.cmd.Process.Kill()
					<-p.done
				}
			}
		}
	}()
	startNode := func(i int) error {
		p, err := c.start(ctx, runID+"-"+nodeName(i), nodeArgs(i)...)
		if err != nil {
			return err
		}
		nodes[i] = p
		all = append(all, p)
		if err := p.waitFor("listening on", 30*time.Second); err != nil {
			return fmt.Errorf("%s: broker %s: %w", kase, nodeName(i), err)
		}
		return nil
	}
	up := 3
	if kase == FaultClusterDown {
		up = 2
	}
	for i := range up {
		if err := startNode(i); err != nil {
			return row, err
		}
	}
	// Each participant's home node first, the others for fail-over.
	home := func(i int) string {
		return strings.Join([]string{urls[i%3], urls[(i+1)%3], urls[(i+2)%3]}, ",")
	}
	level := faultsLogLevel()
	common := []string{"--run", runID, "--privacy", "off", "--parties", strconv.Itoa(c.Parties), "--data", c.Data,
		"--batch", strconv.Itoa(c.Batch), "--seed", strconv.FormatUint(c.Seed, 10), "--log", level,
		"--checkpoint-dir", filepath.Join(c.Dir, "checkpoints"), "--checkpoint-every", "250ms", "--wait", "60s", "--roster", roster}
	if c.Test != "" {
		common = append(common, "--test", c.Test)
	}
	outDir := filepath.Join(c.Dir, runID)
	aggArgs := append([]string{"aggregator", "--nats", home(0), "--steps", strconv.FormatInt(c.Steps, 10), "--out", outDir, "--eval-every", "500ms",
		"--key", filepath.Join(keys, trust.AggregatorID+".nk")}, common...)
	parties := make([]*proc, c.Parties+1)
	for m := 1; m <= c.Parties; m++ {
		p, err := c.start(ctx, fmt.Sprintf("%s-party-%d", runID, m), append([]string{"party", "--id", strconv.Itoa(m), "--nats", home(m),
			"--window", strconv.Itoa(c.Window), "--key", filepath.Join(keys, trust.PartyID(m)+".nk"),
			"--receipts", filepath.Join(receipts, trust.PartyID(m))}, common...)...)
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
	for _, p := range append([]*proc{agg}, parties[1:]...) {
		p.mu.Lock()
		p.want = append(p.want, clusterWaitWords...)
		p.mu.Unlock()
	}

	var back float64 // FaultClusterNode: the training time when the cluster was back
	switch kase {
	case FaultClusterDown:
		// The participants wait, and say why.
		said := func() bool {
			for _, w := range clusterWaitWords {
				if _, ok := agg.when(w); ok {
					return true
				}
			}
			return false
		}
		deadline := time.Now().Add(max(c.Down, 20*time.Second))
		for !said() && time.Now().Before(deadline) {
			if _, ok := agg.when("training starts"); ok {
				return row, fmt.Errorf("%s: training started with 2 of the 3 nodes a stream of 3 copies needs", kase)
			}
			select {
			case <-agg.done:
				return row, fmt.Errorf("%s: the aggregator ended while the third node was down: %v (log: %s)", kase, agg.err, filepath.Join(c.Dir, runID+"-aggregator.log"))
			case <-time.After(20 * time.Millisecond):
			}
		}
		if !said() {
			return row, fmt.Errorf("%s: the aggregator did not say why it waits (%q) within 20 s", kase, clusterWaitWords)
		}
		time.Sleep(c.Down)
		started := time.Now()
		if err := startNode(2); err != nil {
			return row, err
		}
		if err := agg.waitFor("training starts", 2*time.Minute); err != nil {
			return row, fmt.Errorf("%s: aggregator after the third node started: %w", kase, err)
		}
		at, _ := agg.when("training starts")
		row.RecoverySeconds = at.Sub(started).Seconds()
	case FaultClusterNode:
		if err := agg.waitFor("training starts", 2*time.Minute); err != nil {
			return row, fmt.Errorf("%s: aggregator: %w", kase, err)
		}
		w, err := watchStream(ctx, strings.Join(urls, ","), auditor, runID)
		if err != nil {
			return row, fmt.Errorf("%s: watching the stream: %w", kase, err)
		}
		defer w.Close()
		time.Sleep(c.KillAfter)
		si, err := w.info(ctx)
		if err != nil || si.Cluster == nil || si.Cluster.Leader == "" {
			return row, fmt.Errorf("%s: the stream's leader: %v", kase, err)
		}
		victim := slices.IndexFunc([]string{nodeName(0), nodeName(1), nodeName(2)}, func(n string) bool { return n == si.Cluster.Leader })
		if victim < 0 {
			return row, fmt.Errorf("%s: stream leader %q is none of the nodes", kase, si.Cluster.Leader)
		}
		before := si.State.Msgs
		_ = nodes[victim].cmd.Process.Kill()
		killed := time.Now()
		row.Killed = nodes[victim].diedOf(syscall.SIGKILL)
		if !row.Killed {
			return row, fmt.Errorf("%s: node %s did not die of kill -9", kase, nodeName(victim))
		}
		// Recovery: until the stream has grown by 100 messages past what
		// it held at the kill, read through the surviving nodes.
		for row.RecoverySeconds == 0 {
			if time.Since(killed) > 2*time.Minute {
				return row, fmt.Errorf("%s: the stream did not grow within 2 minutes of the kill of %s (it held %d)", kase, nodeName(victim), before)
			}
			if si, err := w.info(ctx); err == nil && si.State.Msgs >= before+100 && si.Cluster != nil && si.Cluster.Leader != nodeName(victim) {
				row.RecoverySeconds = time.Since(killed).Seconds()
			}
			select {
			case <-agg.done:
				if row.RecoverySeconds == 0 {
					row.RecoverySeconds = time.Since(killed).Seconds() // ended meanwhile: at most this
				}
			case <-time.After(20 * time.Millisecond):
			}
		}
		c.Log.Info().Str("case", kase).Str("killed", nodeName(victim)).Uint64("messages_at_kill", before).
			Float64("recovery_s", row.RecoverySeconds).Msg("stream leader killed")
		// The aggregator does not resume here (it fails over): its
		// training time is the time since training started.
		if start, ok := agg.when("training starts"); ok {
			back = killed.Add(time.Duration(row.RecoverySeconds * float64(time.Second))).Sub(start).Seconds()
		}
	}

	if err := agg.wait(ctx); err != nil {
		return row, fmt.Errorf("%s: aggregator: %w (log: %s)", kase, err, filepath.Join(c.Dir, runID+"-aggregator.log"))
	}
	row.FirstEvalAfter = -1
	if back > 0 {
		if ts, err := curveTimes(outDir); err == nil {
			row.FirstEvalAfter = firstPointAfter(ts, back)
		}
	}
	for m := 1; m <= c.Parties; m++ {
		if err := parties[m].wait(ctx); err != nil {
			return row, fmt.Errorf("%s: party %d: %w", kase, m, err)
		}
	}
	if err := readFaultSummary(&row, outDir, all); err != nil {
		return row, fmt.Errorf("%s: %w", kase, err)
	}
	// The audit reads the live cluster through the nodes still up.
	var live []string
	for i, p := range nodes {
		select {
		case <-p.done:
		default:
			live = append(live, urls[i])
		}
	}
	auditErr := c.auditVerifyArgs(ctx, &row, runID, []string{"audit", "verify", "--nats", strings.Join(live, ","), "--key", auditor,
		"--run", runID, "--roster", roster, "--receipts", receipts, "--json"})
	if a := row.Audit; a != nil {
		row.Lost = int64(a.Counts[string(trust.ProblemGap)] + a.Counts[string(trust.ProblemStreamGap)] + a.Counts[string(trust.ProblemTruncated)])
		row.Duplicated = int64(a.Counts[string(trust.ProblemDuplicate)] + a.Counts[string(trust.ProblemReplay)])
	}
	row.Seconds = time.Since(t0).Seconds()
	c.Log.Info().Str("case", kase).Str("acc", fmt.Sprintf("%.2f%%", 100*row.Accuracy)).Int64("lost", row.Lost).
		Int64("duplicated", row.Duplicated).Float64("recovery_s", row.RecoverySeconds).Float64("first_eval_after_s", row.FirstEvalAfter).
		Float64("max_eval_gap_s", row.EvalGap).Int64("rejected", row.Rejected).Bool("audit_ok", row.AuditOK).Int64("audit_problems", row.AuditProblems).Msg("fault case done")
	if auditErr != nil {
		return row, fmt.Errorf("%s: %w", kase, auditErr)
	}
	return row, nil
}

// streamWatch reads a run's stream info as the roster's auditor.
type streamWatch struct {
	nc  *nats.Conn
	js  jetstream.JetStream
	rn  string
	key *trust.Key
}

func watchStream(ctx context.Context, urls, keyFile, runID string) (*streamWatch, error) {
	k, err := trust.ReadKeyFile(keyFile)
	if err != nil {
		return nil, err
	}
	// The key signs every (re)connection's nonce: kept until Close.
	nc, err := nats.Connect(urls, k.NATSOption(), nats.CustomInboxPrefix(trust.InboxPrefix(runID, trust.AuditorID)),
		nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		k.Wipe()
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		k.Wipe()
		return nil, err
	}
	return &streamWatch{nc: nc, js: js, rn: runID, key: k}, nil
}

func (w *streamWatch) info(ctx context.Context) (*jetstream.StreamInfo, error) {
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := w.js.Stream(ictx, broker.StreamName(w.rn))
	if err != nil {
		return nil, err
	}
	return st.Info(ictx)
}

func (w *streamWatch) Close() {
	w.nc.Close()
	w.key.Wipe()
}

// auditVerifyArgs runs asyrevel audit verify with args (ending in
// --json), keeps its report in c.Dir/RUN-audit.json and fills in row's
// audit fields, as auditVerify does for a store.
func (c *FaultConfig) auditVerifyArgs(ctx context.Context, row *FaultRow, runID string, args []string) error {
	cmd := exec.CommandContext(ctx, c.Binary, args...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	path := filepath.Join(c.Dir, runID+"-audit.json")
	if err := os.WriteFile(path, []byte(stdout.String()), 0o644); err != nil {
		return err
	}
	var rep trust.AuditReport
	if err := json.Unmarshal([]byte(stdout.String()), &rep); err != nil {
		return fmt.Errorf("asyrevel audit verify: %v: %s", runErr, strings.TrimSpace(stderr.String()))
	}
	row.AuditProblems = 0
	for _, n := range rep.Counts {
		row.AuditProblems += int64(n)
	}
	row.AuditReceipts = rep.Receipts
	row.Audit = &rep
	row.AuditOK = runErr == nil && rep.Intact()
	if row.AuditOK {
		return nil
	}
	var first []string
	for _, p := range rep.Problems[:min(3, len(rep.Problems))] {
		first = append(first, p.String())
	}
	return fmt.Errorf("%w: %d problems (%s; the report: %s)", ErrAudit, row.AuditProblems, strings.Join(first, "; "), path)
}
