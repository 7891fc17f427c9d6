package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/align"
	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/trust"
)

// alignFlags are the flags of both forms of asyrevel align.
type alignFlags struct {
	key, label, dedupe, out, run, format string
	keepSpace, keepCase, zeros           bool
	timeout                              time.Duration
	progress                             time.Duration
	logLevel                             string
	// How the cells are read, as data split and train read them.
	missing               dataset.MissingPolicy
	na, drop, categorical []string
	holderParty           bool
	maxRatio              float64
}

// addAlignFlags registers the flags that say how an organisation's file
// is read and its keys normalised (align, and predict and serve --inputs).
func addAlignFlags(fs *flag.FlagSet, f *alignFlags) {
	fs.StringVar(&f.key, "key", "", "the key `COLUMNS` (comma-separated for a composite key), by header name or 0-based position")
	fs.StringVar(&f.format, "format", "", "the files' format: csv (a header line) or libsvm (an id, the label holder's label, then index:value pairs); default: told from each file")
	fs.StringVar(&f.dedupe, "dedupe", "refuse", "keys that repeat in one file: refuse (an error with their count) or first (keep each key's first row)")
	fs.BoolVar(&f.keepSpace, "keep-space", false, "keep white space in keys as it is (default: trim, and make inner runs one space)")
	fs.BoolVar(&f.keepCase, "keep-case", false, "keep letter case in keys (default: fold to lower case)")
	fs.BoolVar(&f.zeros, "strip-zeros", false, "remove leading zeros from keys made of digits only (\"007\" matches \"7\")")
	addCellFlags(fs, &f.missing, &f.na, &f.drop, &f.categorical)
}

// alignMaxRatio is --max-ratio as align.Config takes it (0: no bound).
func (f *alignFlags) alignMaxRatio() (float64, error) {
	switch {
	case f.maxRatio < 0 || math.IsNaN(f.maxRatio) || math.IsInf(f.maxRatio, 0):
		return 0, fmt.Errorf("%w: --max-ratio %v: want a ratio > 0, or 0 for no bound", errUsage, f.maxRatio)
	case f.maxRatio == 0:
		return -1, nil
	}
	return f.maxRatio, nil
}

func (f *alignFlags) options(label string) (align.ReadOptions, error) {
	d, err := align.ParseDedupe(f.dedupe)
	if err != nil {
		return align.ReadOptions{}, fmt.Errorf("%w: %v", errUsage, err)
	}
	switch f.format {
	case "", "csv", "libsvm":
	default:
		return align.ReadOptions{}, fmt.Errorf("%w: --format %q: want csv or libsvm", errUsage, f.format)
	}
	return align.ReadOptions{Key: splitList(f.key), Label: label, Dedupe: d, Format: f.format,
		Norm:    align.Normalization{KeepSpace: f.keepSpace, KeepCase: f.keepCase, StripZeros: f.zeros},
		Missing: f.missing, NA: f.na, Drop: f.drop, Categorical: f.categorical}, nil
}

const alignSynopsis = `asyrevel align --inputs LABELS.csv,P1.csv,... --key COLUMN[,COLUMN] --label COLUMN --out DIR
       asyrevel align --nats URL --run R --id M --nkey FILE --roster FILE --data FILE --key COLUMN [--label COLUMN] --out DIR

Private entity alignment: the organisations find the rows they all hold (by the key
columns) without showing each other any key. ECDH private set intersection on
ristretto255 (RFC 9380 hash-to-group, cloudflare/circl), the aggregator (the label
holder, organisation 0) as the hub, every message signed and kept in the run's stream.
Each organisation learns only its own rows of the intersection, in one common order,
and the sizes (docs/align.md says exactly what each one learns).

The first form runs every organisation in this process over an embedded broker: the
first file is the label holder's, the others parties 1, 2, ... in order; the label
holder's own feature columns become the last party's block (it runs that party for
them; --label-holder-party=false leaves them out). DIR becomes a split folder that
asyrevel train --data DIR takes as it is (and align.json, each organisation's record,
and keys.csv.gz, the label holder's keys as written, by which predict and serve report
rows). The second form is one organisation of a run whose broker runs
elsewhere (asyrevel broker --roster, keys from asyrevel keys): DIR becomes a folder of its
own that asyrevel aggregator --data DIR (--id 0) or party --id M --data DIR takes as it is:
its file (the labels file for --id 0, party-M.train.gz otherwise), a manifest with the
whole layout that lists only that file, and align.json, its record (--out FILE.gz: the
bare file and FILE.gz.align.json). asyrevel data verify DIR|REC.json ... checks each folder
alone and compares the organisations' order digests, from hashes alone.

Files are CSV with a header; every column but the key and label columns is a feature,
read as data split and train read one: numeric, or one-hot with --categorical; --drop
leaves columns out; a missing cell (empty, NA, --na) is refused until --missing zero
(read as 0) or --missing drop (leave its row out) says what to do. Or LIBSVM with an id column (--format libsvm, or told from
the file): each line the id, then the label holder's label, then index:value pairs, as in
"cust-17 1 3:0.5 9:1" (a split folder's party files are in this form); give --key id and,
for the label holder, --label label. Keys are normalised before they are hashed: white space
trimmed and inner runs made one space (--keep-space), letters folded to lower case
(--keep-case), and, with --strip-zeros, leading zeros removed from all-digit keys.
Every organisation must use the same rules: the hub refuses a different one.

Every organisation states its set's size first. The hub refuses a party whose set is larger
than --max-ratio times its own (default 4) before it sends anything of its own set: a party
learns which of its keys the hub holds, so its set's size bounds how much of the hub's list
it can test. A hub that agrees with a much larger party raises the ratio (0: no bound). The
run's log keeps every size.`

func cmdAlign(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("align", alignSynopsis, stderr)
	var f alignFlags
	inputs := fs.String("inputs", "", "in-process form: the label holder's `FILES` first, then party 1, 2, ... (comma-separated)")
	addAlignFlags(fs, &f)
	fs.StringVar(&f.label, "label", "", "the label `COLUMN` of the label holder's file (one-organisation form, a party: a column\nto leave out, as when the label holder aligns its own file as its party's)")
	fs.BoolVar(&f.holderParty, "label-holder-party", true, "in-process form: the label holder's feature columns (every column of its file but\nthe key and the label) become the last party's block: the label holder runs that\nparty for its own features (false: leave them out)")
	fs.StringVar(&f.out, "out", "", "in-process form: the split folder `PATH` to write; one-organisation form: the file to write")
	fs.DurationVar(&f.timeout, "timeout", align.DefaultTimeout, "how long to wait for an organisation that sends nothing (it left, or hangs)")
	fs.Float64Var(&f.maxRatio, "max-ratio", align.DefaultMaxRatio, "the hub (label holder): refuse a party whose set is larger than this many times the\nhub's own, before any of the hub's set is sent (0: no bound; agree on it with every organisation)")
	fs.DurationVar(&f.progress, "progress", 5*time.Second, "print a progress line this often (0: never)")
	fs.StringVar(&f.run, "run", "", "the run id (in-process form: default align-<time>)")
	fs.StringVar(&f.logLevel, "log", "warn", "log level: debug, info, warn, error")
	natsURL := fs.String("nats", "", "one-organisation form: the run's broker `URL`")
	id := fs.Int("id", -1, "one-organisation form: this organisation (0 the label holder and hub, M party M)")
	nkey := fs.String("nkey", "", "one-organisation form: this organisation's key `FILE` (asyrevel keys)")
	rosterFile := fs.String("roster", "", "one-organisation form: the run's roster.json `FILE`")
	data := fs.String("data", "", "one-organisation form: this organisation's `FILE`")
	summary := fs.String("summary", "", "write the summary JSON here too (in-process form: default DIR/align-summary.json)")
	testFrac := fs.Float64("test-fraction", 0, "in-process form: hold out this share of the aligned rows as the test set\n(drawn with --seed in the common order)")
	seed := fs.Uint64("seed", 1, "seed of --test-fraction's draw")
	store := fs.String("store", "", "in-process form: keep the embedded broker's store (the audited log) in `DIR` (default: a temporary folder)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return fmt.Errorf("%w: align takes no positional argument", errUsage)
	}
	if f.key == "" || f.out == "" {
		return fmt.Errorf("%w: align needs --key and --out", errUsage)
	}
	lvl, err := zerolog.ParseLevel(f.logLevel)
	if err != nil {
		return fmt.Errorf("%w: --log: %v", errUsage, err)
	}
	log := newLogger(stderr, lvl, false)
	switch {
	case *inputs != "" && *natsURL == "":
		return alignLocal(ctx, &f, splitList(*inputs), *store, *summary, dataset.TestSplit{Fraction: *testFrac, Shuffle: true, Seed: *seed}, log, stdout, stderr)
	case *inputs == "" && *natsURL != "":
		if *id < 0 || *data == "" || *nkey == "" || *rosterFile == "" || f.run == "" {
			return fmt.Errorf("%w: the one-organisation form needs --run, --id, --nkey, --roster and --data", errUsage)
		}
		return alignOne(ctx, &f, *natsURL, *id, *nkey, *rosterFile, *data, *summary, log, stdout, stderr)
	}
	return fmt.Errorf("%w: give --inputs (every organisation in this process) or --nats (one organisation)", errUsage)
}

// alignSummary is the JSON summary of an alignment.
type alignSummary struct {
	Run            string         `json:"run"`
	Spec           string         `json:"spec"`
	Organisations  int            `json:"organisations"`
	Sizes          []int          `json:"sizes"`
	Intersection   int            `json:"intersection"`
	WallSeconds    float64        `json:"wall_seconds"`
	WireBytes      int64          `json:"wire_bytes"`
	WireBytesPerID float64        `json:"wire_bytes_per_id"`
	Messages       int64          `json:"messages"`
	Records        []align.Record `json:"records"`
}

// readTables reads the organisations' files: the label holder's first,
// then parties 1, 2, ... With holderParty, the label holder's feature
// columns become one more party's block, the last: the label holder runs
// that party for its own features (the aggregator holds the labels, a
// party a block).
func readTables(paths []string, f *alignFlags, holderParty bool, stderr io.Writer) ([]*align.Table, error) {
	tables := make([]*align.Table, len(paths))
	absent := map[string]int{} // --drop and --categorical columns: the files that lack them
	for m, p := range paths {
		label := ""
		if m == 0 {
			label = f.label
		}
		opts, err := f.options(label)
		if err != nil {
			return nil, err
		}
		// Every file gets the same flags, and a column is one
		// organisation's: the others lack it.
		opts.IgnoreAbsent = true
		t, err := align.ReadTable(p, opts)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", orgLabel(m), err)
		}
		if m > 0 && t.X.NCols == 0 {
			return nil, fmt.Errorf("%s: %s has no feature column besides the key", orgLabel(m), p)
		}
		if t.Dropped > 0 {
			fmt.Fprintf(stderr, "%s: dropped %d rows whose key repeats an earlier row's (--dedupe first)\n", orgLabel(m), t.Dropped)
		}
		if w := t.Missing.String(); w != "" {
			fmt.Fprintf(stderr, "%s: %s: %s\n", orgLabel(m), p, w)
		}
		for _, c := range t.Absent {
			absent[c]++
		}
		tables[m] = t
	}
	for _, c := range slices.Concat(f.drop, f.categorical) {
		if absent[c] == len(paths) {
			return nil, fmt.Errorf("%w: --drop or --categorical %q: no file has such a column", errUsage, c)
		}
	}
	if h := tables[0]; h.X.NCols > 0 {
		m := len(tables)
		if !holderParty {
			fmt.Fprintf(stderr, "note: the label holder's %s left out (--label-holder-party=false)\n", columnsText(h.Names))
			return tables, nil
		}
		own := *h
		own.Labels = nil
		tables = append(tables, &own)
		fmt.Fprintf(stderr, "note: the label holder's %s %s party %d's block: the label holder runs party %d for its own features (--label-holder-party=false leaves them out)\n",
			columnsText(h.Names), map[bool]string{true: "is", false: "are"}[len(h.Names) == 1], m, m)
	}
	return tables, nil
}

// columnsText names feature columns for a note: "feature column balance",
// "3 feature columns (a, b, c)".
func columnsText(names []string) string {
	if len(names) == 1 {
		return "feature column " + names[0]
	}
	list := names
	more := ""
	if len(list) > 6 {
		list, more = list[:6], ", ..."
	}
	return fmt.Sprintf("%d feature columns (%s%s)", len(names), strings.Join(list, ", "), more)
}

func orgLabel(m int) string {
	if m == 0 {
		return "aggregator (label holder)"
	}
	return trust.PartyID(m)
}

// progressLines prints a line per organisation every period until done
// is closed.
func progressLines(w io.Writer, every time.Duration, names []string, ps []*align.Progress, sizes []int, done chan struct{}) {
	if every <= 0 {
		return
	}
	t0 := time.Now()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			for i, p := range ps {
				state := ""
				if p.Matched.Load() {
					state = ", matched"
				}
				fmt.Fprintf(w, "align %5.0fs %s: hashed %d/%d, raised %d peer elements, sent %d items, received %d%s\n",
					time.Since(t0).Seconds(), names[i], p.Hashed.Load(), sizes[i], p.Masked.Load(), p.Sent.Load(), p.Received.Load(), state)
			}
		}
	}
}

func alignLocal(ctx context.Context, f *alignFlags, paths []string, store, summaryPath string, holdout dataset.TestSplit, log zerolog.Logger, stdout, stderr io.Writer) error {
	if len(paths) < 2 {
		return fmt.Errorf("%w: --inputs needs the label holder's file and at least one party's", errUsage)
	}
	if f.label == "" {
		return fmt.Errorf("%w: the in-process form needs --label (the label holder's label column)", errUsage)
	}
	run := f.run
	if run == "" {
		run = "align-" + time.Now().UTC().Format("20060102-150405")
	}
	tables, err := readTables(paths, f, f.holderParty, stderr)
	if err != nil {
		return err
	}
	q := len(tables) - 1
	if store == "" {
		tmp, err := os.MkdirTemp("", "asyrevel-align-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		store = tmp
	}
	l, err := align.StartLocal(ctx, run, q, store)
	if err != nil {
		return err
	}
	defer l.Close()
	opts, _ := f.options("")
	spec := align.Spec(len(opts.Key), opts.Norm)
	ratio, err := f.alignMaxRatio()
	if err != nil {
		return err
	}
	t0 := time.Now()
	res := make([]*align.Result, q+1)
	errs := make([]error, q+1)
	progress := make([]*align.Progress, q+1)
	names, sizes := make([]string, q+1), make([]int, q+1)
	var wg sync.WaitGroup
	for m := range tables {
		progress[m], names[m], sizes[m] = new(align.Progress), trust.AggregatorID, tables[m].Len()
		if m > 0 {
			names[m] = trust.PartyID(m)
		}
		cfg := align.Config{Run: run, ID: m, Parties: q, Bus: l.Bus(m), Roster: l.Roster, Key: l.Keys[m],
			Spec: spec, Width: tables[m].X.NCols, Timeout: f.timeout, Log: log, Progress: progress[m], MaxRatio: ratio}
		if m == 0 {
			cfg.Width, cfg.Labels = 0, tables[m].Labels
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[m], errs[m] = align.Run(ctx, cfg, tables[m].Keys)
		}()
	}
	done := make(chan struct{})
	go progressLines(stderr, f.progress, names, progress, sizes, done)
	wg.Wait()
	close(done)
	wall := time.Since(t0).Seconds()
	// The root cause first: the organisation that broke or left, not
	// the ones that heard of it.
	var first error
	for _, e := range errs {
		if e != nil && !errors.Is(e, align.ErrAborted) {
			first = e
			break
		}
	}
	if first == nil {
		first = errors.Join(errs...)
	}
	if first != nil {
		return first
	}
	man, recs, err := align.WriteFolder(f.out, run, spec, tables, res, holdout)
	if err != nil {
		return err
	}
	// The roster (public keys only), for asyrevel audit verify --store.
	if err := l.Roster.WriteFile(filepath.Join(f.out, "roster.json"), true); err != nil {
		return err
	}
	s := alignSummary{Run: run, Spec: spec, Organisations: q + 1, Sizes: sizes, Intersection: len(res[0].Rows), WallSeconds: wall, Records: recs}
	ids := 0
	for m, r := range res {
		s.WireBytes += r.Stats.BytesSent
		s.Messages += r.Stats.MessagesSent
		ids += tables[m].Len()
	}
	s.WireBytesPerID = float64(s.WireBytes) / float64(ids)
	if summaryPath == "" {
		summaryPath = filepath.Join(f.out, "align-summary.json")
	}
	if err := writeJSON(summaryPath, s); err != nil {
		return err
	}
	who := fmt.Sprintf("%d organisations", q+1)
	if len(tables) > len(paths) {
		who = fmt.Sprintf("%d organisations (%d participants: the label holder also runs party %d)", len(paths), q+1, q)
	}
	fmt.Fprintf(stdout, "aligned %s of %v rows: %d in common, %.1f s, %d wire bytes (%.1f a row)\n",
		who, sizes, s.Intersection, wall, s.WireBytes, s.WireBytesPerID)
	fmt.Fprintf(stdout, "wrote %d files, %s and %s in %s (order sha256 %s)\n", len(man.Files), "manifest.json", align.RecordFile, f.out, recs[0].OrderSHA256)
	return nil
}

func writeJSON(path string, v any) error {
	js, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(js, '\n'), 0o644)
}

func alignOne(ctx context.Context, f *alignFlags, url string, id int, nkey, rosterFile, data, summaryPath string, log zerolog.Logger, stdout, stderr io.Writer) error {
	roster, err := trust.ReadRoster(rosterFile)
	if err != nil {
		return err
	}
	if roster.Run != f.run {
		return fmt.Errorf("%w: the roster is run %s's, not %s's", errUsage, roster.Run, f.run)
	}
	key, err := trust.ReadKeyFile(nkey)
	if err != nil {
		return err
	}
	label := ""
	if id == 0 {
		if f.label == "" {
			return fmt.Errorf("%w: the label holder (--id 0) needs --label", errUsage)
		}
		label = f.label
	}
	opts, err := f.options(label)
	if err != nil {
		return err
	}
	if id > 0 && f.label != "" {
		// The label holder aligning its own file as its party's: the
		// label column is not a feature.
		opts.Drop = append(opts.Drop, f.label)
	}
	t, err := align.ReadTable(data, opts)
	if err != nil {
		return err
	}
	if id > 0 && t.X.NCols == 0 {
		return fmt.Errorf("%w: %s has no feature column besides the key", errUsage, data)
	}
	if w := t.Missing.String(); w != "" {
		fmt.Fprintf(stderr, "%s: %s\n", data, w)
	}
	if id == 0 && t.X.NCols > 0 {
		fmt.Fprintf(stderr, "note: the label holder's %s are not in its labels folder: to train on them, the label holder runs a party for them, aligned in this run with its own key: align --id M --data %s --label %s ... (docs/align.md)\n",
			columnsText(t.Names), data, f.label)
	}
	if t.Dropped > 0 {
		fmt.Fprintf(stderr, "dropped %d rows whose key repeats an earlier row's (--dedupe first)\n", t.Dropped)
	}
	bus, err := align.Connect(ctx, url, roster, key)
	if err != nil {
		return err
	}
	defer bus.Close()
	spec := align.Spec(len(opts.Key), opts.Norm)
	p := new(align.Progress)
	ratio, err := f.alignMaxRatio()
	if err != nil {
		return err
	}
	cfg := align.Config{Run: f.run, ID: id, Parties: roster.Parties(), Bus: bus, Roster: roster, Key: key,
		Spec: spec, Width: t.X.NCols, Timeout: f.timeout, Log: log, Progress: p, MaxRatio: ratio}
	if id == 0 {
		cfg.Width, cfg.Labels = 0, t.Labels
	}
	done := make(chan struct{})
	name := trust.AggregatorID
	if id > 0 {
		name = trust.PartyID(id)
	}
	go progressLines(stderr, f.progress, []string{name}, []*align.Progress{p}, []int{t.Len()}, done)
	res, err := align.Run(ctx, cfg, t.Keys)
	close(done)
	if err != nil {
		return err
	}
	var rec *align.Record
	wrote := f.out + " and " + f.out + ".align.json"
	if strings.HasSuffix(f.out, ".gz") {
		rec, err = align.WriteOwn(f.out, f.run, spec, id, t, res)
	} else {
		// A folder of its own that aggregator/party --data takes as it is.
		_, rec, err = align.WriteOwnFolder(f.out, f.run, spec, id, t, res)
		wrote = dataset.ManifestFile + " and " + align.RecordFile + " in " + f.out
	}
	if err != nil {
		return err
	}
	if !strings.HasSuffix(f.out, ".gz") {
		wrote = rec.File + ", " + wrote
	}
	if summaryPath != "" {
		if err := writeJSON(summaryPath, rec); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "%s: %d of its %d rows in common, %.1f s, %d wire bytes sent; wrote %s (order sha256 %s)\n",
		name, rec.Samples, rec.Own, rec.Stats.Seconds, rec.Stats.BytesSent, wrote, rec.OrderSHA256)
	return nil
}

// verifyAlignOrder checks, in a split folder that asyrevel align wrote,
// that every file of a set lists its ids in one order, by their digests.
func verifyAlignOrder(dir, split string, labels *dataset.Labels, parties []*dataset.PartyData, stdout io.Writer) error {
	if _, err := os.Stat(filepath.Join(dir, align.RecordFile)); err != nil {
		return nil // not an alignment's folder
	}
	want := align.OrderDigest(labels.IDs)
	for _, p := range parties {
		if got := align.OrderDigest(p.IDs); got != want {
			return fmt.Errorf("%s set: party %d's order digest %s differs from the labels' %s", split, p.Party, got, want)
		}
	}
	fmt.Fprintf(stdout, "%s: every file's order digest is %s\n", split, want)
	return nil
}

// verifyAlignRecords compares the records of the organisations of one
// alignment: records (REC.json) as they are, and the folders of the
// one-organisation form each checked first on its own (its file against
// its manifest, its ids against its record's digest), then their layouts
// against each other.
func verifyAlignRecords(paths []string, stdout io.Writer) error {
	var recs []align.Record
	var folders []*align.FolderCheck
	for _, p := range paths {
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			c, err := align.CheckFolder(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "%s: %s's %s matches %s, its %d ids' order digest its record's\n", p, c.Record.Organisation, c.Record.File, dataset.ManifestFile, c.Record.Samples)
			folders = append(folders, c)
			recs = append(recs, c.Record)
			continue
		}
		r, err := align.ReadRecords(p)
		if err != nil {
			return err
		}
		recs = append(recs, r...)
	}
	if len(folders) > 1 {
		if err := align.CheckFolders(folders); err != nil {
			return err
		}
	}
	if len(recs) == 1 && len(folders) == 1 {
		fmt.Fprintf(stdout, "one organisation's folder: give the others' folders or %s records too to compare the order\n", align.RecordFile)
		return nil
	}
	if err := align.CheckRecords(recs); err != nil {
		return err
	}
	for _, r := range recs {
		fmt.Fprintf(stdout, "%s: %d rows, order sha256 %s\n", r.Organisation, r.Samples, r.OrderSHA256)
	}
	fmt.Fprintf(stdout, "%d organisations agree on the order of %d rows\n", len(recs), recs[0].Samples)
	return nil
}

// isAlignOwnFolder reports whether dir is a folder of asyrevel align's
// one-organisation form (data verify compares those by their records).
func isAlignOwnFolder(dir string) bool { return align.IsOwnFolder(dir) }
