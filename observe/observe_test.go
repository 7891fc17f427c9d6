package observe_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/observe"
	"github.com/asyrevel/asyrevel/run"
)

// scrape reads the metrics at url (nil if they cannot be read).
func scrape(url string) (map[string]*dto.MetricFamily, string) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, ""
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil, ""
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		return nil, ""
	}
	return fams, string(body)
}

// values is each series of a family by its label values joined with ",".
func values(f *dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	if f == nil {
		return out
	}
	for _, m := range f.Metric {
		var ls []string
		for _, l := range m.Label {
			ls = append(ls, l.GetValue())
		}
		var v float64
		switch {
		case m.Counter != nil:
			v = m.Counter.GetValue()
		case m.Gauge != nil:
			v = m.Gauge.GetValue()
		case m.Summary != nil:
			v = float64(m.Summary.GetSampleCount())
		}
		out[strings.Join(ls, ",")] = v
	}
	return out
}

// TestTrainMetricsAndReport scrapes a run of train (embedded broker,
// trust layer on) while it trains: every party's own step count and the
// aggregator's count of its answered requests are there and positive,
// the embedded broker's JetStream figures name the run's stream, the
// names pass Prometheus's lint, and the board's state has the curve. At
// the end, OUT/report.html holds the page with the last state inlined and
// nothing that would load from elsewhere.
func TestTrainMetricsAndReport(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	out := t.TempDir()
	const q = 3
	var mu sync.Mutex
	var metricsAddr, boardAddr string
	listening := make(chan struct{})
	cfg := run.New(func(c *run.Config) {
		c.Synthetic = &dataset.SyntheticConfig{Samples: 4000, TestSamples: 500, Features: 12, Classes: 2, Noise: 0.02, Seed: 1}
		c.Parties, c.Batch, c.Window = q, 16, 2
		// A bound on a hang only: the run stops once a scrape showed
		// what the test reads (StopWhen below). A length of 40,000 steps
		// let a fast machine finish before the first scrape, and a
		// busy one make the 3 minutes run out.
		c.MaxSteps = 10_000_000
		c.EvalEvery = 200 * time.Millisecond
		c.Out = out
		c.Monitor = run.Monitor{Metrics: "127.0.0.1:0", Board: "127.0.0.1:0", Report: true}
	})
	var scrapedOK atomic.Bool
	hooks := run.Hooks{OnListen: func(m, b string) {
		mu.Lock()
		metricsAddr, boardAddr = m, b
		mu.Unlock()
		close(listening)
	}, StopWhen: scrapedOK.Load}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a bound on a hang
	defer cancel()
	type scraped struct {
		fams  map[string]*dto.MetricFamily
		text  string
		state observe.State
	}
	got := make(chan scraped, 1)
	go func() {
		select {
		case <-listening:
		case <-ctx.Done():
			return
		}
		mu.Lock()
		murl, burl := "http://"+metricsAddr+"/metrics", "http://"+boardAddr+"/api/state"
		mu.Unlock()
		for ctx.Err() == nil {
			time.Sleep(200 * time.Millisecond)
			fams, text := scrape(murl)
			steps := values(fams["asyrevel_party_steps_total"])
			ok := len(steps) == q
			for _, v := range steps {
				ok = ok && v > 0
			}
			if !ok || fams["asyrevel_heldout_loss"] == nil {
				continue
			}
			var st observe.State
			if resp, err := http.Get(burl); err == nil {
				json.NewDecoder(resp.Body).Decode(&st)
				resp.Body.Close()
			}
			got <- scraped{fams, text, st}
			scrapedOK.Store(true)
			return
		}
	}()
	s, err := run.Train(ctx, cfg, hooks)
	if err != nil {
		t.Fatal(err)
	}
	var sc scraped
	select {
	case sc = <-got:
	default:
		t.Fatalf("no scrape during the run showed every party's steps (%d steps in all)", s.Steps)
	}
	for _, name := range []string{"asyrevel_party_steps_total", "asyrevel_party_answered_total", "asyrevel_party_requests_total"} {
		v := values(sc.fams[name])
		for m := 1; m <= q; m++ {
			if v[itoa(m)] <= 0 {
				t.Errorf("%s{party=%d} = %v during the run, want > 0", name, m, v[itoa(m)])
			}
		}
	}
	if v := values(sc.fams["asyrevel_steps_total"])[""]; v <= 0 {
		t.Errorf("asyrevel_steps_total = %v", v)
	}
	streams := values(sc.fams["asyrevel_broker_stream_messages"])
	if streams["asyrevel,ASYREVEL_"+s.Run] <= 0 {
		t.Errorf("the embedded broker's figures lack the run's stream: %v", streams)
	}
	if v := values(sc.fams["asyrevel_trust_enabled"])[""]; v != 1 {
		t.Errorf("asyrevel_trust_enabled = %v, want 1 (train's default)", v)
	}
	problems, err := promlint.New(strings.NewReader(sc.text)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "asyrevel_") {
			t.Errorf("lint: %s: %s", p.Metric, p.Text)
		}
	}
	if sc.state.Run != s.Run || sc.state.Points == 0 || len(sc.state.Parties) != q || sc.state.Phase != "training" {
		t.Errorf("board state during the run: run %q, %d points, %d parties, phase %q", sc.state.Run, sc.state.Points, len(sc.state.Parties), sc.state.Phase)
	}

	page, err := os.ReadFile(filepath.Join(out, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	html := string(page)
	const mark = "const REPORT = "
	i := strings.Index(html, mark)
	if i < 0 || strings.Contains(html, "/*DATA*/") {
		t.Fatal("report.html lacks its inlined data")
	}
	var st observe.State
	if err := json.NewDecoder(strings.NewReader(html[i+len(mark):])).Decode(&st); err != nil {
		t.Fatalf("report.html's data: %v", err)
	}
	if !st.Final || st.Phase != "done" || st.Steps != s.Steps || len(st.Curve) != len(s.Curve) || len(st.Curve) == 0 {
		t.Errorf("report: final %v, phase %q, %d steps (run %d), %d points (run %d)", st.Final, st.Phase, st.Steps, s.Steps, len(st.Curve), len(s.Curve))
	}
	for _, ext := range []string{`src="http`, `href="http`, "import(", "@import", "url(http"} {
		if strings.Contains(html, ext) {
			t.Errorf("report.html loads something from elsewhere (%q): it must work offline", ext)
		}
	}
}

func itoa(m int) string { return string(rune('0' + m)) }
