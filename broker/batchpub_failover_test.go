package broker_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/internal/freeport"
)

// countWriter counts the debug lines that say 10158 (an answer each), and
// keeps the first of them and the lines above debug.
type countWriter struct {
	n     atomic.Int64
	mu    sync.Mutex
	lines []string
}

func (w *countWriter) Write(p []byte) (int, error) {
	debug := bytes.Contains(p, []byte(`"level":"debug"`))
	n := int64(0)
	if debug && bytes.Contains(p, []byte("10158")) {
		n = w.n.Add(1)
	}
	if n == 1 || !debug {
		w.mu.Lock()
		if len(w.lines) < 20 {
			w.lines = append(w.lines, string(p))
		}
		w.mu.Unlock()
	}
	return len(p), nil
}

func (w *countWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.lines, "")
}

// A loop that moves the stream's leader twice and then kills (SIGKILL) the
// leader's node of a 3-node cluster of processes while three fail-over
// publishers (one on each node) send batches, and then checks that every publisher's flush completes and the
// stream holds every message once. Set ASYREVEL_FAILOVER_LOOP=N to run N
// rounds (a search for a stall of "duplicate message id is in process",
// error 10158, after a fail-over); skipped otherwise.
func TestClusterFailoverLoop(t *testing.T) {
	rounds, _ := strconv.Atoi(os.Getenv("ASYREVEL_FAILOVER_LOOP"))
	if rounds <= 0 {
		t.Skip("set ASYREVEL_FAILOVER_LOOP=N to run N fail-over rounds")
	}
	for r := range rounds {
		t.Run(strconv.Itoa(r), failoverRound)
	}
}

// TestHelperNode is a cluster node in a process of its own for
// TestClusterFailoverLoop (which kills it with SIGKILL): it runs only
// with ASYREVEL_HELPER_NODE=dir,i,port1,port2,port3 set.
func TestHelperNode(t *testing.T) {
	spec := os.Getenv("ASYREVEL_HELPER_NODE")
	if spec == "" {
		t.Skip("a helper process of TestClusterFailoverLoop")
	}
	f := strings.Split(spec, ",")
	i, _ := strconv.Atoi(f[1])
	var ports []int
	for _, s := range f[2:] {
		p, _ := strconv.Atoi(s)
		ports = append(ports, p)
	}
	s, err := startNode(f[0], i, ports, "failover-secret")
	if err != nil {
		fmt.Println("failed", err)
		os.Exit(1)
	}
	fmt.Println("ready", s.URL())
	// Until the parent kills this process, or is gone (its end of stdin
	// closes).
	io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// procCluster starts a 3-node cluster of processes; the URLs, the node
// names and the processes.
func procCluster(t *testing.T) ([]string, []string, []*exec.Cmd) {
	ports, err := freeport.Pick("127.0.0.1", 3)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	urls := make([]string, 3)
	cmds := make([]*exec.Cmd, 3)
	ready := make(chan error, 3)
	for i := range 3 {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestHelperNode$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("ASYREVEL_HELPER_NODE=%s,%d,%d,%d,%d", dir, i, ports[0], ports[1], ports[2]))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		in, err := cmd.StdinPipe() // kept open while the test runs
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { in.Close(); cmd.Process.Kill(); cmd.Wait() })
		cmds[i] = cmd
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if u, ok := strings.CutPrefix(sc.Text(), "ready "); ok {
					urls[i] = u
					ready <- nil
					io.Copy(io.Discard, out)
					return
				}
			}
			ready <- fmt.Errorf("node %d did not start", i+1)
		}()
	}
	for range 3 {
		if err := <-ready; err != nil {
			t.Fatal(err)
		}
	}
	return urls, []string{"n1", "n2", "n3"}, cmds
}

func failoverRound(t *testing.T) {
	urls, names, cmds := procCluster(t)
	run := newRun()
	const pubs = 3
	var buses [pubs]*broker.JetStream
	var logs [pubs]*countWriter
	for i := range pubs {
		list := append([]string{urls[i]}, append(append([]string(nil), urls[:i]...), urls[i+1:]...)...)
		logs[i] = &countWriter{}
		l := zerolog.New(logs[i]).Level(zerolog.DebugLevel)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		b, err := broker.ConnectJetStream(ctx, broker.JetStreamConfig{
			URL: strings.Join(list, ","), Run: run, Name: "p" + strconv.Itoa(i), Replicas: 3,
			Design: broker.DesignOrdered, Retry: true, Logger: &l,
		})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		buses[i] = b
	}
	admin := connectJSConfig(t, broker.JetStreamConfig{URL: urls[0], Run: run, Name: "admin", Replicas: 3})
	js, err := jetstream.New(admin.Conn())
	if err != nil {
		t.Fatal(err)
	}
	prefix := broker.SubjectPrefix(run) + "."
	stop := make(chan struct{})
	var sent [pubs]atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, pubs)
	for i := range pubs {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			for k := 0; ; k++ {
				select {
				case <-stop:
					fctx, fcancel := context.WithTimeout(context.Background(), 40*time.Second)
					defer fcancel()
					if err := buses[i].Flush(fctx); err != nil {
						errs <- fmt.Errorf("publisher %d: final flush: %w", i, err)
					}
					return
				default:
				}
				subj := prefix + "p" + strconv.Itoa(i) + "." + strconv.Itoa(k%2)
				if err := buses[i].Publish(ctx, &broker.Message{Subject: subj, Data: []byte(strconv.Itoa(k))}); err != nil {
					errs <- fmt.Errorf("publisher %d: %w", i, err)
					return
				}
				sent[i].Add(1)
				if k%8 == 7 {
					fctx, fcancel := context.WithTimeout(ctx, 40*time.Second)
					err := buses[i].Flush(fctx)
					fcancel()
					if err != nil {
						errs <- fmt.Errorf("publisher %d: flush: %w", i, err)
						return
					}
				}
			}
		})
	}
	// What the publishers said, and what they hold unconfirmed.
	report := func() {
		for i := range pubs {
			t.Logf("publisher %d: %d unconfirmed, %d answers 10158; %s", i, broker.UnconfirmedPublishes(buses[i]), logs[i].n.Load(), logs[i])
		}
	}
	time.Sleep(300 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The leader moves twice with batches in flight (nodes that were
	// leaders keep what their leadership left in their dedupe lists),
	// then the leader's node is killed.
	for range 2 {
		r, err := admin.Conn().Request("$JS.API.STREAM.LEADER.STEPDOWN."+broker.StreamName(run), nil, 10*time.Second)
		if err != nil || !bytes.Contains(r.Data, []byte(`"success":true`)) {
			t.Logf("stepdown: %v", err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	st, err := js.Stream(ctx, broker.StreamName(run))
	if err != nil {
		report()
		t.Fatalf("stream info after the stepdowns: %v", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		report()
		t.Fatalf("stream info after the stepdowns: %v", err)
	}
	killed := -1
	for i, n := range names {
		if n == info.Cluster.Leader {
			killed = i
		}
	}
	if killed < 0 {
		t.Fatalf("leader %q not found", info.Cluster.Leader)
	}
	if killed == 0 {
		// The admin connection's node: ask another one from now on.
		admin = connectJSConfig(t, broker.JetStreamConfig{URL: urls[1], Run: run, Name: "admin2", Replicas: 3})
		if js, err = jetstream.New(admin.Conn()); err != nil {
			t.Fatal(err)
		}
	}
	cmds[killed].Process.Kill()
	t.Logf("killed node %d, the stream's leader", killed+1)
	time.Sleep(1500 * time.Millisecond)
	close(stop)
	wg.Wait()
	close(errs)
	failed := false
	for err := range errs {
		failed = true
		t.Error(err)
	}
	var total int64
	for i := range pubs {
		total += sent[i].Load()
	}
	if failed {
		report()
		return
	}
	for i := range pubs {
		if n := logs[i].n.Load(); n > 0 {
			t.Logf("publisher %d: %d answers 10158; %s", i, n, logs[i])
		}
	}
	st, err = js.Stream(ctx, broker.StreamName(run))
	if err != nil {
		t.Fatal(err)
	}
	info, err = st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if int64(info.State.Msgs) != total {
		t.Errorf("stream holds %d messages, %d sent", info.State.Msgs, total)
	}
	t.Logf("%d messages; new leader %s", total, info.Cluster.Leader)
}
