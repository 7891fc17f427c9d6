package experiment

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/internal/atomicfile"
	"github.com/asyrevel/asyrevel/internal/wan"
	"github.com/asyrevel/asyrevel/run"
	"github.com/asyrevel/asyrevel/serve"
	"github.com/asyrevel/asyrevel/trust"
)

// ServeConfig is the serving experiment: batch throughput, online latency
// and the memory of a party's index.
type ServeConfig struct {
	Data, Test string        // a9a's training and test files
	Parties    int           // default 8
	Rates      []float64     // online request rates (default 100, 1000, 5000)
	Duration   time.Duration // per online rate (default 10 s)
	Repeats    int           // batch repetitions per bus (default 3)
	IndexIDs   int           // ids of the memory measurement (default 1,000,000)
	// LinkDelay is the round trip a proxy adds to the last party's
	// broker connection (half each way) for the slow-link rows (default
	// 20 ms); LinkRates their request rates (default 100, 1000).
	LinkDelay time.Duration
	LinkRates []float64
	Dir       string // working folder
	Log       zerolog.Logger
}

// ServeRow is one line of results/serve.csv.
type ServeRow struct {
	Kind   string  // batch, online, memory
	Bus    string  // memory, jetstream-tcp, jetstream-inprocess
	Signed bool    // messages signed and verified
	Rate   float64 // online: requests a second offered
	Value  float64 // batch: predictions/s (best of the repeats); memory: bytes per party
	P50    float64 // online latencies, ms
	P99    float64
	P999   float64
	OK     int64 // online: 200 answers
	Failed int64 // online: other answers or errors
	Note   string
}

// ServeResult is the experiment's outcome.
type ServeResult struct {
	Rows     []ServeRow
	Accuracy float64 // predict's accuracy on the test set
	TrainAcc float64 // the run's test_accuracy
	TestRows int
}

// Serve runs the serving experiment: it trains models on cfg.Data with
// every participant in one process, then measures batch predictions per
// second on cfg.Test for the memory bus and the embedded broker (TCP and
// in-process), single-id request latencies of the HTTP service at each
// rate (parties on the broker over TCP loopback, signed), and the memory
// a party's id index takes for IndexIDs ids.
func Serve(ctx context.Context, cfg ServeConfig) (*ServeResult, error) {
	cfg.defaults()
	return serveRun(ctx, cfg)
}

func (cfg *ServeConfig) defaults() {
	if cfg.Parties == 0 {
		cfg.Parties = 8
	}
	if len(cfg.Rates) == 0 {
		cfg.Rates = []float64{100, 1000, 5000}
	}
	if cfg.Duration == 0 {
		cfg.Duration = 10 * time.Second
	}
	if cfg.Repeats == 0 {
		cfg.Repeats = 3
	}
	if cfg.IndexIDs == 0 {
		cfg.IndexIDs = 1_000_000
	}
	if cfg.LinkDelay == 0 {
		cfg.LinkDelay = 20 * time.Millisecond
	}
	if len(cfg.LinkRates) == 0 {
		cfg.LinkRates = []float64{100, 1000}
	}
}

func serveRun(ctx context.Context, cfg ServeConfig) (*ServeResult, error) {
	// The index first, on a quiet heap.
	mem := indexMemory(cfg.IndexIDs)
	out := filepath.Join(cfg.Dir, "run")
	cfg.Log.Info().Msg("serve: training the models (8 parties, 3,000 steps)")
	s, err := run.Train(ctx, run.New(func(c *run.Config) {
		c.Data = cfg.Data
		c.Test = cfg.Test
		c.Parties = cfg.Parties
		c.MaxSteps = 3000
		c.Out = out
		c.NoLeakage = true
	}), run.Hooks{})
	if err != nil {
		return nil, err
	}
	res := &ServeResult{TrainAcc: s.TestAccuracy}
	models := run.ModelsDir(out)
	for _, bus := range []struct {
		bus       string
		inProcess bool
	}{{"memory", false}, {"jetstream", false}, {"jetstream", true}} {
		best, name := 0.0, ""
		for range cfg.Repeats {
			m, err := serve.Predict(ctx, serve.PredictConfig{Models: models, Data: cfg.Test, Net: serve.NetConfig{Bus: bus.bus, InProcess: bus.inProcess}, Log: zerolog.Nop()})
			if err != nil {
				return nil, err
			}
			res.Accuracy, res.TestRows, name = m.Accuracy, m.Rows, m.Bus
			best = max(best, m.PerSecond)
		}
		cfg.Log.Info().Str("bus", name).Float64("predictions_per_s", best).Msg("serve: batch")
		res.Rows = append(res.Rows, ServeRow{Kind: "batch", Bus: name, Signed: true, Value: best,
			Note: fmt.Sprintf("a9a test, %d rows, %d parties, best of %d", res.TestRows, cfg.Parties, cfg.Repeats)})
	}
	for _, v := range []struct{ signed, link bool }{{true, false}, {false, false}, {true, true}} {
		rows, err := serveOnline(ctx, cfg, models, v.signed, v.link)
		if err != nil {
			return nil, err
		}
		res.Rows = append(res.Rows, rows...)
	}
	res.Rows = append(res.Rows, mem)
	return res, nil
}

// serveOnline measures the HTTP service's latency at each rate; with
// link, the last party's broker connection goes through a proxy that adds
// cfg.LinkDelay to each round trip.
func serveOnline(ctx context.Context, cfg ServeConfig, models string, signed, link bool) ([]ServeRow, error) {
	dc := serve.DeployConfig{Models: models, Data: cfg.Test, Timeout: time.Second, Log: cfg.Log}
	rates, bus := cfg.Rates, ""
	if link {
		var proxy *wan.Proxy
		defer func() {
			if proxy != nil {
				proxy.Close()
			}
		}()
		dc.PartyURL = func(m int, url string) (string, error) {
			if m != cfg.Parties {
				return "", nil
			}
			u, err := neturl.Parse(url)
			if err != nil {
				return "", err
			}
			if proxy, err = wan.Start(fmt.Sprintf("party-%d", m), u.Host, wan.Link{Delay: cfg.LinkDelay / 2}); err != nil {
				return "", err
			}
			return proxy.URL(), nil
		}
		rates, bus = cfg.LinkRates, fmt.Sprintf("-party-%d-behind-%v-proxy", cfg.Parties, cfg.LinkDelay)
	}
	d, err := deployMaybeUnsigned(ctx, dc, signed)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	// Without client tokens: the rows measure scoring (the tokens' cost is
	// serve's BenchmarkServiceAuth, with and without them in one run).
	svc := serve.NewService(serve.ServiceConfig{Scorer: d.Scorer, Labels: d.Set.Aggregator.Labels, InsecureNoAuth: true})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: svc.Handler()}
	go srv.Serve(ln)
	defer srv.Close()
	linkNote := ""
	if link {
		linkNote = fmt.Sprintf(", party %d's broker connection behind a proxy adding %v a round trip (%v each way)", cfg.Parties, cfg.LinkDelay, cfg.LinkDelay/2)
	}
	// One request at a time, without HTTP: the service's own latency and
	// CPU a request.
	var seq []float64
	c0 := cpuTime()
	for i := range 1000 {
		t0 := time.Now()
		if _, err := d.Scorer.Score(ctx, []string{d.IDs[i%len(d.IDs)]}); err != nil {
			return nil, err
		}
		seq = append(seq, float64(time.Since(t0))/float64(time.Millisecond))
	}
	cpuEach := float64(cpuTime()-c0) / float64(time.Millisecond) / 1000
	slices.Sort(seq)
	rows := []ServeRow{{Kind: "sequential", Bus: d.Net.Name + bus, Signed: signed, Value: cpuEach * 1000, P50: seq[500], P99: seq[990], P999: seq[999], OK: 1000,
		Note: fmt.Sprintf("1,000 single-id Score calls one after the other, no HTTP%s; value: CPU microseconds a request (all participants); load average %s", linkNote, loadAvg())}}
	url := "http://" + ln.Addr().String() + "/v1/predict"
	// At most 2,000 connections: a saturated service makes the requests
	// queue in the client (their latency counts from the scheduled send)
	// instead of exhausting the process's files.
	client := &http.Client{Transport: &http.Transport{MaxIdleConns: 2000, MaxIdleConnsPerHost: 2000, MaxConnsPerHost: 2000}, Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	for _, rate := range rates {
		r := loadAt(ctx, client, url, d.IDs, rate, cfg.Duration)
		r.Bus, r.Signed = d.Net.Name+bus, signed
		r.Note = fmt.Sprintf("single-id POST /v1/predict, open loop for %v, %d parties, HTTP and parties on one machine%s; load average %s before", cfg.Duration, cfg.Parties, linkNote, loadAvg())
		cfg.Log.Info().Bool("signed", signed).Bool("link", link).Float64("rate", rate).Float64("p50_ms", r.P50).Float64("p99_ms", r.P99).Float64("p999_ms", r.P999).Int64("failed", r.Failed).Msg("serve: online")
		rows = append(rows, r)
	}
	return rows, nil
}

// deployMaybeUnsigned deploys with the run's keys (signed) or with none.
func deployMaybeUnsigned(ctx context.Context, dc serve.DeployConfig, signed bool) (*serve.Deployment, error) {
	if signed {
		dc.Keys = ""
		return serve.Deploy(ctx, dc)
	}
	dc.Keys = serve.NoKeys
	return serve.Deploy(ctx, dc)
}

// loadAvg is the machine's 1-minute load average ("?" if unknown).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}

// loadAt sends single-id requests at rate a second for dur (open loop:
// latency counts from the scheduled send, so a stall is not hidden) and
// returns the latency percentiles.
func loadAt(ctx context.Context, client *http.Client, url string, ids []string, rate float64, dur time.Duration) ServeRow {
	n := int(rate * dur.Seconds())
	interval := time.Duration(float64(time.Second) / rate)
	lat := make([]float64, n)
	ok := make([]bool, n)
	var wg sync.WaitGroup
	rng := rand.New(rand.NewPCG(1, uint64(rate)))
	start := time.Now()
	for i := range n {
		at := start.Add(time.Duration(i) * interval)
		if d := time.Until(at); d > 0 {
			time.Sleep(d)
		}
		if ctx.Err() != nil {
			n = i
			break
		}
		body := `{"ids":["` + ids[rng.IntN(len(ids))] + `"]}`
		wg.Go(func() {
			resp, err := client.Post(url, "application/json", strings.NewReader(body))
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				ok[i] = resp.StatusCode == 200
			}
			lat[i] = float64(time.Since(at)) / float64(time.Millisecond)
		})
	}
	wg.Wait()
	lat, ok = lat[:n], ok[:n]
	r := ServeRow{Kind: "online", Rate: rate}
	var good []float64
	for i, v := range lat {
		if ok[i] {
			r.OK++
			good = append(good, v)
		} else {
			r.Failed++
		}
	}
	slices.Sort(good)
	pct := func(p float64) float64 {
		if len(good) == 0 {
			return 0
		}
		return good[min(len(good)-1, int(p*float64(len(good))))]
	}
	r.P50, r.P99, r.P999 = pct(0.5), pct(0.99), pct(0.999)
	return r
}

// indexMemory measures the heap a party's id index takes for n ids (the
// ids as strings and the map from id to row).
func indexMemory(n int) ServeRow {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = "C" + strconv.Itoa(10_000_000+i)
	}
	index, _ := serve.Index(ids)
	runtime.GC()
	runtime.ReadMemStats(&after)
	bytes := float64(after.HeapAlloc) - float64(before.HeapAlloc)
	runtime.KeepAlive(index)
	runtime.KeepAlive(ids)
	return ServeRow{Kind: "memory", Value: bytes, Note: fmt.Sprintf("heap of a party's id index: %d ids of 9 bytes (the ids and the map from id to row), without the rows", n)}
}

// WriteServe writes dir/serve.csv, records the run (command, settings)
// and writes the report again.
func WriteServe(dir string, cfg ServeConfig, r *ServeResult, command string, started time.Time) error {
	cfg.defaults()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	w.Write([]string{"kind", "bus", "signed", "rate", "value", "p50_ms", "p99_ms", "p999_ms", "ok", "failed", "note"})
	for _, row := range r.Rows {
		w.Write([]string{row.Kind, row.Bus, strconv.FormatBool(row.Signed), fmt.Sprint(row.Rate), fmt.Sprintf("%.0f", row.Value),
			fmt.Sprintf("%.3f", row.P50), fmt.Sprintf("%.3f", row.P99), fmt.Sprintf("%.3f", row.P999), fmt.Sprint(row.OK), fmt.Sprint(row.Failed), row.Note})
	}
	w.Flush()
	if err := atomicfile.WriteBytes(filepath.Join(dir, "serve.csv"), 0o666, b.Bytes()); err != nil {
		return err
	}
	return WriteSection(dir, Section{
		Name: "serve", Command: command, Started: started, Duration: time.Since(started),
		Settings: []string{
			fmt.Sprintf("%d parties, a9a, rates %v, %v each; slow link: +%v round trip to party %d, rates %v", cfg.Parties, cfg.Rates, cfg.Duration, cfg.LinkDelay, cfg.Parties, cfg.LinkRates),
			fmt.Sprintf("models of an a9a run of %d parties; batch requests of 4,096 ids, 4 in flight; signing every %d messages or %v", cfg.Parties, trust.DefaultEvery, trust.DefaultMaxDelay),
		},
	})
}
