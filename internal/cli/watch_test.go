package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/asyrevel/asyrevel/internal/freeport"
)

// findBinary is the path of a Debian package's binary, or "" without it.
func findBinary(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if p := "/usr/bin/" + name; isFile(p) {
		return p
	}
	return ""
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// startProc starts a process of the test, its output in a log file of
// dir that the test names when it fails, and stops it (interrupt, then
// kill) when the test ends.
func startProc(t *testing.T, dir, name string, cmd *exec.Cmd) *exec.Cmd {
	t.Helper()
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	if cmd.Stdout == nil {
		cmd.Stdout = logf
	}
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("%s's output:\n%s", name, tail(string(b), 3000))
		}
	})
	return cmd
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// promQuery asks a Prometheus server's HTTP API for the value of an
// instant query with a single result ("" while it has none).
func promQuery(base, query string) (string, error) {
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(query))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return "", err
	}
	if r.Status != "success" {
		return "", fmt.Errorf("query %s: %s", query, r.Error)
	}
	if len(r.Data.Result) != 1 {
		return "", nil
	}
	v, _ := r.Data.Result[0].Value[1].(string)
	return v, nil
}

// TestPrometheusScrapesTrain runs a real Prometheus server (Debian's
// package: make prometheus-server) on loopback with a configuration of
// its own that scrapes `asyrevel train --metrics` every second, and asks
// its HTTP API, with PromQL, for what must be there during the run: the
// target up, every one of the three parties with steps of its own
// (asyrevel_party_steps_total > 0), and the embedded broker's JetStream
// figures for the run's stream.
func TestPrometheusScrapesTrain(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("short")
	}
	prom := findBinary("prometheus")
	if prom == "" {
		t.Skip("no prometheus binary: make prometheus-server installs Debian's prometheus package (apt-get install prometheus)")
	}
	bin := testBinary(t)
	dir := t.TempDir()
	ports, err := freeport.Pick("127.0.0.1", 2)
	if err != nil {
		t.Fatal(err)
	}
	metrics := "127.0.0.1:" + strconv.Itoa(ports[0])
	promAddr := "127.0.0.1:" + strconv.Itoa(ports[1])
	conf := fmt.Sprintf("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: asyrevel\n    static_configs:\n      - targets: [%q]\n", metrics)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	startProc(t, dir, "train", exec.Command(bin, "train", "--data", "synthetic:n=3000,d=12,test=500,noise=0.02", "--parties", "3",
		"--batch", "16", "--window", "2", "--duration", "3m", "--run", "scraped", "--metrics", metrics, "--log", "warn", "--privacy", labelled))
	startProc(t, dir, "prometheus", exec.Command(prom, "--config.file", filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path", filepath.Join(dir, "tsdb"), "--web.listen-address", promAddr))
	base := "http://" + promAddr
	checks := []struct{ query, want string }{
		{`up{job="asyrevel"}`, "1"},
		{`count(asyrevel_party_steps_total{job="asyrevel"} > 0)`, "3"},
		{`count(asyrevel_party_answered_total{job="asyrevel"} > 0)`, "3"},
		{`asyrevel_broker_stream_messages{stream="ASYREVEL_scraped"} > 0`, ""}, // any value
	}
	deadline := time.Now().Add(patience)
	for _, c := range checks {
		var got string
		var err error
		for time.Now().Before(deadline) {
			if got, err = promQuery(base, c.query); err == nil && got != "" && (c.want == "" || got == c.want) {
				break
			}
			time.Sleep(time.Second)
		}
		if got == "" || c.want != "" && got != c.want {
			t.Fatalf("Prometheus answers %s with %q (%v), want %q", c.query, got, err, c.want)
		}
		t.Logf("%s = %s", c.query, got)
	}
}

// chromium is the path of Debian's chromium, or "" without it.
func chromium() string {
	for _, n := range []string{"chromium", "chromium-browser"} {
		if p := findBinary(n); p != "" {
			return p
		}
	}
	return ""
}

// browserPath is chromium, or under an address-space limit (make test's
// ulimit -S -v) a script that lifts the soft limit first: chromium
// reserves far more address space than it uses and exits at once, without
// a word, under any limit a test binary should have. A hard limit cannot
// be lifted: the test is skipped, saying so.
func browserPath(t *testing.T, path string) string {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_AS, &lim); err != nil || lim.Cur == math.MaxUint64 {
		return path
	}
	if lim.Max != math.MaxUint64 {
		t.Skipf("chromium cannot start under this address-space hard limit (ulimit -H -v %d KiB): make test sets a soft one (ulimit -S -v)", lim.Max>>10)
	}
	script := filepath.Join(t.TempDir(), "chromium")
	body := "#!/bin/sh\nulimit -S -v unlimited\nexec " + strconv.Quote(path) + ` "$@"` + "\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return script
}

// newBrowser starts a headless chromium with the flags this machine needs
// and a new empty profile.
func newBrowser(t *testing.T, ctx context.Context, path string) context.Context {
	actx, cancel := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(path), chromedp.Flag("disable-dev-shm-usage", true), chromedp.Flag("headless", true), chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-quic", true), chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("hide-scrollbars", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 1000))
	t.Cleanup(cancel)
	bctx, cancel2 := chromedp.NewContext(actx)
	t.Cleanup(cancel2)
	return bctx
}

// TestBoardInBrowser loads the aggregator's live board (--board) in a
// real headless chromium (Debian's: make chromium-browser) during a run
// of separate processes (a broker, the aggregator, three parties): the
// learning curve gets points, each party's row says it trains, and once
// party 3 is killed with SIGKILL the page shows it departed, as an event
// and in its row, while the others go on. On the way, party 1's own metrics
// (party --metrics) count its steps and the broker's (broker --metrics)
// the run's stream, and the broker serves nats-server's /jsz. ASYREVEL_BOARD_SCREENSHOT=FILE
// saves a PNG of the page then (docs/board.png).
func TestBoardInBrowser(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("short")
	}
	browser := chromium()
	if browser == "" {
		t.Skip("no chromium: make chromium-browser installs Debian's chromium package (apt-get install chromium)")
	}
	browser = browserPath(t, browser)
	bin := testBinary(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ports, err := freeport.Pick("127.0.0.1", 3)
	if err != nil {
		t.Fatal(err)
	}
	boardAddr := "127.0.0.1:" + strconv.Itoa(ports[0])
	partyMetrics, brokerMetrics := "127.0.0.1:"+strconv.Itoa(ports[1]), "127.0.0.1:"+strconv.Itoa(ports[2])

	keys := filepath.Join(dir, "keys")
	if out, err := exec.Command(bin, "keys", "--run", "watched", "--parties", "3", "--out", keys).CombinedOutput(); err != nil {
		t.Fatalf("keys: %v\n%s", err, out)
	}
	var brokerOut bytes.Buffer
	pr, pw, _ := os.Pipe()
	brk := exec.Command(bin, "broker", "--store", filepath.Join(dir, "store"), "--port", "0", "--roster", filepath.Join(keys, "roster.json"),
		"--metrics", brokerMetrics)
	brk.Stdout = pw
	startProc(t, dir, "broker", brk)
	pw.Close()
	br := bufio.NewReader(pr)
	line, err := br.ReadString('\n')
	for err == nil && !strings.Contains(line, "nats://") {
		brokerOut.WriteString(line)
		line, err = br.ReadString('\n')
	}
	go io.Copy(io.Discard, br) // the broker's later lines
	var natsURL string
	for _, f := range strings.Fields(line) {
		if strings.HasPrefix(f, "nats://") {
			natsURL = f
		}
	}
	if natsURL == "" {
		t.Fatalf("the broker did not say its URL: %v %q %s", err, line, brokerOut.String())
	}
	common := []string{"--nats", natsURL, "--run", "watched", "--parties", "3", "--data", "synthetic:n=4000,d=12,test=1000,noise=0.02", "--privacy", labelled,
		"--batch", "16", "--roster", filepath.Join(keys, "roster.json"), "--log", "info", "--checkpoint-dir", filepath.Join(dir, "ck")}
	parties := make([]*exec.Cmd, 3)
	for i := range parties {
		id := strconv.Itoa(i + 1)
		args := []string{"party", "--id", id, "--window", "2", "--key", filepath.Join(keys, "party-"+id+".nk"), "--sim-compute", "20us"}
		if i == 0 {
			args = append(args, "--metrics", partyMetrics)
		}
		parties[i] = startProc(t, dir, "party-"+id, exec.Command(bin, append(args, common...)...))
	}
	startProc(t, dir, "aggregator", exec.Command(bin, append([]string{"aggregator", "--duration", "3m", "--eval-every", "500ms",
		"--party-timeout", "2s", "--board", boardAddr, "--key", filepath.Join(keys, "aggregator.nk"), "--out", filepath.Join(dir, "out")}, common...)...))

	// The board listens before the data are loaded.
	for i := 0; ; i++ {
		if resp, err := http.Get("http://" + boardAddr + "/"); err == nil {
			resp.Body.Close()
			break
		}
		if i > 300 {
			t.Fatal("the aggregator's board does not answer")
		}
		time.Sleep(100 * time.Millisecond)
	}
	bctx := newBrowser(t, ctx, browser)
	if err := chromedp.Do(bctx, chromedp.Navigate("http://"+boardAddr+"/")); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	wait := func(what, expr string, d time.Duration) {
		t.Helper()
		if _, err := chromedp.Run(bctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(d))); err != nil {
			st, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.body.innerText`))
			t.Fatalf("the page does not show %s (%v); it shows:\n%s", what, err, st)
		}
	}
	wait("a learning curve with points", `+document.getElementById("curve").dataset.points >= 3 &&
		document.querySelector('#curve path[data-series="train_loss"]') !== null`, 90*time.Second)
	wait("every party training", `document.querySelectorAll('#parties tr[data-status="training"]').length === 3`, 30*time.Second)

	// The party's and the broker's own metrics, from their processes.
	for _, c := range []struct{ url, want string }{
		{"http://" + partyMetrics + "/metrics", `asyrevel_party_steps_total{party="1"} `},
		{"http://" + brokerMetrics + "/metrics", `asyrevel_broker_stream_messages{server="asyrevel",stream="ASYREVEL_watched"} `},
		{"http://" + brokerMetrics + "/jsz", `"streams": 1`},
	} {
		body := httpGet(t, c.url)
		i := strings.Index(body, c.want)
		if i < 0 {
			t.Fatalf("%s lacks %q:\n%s", c.url, c.want, tail(body, 2000))
		}
		if strings.HasSuffix(c.want, " ") {
			v, err := strconv.ParseFloat(strings.Fields(body[i+len(c.want):])[0], 64)
			if err != nil || v <= 0 {
				t.Fatalf("%s: %s%v, want > 0", c.url, c.want, body[i+len(c.want):][:20])
			}
		}
	}
	if err := parties[2].Process.Kill(); err != nil {
		t.Fatal(err)
	}
	wait("party 3's departure as an event", `document.querySelector('#events li[data-kind="departed"][data-party="3"]') !== null`, 90*time.Second)
	wait("party 3's row as departed", `document.querySelector('#parties tr[data-party="3"][data-status="departed"]') !== null`, 10*time.Second)
	wait("the others still training", `document.querySelectorAll('#parties tr[data-status="training"]').length === 2`, 10*time.Second)
	points, err := chromedp.Run(bctx, chromedp.Evaluate[int](`+document.getElementById("curve").dataset.points`))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the page shows %d evaluations and party 3's departure", points)
	if path := os.Getenv("ASYREVEL_BOARD_SCREENSHOT"); path != "" {
		time.Sleep(3 * time.Second) // a few more points after the kill
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
