package experiment

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/run"
	"github.com/asyrevel/asyrevel/schemas"
)

// Table3Config configures the communication experiment (the paper's Table
// 3): what one round of each algorithm puts on the broker.
type Table3Config struct {
	Sets    []Set
	Locate  Locate
	Parties int
	Batch   int
	// Steps and Steps0: each configuration runs twice, for Steps0 and for
	// Steps answered requests with the same evaluations (only the initial
	// and the final one); the difference of the bytes on the broker
	// connections divided by the difference of the steps is the wire cost
	// of a round alone.
	Steps, Steps0 int64
	Seed          uint64
	Log           zerolog.Logger
}

// Table3Methods are the configurations compared: the zeroth-order round
// (h and h_bar back, or only their difference) and the first-order one.
var Table3Methods = []struct {
	Name, Algo string
	Delta      bool
	Carries    string
}{
	{"AsyREVEL (h, h_bar)", "asyrevel-gau", false, "up: sample ids, c, c_hat (k each); down: h, h_bar (1 each)"},
	{"AsyREVEL --delta", "asyrevel-gau", true, "up: sample ids, c, c_hat (k each); down: h_bar - h (1)"},
	{"TIG", "tig", false, "up: sample ids, c (k); down: dF_0/dc (k)"},
}

// Table3Row is one configuration's measurement.
type Table3Row struct {
	Set, Method, Carries string
	K, Batch             int
	UpBytes, DownBytes   int     // payload of a round's request and reply
	WireBytes            float64 // bytes on the broker connections per round (publish, delivery, acks, headers)
	RoundMillis          float64 // a party's round trip: request published to reply applied, window 1
	StepsPerSec          float64
}

// Table3 runs the experiment.
func Table3(ctx context.Context, cfg Table3Config) ([]Table3Row, error) {
	var rows []Table3Row
	cache := newLoaded(cfg.Locate)
	for _, set := range cfg.Sets {
		data, err := cache.split(set, cfg.Parties)
		if err != nil {
			return rows, err
		}
		for _, m := range Table3Methods {
			tc := run.New(func(c *run.Config) {
				c.Parties = cfg.Parties
				c.Algo = m.Algo
				c.Delta = m.Delta
				c.Model = set.Model()
				c.Batch = cfg.Batch
				c.Window = 1
				c.EvalEvery = time.Hour
				c.Seed = cfg.Seed
			})
			if err := tc.Prepare(); err != nil {
				return rows, err
			}
			var s [2]*run.Summary
			for i, n := range []int64{cfg.Steps0, cfg.Steps} {
				c := tc
				c.MaxSteps, c.Run = n, ""
				if s[i], err = run.Train(ctx, c, run.Hooks{Loaded: data}); err != nil {
					return rows, fmt.Errorf("%s %s: %w", set.Name, m.Name, err)
				}
			}
			k := 1
			if data.Classes > 2 {
				k = tc.K
			}
			r := Table3Row{Set: set.Name, Method: m.Name, Carries: m.Carries, K: k, Batch: cfg.Batch}
			r.UpBytes, r.DownBytes = roundBytes(m.Algo == "tig", m.Delta, cfg.Batch, k, data.NTrain)
			// The run's own count must agree with the encoded sizes.
			if got, want := s[1].StepBytes, s[1].Steps*int64(r.UpBytes+r.DownBytes); math.Abs(float64(got-want)) > 0.03*float64(want) {
				return rows, fmt.Errorf("%s %s: %d payload bytes for %d steps, the messages' sizes say %d", set.Name, m.Name, got, s[1].Steps, want)
			}
			r.WireBytes = float64(s[1].WireBytes-s[0].WireBytes) / float64(s[1].Steps-s[0].Steps)
			r.StepsPerSec = s[1].StepsPerSec
			r.RoundMillis = 1e3 * float64(cfg.Parties) / s[1].StepsPerSec
			cfg.Log.Info().Str("set", set.Name).Str("method", m.Name).Int("up", r.UpBytes).Int("down", r.DownBytes).
				Str("wire", fmtF(r.WireBytes, 0)).Str("round_ms", fmtF(r.RoundMillis, 3)).Msg("table3")
			rows = append(rows, r)
		}
	}
	return rows, nil
}

// roundBytes is the encoded size of one round's request and reply, for
// a training set of n rows (the sample ids take the bits of the largest).
func roundBytes(firstOrder, delta bool, batch, k, n int) (up, down int) {
	c := schemas.NewCodec()
	// Each subject numbers its messages from 1: a run's sequence numbers
	// take 3 bytes (up to 65,535 messages a subject).
	h := schemas.Header{Version: schemas.Version, Party: 8, Seq: 1 << 10}
	o := &schemas.PartyOutput{Header: h, IDs: sampleIDs(batch, n), C: make([]float64, batch*k)}
	// A reply names its request by digest (Reply.Cause).
	r := &schemas.Reply{Header: h, ReqSeq: 1 << 10, Staleness: 1000, Cause: make([]byte, schemas.DigestSize)}
	switch {
	case firstOrder:
		r.Grad = make([]float64, batch*k)
	case delta:
		o.CHat = make([]float64, batch*k)
		r.Delta = make([]float64, batch)
	default:
		o.CHat = make([]float64, batch*k)
		r.H, r.HBar = make([]float64, batch), make([]float64, batch)
	}
	b, _ := c.Marshal(o)
	up = len(b)
	b, _ = c.Marshal(r)
	return up, len(b)
}

// WriteTable3 writes dir/table3.csv.
func WriteTable3(dir string, rows []Table3Row) error {
	var recs [][]string
	for _, r := range rows {
		recs = append(recs, []string{r.Set, r.Method, strconv.Itoa(r.K), strconv.Itoa(r.Batch), strconv.Itoa(r.UpBytes),
			strconv.Itoa(r.DownBytes), fmtF(r.WireBytes, 0), fmtF(r.RoundMillis, 3), fmtF(r.StepsPerSec, 0)})
	}
	return run.WriteCSV(filepath.Join(dir, "table3.csv"), []string{"set", "method", "k", "batch", "payload_up_bytes",
		"payload_down_bytes", "wire_bytes_per_round", "round_ms", "steps_per_second"}, recs)
}

// sampleIDs are batch ids of a training set of n rows, the largest n-1:
// a batch drawn at random nearly always holds an id that needs as many
// bits, so its packed size is the size of these.
func sampleIDs(batch, n int) []uint32 {
	ids := make([]uint32, batch)
	for i := range ids {
		ids[i] = uint32(max(n-1, 0))
	}
	return ids
}
