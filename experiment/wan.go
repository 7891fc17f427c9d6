package experiment

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/internal/wan"
	"github.com/asyrevel/asyrevel/run"
)

// WANConfig configures the wide-area experiment: AsyREVEL against
// SynREVEL to a target accuracy over the real broker, every party behind
// a proxy that delays its link (package wan), one party's link slower.
type WANConfig struct {
	Set     Set
	Locate  Locate
	Parties []int
	Algos   []string // default asyrevel-gau, synrevel-gau
	// Link is every party's link; Slow the last party's.
	Link, Slow wan.Link
	Target     float64
	Budget     time.Duration // give up after this much training time
	Batch      int
	Window     int
	Seeds      []uint64
	EvalEvery  time.Duration
	Log        zerolog.Logger
}

// WANRow is one run of the wide-area experiment.
type WANRow struct {
	Parties  int
	Algo     string
	Seed     uint64
	Link     string  // the links, as said by wan.Link
	Seconds  float64 // training time to the target; NaN if not reached within the budget
	Steps    int64   // steps when the run stopped
	Accuracy float64 // test accuracy when the run stopped
	Wall     float64 // the whole run, setup included
}

// WAN runs every configuration: for each number of parties, algorithm
// and seed, an embedded broker on TCP loopback, one proxy per party
// (the last party's link Slow, the others' Link), and a training that
// stops at the target accuracy or the budget. Time to the target is
// wall time measured on the real broker and the delayed links, not
// simulated.
func WAN(ctx context.Context, cfg WANConfig) ([]WANRow, error) {
	algos := cfg.Algos
	if len(algos) == 0 {
		algos = []string{"asyrevel-gau", "synrevel-gau"}
	}
	cache := newLoaded(cfg.Locate)
	var rows []WANRow
	for _, q := range cfg.Parties {
		data, err := cache.split(cfg.Set, q)
		if err != nil {
			return rows, err
		}
		for _, seed := range cfg.Seeds {
			for _, algo := range algos {
				r, err := wanRun(ctx, cfg, data, q, algo, seed)
				if err != nil {
					return rows, fmt.Errorf("wan: %d parties, %s: %w", q, algo, err)
				}
				cfg.Log.Info().Int("parties", q).Str("algo", algo).Uint64("seed", seed).Str("seconds_to_target", fmtF(r.Seconds, 2)).
					Str("accuracy", fmtF(100*r.Accuracy, 2)).Int64("steps", r.Steps).Msg("wan")
				rows = append(rows, r)
			}
		}
	}
	return rows, nil
}

func wanRun(ctx context.Context, cfg WANConfig, data *run.Data, q int, algo string, seed uint64) (WANRow, error) {
	row := WANRow{Parties: q, Algo: algo, Seed: seed, Seconds: math.NaN(), Link: fmt.Sprintf("%v; party %d: %v", cfg.Link, q, cfg.Slow)}
	dir, err := os.MkdirTemp("", "asyrevel-wan-")
	if err != nil {
		return row, err
	}
	defer os.RemoveAll(dir)
	srv, err := broker.StartServer(ctx, broker.ServerConfig{Dir: dir, MaxPayload: 8 << 20})
	if err != nil {
		return row, err
	}
	defer srv.Shutdown()
	urls := make([]string, q+1)
	for m := 1; m <= q; m++ {
		link := cfg.Link
		if m == q {
			link = cfg.Slow
		}
		p, err := wan.Start(fmt.Sprintf("party-%d", m), srv.URL(), link)
		if err != nil {
			return row, err
		}
		defer p.Close()
		urls[m] = p.URL()
	}
	window := cfg.Window
	if algo != "asyrevel-gau" && algo != "asyrevel-uni" {
		window = 1 // SynREVEL runs in rounds: one request in flight a party
	}
	tc := run.New(func(c *run.Config) {
		c.Loaded = data
		c.Parties = q
		c.Algo = algo
		c.Batch = cfg.Batch
		c.Window = window
		c.Privacy = "off"
		c.NATS = srv.URL()
		c.PartyURL = func(m int) string { return urls[m] }
		c.Duration = cfg.Budget
		c.TargetAcc = cfg.Target
		c.StopAtTarget = true
		c.EvalEvery = cfg.EvalEvery
		c.Seed = seed
		c.Run = shortRun()
		c.Log = zerolog.Nop()
	})
	s, err := run.Train(ctx, tc)
	if err != nil {
		return row, err
	}
	if s.TimeToTarget >= 0 {
		row.Seconds = s.TimeToTarget
	}
	row.Steps, row.Accuracy, row.Wall = s.Steps, s.TestAccuracy, s.WallSeconds
	return row, nil
}

// WriteWAN writes rows to dir/wan.csv.
func WriteWAN(dir string, rows []WANRow) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var recs [][]string
	for _, r := range rows {
		recs = append(recs, []string{strconv.Itoa(r.Parties), r.Algo, strconv.FormatUint(r.Seed, 10), r.Link, fmtF(r.Seconds, 3),
			strconv.FormatInt(r.Steps, 10), fmtF(r.Accuracy, 4), fmtF(r.Wall, 2)})
	}
	return run.WriteCSV(filepath.Join(dir, "wan.csv"),
		[]string{"parties", "algo", "seed", "links", "seconds_to_target", "steps", "accuracy", "wall_seconds"}, recs)
}

// WANMedian is the median time to the target of algo's runs with q
// parties: +Inf when most did not reach it, NaN without runs.
func WANMedian(rows []WANRow, q int, algo string) float64 {
	var v []float64
	for _, r := range rows {
		if r.Parties == q && r.Algo == algo {
			s := r.Seconds
			if math.IsNaN(s) {
				s = inf
			}
			v = append(v, s)
		}
	}
	return median(v)
}

// WANSpeedups is, per number of parties, SynREVEL's median time to the
// target over AsyREVEL's (NaN where either never reached it).
func WANSpeedups(rows []WANRow) map[int]float64 {
	med := func(q int, algo string) float64 { return WANMedian(rows, q, algo) }
	out := map[int]float64{}
	for _, r := range rows {
		a, s := med(r.Parties, "asyrevel-gau"), med(r.Parties, "synrevel-gau")
		out[r.Parties] = s / a
		if math.IsInf(a, 0) || math.IsInf(s, 0) || math.IsNaN(a) || math.IsNaN(s) {
			out[r.Parties] = math.NaN()
		}
	}
	return out
}
