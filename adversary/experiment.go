package adversary

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/audit"
	"github.com/asyrevel/asyrevel/replay"
	"github.com/asyrevel/asyrevel/run"
	"github.com/asyrevel/asyrevel/trust"
)

// ErrGotThrough is returned by Experiment when a bad message was accepted
// or the audit of the attacked run's log failed.
var ErrGotThrough = errors.New("the adversary got through")

// Config is the adversary experiment: a run of Parties parties on Data
// for Duration, under attack by a rogue sending Scale bad messages of each
// category, then the same run without it.
type Config struct {
	Data     *run.Data
	Parties  int
	Scale    int
	Duration time.Duration // both runs' training time, long enough for the attack to be over before the end
	Seed     uint64
	Out      string // folder of adversary.csv
	Log      zerolog.Logger
	// ServeData is a data file of the run's rows (a9a's test set) for the
	// serve categories (ServeAttack on the attacked run's models); ""
	// leaves them out.
	ServeData string
}

// Result is what the experiment measured.
type Result struct {
	Categories      []*Category
	Total, Accepted int64
	Attacked, Clean *run.Summary
	Audit           *trust.AuditReport
	CSV, Path       string // adversary.csv's text and where it was written
}

// Text is the table and the one-line verdict the command prints.
func (r *Result) Text() string {
	verdict := "intact"
	if !r.Audit.Intact() {
		verdict = "NOT intact"
	}
	return r.CSV + fmt.Sprintf("%d bad messages, %d accepted; test accuracy %.2f%% under attack, %.2f%% clean (%+.2f points); audit: %s, %d messages rejected by their receiver; %s\n",
		r.Total, r.Accepted, 100*r.Attacked.TestAccuracy, 100*r.Clean.TestAccuracy, 100*(r.Attacked.TestAccuracy-r.Clean.TestAccuracy), verdict, sumCounts(r.Audit.Rejected), r.Path)
}

// Experiment trains under attack, audits the attacked run's log, trains
// again without the rogue and writes adversary.csv (category, sent,
// refused_by_broker, rejected_by_receiver, accepted) into cfg.Out. The
// result is returned with ErrGotThrough when a bad message was accepted
// or the audit failed.
func Experiment(ctx context.Context, cfg Config) (*Result, error) {
	quiet := cfg.Log.Level(zerolog.ErrorLevel) // the aggregator warns of every rejection
	base := func(runID, out string) run.Config {
		return run.New(func(c *run.Config) {
			c.Parties = cfg.Parties
			c.Duration = cfg.Duration
			c.Seed = cfg.Seed
			c.Run = runID
			c.Out = out
		})
	}
	tmp, err := os.MkdirTemp("", "asyrevel-adversary-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	cfg.Log.Info().Int("scale", cfg.Scale).Msg("training under attack")
	s, rg, out, err := Run(ctx, cfg.Scale, false, base("adversary", filepath.Join(tmp, "attacked")), run.Hooks{Loaded: cfg.Data, Log: quiet})
	if err != nil {
		return nil, err
	}
	rep, err := audit.CheckOut(ctx, out, "adversary")
	if err != nil {
		return nil, err
	}
	lg, err := replay.Open(ctx, replay.Source{Store: filepath.Join(out, "stream"), Run: "adversary"})
	if err != nil {
		return nil, err
	}
	err = rg.SettleLog(func(fn func(*replay.Record)) error { return audit.Each(ctx, lg, fn) }, rep)
	lg.Close()
	if err != nil {
		return nil, err
	}
	cats := slices.Clone(rg.cats)
	if cfg.ServeData != "" {
		cfg.Log.Info().Int("scale", cfg.Scale).Msg("the attacked run's models served: requests without the right credentials")
		sc, err := ServeAttack(ctx, out, cfg.ServeData, cfg.Scale, quiet)
		if err != nil {
			return nil, err
		}
		cats = append(cats, sc...)
	}
	cfg.Log.Info().Msg("the same run without the rogue")
	clean, err := run.Train(ctx, base("clean", filepath.Join(tmp, "clean")), run.Hooks{Loaded: cfg.Data, Log: quiet})
	if err != nil {
		return nil, err
	}
	cfg.Log.Info().Msg("the other broker forms: asyrevel broker --roster, a stock nats-server")
	doors, err := Doors(ctx, DoorsConfig{Data: cfg.Data, Parties: cfg.Parties, Scale: cfg.Scale, Seed: cfg.Seed, Log: cfg.Log, Stock: true})
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, err
	}
	cats = append(cats, doors...)
	r := &Result{Categories: cats, Attacked: s, Clean: clean, Audit: rep}
	var b strings.Builder
	b.WriteString("category,sent,refused_by_broker,rejected_by_receiver,accepted\n")
	for _, c := range cats {
		fmt.Fprintf(&b, "%s,%d,%d,%d,%d\n", c.Name, c.Sent, c.Refused, c.Rejected, c.Accepted())
		r.Total += c.Sent
		r.Accepted += max(c.Accepted(), 0)
	}
	r.CSV, r.Path = b.String(), filepath.Join(cfg.Out, "adversary.csv")
	if err := os.WriteFile(r.Path, []byte(r.CSV), 0o644); err != nil {
		return nil, err
	}
	if r.Accepted > 0 || !rep.Intact() {
		return r, ErrGotThrough
	}
	return r, nil
}

func sumCounts(m map[string]uint64) uint64 {
	var n uint64
	for _, v := range m {
		n += v
	}
	return n
}
