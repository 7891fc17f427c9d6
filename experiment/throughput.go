package experiment

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/run"

	"github.com/rs/zerolog"
)

// Variants that the throughput experiment compares by default: the
// in-memory bus, each transport design over TCP loopback, the default
// design in-process, with synchronous writes and with S2 compression,
// and the 3-node cluster with the default and the acked design. A
// variant is "memory" or DESIGN[-OPTION...]-CONNECTION, CONNECTION one
// of tcp, inprocess and cluster (3 nodes, the stream on all three);
// OPTION sync writes each message to the store before acknowledging it
// (broker.PersistSync), s2 compresses the store with S2, plain does not,
// nosign turns the trust layer off (no signatures, chains or broker
// permissions: its cost is the difference; "memory-nosign" too), failover
// (cluster only) connects each participant as a separate process given
// every node's URL does, with the fail-over publisher
// (ordered-failover-cluster is what such processes run by default).
var Variants = []string{
	"memory", "core-tcp", "capture-tcp", "capture-inprocess", "capture-sync-tcp", "capture-s2-tcp",
	"ordered-tcp", "acked-tcp", "capture-cluster", "acked-cluster",
}

// DefaultVariant is the variant of `asyrevel train` without transport
// flags (the default design over TCP loopback).
const DefaultVariant = "capture-tcp"

// variant is a parsed variant name.
type variant struct {
	name, conn      string
	design          broker.Design
	persist, compr  string
	inProcess       bool
	cluster, memory bool
	noTrust         bool
	failover        bool
}

// parseVariant reads a variant name. The names of earlier versions of
// this experiment (jetstream-tcp, jetstream-inprocess,
// jetstream-cluster) mean the default design on that connection.
func parseVariant(name string) (variant, error) {
	if name == "memory" || name == "memory-nosign" {
		return variant{name: name, conn: "memory", design: broker.DesignMemory, memory: true, noTrust: name != "memory"}, nil
	}
	if conn, ok := strings.CutPrefix(name, "jetstream-"); ok {
		name = string(broker.DefaultDesign) + "-" + conn
	}
	parts := strings.Split(name, "-")
	v := variant{name: name}
	if len(parts) < 2 {
		return v, fmt.Errorf("%w: variant %q: want memory or DESIGN[-sync][-s2|-plain]-CONNECTION", run.ErrConfig, name)
	}
	d, err := broker.ParseDesign(parts[0])
	if err != nil || d == broker.DesignMemory {
		return v, fmt.Errorf("%w: variant %q: unknown design %q", run.ErrConfig, name, parts[0])
	}
	v.design = d
	switch v.conn = parts[len(parts)-1]; v.conn {
	case "tcp":
	case "inprocess":
		v.inProcess = true
	case "cluster":
		v.cluster = true
	default:
		return v, fmt.Errorf("%w: variant %q: connection %q: want tcp, inprocess or cluster", run.ErrConfig, name, v.conn)
	}
	for _, o := range parts[1 : len(parts)-1] {
		switch o {
		case "sync":
			v.persist = "sync"
		case "plain":
			v.compr = "none"
		case "s2":
			v.compr = "s2"
		case "nosign":
			v.noTrust = true
		case "failover":
			if !v.cluster {
				return v, fmt.Errorf("%w: variant %q: failover is for a cluster", run.ErrConfig, name)
			}
			v.failover = true
		default:
			return v, fmt.Errorf("%w: variant %q: option %q: want sync, s2, plain or nosign", run.ErrConfig, name, o)
		}
	}
	return v, nil
}

// apply points a training configuration at the variant.
func (v variant) apply(tc *run.Config) {
	tc.Trust.Off = v.noTrust
	if v.memory {
		tc.Bus = "memory"
		return
	}
	tc.Design, tc.Persist, tc.Compress = string(v.design), v.persist, v.compr
	tc.InProcess = v.inProcess
	if v.cluster {
		tc.Cluster = 3
		tc.ClusterURLs = v.failover
	}
}

// ThroughputConfig configures the throughput experiment.
type ThroughputConfig struct {
	Data     *run.Data // split over Parties
	Parties  int
	Variants []string // see Variants
	Windows  []int
	Batches  []int
	Duration time.Duration // training time per configuration
	Seed     uint64
	Log      zerolog.Logger
}

// ThroughputRow is one configuration's measurement.
type ThroughputRow struct {
	Variant       string
	Bus           string // memory, tcp, inprocess or cluster
	Design        string
	Window, Batch int
	Steps         int64
	Seconds       float64
	StepsPerSec   float64
	// Ratio is StepsPerSec over the memory bus's at the same window and
	// batch in the same experiment (NaN without a memory row).
	Ratio        float64
	BytesPerStep float64 // payload bytes of a step's PartyOutput and Reply
	// WireBytesPerStep is all bytes on the clients' broker connections
	// during the run (initial pass, evaluations and setup included) per
	// step; StepWireBytes the bytes of the training steps alone: the
	// difference with a shorter run of the same configuration, per extra
	// step (window 8 only; NaN otherwise and for memory).
	WireBytesPerStep, StepWireBytes float64
	// StoreBytesPerStep is the embedded store's disk size after the run
	// per step (NaN without an embedded store).
	StoreBytesPerStep float64
	// CPUPerStep is the process's CPU time (every participant and the
	// embedded broker) per step, microseconds, setup included: less
	// sensitive than steps/s to other processes on a shared machine.
	CPUPerStep float64
	// MessagesSent counts what the parties and the aggregator published,
	// MessagesStored the run's messages in the stream afterwards (-1
	// without a log); Lost is their difference, Dropped the live
	// deliveries lost by subscriptions that fell behind.
	MessagesSent, MessagesStored, Lost, Dropped int64
}

// calibration is the wire cost of a variant's run without steps.
type calibration struct {
	wire  float64
	steps int64
}

// Throughput measures steps per second, bytes per step and what the
// stream stored, of the whole pipeline (parties, aggregator, broker), for
// every variant, window and batch size, each for cfg.Duration of training
// time. Variants run in turn within each window and batch, so that a
// ratio compares runs minutes apart at most.
func Throughput(ctx context.Context, cfg ThroughputConfig) ([]ThroughputRow, error) {
	vs := make([]variant, len(cfg.Variants))
	for i, name := range cfg.Variants {
		var err error
		if vs[i], err = parseVariant(name); err != nil {
			return nil, err
		}
	}
	base := func(w, b int) run.Config {
		return run.New(func(c *run.Config) {
			c.Parties = cfg.Parties
			c.Algo = "asyrevel-gau"
			c.Batch = b
			c.Window = w
			c.EvalEvery = 10 * max(cfg.Duration, time.Second)
			c.Seed = cfg.Seed
			c.Run = shortRun()
		})
	}
	var rows []ThroughputRow
	for _, w := range cfg.Windows {
		for _, b := range cfg.Batches {
			first := len(rows)
			for _, v := range vs {
				// At window 8, a shorter run of the same configuration:
				// the difference of the wire bytes over the difference of
				// the steps leaves out what does not grow with the steps
				// (setup, the initial pass, the two evaluations, the
				// catch-up of a subscription, which receives what comes
				// live twice for its first CatchUpGrace).
				var cal *calibration
				if w == 8 && !v.memory {
					tc := base(w, b)
					tc.Duration = max(cfg.Duration/4, 400*time.Millisecond)
					v.apply(&tc)
					if s, err := train(ctx, cfg.Log, tc, cfg.Data); err == nil {
						cal = &calibration{float64(s.WireBytes), s.Steps}
					}
				}
				tc := base(w, b)
				tc.Duration = cfg.Duration
				v.apply(&tc)
				cpu0 := cpuTime()
				s, err := train(ctx, cfg.Log, tc, cfg.Data)
				cpu := cpuTime() - cpu0
				if err != nil {
					if ctx.Err() != nil {
						return rows, err
					}
					cfg.Log.Error().Err(err).Str("variant", v.name).Int("window", w).Int("batch", b).Msg("no row: the run failed twice")
					continue
				}
				r := ThroughputRow{Variant: v.name, Bus: v.conn, Design: string(v.design), Window: w, Batch: b,
					Steps: s.Steps, Seconds: s.TrainSeconds, StepsPerSec: s.StepsPerSec,
					WireBytesPerStep: nanF, StepWireBytes: nanF, StoreBytesPerStep: nanF, Ratio: nanF,
					MessagesSent: s.MessagesSent, MessagesStored: s.MessagesStored, Lost: s.Lost, Dropped: s.Dropped}
				if s.Steps > 0 {
					r.CPUPerStep = float64(cpu.Microseconds()) / float64(s.Steps)
					r.BytesPerStep = float64(s.StepBytes) / float64(s.Steps)
					if s.WireBytes > 0 {
						r.WireBytesPerStep = float64(s.WireBytes) / float64(s.Steps)
						if cal != nil && s.Steps > cal.steps {
							r.StepWireBytes = (float64(s.WireBytes) - cal.wire) / float64(s.Steps-cal.steps)
						}
					}
					if s.StoreBytes > 0 {
						r.StoreBytesPerStep = float64(s.StoreBytes) / float64(s.Steps)
					}
				}
				ev := cfg.Log.Info().Str("variant", v.name).Int("window", w).Int("batch", b).Str("steps/s", fmtF(r.StepsPerSec, 0)).
					Str("step wire bytes", fmtF(r.StepWireBytes, 0)).Int64("sent", r.MessagesSent).Int64("stored", r.MessagesStored)
				if r.Lost != 0 || r.Dropped != 0 {
					ev = ev.Int64("lost", r.Lost).Int64("dropped", r.Dropped)
				}
				ev.Msg("throughput")
				rows = append(rows, r)
			}
			// Ratios to the memory bus of this window and batch.
			i := slices.IndexFunc(rows[first:], func(r ThroughputRow) bool { return r.Variant == "memory" })
			if i >= 0 && rows[first+i].StepsPerSec > 0 {
				for j := first; j < len(rows); j++ {
					rows[j].Ratio = rows[j].StepsPerSec / rows[first+i].StepsPerSec
				}
			}
		}
	}
	return rows, nil
}

// train runs tc, and once more (a fresh run) if it fails: on a loaded
// machine a 3-node cluster may miss its start-up deadlines.
func train(ctx context.Context, log zerolog.Logger, tc run.Config, data *run.Data) (*run.Summary, error) {
	s, err := run.Train(ctx, tc, run.Hooks{Loaded: data})
	if err != nil && ctx.Err() == nil {
		log.Warn().Err(err).Msg("run failed; trying again")
		tc.Run = shortRun()
		s, err = run.Train(ctx, tc, run.Hooks{Loaded: data})
	}
	return s, err
}

// shortRun names an experiment's run (each has a store of its own): five
// characters, so that the subjects, which carry it, cost the same number
// of bytes in every row (each character more costs 4 bytes a step).
func shortRun() string {
	runSeq++
	return fmt.Sprintf("x%04d", runSeq%10000)
}

var runSeq int

// WriteThroughput writes rows to dir/throughput.csv, records the run and
// writes the report again (which plots throughput.png).
func WriteThroughput(dir string, rows []ThroughputRow) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	opt := func(v float64, prec int) string {
		if math.IsNaN(v) {
			return ""
		}
		return fmtF(v, prec)
	}
	var recs [][]string
	for _, r := range rows {
		stored, lost := "", ""
		if r.MessagesStored >= 0 {
			stored, lost = strconv.FormatInt(r.MessagesStored, 10), strconv.FormatInt(r.Lost, 10)
		}
		recs = append(recs, []string{r.Variant, r.Bus, r.Design, strconv.Itoa(r.Window), strconv.Itoa(r.Batch),
			fmtF(r.StepsPerSec, 1), opt(r.Ratio, 3), fmtF(r.CPUPerStep, 2), fmtF(r.BytesPerStep, 1), opt(r.WireBytesPerStep, 1), opt(r.StepWireBytes, 1),
			opt(r.StoreBytesPerStep, 1), strconv.FormatInt(r.Steps, 10), fmtF(r.Seconds, 3),
			strconv.FormatInt(r.MessagesSent, 10), stored, lost, strconv.FormatInt(r.Dropped, 10)})
	}
	header := []string{"variant", "bus", "design", "window", "batch", "steps_per_s", "ratio_to_memory", "cpu_us_per_step", "bytes_per_step",
		"wire_bytes_per_step", "step_wire_bytes", "store_bytes_per_step", "steps", "seconds",
		"messages_sent", "messages_stored", "lost", "dropped"}
	if err := run.WriteCSV(filepath.Join(dir, "throughput.csv"), header, recs); err != nil {
		return err
	}
	return record(dir, "throughput")
}
