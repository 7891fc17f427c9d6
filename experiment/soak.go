package experiment

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/run"
)

// SoakConfig configures the soak experiment: one long run of `asyrevel
// train` (its own process, the embedded broker inside it, or a broker
// process of its own with Separate) whose resident memory and store size
// are sampled.
type SoakConfig struct {
	Binary    string
	Dir       string
	Data      string
	Test      string
	Parties   int
	Duration  time.Duration
	Every     time.Duration // sampling period (default 5s)
	Transport string        // --transport ("" = the default design)
	Separate  bool          // the broker as a process of its own
	// Reference is the time of the sample the end is compared with
	// (default one minute, or a fifth of Duration if that is shorter).
	Reference time.Duration
	Seed      uint64
	Log       zerolog.Logger
}

// SoakSample is one sample.
type SoakSample struct {
	Seconds    float64
	RSS        int64 // the training process, bytes
	BrokerRSS  int64 // the broker process with Separate, bytes
	StoreBytes int64
}

// SoakResult is the soak's outcome.
type SoakResult struct {
	Samples      []SoakSample
	Steps        int64
	StoreBytes   int64
	BytesPerStep float64
	TestAccuracy float64
	Reference    time.Duration
	// RSSRef and RSSEnd are the medians of the resident memory of the
	// process that holds the broker over the window that starts at
	// Reference and over the last window (Window: a minute, or a fifth of
	// the run if shorter): single samples swing by up to 10% with the
	// garbage collector's cycles. RSSLast is the last sample.
	RSSRef, RSSEnd, RSSLast int64
	Window                  time.Duration
	Growth                  float64 // RSSEnd / RSSRef - 1
	LastGrowth              float64 // RSSLast / RSSRef - 1
	Flat                    bool    // Growth within 10%
}

// procRSS is the resident memory of process pid in bytes (0 if unknown:
// Linux's /proc only).
func procRSS(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

func treeSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// Soak runs the soak experiment.
func Soak(ctx context.Context, c SoakConfig) (*SoakResult, error) {
	if c.Every <= 0 {
		c.Every = 5 * time.Second
	}
	if c.Reference <= 0 {
		c.Reference = min(time.Minute, c.Duration/5)
	}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return nil, err
	}
	out := filepath.Join(c.Dir, "soak")
	store := filepath.Join(out, "stream")
	args := []string{"train", "--data", c.Data, "--parties", strconv.Itoa(c.Parties), "--duration", c.Duration.String(),
		"--out", out, "--log", "warn", "--seed", strconv.FormatUint(c.Seed, 10), "--run", "soak"}
	if c.Test != "" {
		args = append(args, "--test", c.Test)
	}
	if c.Transport != "" {
		args = append(args, "--transport", c.Transport)
	}
	if c.Separate {
		store = filepath.Join(c.Dir, "store")
		_ = os.RemoveAll(store)
		url, stop, err := StartBroker(ctx, c.Binary, c.Dir)
		if err != nil {
			return nil, err
		}
		defer stop()
		args = append(args, "--nats", url)
	}
	cmd := exec.CommandContext(ctx, c.Binary, args...)
	logf, err := os.Create(filepath.Join(c.Dir, "soak.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	brokerPid := 0
	if c.Separate {
		brokerPid = findBroker(c.Dir)
	}
	res := &SoakResult{Reference: c.Reference}
	t0 := time.Now()
	tick := time.NewTicker(c.Every)
	defer tick.Stop()
	for running := true; running; {
		select {
		case err := <-done:
			if err != nil {
				return nil, fmt.Errorf("soak run: %w (log: %s)", err, logf.Name())
			}
			running = false
		case <-tick.C:
			s := SoakSample{Seconds: time.Since(t0).Seconds(), RSS: procRSS(cmd.Process.Pid), StoreBytes: treeSize(store)}
			if brokerPid > 0 {
				s.BrokerRSS = procRSS(brokerPid)
			}
			if s.RSS > 0 {
				res.Samples = append(res.Samples, s)
				c.Log.Info().Str("t", fmt.Sprintf("%.0fs", s.Seconds)).Str("rss", run.MB(s.RSS)).Str("broker_rss", run.MB(s.BrokerRSS)).
					Str("store", run.MB(s.StoreBytes)).Msg("soak")
			}
		}
	}
	var sum run.Summary
	raw, err := os.ReadFile(filepath.Join(out, "summary.json"))
	if err == nil {
		err = json.Unmarshal(raw, &sum)
	}
	if err != nil {
		return nil, fmt.Errorf("soak summary: %w", err)
	}
	res.Steps, res.TestAccuracy = sum.Steps, sum.TestAccuracy
	res.StoreBytes = treeSize(store)
	if res.Steps > 0 {
		res.BytesPerStep = float64(res.StoreBytes) / float64(res.Steps)
	}
	mem := func(s SoakSample) int64 {
		if c.Separate {
			return s.BrokerRSS
		}
		return s.RSS
	}
	res.Window = c.Reference
	summarizeRSS(res, mem)
	return res, nil
}

// summarizeRSS sets the medians RSSRef (the window from Reference on) and
// RSSEnd (the last window), RSSLast, Growth and Flat.
func summarizeRSS(res *SoakResult, mem func(SoakSample) int64) {
	n := len(res.Samples)
	if n == 0 {
		return
	}
	ref0, w := res.Reference.Seconds(), res.Window.Seconds()
	end := res.Samples[n-1].Seconds
	var first, last []int64
	for _, s := range res.Samples {
		if v := mem(s); v > 0 && s.Seconds >= ref0 && s.Seconds < ref0+w {
			first = append(first, v)
		}
		if v := mem(s); v > 0 && s.Seconds > end-w {
			last = append(last, v)
		}
	}
	res.RSSLast = mem(res.Samples[n-1])
	res.RSSRef, res.RSSEnd = median64(first), median64(last)
	if res.RSSRef > 0 {
		res.Growth = float64(res.RSSEnd)/float64(res.RSSRef) - 1
		res.LastGrowth = float64(res.RSSLast)/float64(res.RSSRef) - 1
		res.Flat = res.Growth <= 0.10
	}
}

// median64 is the median of v (the lower middle of an even count; 0 if
// v is empty).
func median64(v []int64) int64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	return v[(len(v)-1)/2]
}

// findBroker finds the pid of the broker process whose store is in dir.
func findBroker(dir string) int {
	entries, _ := os.ReadDir("/proc")
	want := filepath.Join(dir, "store")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), "broker") && strings.Contains(string(b), want) {
			return pid
		}
	}
	return 0
}

// WriteSoak writes dir/soak.csv.
func WriteSoak(dir string, r *SoakResult) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var recs [][]string
	for _, s := range r.Samples {
		recs = append(recs, []string{fmt.Sprintf("%.1f", s.Seconds), fmt.Sprintf("%.1f", float64(s.RSS)/(1<<20)),
			fmt.Sprintf("%.1f", float64(s.BrokerRSS)/(1<<20)), fmt.Sprintf("%.1f", float64(s.StoreBytes)/(1<<20))})
	}
	if err := run.WriteCSV(filepath.Join(dir, "soak.csv"), []string{"seconds", "rss_mb", "broker_rss_mb", "store_mb"}, recs); err != nil {
		return err
	}
	return record(dir, "soak")
}
