package cli

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/observe"
	"github.com/asyrevel/asyrevel/serve"
	"github.com/asyrevel/asyrevel/trust"
)

// scoreFlags are the flags predict, serve and party --serve share.
type scoreFlags struct {
	models, data, split, keys string
	roster                    string
	trustUnsigned             bool
	net                       serve.NetConfig
	timeout                   time.Duration
	logLevel                  string
	logJSON                   bool
}

func addScoreFlags(fs *flag.FlagSet, f *scoreFlags, what, split string, timeout time.Duration) {
	fs.StringVar(&f.models, "models", "", "`DIR` of the run's model files (train --out DIR writes DIR/models)")
	fs.StringVar(&f.data, "data", "", what)
	fs.StringVar(&f.split, "split", split, "the sets of a split folder to read: test, train, or all (default: "+map[string]string{
		serve.SplitAuto: "the test set if the\nfolder has one, else its training set)", serve.SplitAll: "all of them)"}[split])
	fs.StringVar(&f.keys, "keys", "", "`DIR` of the run's keys (roster.json, *.nk): messages signed and verified, the model\nfiles checked against the roster (default MODELS/../keys when it has a roster)")
	fs.StringVar(&f.roster, "roster", "", "the run's roster.json (`FILE`): the model files are checked against it (each signed\nby the participant it names) when the keys folder is elsewhere; without a roster the\nmodels are refused")
	fs.BoolVar(&f.trustUnsigned, "trust-unsigned", false, "accept model files without a roster to check them against (a model re-signed with\nany key, or not signed, is then accepted): for models of a run without keys")
	fs.StringVar(&f.net.NATS, "nats", "", "URL of the broker (default: an embedded one on loopback)")
	fs.StringVar(&f.net.Bus, "bus", "jetstream", "jetstream, or memory (in-process, no broker)")
	fs.StringVar(&f.net.Store, "store", "", "keep the embedded broker's store (the scoring log) in `DIR` (default: a temporary one)")
	fs.StringVar(&f.net.Run, "run", "", "run id of the subjects and stream (default: the models')")
	fs.DurationVar(&f.timeout, "timeout", timeout, "how long a request waits for every party's answer")
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
	addScoreFlags(fs, &f, "the `PATH` to score: a file in the training set's format, or a split folder", serve.SplitAuto, serve.DefaultBatchTimeout)
	in := addInputFlags(fs)
	out := fs.String("out", "predictions.csv", "where the predictions go")
	metrics := fs.String("metrics", "", "where the metrics go as JSON (default: OUT with .metrics.json for .csv)")
	separate := fs.Bool("separate", false, "the parties are separate processes (asyrevel party --serve) on --nats")
	wait := fs.Duration("wait", 30*time.Second, "--separate: how long to wait for the parties to answer")
	chunk := fs.Int("chunk", serve.DefaultChunk, "ids a request")
	window := fs.Int("window", serve.DefaultWindow, "requests in flight")
	fs.BoolVar(&f.net.InProcess, "in-process", false, "connect to the embedded broker in-process instead of over TCP loopback")
	inputs, log, err := f.parse(fs, in, args, "predict", stderr)
	if err != nil {
		return err
	}
	if sets := serve.SplitsOf(f.data, f.split); sets != "" && !*separate {
		fmt.Fprintf(stderr, "scoring the %s set of %s (--split)\n", sets, f.data)
	}
	last := time.Now()
	m, err := serve.Predict(ctx, serve.PredictConfig{
		Models: f.models, Data: f.data, Inputs: inputs, Split: f.split, Out: *out, Metrics: *metrics, Keys: f.keys, Roster: f.roster, TrustUnsigned: f.trustUnsigned, Net: f.net,
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
	if !m.ModelsChecked {
		warnUnvouched(stderr, f.models)
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

// parse parses the flags of predict or serve (cmd), reads --inputs and
// checks the two a scorer needs, and sets the network's logger.
func (f *scoreFlags) parse(fs *flag.FlagSet, in *inputFlags, args []string, cmd string, stderr io.Writer) (*serve.Inputs, zerolog.Logger, error) {
	if err := fs.Parse(args); err != nil {
		return nil, zerolog.Nop(), usageErr(err)
	}
	inputs, err := in.inputs(fs, f.data)
	if err != nil {
		return nil, zerolog.Nop(), err
	}
	if f.models == "" || f.data == "" && inputs == nil {
		return nil, zerolog.Nop(), fmt.Errorf("%w: %s needs --models DIR and --data PATH (or --inputs FILES --key COLUMN)", errUsage, cmd)
	}
	log, err := f.logger(stderr)
	if err != nil {
		return nil, zerolog.Nop(), err
	}
	f.net.Log = log
	return inputs, log, nil
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
	addScoreFlags(fs, &f, "this party's rows: a data file, its party file of a split, or a split folder", serve.SplitAll, serve.DefaultTimeout)
	fs.Bool("serve", true, "serving mode (this command)")
	id := fs.Int("id", 0, "this party's id")
	key := fs.String("key", "", "this party's key `FILE` (asyrevel keys), with --roster: answers signed, requests verified")
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
	keys, err := partyKeys(f.keys, *key, f.roster, *id, f.models)
	if err != nil {
		return err
	}
	if err := f.checkModel(mf, keys, log, stderr); err != nil {
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
	if key == "" {
		return nil, nil // --roster alone checks the model file
	}
	if roster == "" {
		return nil, fmt.Errorf("%w: --key goes with --roster", errUsage)
	}
	return serve.PartyKeys(key, roster, m)
}

// checkModel checks a party's model file against the run's roster: the
// keys' roster, --roster, or the one beside the models; without any it
// refuses unless --trust-unsigned, which it says loudly.
func (f *scoreFlags) checkModel(mf *serve.File, keys *serve.Keys, log zerolog.Logger, stderr io.Writer) error {
	r := keys.RosterOrNil()
	if r == nil && f.roster == "" {
		if p := filepath.Join(filepath.Dir(filepath.Clean(f.models)), "keys", "roster.json"); fileExists(p) {
			f.roster = p
		}
	}
	if r == nil && f.roster != "" {
		var err error
		if r, err = trust.ReadRoster(f.roster); err != nil {
			return fmt.Errorf("--roster: %w", err)
		}
	}
	if r != nil {
		return mf.CheckSigner(r)
	}
	if !f.trustUnsigned {
		return fmt.Errorf("%w in %s: give the run's keys folder (--keys DIR) or its roster (--roster FILE), or --trust-unsigned "+
			"to score with a model file that nobody vouches for", serve.ErrNoRoster, f.models)
	}
	warnUnvouched(stderr, f.models)
	return nil
}

// warnUnvouched says, whatever the log level, that the model files were
// not checked against a roster.
func warnUnvouched(w io.Writer, models string) {
	fmt.Fprintf(w, "WARNING: --trust-unsigned: the model files in %s are NOT checked against the run's roster: a model\n"+
		"re-signed with any key, or not signed at all, is accepted. Give --keys DIR or --roster FILE instead.\n", models)
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
	fs := newFlagSet("serve", "asyrevel serve --models DIR --data PATH --listen ADDR [--clients FILE] [flags]\n\n"+
		"Serves a run's saved models over HTTP: POST /v1/predict {\"ids\": [...]} answers\n"+
		"{\"predictions\": [{\"id\", \"label\", \"probabilities\"}]}; GET /healthz; GET /metrics\n"+
		"(Prometheus text). The parties find the rows of PATH by id. Every participant runs\n"+
		"in this process unless --separate: then this is the label holder's aggregator and\n"+
		"the parties run asyrevel party --serve on --nats. An id a party lacks is a 404 naming\n"+
		"the organisation, a party down a 503 after --timeout, a bad request a 400.\n\n"+
		"Every request to /v1/predict and /metrics needs a client token (Authorization: Bearer\n"+
		"TOKEN) issued with asyrevel keys client --name NAME --out DIR, with the endpoint's scope,\n"+
		"or (--tls-ca) a client certificate that authority signed;\n"+
		"without one the answer is 401, with the wrong scope 403, over the client's rate 429 with\n"+
		"Retry-After, each with a JSON body naming the fix. /healthz is open. The access log records\n"+
		"who asked for which ids (hashed with DIR/access.key). --insecure-no-auth answers everyone,\n"+
		"for local trials only. SIGHUP re-reads the clients file.", stderr)
	var f scoreFlags
	addScoreFlags(fs, &f, "the `PATH` whose rows are served: a file in the training set's format, or a split folder\n(--separate: the ids, from a data file or a labels file)", serve.SplitAll, serve.DefaultTimeout)
	in := addInputFlags(fs)
	listen := fs.String("listen", "127.0.0.1:8080", "the HTTP `ADDR`ess")
	separate := fs.Bool("separate", false, "the parties are separate processes (asyrevel party --serve) on --nats")
	wait := fs.Duration("wait", 30*time.Second, "--separate: how long to wait for the parties at start")
	maxIDs := fs.Int("max-ids", serve.DefaultMaxIDs, "ids in one request")
	fs.BoolVar(&f.net.InProcess, "in-process", false, "connect to the embedded broker in-process instead of over TCP loopback")
	metrics := fs.String("metrics", "", "also serve the Prometheus metrics (those of GET /metrics) at http://`ADDR`/metrics,\nan address of their own (e.g. 127.0.0.1:9464, for a scraper inside the network)")
	var sf serveAuthFlags
	sf.add(fs)
	inputs, log, err := f.parse(fs, in, args, "serve", stderr)
	if err != nil {
		return err
	}
	// The clients before the models: a service that would answer no one,
	// or everyone unasked, is refused before anything starts.
	sa, err := sf.open(f.models, *listen, log, stderr)
	if err != nil {
		return err
	}
	defer sa.close()
	tlsCfg, err := sf.tlsConfig()
	if err != nil {
		return err
	}
	d, err := serve.Deploy(ctx, serve.DeployConfig{Models: f.models, Data: f.data, Split: f.split, Inputs: inputs, Keys: f.keys, Roster: f.roster,
		TrustUnsigned: f.trustUnsigned, Net: f.net, Separate: *separate, Wait: *wait, Timeout: f.timeout, Log: log})
	if err != nil {
		return err
	}
	defer d.Close()
	if d.ModelRoster == nil {
		warnUnvouched(stderr, f.models)
	}
	if d.Inputs != nil {
		inputsReport(stdout, inputs, d.Inputs)
	}
	svc := serve.NewService(serve.ServiceConfig{Scorer: d.Scorer, Labels: d.Set.Aggregator.Labels, MaxIDs: *maxIDs, Probe: d.IDs[0], Resolve: d.Resolve, Log: log,
		Auth: sa.auth, InsecureNoAuth: sf.insecure, Access: sa.access})
	if *metrics != "" {
		ms, err := observe.Listen(*metrics, svc.MetricsHandler())
		if err != nil {
			return fmt.Errorf("--metrics: %w", err)
		}
		defer ms.Close()
		log.Info().Str("url", ms.URL("/metrics")).Msg("Prometheus metrics")
	}
	stopHUP := sa.reloadOnHUP(log, stderr) // before the port opens
	defer stopHUP()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	stopWords.Store(ptr("stopping: answering the requests in flight, then closing the service; nothing is written (again to quit at once)"))
	defer stopWords.Store(nil)
	srv := &http.Server{Handler: svc.Handler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second, TLSConfig: tlsCfg}
	errc := make(chan error, 1)
	scheme := "http"
	if tlsCfg != nil {
		scheme = "https"
		go func() { errc <- srv.ServeTLS(ln, "", "") }()
	} else {
		go func() { errc <- srv.Serve(ln) }()
	}
	by := ""
	if d.Resolve != nil {
		by = "; ids as the organisations write them, normalised as the alignment did"
	}
	fmt.Fprintf(stdout, "serving run %s (%d parties, %d ids, %s%s) on %s://%s; auth: %s; access log %s\n", d.Set.Aggregator.Run, d.Set.Aggregator.Parties,
		len(d.IDs), d.Net.Name, by, scheme, ln.Addr(), svc.AuthState(), sa.accessPath)
	log.Info().Str("listen", ln.Addr().String()).Int("ids", len(d.IDs)).Str("auth", svc.AuthState()).Msg("serving")
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

// serveAuthFlags are serve's flags of who may ask.
type serveAuthFlags struct {
	clients, accessLog, accessKey string
	insecure                      bool
	rate                          float64
	burst                         int
	tls                           trust.TLSFiles
}

func (sf *serveAuthFlags) add(fs *flag.FlagSet) {
	fs.StringVar(&sf.clients, "clients", "", "the clients file (`FILE`, asyrevel keys client --out DIR writes DIR/clients.json)\n(default MODELS/../keys/clients.json when it exists)")
	fs.BoolVar(&sf.insecure, "insecure-no-auth", false, "answer every request without credentials: for local trials only (said at start,\nin /healthz and in the access log)")
	fs.Float64Var(&sf.rate, "rate", serve.DefaultRate, "ids a second a client may ask for, unless its token says otherwise")
	fs.IntVar(&sf.burst, "burst", serve.DefaultBurst, "ids a client may ask at once after a pause, unless its token says otherwise (at\nleast --max-ids)")
	fs.StringVar(&sf.accessLog, "access-log", "", "the access log (`FILE`, appended; - for stderr): who asked for which ids, hashed\n(default MODELS/../serve-access.log)")
	fs.StringVar(&sf.accessKey, "access-key", "", "the key of the access log's id hashes (`FILE`; default access.key beside the clients\nfile, made if missing)")
	fs.StringVar(&sf.tls.Cert, "tls-cert", "", "serve HTTPS with this certificate chain (`FILE`, PEM); with --tls-key")
	fs.StringVar(&sf.tls.Key, "tls-key", "", "the certificate's private key (`FILE`, PEM)")
	fs.StringVar(&sf.tls.CA, "tls-ca", "", "mutual TLS: admit a request without a token whose client certificate this\nauthority signed (`FILE`, PEM); the certificate's Common Name names the client")
}

// serveAuth is what serveAuthFlags opened.
type serveAuth struct {
	clientsPath, accessPath string
	auth                    *serve.Auth
	access                  *serve.AccessLog
}

func (sa *serveAuth) close() {
	if sa != nil && sa.access != nil {
		sa.access.Close()
	}
}

// open reads the clients file (or says why the service may not start),
// the access log's key, and opens the access log.
func (sf *serveAuthFlags) open(models, listen string, log zerolog.Logger, stderr io.Writer) (*serveAuth, error) {
	base := filepath.Dir(filepath.Clean(models))
	sa := &serveAuth{clientsPath: sf.clients}
	if sa.clientsPath == "" {
		if p := filepath.Join(base, "keys", serve.ClientsFile); fileExists(p) {
			sa.clientsPath = p
		}
	}
	if sf.rate <= 0 || sf.burst <= 0 {
		return nil, fmt.Errorf("%w: --rate and --burst must be positive", errUsage)
	}
	switch {
	case sf.insecure && sf.clients != "":
		return nil, fmt.Errorf("%w: --insecure-no-auth and --clients exclude each other", errUsage)
	case sf.insecure:
		sa.clientsPath = ""
		fmt.Fprintf(stderr, "WARNING: --insecure-no-auth: every request is answered without credentials: anyone who reaches %s reads\n"+
			"every customer's prediction. For local trials only; issue client tokens (asyrevel keys client) for anything else.\n", listen)
		if host, _, err := net.SplitHostPort(listen); err == nil && !isLoopback(host) {
			fmt.Fprintf(stderr, "WARNING: %s is not a loopback address: the service is open to the network\n", listen)
		}
		log.Warn().Str("listen", listen).Msg("--insecure-no-auth: no authentication")
	case sa.clientsPath == "" && sf.tls.CA != "":
		log.Info().Str("ca", sf.tls.CA).Msg("clients by their certificates (mutual TLS), no tokens")
	case sa.clientsPath == "":
		return nil, fmt.Errorf("%w: serve answers only its clients, and there is no clients file: issue a token with\n"+
			"  asyrevel keys client --name NAME --out %s\n"+
			"(serve finds %s there), or give --clients FILE; --insecure-no-auth answers everyone (local trials only)",
			errUsage, filepath.Join(base, "keys"), serve.ClientsFile)
	}
	if sa.clientsPath != "" || sf.tls.CA != "" && !sf.insecure {
		var clients *serve.Clients
		if sa.clientsPath != "" {
			var err error
			if clients, err = serve.ReadClients(sa.clientsPath); err != nil {
				return nil, err
			}
			if len(clients.Clients) == 0 && sf.tls.CA == "" {
				return nil, fmt.Errorf("%s lists no client: issue a token with asyrevel keys client --name NAME --out %s", sa.clientsPath, filepath.Dir(sa.clientsPath))
			}
		}
		var err error
		if sa.auth, err = serve.NewAuth(serve.AuthConfig{Clients: clients, Certificates: sf.tls.CA != "", Rate: sf.rate, Burst: sf.burst}); err != nil {
			return nil, err
		}
		for _, c := range sa.auth.Expiring(7 * 24 * time.Hour) {
			log.Warn().Str("client", c.Name).Time("expires", c.Expires).Msg("a client's token has expired or expires within a week (asyrevel keys client --force issues a new one)")
		}
		log.Info().Str("clients", sa.clientsPath).Int("n", sa.auth.Len()).Msg("client tokens")
	}
	var key []byte
	var err error
	switch {
	case sf.accessKey != "":
		key, err = serve.MakeAccessKey(sf.accessKey)
	case sa.clientsPath != "":
		key, err = serve.MakeAccessKey(filepath.Join(filepath.Dir(sa.clientsPath), serve.AccessKeyFile))
	case sf.tls.CA != "" && !sf.insecure:
		key, err = serve.MakeAccessKey(filepath.Join(base, "keys", serve.AccessKeyFile))
	default: // --insecure-no-auth without a key: this process's own
		key = make([]byte, 32)
		_, err = rand.Read(key)
		log.Warn().Msg("the access log's ids are hashed with a key of this process only (--access-key FILE keeps one)")
	}
	if err != nil {
		return nil, fmt.Errorf("the access log's key: %w", err)
	}
	sa.accessPath = sf.accessLog
	if sa.accessPath == "" {
		sa.accessPath = filepath.Join(base, "serve-access.log")
	}
	if sa.access, err = serve.OpenAccessLog(sa.accessPath, key); err != nil {
		return nil, fmt.Errorf("the access log: %w", err)
	}
	return sa, nil
}

func (sf *serveAuthFlags) tlsConfig() (*tls.Config, error) {
	if !sf.tls.Enabled() {
		return nil, nil
	}
	cfg, err := trust.ServerTLS(sf.tls)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	if cfg.ClientCAs != nil {
		// A certificate when given must verify; a client without one may
		// still send a token.
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return cfg, nil
}

// reloadOnHUP re-reads the clients file on SIGHUP; the returned function
// stops it.
func (sa *serveAuth) reloadOnHUP(log zerolog.Logger, stderr io.Writer) func() {
	if sa.auth == nil {
		return func() {}
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-hup:
				c, err := serve.ReadClients(sa.clientsPath)
				if err == nil {
					err = sa.auth.Reload(c)
				}
				if err != nil {
					fmt.Fprintf(stderr, "SIGHUP: the clients file is not read, the clients stay as they were: %v\n", err)
					continue
				}
				log.Info().Str("clients", sa.clientsPath).Int("n", sa.auth.Len()).Msg("SIGHUP: clients file read again")
			}
		}
	}()
	return func() { signal.Stop(hup); close(done) }
}

// isLoopback reports whether host is a loopback name or address.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
