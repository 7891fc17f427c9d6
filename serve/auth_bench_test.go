package serve_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/serve"
)

// BenchmarkServiceAuth measures the HTTP service's single-id latency with
// and without client tokens in one run: one deployment (benchDeploy:
// ASYREVEL_BENCH_RUN's models over the embedded broker, signed), three
// HTTP fronts on it, and an open-loop load of ASYREVEL_BENCH_RATE
// requests a second (default 1,000) that visits the fronts in turn, in
// slices of ASYREVEL_BENCH_SLICE (default 2 s), for ASYREVEL_BENCH_ROUNDS
// rounds (default 5), each round starting with the next front: so each
// front sees the same rate, interleaved in time with the others on the
// same machine.
//
//   - none: no authentication and no access log (the service before
//     tokens);
//   - insecure: --insecure-no-auth, with the access log;
//   - tokens: a client token checked, the client's bucket, the access log.
//
// Latency counts from the scheduled send (a stall is not hidden). Run with
// -benchtime 1x; it reports p50, p99 and p99.9 of each front in ms and
// the ratio of the p99s (tokens / none).
func BenchmarkServiceAuth(b *testing.B) {
	rate, slice, rounds := 1000.0, 2*time.Second, 5
	fmt.Sscan(os.Getenv("ASYREVEL_BENCH_RATE"), &rate)
	if s, err := time.ParseDuration(os.Getenv("ASYREVEL_BENCH_SLICE")); err == nil {
		slice = s
	}
	fmt.Sscan(os.Getenv("ASYREVEL_BENCH_ROUNDS"), &rounds)
	d := benchDeploy(b, true, "")
	dir := b.TempDir()
	var clients serve.Clients
	tok, err := clients.Issue("bench", serve.IssueOptions{Rate: 1e9, Burst: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	auth, err := serve.NewAuth(serve.AuthConfig{Clients: &clients})
	if err != nil {
		b.Fatal(err)
	}
	key, err := serve.MakeAccessKey(filepath.Join(dir, serve.AccessKeyFile))
	if err != nil {
		b.Fatal(err)
	}
	type front struct {
		name, url, auth string
		lat             []float64
		failed          int
	}
	var fronts []*front
	for _, v := range []struct {
		name     string
		insecure bool
		auth     *serve.Auth
		logged   bool
	}{{"none", true, nil, false}, {"insecure", true, nil, true}, {"tokens", false, auth, true}} {
		cfg := serve.ServiceConfig{Scorer: d.Scorer, Labels: d.Set.Aggregator.Labels, InsecureNoAuth: v.insecure, Auth: v.auth}
		if v.logged {
			al, err := serve.OpenAccessLog(filepath.Join(dir, v.name+".log"), key)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { al.Close() })
			cfg.Access = al
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		srv := &http.Server{Handler: serve.NewService(cfg).Handler()}
		go srv.Serve(ln)
		b.Cleanup(func() { srv.Close() })
		f := &front{name: v.name, url: "http://" + ln.Addr().String() + "/v1/predict"}
		if v.auth != nil {
			f.auth = "Bearer " + tok
		}
		fronts = append(fronts, f)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConns: 2000, MaxIdleConnsPerHost: 2000, MaxConnsPerHost: 2000}, Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	load, _ := os.ReadFile("/proc/loadavg")
	b.ResetTimer()
	for range b.N {
		// Warm every front's connections first.
		for _, f := range fronts {
			openLoop(ctx, client, f.url, f.auth, d.IDs, rng, rate, 300*time.Millisecond)
		}
		for r := range rounds {
			for k := range fronts { // each round starts with another front
				f := fronts[(r+k)%len(fronts)]
				lat, failed := openLoop(ctx, client, f.url, f.auth, d.IDs, rng, rate, slice)
				f.lat = append(f.lat, lat...)
				f.failed += failed
			}
		}
	}
	b.StopTimer()
	loadAfter, _ := os.ReadFile("/proc/loadavg")
	p99 := map[string]float64{}
	for _, f := range fronts {
		slices.Sort(f.lat)
		pct := func(p float64) float64 { return f.lat[min(len(f.lat)-1, int(p*float64(len(f.lat))))] }
		p99[f.name] = pct(0.99)
		b.ReportMetric(pct(0.5), "p50-ms/"+f.name)
		b.ReportMetric(pct(0.99), "p99-ms/"+f.name)
		b.ReportMetric(pct(0.999), "p99.9-ms/"+f.name)
		b.Logf("%-8s %6d requests at %.0f/s, %d failed: p50 %.3f ms, p99 %.3f ms, p99.9 %.3f ms", f.name, len(f.lat), rate, f.failed, pct(0.5), pct(0.99), pct(0.999))
		if f.failed > 0 {
			b.Errorf("%s: %d requests failed", f.name, f.failed)
		}
	}
	b.ReportMetric(p99["tokens"]/p99["none"], "p99-ratio-tokens/none")
	b.Logf("p99 tokens/none %.3f, insecure/none %.3f; %d parties, %d ids; load average before %s after %s",
		p99["tokens"]/p99["none"], p99["insecure"]/p99["none"], d.Set.Aggregator.Parties, len(d.IDs),
		strings.TrimSpace(string(load)), strings.TrimSpace(string(loadAfter)))
}

// openLoop sends single-id requests at rate a second for dur, each at its
// scheduled time whatever the answers before it, and returns the latency
// (ms, from the scheduled time) of the answered ones and the count of the
// others.
func openLoop(ctx context.Context, client *http.Client, url, auth string, ids []string, rng *rand.Rand, rate float64, dur time.Duration) ([]float64, int) {
	n := int(rate * dur.Seconds())
	interval := time.Duration(float64(time.Second) / rate)
	lat := make([]float64, n)
	ok := make([]bool, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		at := start.Add(time.Duration(i) * interval)
		if w := time.Until(at); w > 0 {
			time.Sleep(w)
		}
		body := `{"ids":["` + ids[rng.IntN(len(ids))] + `"]}`
		wg.Go(func() {
			req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
			if err != nil {
				return
			}
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			resp, err := client.Do(req)
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				ok[i] = resp.StatusCode == 200
			}
			lat[i] = float64(time.Since(at)) / float64(time.Millisecond)
		})
	}
	wg.Wait()
	var good []float64
	failed := 0
	for i, v := range lat {
		if ok[i] {
			good = append(good, v)
		} else {
			failed++
		}
	}
	return good, failed
}
