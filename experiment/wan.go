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
	// Arms are the configurations compared; nil means WANArms(Window,
	// Batch).
	Arms []WANArm
	// Link is every party's link; Slow the last party's.
	Link, Slow wan.Link
	Target     float64
	Budget     time.Duration // give up after this much training time
	Batch      int           // samples per request
	Window     int           // AsyREVEL's pipelined window
	Seeds      []uint64
	EvalEvery  time.Duration
	Log        zerolog.Logger
}

// WANArm is one configuration of the comparison: an algorithm with a
// window (requests in flight per party) and a batch (samples per request).
type WANArm struct {
	Algo          string
	Window, Batch int
}

// Pipelined says whether a party keeps more than one request in flight.
func (a WANArm) Pipelined() bool { return a.Window > 1 }

// InFlight is the samples a party has in flight: window times batch.
func (a WANArm) InFlight() int { return a.Window * a.Batch }

func (a WANArm) String() string {
	return fmt.Sprintf("%s window %d batch %d", a.Algo, a.Window, a.Batch)
}

// WANArms are the arms that separate what asynchrony buys from what
// pipelining buys: AsyREVEL with window 1 (the paper's algorithm: one
// request in flight a party) and with the pipelined window, SynREVEL at
// the same batch (its rounds allow one request in flight: a second
// request would be computed on the model the round's reply has not yet
// updated, which is asynchrony), and SynREVEL whose one request carries
// the samples AsyREVEL's window has in flight (batch window*batch): the
// same data a round trip, the nearest SynREVEL gets to pipelining.
func WANArms(window, batch int) []WANArm {
	arms := []WANArm{{"asyrevel-gau", window, batch}}
	if window > 1 {
		arms = append(arms, WANArm{"asyrevel-gau", 1, batch})
	}
	arms = append(arms, WANArm{"synrevel-gau", 1, batch})
	if window > 1 {
		arms = append(arms, WANArm{"synrevel-gau", 1, window * batch})
	}
	return arms
}

// WANRow is one run of the wide-area experiment.
type WANRow struct {
	Parties  int
	Algo     string
	Window   int // requests in flight per party
	Batch    int // samples per request
	Seed     uint64
	Link     string  // the links, as said by wan.Link
	Seconds  float64 // training time to the target; NaN if not reached within the budget
	Steps    int64   // steps when the run stopped
	Accuracy float64 // test accuracy when the run stopped
	Wall     float64 // the whole run, setup included
}

// Arm is the row's configuration.
func (r WANRow) Arm() WANArm { return WANArm{r.Algo, r.Window, r.Batch} }

// WAN runs every configuration: for each number of parties, algorithm
// and seed, an embedded broker on TCP loopback, one proxy per party
// (the last party's link Slow, the others' Link), and a training that
// stops at the target accuracy or the budget. Time to the target is
// wall time measured on the real broker and the delayed links, not
// simulated.
func WAN(ctx context.Context, cfg WANConfig) ([]WANRow, error) {
	arms := cfg.Arms
	if len(arms) == 0 {
		arms = WANArms(cfg.Window, cfg.Batch)
	}
	cache := newLoaded(cfg.Locate)
	var rows []WANRow
	for _, q := range cfg.Parties {
		data, err := cache.split(cfg.Set, q)
		if err != nil {
			return rows, err
		}
		for _, seed := range cfg.Seeds {
			for _, arm := range arms {
				r, err := wanRun(ctx, cfg, data, q, arm, seed)
				if err != nil {
					return rows, fmt.Errorf("wan: %d parties, %v: %w", q, arm, err)
				}
				cfg.Log.Info().Int("parties", q).Str("algo", arm.Algo).Int("window", arm.Window).Int("batch", arm.Batch).
					Uint64("seed", seed).Str("seconds_to_target", fmtF(r.Seconds, 2)).
					Str("accuracy", fmtF(100*r.Accuracy, 2)).Int64("steps", r.Steps).Msg("wan")
				rows = append(rows, r)
			}
		}
	}
	return rows, nil
}

func wanRun(ctx context.Context, cfg WANConfig, data *run.Data, q int, arm WANArm, seed uint64) (WANRow, error) {
	row := WANRow{Parties: q, Algo: arm.Algo, Window: arm.Window, Batch: arm.Batch, Seed: seed, Seconds: math.NaN(),
		Link: fmt.Sprintf("%v; party %d: %v", cfg.Link, q, cfg.Slow)}
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
	tc := run.New(func(c *run.Config) {
		c.Parties = q
		c.Algo = arm.Algo
		c.Batch = arm.Batch
		c.Window = arm.Window
		c.Privacy = "off"
		c.NATS = srv.URL()
		c.Duration = cfg.Budget
		c.TargetAcc = cfg.Target
		c.StopAtTarget = true
		c.EvalEvery = cfg.EvalEvery
		c.Seed = seed
		c.Run = shortRun()
	})
	s, err := run.Train(ctx, tc, run.Hooks{Loaded: data, PartyURL: func(m int) string { return urls[m] }})
	if err != nil {
		return row, err
	}
	if s.TimeToTarget >= 0 {
		row.Seconds = s.TimeToTarget
	}
	row.Steps, row.Accuracy, row.Wall = s.Steps, s.TestAccuracy, s.WallSeconds
	return row, nil
}

// WANColumns are wan.csv's columns: a run's configuration (parties,
// algo, window: requests in flight per party, pipelined: window above 1,
// batch: samples per request, samples_in_flight: window times batch, seed,
// links), then what it measured.
var WANColumns = []string{"parties", "algo", "window", "pipelined", "batch", "samples_in_flight", "seed", "links",
	"seconds_to_target", "steps", "accuracy", "wall_seconds"}

// WriteWAN writes rows to dir/wan.csv.
func WriteWAN(dir string, rows []WANRow) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var recs [][]string
	for _, r := range rows {
		a := r.Arm()
		recs = append(recs, []string{strconv.Itoa(r.Parties), r.Algo, strconv.Itoa(r.Window), strconv.FormatBool(a.Pipelined()),
			strconv.Itoa(r.Batch), strconv.Itoa(a.InFlight()), strconv.FormatUint(r.Seed, 10), r.Link, fmtF(r.Seconds, 3),
			strconv.FormatInt(r.Steps, 10), fmtF(r.Accuracy, 4), fmtF(r.Wall, 2)})
	}
	return run.WriteCSV(filepath.Join(dir, "wan.csv"), WANColumns, recs)
}

// WANMedian is the median time to the target of arm's runs with q
// parties: +Inf when most did not reach it, NaN without runs.
func WANMedian(rows []WANRow, q int, arm WANArm) float64 {
	var v []float64
	for _, r := range rows {
		if r.Parties == q && r.Arm() == arm {
			s := r.Seconds
			if math.IsNaN(s) {
				s = inf
			}
			v = append(v, s)
		}
	}
	return median(v)
}

// WANSpeedup is, per number of parties, the median time to the target of
// slow's runs over fast's (NaN where either never reached it, or has no
// runs).
func WANSpeedup(rows []WANRow, slow, fast WANArm) map[int]float64 {
	out := map[int]float64{}
	for _, r := range rows {
		a, s := WANMedian(rows, r.Parties, fast), WANMedian(rows, r.Parties, slow)
		out[r.Parties] = s / a
		if math.IsInf(a, 0) || math.IsInf(s, 0) || math.IsNaN(a) || math.IsNaN(s) {
			out[r.Parties] = math.NaN()
		}
	}
	return out
}
