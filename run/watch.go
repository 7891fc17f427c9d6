package run

import (
	"context"
	"os"
	"path/filepath"

	"github.com/asyrevel/asyrevel/board"
	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/observe"
)

// Monitor is what a process shows while it runs: Prometheus metrics, the
// live board and the report page (packages observe and board).
type Monitor struct {
	// Metrics is the address of the Prometheus metrics (/metrics; "" =
	// none), Board the address of the live board ("" = none).
	Metrics string
	Board   string
	// Report writes OUT/report.html, the board's page with the run's last
	// state inlined, when the run ends (train and aggregator with Out).
	Report bool
}

// watcher is the Monitor of one process at work.
type watcher struct {
	w       *observe.Watch
	metrics *observe.Server
	board   *observe.Server
	cancel  context.CancelFunc
	cfg     *job
}

// startWatch starts what cfg.Monitor asks for, for a process of role
// (train, aggregator, party-M), before the data are loaded: an address
// already taken fails at once. It returns nil when nothing is asked for;
// every method of a nil watcher does nothing.
func startWatch(cfg *job, role string) (*watcher, error) {
	mon := cfg.Monitor
	if mon.Metrics == "" && mon.Board == "" && !(mon.Report && cfg.Out != "") {
		return nil, nil
	}
	info := observe.Info{Run: cfg.Run, Role: role, Algo: cfg.Algo, Model: cfg.Model, Parties: cfg.Parties, Window: cfg.Window, Resumed: cfg.Resume}
	wt := &watcher{w: observe.New(info), cfg: cfg}
	var err error
	if mon.Metrics != "" {
		if wt.metrics, err = observe.Listen(mon.Metrics, wt.w.Handler()); err != nil {
			return nil, err
		}
		cfg.hooks.Log.Info().Str("url", wt.metrics.URL("/metrics")).Msg("Prometheus metrics")
	}
	if mon.Board != "" {
		if wt.board, err = observe.Listen(mon.Board, board.Handler(wt.w)); err != nil {
			wt.metrics.Close()
			return nil, err
		}
		cfg.hooks.Log.Info().Str("url", wt.board.URL("/")).Msg("live board")
	}
	if f := cfg.hooks.OnListen; f != nil {
		var m, b string
		if wt.metrics != nil {
			m = wt.metrics.Addr()
		}
		if wt.board != nil {
			b = wt.board.Addr()
		}
		f(m, b)
	}
	if mon.Board != "" || mon.Report {
		ctx, cancel := context.WithCancel(context.Background())
		wt.cancel = cancel
		go wt.w.Run(ctx)
	}
	return wt, nil
}

// watch is the watcher's Watch (nil without one).
func (wt *watcher) watch() *observe.Watch {
	if wt == nil {
		return nil
	}
	return wt.w
}

// loaded completes the run's description once the data are loaded and
// the privacy switch applied.
func (wt *watcher) loaded(d *Data) {
	if wt == nil {
		return
	}
	var sw string
	if c := wt.cfg.PrivacyChoice; c != nil {
		sw = c.Switch
	}
	wt.w.Describe(d.Name, sw)
}

// network hands the Watch the embedded broker's servers.
func (wt *watcher) network(n *network) {
	if wt == nil {
		return
	}
	if s := n.Servers(); len(s) > 0 {
		wt.w.SetServers(s...)
	}
}

// aggregatorBus hands the Watch the aggregator's connection, which also
// reads the stream's figures.
func (wt *watcher) aggregatorBus(b broker.Bus) {
	if wt == nil {
		return
	}
	wt.w.SetBus("aggregator", b)
	if s, ok := b.(observe.StreamSource); ok {
		wt.w.SetStream(s)
	}
}

// close writes the report (Monitor.Report, once an aggregator ran) and
// stops the servers.
func (wt *watcher) close() {
	if wt == nil {
		return
	}
	if wt.cancel != nil {
		wt.cancel()
	}
	cfg := wt.cfg
	if cfg.Monitor.Report && cfg.Out != "" && wt.w.Ran() {
		wt.w.Sample()
		path := filepath.Join(cfg.Out, "report.html")
		err := os.MkdirAll(cfg.Out, 0o755)
		if err == nil {
			err = board.WriteReport(path, wt.w.State(0))
		}
		if err != nil {
			cfg.hooks.Log.Warn().Err(err).Msg("the report page could not be written")
		} else {
			cfg.hooks.Log.Info().Str("path", path).Msg("report page written")
		}
	}
	wt.metrics.Close()
	wt.board.Close()
}
