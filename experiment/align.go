package experiment

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/asyrevel/asyrevel/run"
)

// AlignConfig is the align experiment: private entity alignment against
// its lower bound and a plain hashed join, every case in its own process.
type AlignConfig struct {
	Cases   []AlignCase
	Out     string // results folder (align.csv, REPORT.md)
	Command string // the command line, for the report
	// Process is the process that runs case c and prints its
	// AlignBenchResult as JSON on its standard output (asyrevel
	// experiment align --one).
	Process func(ctx context.Context, c AlignCase) *exec.Cmd
}

// AlignCase is one configuration of the align
type AlignCase struct {
	Orgs    int
	IDs     int
	Overlap float64
}

// AlignCases are the align experiment's cases, QuickAlignCases those of
// --quick.
var (
	AlignCases = []AlignCase{{Orgs: 2, IDs: 10_000, Overlap: 0.5}, {Orgs: 2, IDs: 100_000, Overlap: 0.5}, {Orgs: 2, IDs: 1_000_000, Overlap: 0.5},
		{Orgs: 3, IDs: 100_000, Overlap: 0.3}, {Orgs: 8, IDs: 100_000, Overlap: 0.5}}
	QuickAlignCases = []AlignCase{{Orgs: 2, IDs: 10_000, Overlap: 0.5}, {Orgs: 2, IDs: 100_000, Overlap: 0.5},
		{Orgs: 3, IDs: 20_000, Overlap: 0.3}, {Orgs: 8, IDs: 10_000, Overlap: 0.5}}
)

// AlignRow is one measured case.
type AlignRow struct {
	AlignBenchResult
	BoundSeconds float64 `json:"bound_seconds"`
	PeakRSS      int64   `json:"peak_rss"`
	CPUSeconds   float64 `json:"cpu_seconds"` // user + system time of the case's process
	// The 1-minute load average when the case started and ended.
	LoadStart, LoadEnd float64
}

// LocalRatio is the protocol's CPU time over its hashes and
// multiplications at the group costs measured around it, in its process.
func (r *AlignRow) LocalRatio() float64 {
	sizes := make([]int, r.Orgs)
	for i := range sizes {
		sizes[i] = r.IDs
	}
	return r.AlignBenchResult.CPUSeconds / r.Costs.Bound(sizes, 1)
}

// Share is the share of the machine's cores the protocol got: its CPU
// time over wall time times cores.
func (r *AlignRow) Share(cores int) float64 {
	return r.AlignBenchResult.CPUSeconds / (r.Seconds * float64(cores))
}

// Alone estimates the protocol's wall time had its process had the cores
// to itself: its CPU time spread over the cores for the part of the time
// the Go scheduler had work for them (1 - IdleShare).
func (r *AlignRow) Alone(cores int) float64 {
	return r.AlignBenchResult.CPUSeconds / float64(cores) / max(1-r.IdleShare, 1e-9)
}

// load1 is the 1-minute load average, or NaN.
func load1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 1 {
		if v, err := strconv.ParseFloat(f[0], 64); err == nil {
			return v
		}
	}
	return math.NaN()
}

// Align runs every case of cfg in its own process, compares it with the
// bound from the group costs measured here, writes align.csv and the
// report, and says what it measured on stdout (the cases'
// progress goes to stderr).
func Align(ctx context.Context, cfg AlignConfig, stdout, stderr io.Writer) error {
	t0 := time.Now()
	costs := MeasureGroupCosts(3000)
	cores := runtime.GOMAXPROCS(0)
	fmt.Fprintf(stdout, "group costs on one core: hash-to-group %.1f µs, scalar multiplication %.1f µs, encode %.1f µs, decode %.1f µs; %d cores\n",
		1e6*costs.Hash, 1e6*costs.Mult, 1e6*costs.Encode, 1e6*costs.Decode, cores)
	var rows []AlignRow
	for _, c := range cfg.Cases {
		var out, errb bytes.Buffer
		load0 := load1()
		cmd := cfg.Process(ctx, c)
		cmd.Stdout = &out
		cmd.Stderr = io.MultiWriter(&errb, stderr)
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("case %d organisations of %d ids: %w\n%s", c.Orgs, c.IDs, err, errb.String())
		}
		var r AlignRow
		if err := json.Unmarshal(out.Bytes(), &r.AlignBenchResult); err != nil {
			return fmt.Errorf("case %d organisations of %d ids: %w", c.Orgs, c.IDs, err)
		}
		sizes := make([]int, c.Orgs)
		for i := range sizes {
			sizes[i] = c.IDs
		}
		r.BoundSeconds = costs.Bound(sizes, cores)
		r.PeakRSS = peakRSS(cmd.ProcessState)
		r.CPUSeconds = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
		r.LoadStart, r.LoadEnd = load0, load1()
		rows = append(rows, r)
		fmt.Fprintf(stdout, "%d organisations of %d ids (overlap %g): %d in common, %.1f s (bound %.1f s, %.2fx; CPU %.1f s against %.1f s, %.2fx), %s peak, %.1f wire bytes an id, plain join %.3f s, correct %v\n",
			r.Orgs, r.IDs, r.Overlap, r.Intersection, r.Seconds, r.BoundSeconds, r.Seconds/r.BoundSeconds,
			r.CPUSeconds, r.BoundSeconds*float64(cores), r.CPUSeconds/(r.BoundSeconds*float64(cores)), run.MB(r.PeakRSS),
			float64(r.WireBytes)/float64(r.Orgs*r.IDs), r.PlainJoinSeconds, r.Correct)
		fmt.Fprintf(stdout, "  the protocol: %.1f CPU s, %.2fx its operations at the costs measured around it (hash %.1f µs, multiplication %.1f µs); %.0f%% of the %d cores' time (load average %.1f at the start, %.1f at the end); the Go scheduler idle %.2f%%, collecting %.2f%%; with the cores to itself about %.1f s, %.2fx the bound\n",
			r.AlignBenchResult.CPUSeconds, r.LocalRatio(), 1e6*r.Costs.Hash, 1e6*r.Costs.Mult,
			100*r.Share(cores), cores, r.LoadStart, r.LoadEnd, 100*r.IdleShare, 100*r.GCShare, r.Alone(cores), r.Alone(cores)/r.BoundSeconds)
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return err
	}
	header := []string{"orgs", "ids_per_org", "overlap", "intersection", "seconds", "bound_seconds", "ratio", "cpu_seconds", "bound_cpu_seconds", "cpu_ratio", "peak_rss_mb",
		"wire_bytes", "wire_bytes_per_id", "wire_bytes_per_org_id", "messages", "plain_join_seconds", "correct", "hash_us", "mult_us", "cores",
		"protocol_cpu_seconds", "local_hash_us", "local_mult_us", "protocol_cpu_ratio_local", "core_share", "go_idle_share", "gc_share", "load_start", "load_end", "alone_seconds", "alone_ratio"}
	var recs [][]string
	ff := func(v float64, p int) string { return strconv.FormatFloat(v, 'f', p, 64) }
	allOK := true
	for _, r := range rows {
		ratio := r.Seconds / r.BoundSeconds
		cpuRatio := r.CPUSeconds / (r.BoundSeconds * float64(cores))
		perID := float64(r.WireBytes) / float64(r.Orgs*r.IDs)
		perOrgID := float64(r.WireBytes) / float64(r.IDs)
		recs = append(recs, []string{strconv.Itoa(r.Orgs), strconv.Itoa(r.IDs), ff(r.Overlap, 2), strconv.Itoa(r.Intersection), ff(r.Seconds, 2),
			ff(r.BoundSeconds, 2), ff(ratio, 3), ff(r.CPUSeconds, 2), ff(r.BoundSeconds*float64(cores), 2), ff(cpuRatio, 3), ff(float64(r.PeakRSS)/(1<<20), 0), strconv.FormatInt(r.WireBytes, 10), ff(perID, 1), ff(perOrgID, 1),
			strconv.FormatInt(r.Messages, 10), ff(r.PlainJoinSeconds, 4), strconv.FormatBool(r.Correct), ff(1e6*costs.Hash, 2), ff(1e6*costs.Mult, 2), strconv.Itoa(cores),
			ff(r.AlignBenchResult.CPUSeconds, 2), ff(1e6*r.Costs.Hash, 2), ff(1e6*r.Costs.Mult, 2), ff(r.LocalRatio(), 3), ff(r.Share(cores), 3), ff(r.IdleShare, 4), ff(r.GCShare, 4), ff(r.LoadStart, 2), ff(r.LoadEnd, 2), ff(r.Alone(cores), 2), ff(r.Alone(cores)/r.BoundSeconds, 3)})
		allOK = allOK && r.Correct
	}
	if err := run.WriteCSV(filepath.Join(cfg.Out, "align.csv"), header, recs); err != nil {
		return err
	}
	sec := Section{Name: "align", Command: cfg.Command, Started: t0, Duration: time.Since(t0)}
	if err := WriteSection(cfg.Out, sec); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s and %s\n", filepath.Join(cfg.Out, "align.csv"), filepath.Join(cfg.Out, ReportFile))
	if !allOK {
		return fmt.Errorf("an alignment differs from the plain intersection")
	}
	return nil
}

// ParseAlignCases parses ORGS:IDS:OVERLAP cases, comma-separated.
func ParseAlignCases(s string) ([]AlignCase, error) {
	var out []AlignCase
	for _, c := range strings.Split(s, ",") {
		if c = strings.TrimSpace(c); c == "" {
			continue
		}
		p := strings.Split(c, ":")
		if len(p) != 3 {
			return nil, fmt.Errorf("%q: want ORGS:IDS:OVERLAP", c)
		}
		o, err1 := strconv.Atoi(p[0])
		n, err2 := strconv.Atoi(p[1])
		v, err3 := strconv.ParseFloat(p[2], 64)
		if err1 != nil || err2 != nil || err3 != nil || o < 2 || n < 1 || !(v >= 0 && v <= 1) {
			return nil, fmt.Errorf("%q: want ORGS >= 2, IDS >= 1, OVERLAP in [0,1]", c)
		}
		out = append(out, AlignCase{Orgs: o, IDs: n, Overlap: v})
	}
	return out, nil
}
