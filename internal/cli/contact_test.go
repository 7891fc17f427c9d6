package cli

// Tests of issue 11, "first contact": each drives the command line as a new
// user would and fails on the code before the issue was addressed.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/run"
	"github.com/asyrevel/asyrevel/trust"
)

// runCLICtx is runCLI with a context.
func runCLICtx(ctx context.Context, args ...string) (code int, stdout, stderr string) {
	var o, e syncBuffer
	code = execute(ctx, args, &o, &e)
	return code, o.String(), e.String()
}

// syncBuffer is a bytes.Buffer safe for the concurrent writes of loggers.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// writeCSV writes a CSV file with a label in the first column under a name
// that is not a usual label name ("Outcome", 0/1, 63% zeros), two features
// that predict it on very different scales ("age" 20..80, "income" about
// 1e5), a 0/1 column, and last a float column with hundreds of distinct
// values ("score").
func writeCSV(t *testing.T, dir string, n int) string {
	return writeCSVSeed(t, dir, "people.csv", n, 7)
}

func writeCSVSeed(t *testing.T, dir, name string, n int, seed uint64) string {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 11))
	var b strings.Builder
	b.WriteString("Outcome,age,income,flag,score\n")
	for i := range n {
		y := 0
		if rng.Float64() < 0.37 {
			y = 1
		}
		age := 20 + 60*rng.Float64()
		if y == 1 {
			age = 45 + 35*rng.Float64()
		}
		income := 1e5 * (0.5 + rng.Float64())
		fmt.Fprintf(&b, "%d,%.1f,%.0f,%d,%.4f\n", y, age, income, i%2, rng.NormFloat64())
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Item 1: a run id used twice on one store stops at once with the cause
// and the fix, instead of hanging.
func TestReusedRunID(t *testing.T) {
	t.Parallel()
	store := t.TempDir()
	args := []string{"train", "--data", "synthetic:n=2000,d=8,test=400", "--parties", "2", "--epochs", "2",
		"--batch", "16", "--window", "2", "--log", "warn", "--run", "again", "--store", store}
	if code, _, errOut := runCLI(t, args...); code != 0 {
		t.Fatalf("first run: exit %d: %s", code, errOut)
	}
	// A hang is not timed: it runs into the long deadline, whose cancel
	// ends the run with an interrupt's status and words, not exit 1 with
	// the cause below.
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	code, _, errOut := runCLICtx(ctx, args...)
	if code != 1 || ctx.Err() != nil {
		t.Fatalf("second run with the same --run: exit %d (deadline: %v), want 1 at once: %s", code, ctx.Err(), errOut)
	}
	for _, want := range []string{"run again already has", store, "--run", "store rm"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("the message does not say %q: %s", want, errOut)
		}
	}
}

// startBroker starts an embedded broker for separate-process style tests.
func startBroker(t *testing.T) string {
	t.Helper()
	srv, err := broker.StartServer(context.Background(), broker.ServerConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return srv.URL()
}

type result struct {
	code        int
	out, errOut string
	took        time.Duration
}

func goCLI(ctx context.Context, args ...string) <-chan result {
	ch := make(chan result, 1)
	go func() {
		t0 := time.Now()
		code, o, e := runCLICtx(ctx, args...)
		ch <- result{code, o, e, time.Since(t0)}
	}()
	return ch
}

// Item 2: a party given the wrong data file is told why it is refused and
// exits non-zero; the others wait for it, and carry on when it comes back
// with the right file.
func TestRefusedPartyCarryOn(t *testing.T) {
	t.Parallel()
	url := startBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	common := []string{"--nats", url, "--run", "refuse", "--parties", "2", "--batch", "16", "--log", "warn", "--checkpoint-dir", t.TempDir()}
	good := "synthetic:n=2000,d=8,test=400"
	p1 := goCLI(ctx, append([]string{"party", "--id", "1", "--data", good}, common...)...)
	agg := goCLI(ctx, append([]string{"aggregator", "--data", good, "--epochs", "3", "--join-wait", "30s"}, common...)...)
	bad := <-goCLI(ctx, append([]string{"party", "--id", "2", "--data", "synthetic:n=2500,d=8,test=400"}, common...)...)
	if bad.code != 1 || !strings.Contains(bad.errOut, "refused") || !strings.Contains(bad.errOut, "2500") {
		t.Fatalf("wrong file: exit %d after %v, want 1 with the reason: %s", bad.code, bad.took, bad.errOut)
	}
	fixed := <-goCLI(ctx, append([]string{"party", "--id", "2", "--data", good}, common...)...)
	if fixed.code != 0 {
		t.Fatalf("party 2 with the right file: exit %d: %s", fixed.code, fixed.errOut)
	}
	if r := <-agg; r.code != 0 || !strings.Contains(r.out, "test accuracy") {
		t.Fatalf("aggregator: exit %d: %s%s", r.code, r.out, r.errOut)
	}
	if r := <-p1; r.code != 0 {
		t.Fatalf("party 1: exit %d: %s", r.code, r.errOut)
	}
}

// rosterBroker makes run's keys (q parties) and starts an embedded broker
// that admits only the roster's users, with the run's stream; it returns
// the server, its store folder and the keys folder.
func rosterBroker(t *testing.T, runID string, q int) (*broker.Server, string, string) {
	t.Helper()
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	if code, _, errOut := runCLI(t, "keys", "--run", runID, "--parties", fmt.Sprint(q), "--out", keys); code != 0 {
		t.Fatalf("keys: exit %d: %s", code, errOut)
	}
	roster, err := trust.ReadRoster(filepath.Join(keys, "roster.json"))
	if err != nil {
		t.Fatal(err)
	}
	rb, err := run.NewRosterBroker(roster)
	if err != nil {
		t.Fatal(err)
	}
	store := filepath.Join(dir, "store")
	srv, err := broker.StartServer(context.Background(), broker.ServerConfig{Dir: store, Configure: rb.Configure})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	if err := rb.CreateStream(context.Background(), srv); err != nil {
		t.Fatal(err)
	}
	return srv, store, keys
}

// Separate participants with the trust layer on, on a broker that admits
// only the roster's users: a party and then the aggregator are stopped
// and started again with --resume; the party from its first checkpoint
// (as if killed -9 right after it: it computes again the requests,
// evaluations and receipts it sent since, and must not send them twice),
// the aggregator from the one it saved when stopped (SIGTERM). The run
// ends, no receiver rejects a message, and the whole log passes audit
// verify.
func TestSeparateResumeTrusted(t *testing.T) {
	t.Parallel()
	srv, store, keys := rosterBroker(t, "sepres", 2)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	ckDir := t.TempDir()
	common := []string{"--nats", srv.URL(), "--run", "sepres", "--parties", "2", "--batch", "16", "--log", "warn", "--privacy", labelled,
		"--roster", filepath.Join(keys, "roster.json"), "--checkpoint-dir", ckDir, "--checkpoint-every", "200ms", "--data", "synthetic:n=2000,d=8,test=400"}
	ck2 := run.CheckpointPath(ckDir, "sepres", 2)
	first2 := make(chan []byte, 1)
	go func() {
		defer close(first2)
		for ctx.Err() == nil {
			if b, err := os.ReadFile(ck2); err == nil {
				first2 <- b
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	key := func(id string) []string { return []string{"--key", filepath.Join(keys, id+".nk")} }
	party := func(ctx context.Context, id string, more ...string) <-chan result {
		return goCLI(ctx, slices.Concat([]string{"party", "--id", id, "--window", "2"}, key("party-"+id), common, more)...)
	}
	aggregator := func(ctx context.Context, more ...string) <-chan result {
		return goCLI(ctx, slices.Concat([]string{"aggregator", "--eval-every", "500ms", "--seal-every", "250ms"}, key("aggregator"), common, more)...)
	}
	// Each stop waits for the event it follows (a checkpoint written),
	// never for a time: on a busy host party 2 had not started training
	// 1.2 s after its start, and left no checkpoint to put back. The first
	// aggregator runs until it is stopped; the resumed one for 3 s of
	// training in all.
	p1 := party(ctx, "1")
	c2, stop2 := context.WithCancelCause(ctx)
	p2 := party(c2, "2")
	ca, stopA := context.WithCancelCause(ctx)
	agg := aggregator(ca, "--duration", "10m")
	b, ok := <-first2
	if !ok {
		t.Fatal("no first checkpoint of party 2 to put back")
	}
	stop2(errors.New("terminated"))
	if r := <-p2; r.code != exitPaused {
		t.Fatalf("party 2 stopped: exit %d, want %d (paused): %s", r.code, exitPaused, r.errOut)
	}
	if err := os.WriteFile(ck2, b, 0o600); err != nil {
		t.Fatal(err)
	}
	p2 = party(ctx, "2", "--resume")
	// The resumed party has gone on once it saves a checkpoint of its own.
	for ctx.Err() == nil {
		if now, err := os.ReadFile(ck2); err == nil && !bytes.Equal(now, b) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	stopA(errors.New("terminated"))
	if r := <-agg; r.code != exitPaused {
		t.Fatalf("aggregator stopped: exit %d, want %d (paused): %s", r.code, exitPaused, r.errOut)
	}
	ra := <-aggregator(ctx, "--resume", "--duration", "3s")
	r1, r2 := <-p1, <-p2
	for name, r := range map[string]result{"aggregator resumed": ra, "party 1": r1, "party 2 resumed": r2} {
		if r.code != 0 || strings.Contains(r.errOut, "rejected message") || strings.Contains(r.errOut, "trust-") ||
			strings.Contains(r.errOut, "not countersigning") || strings.Contains(r.errOut, "differs from the one in the stream") {
			t.Errorf("%s: exit %d: %s", name, r.code, r.errOut)
		}
	}
	if !strings.Contains(ra.out, "resumed") {
		t.Errorf("the aggregator did not say it resumed: %s", ra.out)
	}
	srv.Shutdown()
	code, out, errOut := runCLI(t, "audit", "verify", "--store", store, "--run", "sepres", "--roster", filepath.Join(keys, "roster.json"))
	// Nothing sent twice: no message of the log was refused by its
	// receiver (a receipt countersigned again and sent again would be).
	if code != 0 || !strings.Contains(out, "intact") || !strings.Contains(out, "party-2      rcpt ") || strings.Contains(out, "rejected by their receiver") {
		t.Errorf("audit verify: exit %d: %s%s", code, out, errOut)
	}
	t.Logf("aggregator: %s\nparty 2 resumed: %s\naudit:\n%s", ra.out, r2.errOut, out)
}

// Issue 12 with the trust layer on, on a broker that admits only the
// roster's users: the refused party's new process restarts its chains
// (signed, after the earlier attempt's messages), the aggregator accepts
// it, the run ends, and the whole log passes audit verify.
func TestRefusedPartyRejoinsTrusted(t *testing.T) {
	t.Parallel()
	srv, store, keys := rosterBroker(t, "rejoin", 2)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	common := []string{"--nats", srv.URL(), "--run", "rejoin", "--parties", "2", "--batch", "16", "--log", "warn", "--roster", filepath.Join(keys, "roster.json"), "--checkpoint-dir", t.TempDir()}
	key := func(id string) []string { return []string{"--key", filepath.Join(keys, id+".nk")} }
	good := "synthetic:n=2000,d=8,test=400"
	p1 := goCLI(ctx, slices.Concat([]string{"party", "--id", "1", "--data", good}, key("party-1"), common)...)
	agg := goCLI(ctx, slices.Concat([]string{"aggregator", "--data", good, "--epochs", "2", "--join-wait", "30s"}, key("aggregator"), common)...)
	bad := <-goCLI(ctx, slices.Concat([]string{"party", "--id", "2", "--data", "synthetic:n=2500,d=8,test=400"}, key("party-2"), common)...)
	if bad.code != 1 || !strings.Contains(bad.errOut, "refused") {
		t.Fatalf("wrong file: exit %d after %v, want 1 with the reason: %s", bad.code, bad.took, bad.errOut)
	}
	fixed := <-goCLI(ctx, slices.Concat([]string{"party", "--id", "2", "--data", good}, key("party-2"), common)...)
	ra, r1 := <-agg, <-p1
	if fixed.code != 0 || ra.code != 0 || r1.code != 0 {
		t.Fatalf("party 2 again: exit %d: %s\naggregator: exit %d: %s\nparty 1: exit %d: %s", fixed.code, fixed.errOut, ra.code, ra.errOut, r1.code, r1.errOut)
	}
	for name, r := range map[string]result{"party 2 again": fixed, "aggregator": ra, "party 1": r1} {
		if strings.Contains(r.errOut, "rejected message") {
			t.Errorf("%s: a receiver rejected a message: %s", name, r.errOut)
		}
	}
	srv.Shutdown()
	code, out, errOut := runCLI(t, "audit", "verify", "--store", store, "--run", "rejoin", "--roster", filepath.Join(keys, "roster.json"))
	if code != 0 || !strings.Contains(out, "intact") || !strings.Contains(out, "chains restarted by their owner (signed): ") {
		t.Errorf("audit verify: exit %d: %s%s", code, out, errOut)
	}
	t.Logf("party 2's first attempt: %v; audit:\n%s", bad.took, out)
}

// Item 2 and liveness: if the refused party does not come back, the
// aggregator gives up after --join-wait and every participant exits
// non-zero with the same reason.
func TestRefusedPartyStopsAll(t *testing.T) {
	t.Parallel()
	url := startBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	common := []string{"--nats", url, "--run", "giveup", "--parties", "2", "--log", "warn", "--checkpoint-dir", t.TempDir()}
	good := "synthetic:n=2000,d=8,test=400"
	p1 := goCLI(ctx, append([]string{"party", "--id", "1", "--data", good}, common...)...)
	p2 := goCLI(ctx, append([]string{"party", "--id", "2", "--data", "synthetic:n=2500,d=8,test=400"}, common...)...)
	agg := goCLI(ctx, append([]string{"aggregator", "--data", good, "--epochs", "3", "--join-wait", "3s"}, common...)...)
	r2, ra, r1 := <-p2, <-agg, <-p1
	if r2.code != 1 || !strings.Contains(r2.errOut, "refused") {
		t.Errorf("refused party: exit %d: %s", r2.code, r2.errOut)
	}
	for name, r := range map[string]result{"aggregator": ra, "party 1": r1} {
		if r.code != 1 || !strings.Contains(r.errOut, "party 2") || !strings.Contains(r.errOut, "2500") || ctx.Err() != nil {
			t.Errorf("%s: exit %d after %v, want 1 naming party 2's refusal: %s", name, r.code, r.took, r.errOut)
		}
	}
}

// Item 3: the label column is never guessed.
func TestLabelColumn(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := writeCSV(t, dir, 600)
	code, out, errOut := runCLI(t, "data", "inspect", path)
	if code != 1 || !strings.Contains(errOut, "--label") {
		t.Errorf("inspect without a label column: exit %d, want 1 and a hint at --label: %s%s", code, out, errOut)
	}
	for _, label := range []string{"Outcome", "0"} {
		code, out, errOut = runCLI(t, "data", "inspect", "--label", label, path)
		if code != 0 || !strings.Contains(out, `"Outcome"`) || !strings.Contains(out, "--label") || !strings.Contains(out, "classes:   2") {
			t.Errorf("inspect --label %s: exit %d: %s%s", label, code, out, errOut)
		}
	}
	code, out, errOut = runCLI(t, "data", "inspect", "--label", "score", path)
	if code != 1 || !strings.Contains(errOut, "classes") {
		t.Errorf("a float column as the label: exit %d, want a refusal: %s%s", code, out, errOut)
	}
	code, _, errOut = runCLI(t, "train", "--data", path, "--label", "Outcome", "--scale", "standard", "--parties", "2", "--epochs", "1", "--log", "warn")
	if code != 0 {
		t.Errorf("train --label: exit %d: %s", code, errOut)
	}
	split := filepath.Join(dir, "split")
	code, out, errOut = runCLI(t, "data", "split", "--parties", "2", "--label", "Outcome", "--test-fraction", "0.2", "--out", split, path)
	if code != 0 || !strings.Contains(out, "4 features") {
		t.Errorf("data split --label: exit %d: %s%s", code, out, errOut)
	}
}

// Item 4: a run that learns nothing says so, and unscaled columns are
// pointed out.
func TestNotLearningWarned(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	train, test := writeCSV(t, dir, 600), writeCSVSeed(t, dir, "test.csv", 300, 8)
	common := []string{"train", "--data", train, "--test", test, "--label", "Outcome", "--parties", "2", "--log", "warn", "--privacy", "off"}
	// A step size that cannot move: the accuracy stays at the share of
	// the larger class.
	code, out, errOut := runCLI(t, append(common, "--scale", "standard", "--epochs", "2", "--lr", "1e-9")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"largest class", "--lr", "--mu", "--scale"} {
		if !strings.Contains(out, want) {
			t.Errorf("the report has no warning mentioning %q: %s", want, out)
		}
	}
	// Without a test set, the training loss tells the same.
	code, out, errOut = runCLI(t, "train", "--data", train, "--label", "Outcome", "--parties", "2", "--log", "warn",
		"--scale", "standard", "--epochs", "2", "--lr", "1e-9", "--privacy", "off")
	if code != 0 || !strings.Contains(out, "no better than predicting the share of each class") {
		t.Errorf("no test set: exit %d, no warning: %s%s", code, out, errOut)
	}
	// Unscaled columns on very different scales are pointed out.
	code, out, errOut = runCLI(t, append(common, "--epochs", "1", "--lr", "1e-12")...)
	if code != 0 || !strings.Contains(errOut, `"income" reaches`) || !strings.Contains(errOut, "--scale standard") {
		t.Errorf("unscaled: exit %d, no warning about the column income: %s%s", code, out, errOut)
	}
	// Scaled, the same data learns and no warning is given.
	code, out, errOut = runCLI(t, append(common, "--scale", "standard", "--epochs", "20")...)
	if code != 0 || strings.Contains(out+errOut, "warning") || strings.Contains(errOut, "WRN") {
		t.Errorf("--scale standard: exit %d, warnings: %s%s", code, out, errOut)
	}
}

// Item 5: the store's size is recorded, runs into one --out do not pile up
// stores, and old stores can be listed and removed.
func TestStoreDisk(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "out")
	args := []string{"train", "--data", "synthetic:n=2000,d=8,test=400", "--parties", "2", "--epochs", "2",
		"--batch", "16", "--window", "2", "--log", "warn", "--out", out}
	for i := range 2 {
		// The second time with the same run id too: a new attempt.
		if code, _, errOut := runCLI(t, append(args, "--run", "same")...); code != 0 {
			t.Fatalf("run %d into the same --out: exit %d: %s", i+1, code, errOut)
		}
	}
	var s struct {
		StoreBytes int64 `json:"store_bytes"`
	}
	if raw, err := readSummary(out, &s); err != nil || s.StoreBytes <= 0 {
		t.Errorf("summary.json lacks the store's size (store_bytes): %v %s", err, raw)
	}
	code, list, errOut := runCLI(t, "store", "list", out)
	if code != 0 || strings.Count(list, "same") != 1 {
		t.Errorf("store list after two runs into one --out: exit %d, want one run: %s%s", code, list, errOut)
	}
	other := t.TempDir()
	keep := filepath.Join(other, "notes.txt")
	os.WriteFile(keep, []byte("mine"), 0o644)
	code, _, errOut = runCLI(t, "store", "rm", other)
	if _, err := os.Stat(keep); code != 1 || err != nil || !strings.Contains(errOut, "not an asyrevel store") {
		t.Errorf("store rm of a folder that is not a store: exit %d, file: %v: %s", code, err, errOut)
	}
	code, _, errOut = runCLI(t, "store", "rm", filepath.Join(out, "stream"))
	if _, err := os.Stat(filepath.Join(out, "stream")); code != 0 || !os.IsNotExist(err) {
		t.Errorf("store rm: exit %d, store still there (%v): %s", code, err, errOut)
	}
}

// Item 6: CSV files as users bring them.
func TestCSVAsUsersBringThem(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// scikit-learn's sample data layout: n_samples,n_features,class names.
	var b strings.Builder
	b.WriteString("90,4,setosa,versicolor,virginica\n")
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 90 {
		c := i % 3
		fmt.Fprintf(&b, "%.1f,%.1f,%.1f,%.1f,%d\n", 5+float64(c)+rng.Float64(), 3+rng.Float64(), 1+2*float64(c)+rng.Float64(), 0.2+float64(c)*0.8, c)
	}
	iris := filepath.Join(dir, "iris.csv")
	os.WriteFile(iris, []byte(b.String()), 0o644)
	code, out, errOut := runCLI(t, "data", "inspect", iris)
	if code != 0 || !strings.Contains(out, "samples:   90") || !strings.Contains(out, "features:  4") || !strings.Contains(out, "virginica") {
		t.Errorf("scikit-learn layout: exit %d: %s%s", code, out, errOut)
	}
	// Lines before the header: --skip-rows.
	notes := filepath.Join(dir, "notes.csv")
	os.WriteFile(notes, []byte("exported by a tool\nversion 3\nid,a,b,label\n1,2,3,0\n2,3,4,1\n3,1,1,0\n"), 0o644)
	if code, out, errOut = runCLI(t, "data", "inspect", "--skip-rows", "2", notes); code != 0 || !strings.Contains(out, "samples:   3") {
		t.Errorf("--skip-rows 2: exit %d: %s%s", code, out, errOut)
	}
	// A text column: the error names the flag that fixes it, and the flag does.
	text := filepath.Join(dir, "text.csv")
	os.WriteFile(text, []byte("id,colour,size,label\n1,red,2,0\n2,blue,3,1\n3,red,1,0\n"), 0o644)
	if code, _, errOut = runCLI(t, "data", "inspect", text); code != 1 || !strings.Contains(errOut, "--categorical colour") {
		t.Errorf("text column: exit %d, want a hint at --categorical: %s", code, errOut)
	}
	if code, out, errOut = runCLI(t, "data", "inspect", "--categorical", "colour", text); code != 0 || !strings.Contains(out, "features:  3") {
		t.Errorf("--categorical colour: exit %d: %s%s", code, out, errOut)
	}
	// Stratified split: both sets keep the classes' shares.
	path := writeCSV(t, dir, 500)
	split := filepath.Join(dir, "split")
	code, _, errOut = runCLI(t, "data", "split", "--parties", "2", "--label", "Outcome", "--scale", "standard",
		"--test-fraction", "0.2", "--stratify", "--out", split, path)
	if code != 0 {
		t.Fatalf("data split --stratify: exit %d: %s", code, errOut)
	}
	var man struct {
		Sets []struct {
			Split       string `json:"split"`
			ClassCounts []int  `json:"class_counts"`
		} `json:"sets"`
	}
	raw, _ := os.ReadFile(filepath.Join(split, "manifest.json"))
	json.Unmarshal(raw, &man)
	if len(man.Sets) != 2 {
		t.Fatalf("manifest: %s", raw)
	}
	share := func(c []int) float64 { return float64(c[1]) / float64(c[0]+c[1]) }
	tr, te := man.Sets[0].ClassCounts, man.Sets[1].ClassCounts
	if d := share(tr) - share(te); d > 0.005 || d < -0.005 {
		t.Errorf("stratified split: class 1 is %.3f of train and %.3f of test", share(tr), share(te))
	}
	// experiment central reads a split folder.
	code, out, errOut = runCLI(t, "experiment", "central", "--data", split)
	if code != 0 || !strings.Contains(out, "test accuracy") {
		t.Errorf("experiment central on a split folder: exit %d: %s%s", code, out, errOut)
	}
}

// signalOnMatch is a log's writer that closes seen once what it holds
// matches re.
type signalOnMatch struct {
	syncBuffer
	re   *regexp.Regexp
	seen chan struct{}
	once sync.Once
}

func (s *signalOnMatch) Write(p []byte) (int, error) {
	n, err := s.syncBuffer.Write(p)
	if s.re.MatchString(s.syncBuffer.String()) {
		s.once.Do(func() { close(s.seen) })
	}
	return n, err
}

// Item 7: Ctrl-C writes the summary and the plot of the part that ran,
// and exits paused (issue 13: checkpoint, flush, summary; issue 35: the
// status of a run that goes on with --resume, 75, not a finished run's).
func TestInterruptWritesSummary(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	// The interrupt comes once a progress line counts steps, not after a
	// fixed 3 s (on a busy machine training had not started by then).
	stepped := &signalOnMatch{re: regexp.MustCompile(`progress .*steps=[1-9]`), seen: make(chan struct{})}
	go func() {
		select {
		case <-stepped.seen:
		case <-time.After(patience):
		}
		cancel(errors.New("interrupt signal received"))
	}()
	var out1 syncBuffer
	code := execute(ctx, []string{"train", "--data", "synthetic:n=4000,d=16,test=500", "--parties", "2",
		"--duration", "60s", "--eval-every", "250ms", "--out", out, "--log", "info", "--run", "intr", "--privacy", "off"}, &out1, stepped)
	stdout, stderr := out1.String(), stepped.String()
	if code != exitPaused {
		t.Errorf("exit %d, want %d (a clean stop on request, paused): %s%s", code, exitPaused, stdout, stderr)
	}
	var s struct {
		Interrupted string  `json:"interrupted"`
		Steps       int64   `json:"steps"`
		Acc         float64 `json:"test_accuracy"`
	}
	if _, err := readSummary(out, &s); err != nil || !strings.Contains(s.Interrupted, "interrupt") || s.Steps == 0 || s.Acc <= 0 {
		t.Errorf("summary after an interrupt: %+v %v", s, err)
	}
	if st, err := os.Stat(filepath.Join(out, "curve.png")); err != nil || st.Size() == 0 {
		t.Errorf("no plot after an interrupt: %v", err)
	}
	// The checkpoints in OUT/checkpoints, the keys in OUT/keys and the
	// stream in OUT/stream let the run go on, the trust layer on: here for
	// one more step, then the final evaluation.
	args := []string{"train", "--data", "synthetic:n=4000,d=16,test=500", "--parties", "2",
		"--steps", "1", "--eval-every", "250ms", "--out", out, "--log", "warn", "--run", "intr", "--resume", "--privacy", "off"}
	code, stdout, stderr = runCLI(t, args...)
	if code != 0 || !strings.Contains(stdout, "resumed from the checkpoint") {
		t.Errorf("train --resume: exit %d: %s%s", code, stdout, stderr)
	}
	if strings.Contains(stderr, "rejected message") {
		t.Errorf("train --resume: a receiver rejected a message: %s", stderr)
	}
	// The whole stream, both parts, passes the audit with the receipts
	// of both parts.
	code, stdout, stderr = runCLI(t, "audit", "verify", "--store", filepath.Join(out, "stream"), "--run", "intr")
	if code != 0 || !strings.Contains(stdout, "intact") {
		t.Errorf("audit verify after the resume: exit %d: %s%s", code, stdout, stderr)
	}
	var r struct {
		Interrupted string `json:"interrupted"`
		Steps       int64  `json:"steps"`
		Resumed     *struct {
			FromSteps  int64  `json:"from_steps"`
			Reapplied  int64  `json:"reapplied"`
			Checkpoint string `json:"checkpoint"`
		} `json:"resumed"`
	}
	// The resumed run restores the steps of the first part (from the
	// checkpoint and the stream: a reply cut off by the interrupt may be
	// missing, and its request is answered again) and makes at least one
	// step more: the step budget counts the whole run, so it is checked
	// once the stream has been applied again, not while it is.
	if _, err := readSummary(out, &r); err != nil || r.Interrupted != "" || r.Resumed == nil ||
		r.Resumed.FromSteps+r.Resumed.Reapplied == 0 || r.Steps <= r.Resumed.FromSteps+r.Resumed.Reapplied {
		t.Fatalf("summary after the resume: %+v %+v (first part: %d steps) %v\n%s%s", r, r.Resumed, s.Steps, err, stdout, stderr)
	}
	t.Logf("first part %d steps; resumed from %d, %d applied again, %d in all", s.Steps, r.Resumed.FromSteps, r.Resumed.Reapplied, r.Steps)
}
