package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/experiment"
	"github.com/asyrevel/asyrevel/observe"
	"github.com/asyrevel/asyrevel/serve"
)

// scoreFlags are the flags predict, serve and party --serve share.
type scoreFlags struct {
	models, data, split, keys string
	net                       serve.NetConfig
	timeout                   time.Duration
	logLevel                  string
	logJSON                   bool
}

func addScoreFlags(fs *flag.FlagSet, f *scoreFlags, what, split string) {
	fs.StringVar(&f.models, "models", "", "`DIR` of the run's model files (train --out DIR writes DIR/models)")
	fs.StringVar(&f.data, "data", "", what)
	fs.StringVar(&f.split, "split", split, "the sets of a split folder to read: test, train, or all (default: "+map[string]string{
		serve.SplitAuto: "the test set if the\nfolder has one, else its training set)", serve.SplitAll: "all of them)"}[split])
	fs.StringVar(&f.keys, "keys", "", "`DIR` of the run's keys (roster.json, *.nk): messages signed and verified, the model\nfiles checked against the roster (default MODELS/../keys when it has a roster)")
	fs.StringVar(&f.net.NATS, "nats", "", "URL of the broker (default: an embedded one on loopback)")
	fs.StringVar(&f.net.Bus, "bus", "jetstream", "jetstream, or memory (in-process, no broker)")
	fs.StringVar(&f.net.Store, "store", "", "keep the embedded broker's store (the scoring log) in `DIR` (default: a temporary one)")
	fs.StringVar(&f.net.Run, "run", "", "run id of the subjects and stream (default: the models')")
	fs.DurationVar(&f.timeout, "timeout", serve.DefaultTimeout, "how long a request waits for every party's answer")
	fs.StringVar(&f.logLevel, "log", "info", "log level: debug, info, warn, error")
	fs.BoolVar(&f.logJSON, "log-json", false, "log JSON lines instead of console text")
}

func cmdPredict(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("predict", "asyrevel predict --models DIR --data PATH --out predictions.csv [flags]\n"+
		"       asyrevel predict --models DIR --inputs LABELS.csv,P1.csv,... --key COLUMN --out predictions.csv\n\n"+
		"Scores every row of PATH with a run's saved models: each party computes its outputs\n"+
		"for the rows' ids, the aggregator combines them. predictions.csv has one row per\n"+
		"input row, in the input's order: id (for an alignment, the label holder's key as its\n"+
		"file writes it), label (the true label, when the data has one), predicted (in the\n"+
		"data's label values) and one probability column per class. With labels, accuracy,\n"+
		"AUC and log loss are printed and written next to it (.metrics.json). Of a split\n"+
		"folder, the test set is scored (--split). --inputs scores new rows from the\n"+
		"organisations' own files, joined on their keys as asyrevel align matches them\n"+
		"(docs/journey.md). Every participant runs in this process, as train runs them,\n"+
		"unless --separate: the aggregator alone, the parties are asyrevel party --serve\n"+
		"processes on --nats.", stderr)
	var f scoreFlags
	addScoreFlags(fs, &f, "the `PATH` to score: a file in the training set's format, or a split folder", serve.SplitAuto)
	in := addInputFlags(fs)
	out := fs.String("out", "predictions.csv", "where the predictions go")
	metrics := fs.String("metrics", "", "where the metrics go as JSON (default: OUT with .metrics.json for .csv)")
	separate := fs.Bool("separate", false, "the parties are separate processes (asyrevel party --serve) on --nats")
	wait := fs.Duration("wait", 30*time.Second, "--separate: how long to wait for the parties to answer")
	chunk := fs.Int("chunk", serve.DefaultChunk, "ids a request")
	window := fs.Int("window", serve.DefaultWindow, "requests in flight")
	fs.BoolVar(&f.net.InProcess, "in-process", false, "connect to the embedded broker in-process instead of over TCP loopback")
	if err := fs.Parse(args); err != nil {
		return usageErr(err)
	}
	inputs, err := in.inputs(fs, f.data)
	if err != nil {
		return err
	}
	if f.models == "" || f.data == "" && inputs == nil {
		return fmt.Errorf("%w: predict needs --models DIR and --data PATH (or --inputs FILES --key COLUMN)", errUsage)
	}
	log, err := f.logger(stderr)
	if err != nil {
		return err
	}
	f.net.Log = log
	if sets := serve.SplitsOf(f.data, f.split); sets != "" && !*separate {
		fmt.Fprintf(stderr, "scoring the %s set of %s (--split)\n", sets, f.data)
	}
	last := time.Now()
	m, err := serve.Predict(ctx, serve.PredictConfig{
		Models: f.models, Data: f.data, Inputs: inputs, Split: f.split, Out: *out, Metrics: *metrics, Keys: f.keys, Net: f.net,
		Separate: *separate, Wait: *wait, Chunk: *chunk, Window: *window, Timeout: f.timeout, Log: log,
		Progress: func(done, total int) {
			if time.Since(last) > 2*time.Second || done == total {
				last = time.Now()
				log.Info().Int("scored", done).Int("rows", total).Msg("scoring")
			}
		},
	})
	if err != nil {
		return err
	}
	if m.Inputs != nil {
		inputsReport(stdout, inputs, m.Inputs)
	}
	fmt.Fprintf(stdout, "%d rows scored in %.3f s (%.0f predictions/s, %s, %d parties)\n", m.Rows, m.Seconds, m.PerSecond, m.Bus, m.Parties)
	if m.Labelled {
		fmt.Fprintf(stdout, "accuracy %.6f, AUC %.6f, log loss %.6f\n", m.Accuracy, m.AUC, m.LogLoss)
	}
	fmt.Fprintf(stdout, "predictions: %s\n", *out)
	if *metrics == "" {
		*metrics = strings.TrimSuffix(*out, ".csv") + ".metrics.json"
	}
	fmt.Fprintf(stdout, "metrics: %s\n", *metrics)
	return nil
}

// inputFlags are predict's and serve's --inputs: the organisations' own
// files, read and joined on their keys as asyrevel align read them.
type inputFlags struct {
	paths string
	align alignFlags
}

func addInputFlags(fs *flag.FlagSet) *inputFlags {
	in := &inputFlags{}
	fs.StringVar(&in.paths, "inputs", "", "instead of --data: the organisations' own `FILES` (comma-separated), the label holder's\nfirst, then party 1, 2, ...: joined on their keys (--key) as asyrevel align matches\nthem, each party's columns read by the names it was trained on; rows are reported\nby the label holder's keys as written, in its file's order (docs/journey.md)")
	addAlignFlags(fs, &in.align)
	fs.StringVar(&in.align.label, "label", "label", "with --inputs: the label holder's label `COLUMN`, if its file has one (then the\nmetrics are computed)")
	return in
}

// inputs is the --inputs of the command line, nil without it.
func (in *inputFlags) inputs(fs *flag.FlagSet, data string) (*serve.Inputs, error) {
	if in.paths == "" {
		for _, name := range []string{"key", "label", "format", "dedupe", "keep-space", "keep-case", "strip-zeros", "missing", "na", "drop", "categorical"} {
			if flagGiven(fs, name) {
				return nil, fmt.Errorf("%w: --%s goes with --inputs (the organisations' own files)", errUsage, name)
			}
		}
		return nil, nil
	}
	if data != "" {
		return nil, fmt.Errorf("%w: give --data or --inputs, not both", errUsage)
	}
	if in.align.key == "" {
		return nil, fmt.Errorf("%w: --inputs needs --key (the key column, as asyrevel align was given it)", errUsage)
	}
	opts, err := in.align.options(in.align.label)
	if err != nil {
		return nil, err
	}
	return &serve.Inputs{Paths: splitList(in.paths), Options: opts}, nil
}

// inputsReport says what --inputs read and joined.
func inputsReport(w io.Writer, in *serve.Inputs, r *serve.InputsReport) {
	for i, p := range in.Paths {
		if s := r.Missing[i].String(); s != "" {
			fmt.Fprintf(w, "%s: %s\n", p, s)
		}
	}
	holder := ""
	if r.HolderRun > 0 {
		holder = fmt.Sprintf("; the label holder's own columns are party %d's", r.HolderRun)
	}
	fmt.Fprintf(w, "joined %s (rows %v): %d of the label holder's %d rows are held by every organisation%s\n",
		strings.Join(in.Paths, ","), r.Rows, r.Scored, r.Rows[0], holder)
	if n := r.Rows[0] - r.Scored; n > 0 {
		fmt.Fprintf(w, "not scored: %d rows of %s that a party lacks (%s%s)\n", n, in.Paths[0], strings.Join(r.Unscored, ", "),
			map[bool]string{true: ", ...", false: ""}[n > len(r.Unscored)])
	}
}

// logger is the flags' logger.
func (f *scoreFlags) logger(w io.Writer) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(f.logLevel)
	if err != nil {
		return zerolog.Nop(), fmt.Errorf("%w: --log %q", errUsage, f.logLevel)
	}
	return newLogger(w, lvl, f.logJSON), nil
}

// cmdPartyServe is asyrevel party --serve: a party in serving mode.
func cmdPartyServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("party --serve", "asyrevel party --serve --models DIR --id M --data PATH --nats URL [flags]\n\n"+
		"Runs party M in serving mode: it reads its rows of PATH (a data file, its party file\n"+
		"or a split folder), indexes them by id, and answers the aggregator's scoring\n"+
		"requests (asyrevel predict --separate, asyrevel serve --separate) with its model's\n"+
		"outputs until interrupted.", stderr)
	var f scoreFlags
	addScoreFlags(fs, &f, "this party's rows: a data file, its party file of a split, or a split folder", serve.SplitAll)
	fs.Bool("serve", true, "serving mode (this command)")
	id := fs.Int("id", 0, "this party's id")
	key := fs.String("key", "", "this party's key `FILE` (asyrevel keys): answers signed")
	roster := fs.String("roster", "", "the run's roster.json (`FILE`): requests verified, the model file checked")
	allow := fs.String("allow", "", "`FILE` of the only ids this party scores, one a line; others are refused")
	if err := fs.Parse(args); err != nil {
		return usageErr(err)
	}
	if f.models == "" || f.data == "" || *id < 1 || f.net.NATS == "" && f.net.Bus != "memory" {
		return fmt.Errorf("%w: party --serve needs --models DIR, --data PATH, --id M and --nats URL", errUsage)
	}
	log, err := f.logger(stderr)
	if err != nil {
		return err
	}
	f.net.Log = log
	mf, err := serve.Load(filepath.Join(f.models, serve.FileName(*id)))
	if err != nil {
		return err
	}
	keys, err := partyKeys(f.keys, *key, *roster, *id, f.models)
	if err != nil {
		return err
	}
	rows, err := serve.ReadParty(f.data, mf, f.split)
	if err != nil {
		return err
	}
	var allowed map[string]bool
	if *allow != "" {
		if allowed, err = readIDList(*allow); err != nil {
			return err
		}
	}
	if f.net.Run == "" {
		f.net.Run = mf.Run
	}
	r, err := serve.NewResponder(ctx, serve.ResponderConfig{Run: f.net.Run, Model: mf, Rows: rows, Key: keys.Key(*id), Roster: keys.RosterOrNil(), Allowed: allowed, Log: log})
	if err != nil {
		return err
	}
	defer r.Close()
	n, err := serve.OpenNetwork(ctx, f.net)
	if err != nil {
		return err
	}
	defer n.Close()
	b, err := n.Connect(ctx, fmt.Sprintf("party-%d", *id), keys.Key(*id))
	if err != nil {
		return err
	}
	defer b.Close()
	log.Info().Int("party", *id).Int("rows", len(rows.IDs)).Str("run", f.net.Run).Msg("serving: answering scoring requests")
	if err := r.Run(ctx, b); err != nil {
		return err
	}
	st := r.Stats()
	fmt.Fprintf(stdout, "party %d: %d requests answered, %d ids scored, %d with unknown ids, %d refused, rejected %v\n", *id, st.Requests, st.IDs, st.Unknown, st.Refused, st.Rejected)
	return nil
}

// partyKeys reads a party's key and the roster: from a keys folder, or
// from --key and --roster; with neither, from MODELS/../keys when it has a
// roster, as predict and serve find them (train --out writes it there).
func partyKeys(dir, key, roster string, m int, models string) (*serve.Keys, error) {
	if dir != "" {
		return serve.LoadKeys(dir)
	}
	if key == "" && roster == "" {
		dir = filepath.Join(filepath.Dir(filepath.Clean(models)), "keys")
		if _, err := os.Stat(filepath.Join(dir, "roster.json")); err != nil {
			return nil, nil
		}
		return serve.LoadKeys(dir)
	}
	if key == "" || roster == "" {
		return nil, fmt.Errorf("%w: --key and --roster go together", errUsage)
	}
	return serve.PartyKeys(key, roster, m)
}

// readIDList reads one id a line.
func readIDList(path string) (map[string]bool, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	ids := map[string]bool{}
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		if id := strings.TrimSpace(sc.Text()); id != "" {
			ids[id] = true
		}
	}
	return ids, sc.Err()
}

func cmdServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", "asyrevel serve --models DIR --data PATH --listen ADDR [flags]\n\n"+
		"Serves a run's saved models over HTTP: POST /v1/predict {\"ids\": [...]} answers\n"+
		"{\"predictions\": [{\"id\", \"label\", \"probabilities\"}]}; GET /healthz; GET /metrics\n"+
		"(Prometheus text). The parties find the rows of PATH by id. Every participant runs\n"+
		"in this process unless --separate: then this is the label holder's aggregator and\n"+
		"the parties run asyrevel party --serve on --nats. An id a party lacks is a 404 naming\n"+
		"the organisation, a party down a 503 after --timeout, a bad request a 400.", stderr)
	var f scoreFlags
	addScoreFlags(fs, &f, "the `PATH` whose rows are served: a file in the training set's format, or a split folder\n(--separate: the ids, from a data file or a labels file)", serve.SplitAll)
	in := addInputFlags(fs)
	listen := fs.String("listen", "127.0.0.1:8080", "the HTTP `ADDR`ess")
	separate := fs.Bool("separate", false, "the parties are separate processes (asyrevel party --serve) on --nats")
	wait := fs.Duration("wait", 30*time.Second, "--separate: how long to wait for the parties at start")
	maxIDs := fs.Int("max-ids", serve.DefaultMaxIDs, "ids in one request")
	fs.BoolVar(&f.net.InProcess, "in-process", false, "connect to the embedded broker in-process instead of over TCP loopback")
	metrics := fs.String("metrics", "", "also serve the Prometheus metrics (those of GET /metrics) at http://`ADDR`/metrics,\nan address of their own (e.g. 127.0.0.1:9464, for a scraper inside the network)")
	if err := fs.Parse(args); err != nil {
		return usageErr(err)
	}
	inputs, err := in.inputs(fs, f.data)
	if err != nil {
		return err
	}
	if f.models == "" || f.data == "" && inputs == nil {
		return fmt.Errorf("%w: serve needs --models DIR and --data PATH (or --inputs FILES --key COLUMN)", errUsage)
	}
	log, err := f.logger(stderr)
	if err != nil {
		return err
	}
	f.net.Log = log
	d, err := serve.Deploy(ctx, serve.DeployConfig{Models: f.models, Data: f.data, Split: f.split, Inputs: inputs, Keys: f.keys, Net: f.net,
		Separate: *separate, Wait: *wait, Timeout: f.timeout, Log: log})
	if err != nil {
		return err
	}
	defer d.Close()
	if d.Inputs != nil {
		inputsReport(stdout, inputs, d.Inputs)
	}
	svc := serve.NewService(serve.ServiceConfig{Scorer: d.Scorer, Labels: d.Set.Aggregator.Labels, MaxIDs: *maxIDs, Probe: d.IDs[0], Resolve: d.Resolve, Log: log})
	if *metrics != "" {
		ms, err := observe.Listen(*metrics, svc.MetricsHandler())
		if err != nil {
			return fmt.Errorf("--metrics: %w", err)
		}
		defer ms.Close()
		log.Info().Str("url", ms.URL("/metrics")).Msg("Prometheus metrics")
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	stopWords.Store(ptr("stopping: answering the requests in flight, then closing the service; nothing is written (again to quit at once)"))
	defer stopWords.Store(nil)
	srv := &http.Server{Handler: svc.Handler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	by := ""
	if d.Resolve != nil {
		by = "; ids as the organisations write them, normalised as the alignment did"
	}
	fmt.Fprintf(stdout, "serving run %s (%d parties, %d ids, %s%s) on http://%s\n", d.Set.Aggregator.Run, d.Set.Aggregator.Parties, len(d.IDs), d.Net.Name, by, ln.Addr())
	log.Info().Str("listen", ln.Addr().String()).Int("ids", len(d.IDs)).Msg("serving")
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	srv.Shutdown(sctx)
	st := d.Scorer.Stats()
	fmt.Fprintf(stdout, "served %d requests (%d ids), %d party timeouts, %d late answers, rejected %v\n", st.Answered, st.IDs, st.Timeouts, st.Late, st.Rejected)
	return nil
}

func expServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("experiment serve", "asyrevel experiment serve [--quick]\n\n"+
		"Trains a9a models (8 parties, in one process), then measures batch predictions per second on\n"+
		"a9a's test set for the memory bus and the embedded broker (TCP, in-process), the HTTP service's\n"+
		"latency (p50, p99, p99.9) for single-id requests at 100, 1,000 and 5,000 a second, signed and\n"+
		"not, and at 100 and 1,000 with party 8 behind a proxy adding 20 ms a round trip, and the\n"+
		"memory of a party's index of 1M ids: results/serve.csv and its REPORT.md section.", stderr)
	f := newExpFlags(fs)
	dur := fs.Duration("duration", 10*time.Second, "load time per rate")
	log, err := f.parse(fs, args, stderr)
	if err != nil {
		return err
	}
	started := time.Now()
	train, err := f.path("a9a/a9a.gz")
	if err != nil {
		return fmt.Errorf("experiment serve measures on a9a: %w", err)
	}
	test, err := f.path("a9a/a9a.t.gz")
	if err != nil {
		return err
	}
	cfg := experiment.ServeConfig{Data: train, Test: test, Duration: *dur, IndexIDs: 1_000_000, Log: log}
	if f.quick && !flagGiven(fs, "duration") {
		cfg.Duration, cfg.Repeats = 3*time.Second, 2
	}
	if cfg.Dir, err = os.MkdirTemp("", "asyrevel-serve-"); err != nil {
		return err
	}
	defer os.RemoveAll(cfg.Dir)
	r, err := experiment.Serve(ctx, cfg)
	if err != nil {
		return err
	}
	command := "asyrevel experiment serve"
	if f.quick {
		command += " --quick"
	}
	if err := os.MkdirAll(f.out, 0o755); err != nil {
		return err
	}
	if err := experiment.WriteServe(f.out, cfg, r, command, started); err != nil {
		return err
	}
	for _, row := range r.Rows {
		switch row.Kind {
		case "batch":
			fmt.Fprintf(stdout, "batch %-20s %10.0f predictions/s\n", row.Bus, row.Value)
		case "online":
			fmt.Fprintf(stdout, "online %s signed=%-5v %5.0f/s: p50 %.2f ms, p99 %.2f ms, p99.9 %.2f ms (%d ok, %d failed)\n", row.Bus, row.Signed, row.Rate, row.P50, row.P99, row.P999, row.OK, row.Failed)
		case "memory":
			fmt.Fprintf(stdout, "memory: %.1f MB for %d ids\n", row.Value/(1<<20), cfg.IndexIDs)
		case "sequential":
			fmt.Fprintf(stdout, "sequential %s signed=%-5v: p50 %.2f ms, p99 %.2f ms, %.0f µs CPU a request\n", row.Bus, row.Signed, row.P50, row.P99, row.Value)
		}
	}
	fmt.Fprintf(stdout, "accuracy %.10f (the run's test_accuracy %.10f)\nwrote %s and its section of %s\n", r.Accuracy, r.TrainAcc,
		filepath.Join(f.out, "serve.csv"), filepath.Join(f.out, experiment.ReportFile))
	return nil
}
