package serve

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/asyrevel/asyrevel/align"
	"github.com/asyrevel/asyrevel/dataset"
)

// ErrData reports a data file that cannot be scored with the models: other
// columns, no id column where one is needed, values that are not finite.
var ErrData = errors.New("serve: data does not fit the models")

// Rows are one party's rows of a data file: their ids, in the file's order,
// and the party's columns, prepared as in training (encoded and scaled).
type Rows struct {
	IDs []string
	X   *dataset.Matrix
}

// LabelRows are what the aggregator reads of a data file: the ids in the
// file's order and, if the file has labels, their classes.
type LabelRows struct {
	IDs []string
	Y   []int32 // nil when the file has no labels
	// Keys and Source, when not nil, say how the label holder's own file
	// writes each row's key and where the row is in it (0-based): the
	// rows of an alignment, whose IDs are normalised keys in the
	// alignment's order. Predictions are reported by these keys, in the
	// file's order.
	Keys   []string
	Source []int
}

// Splits of a split folder that scoring reads.
const (
	// SplitAuto is the folder's test set if it has one, else its training
	// set (a folder that asyrevel align wrote of new rows holds only a
	// training set).
	SplitAuto = ""
	// SplitAll is every set of the folder, the training set first.
	SplitAll = "all"
)

// folderSplits are the sets of the split folder dir that split names.
func folderSplits(dir string, man *dataset.SplitManifest, split string) ([]string, error) {
	has := func(name string) bool {
		return slices.ContainsFunc(man.Sets, func(s dataset.SplitSet) bool { return s.Split == name })
	}
	switch split {
	case SplitAuto:
		if has("test") {
			return []string{"test"}, nil
		}
		return []string{"train"}, nil
	case SplitAll:
		var all []string
		for _, s := range man.Sets {
			all = append(all, s.Split)
		}
		return all, nil
	}
	if !has(split) {
		var sets []string
		for _, s := range man.Sets {
			sets = append(sets, s.Split)
		}
		return nil, fmt.Errorf("%w: split folder %s has no %s set (it holds %s): give --split %s, or all",
			ErrData, dir, split, strings.Join(sets, " and "), strings.Join(sets, " or "))
	}
	return []string{split}, nil
}

// SplitsOf says which sets of a split folder split reads ("test", "train",
// "train and test"), for messages; "" for a path that is no split folder.
func SplitsOf(path, split string) string {
	if !dataset.IsSplit(path) {
		return ""
	}
	man, err := dataset.ReadManifest(path)
	if err != nil {
		return ""
	}
	sets, err := folderSplits(path, man, split)
	if err != nil {
		return ""
	}
	return strings.Join(sets, " and ")
}

// ReadAll reads path once for every participant of s (one process playing
// every role): each party's rows and the aggregator's ids and labels.
// path is a data file in the training set's format (LIBSVM, CSV, a folder
// of IDX files, whose t10k files are scored) or, for models trained on a
// split folder, a split folder (its split files are read, each party's
// alone).
func ReadAll(path string, s *Set, split string) ([]*Rows, *LabelRows, error) {
	agg := s.Aggregator
	if agg.Read.Format == "split" || dataset.IsSplit(path) {
		parts := make([]*Rows, len(s.Parties))
		for m, f := range s.Parties {
			var err error
			if parts[m], err = ReadParty(path, f, split); err != nil {
				return nil, nil, err
			}
		}
		lab, err := ReadLabels(path, agg, split)
		if err != nil {
			return nil, nil, err
		}
		return parts, lab, checkAligned(parts, lab)
	}
	ds, ids, err := openData(path, agg.Read, agg.Labels)
	if err != nil {
		return nil, nil, err
	}
	parts := make([]*Rows, len(s.Parties))
	for m, f := range s.Parties {
		if parts[m], err = partyRows(ds, ids, f); err != nil {
			return nil, nil, err
		}
	}
	return parts, &LabelRows{IDs: ids, Y: labelsOf(ds)}, nil
}

// ReadParty reads party f's rows of path: a data file with every column
// (the party keeps its own), a party file written by asyrevel data split,
// or a split folder (its file of split for this party).
func ReadParty(path string, f *File, split string) (*Rows, error) {
	if dataset.IsSplit(path) {
		man, err := dataset.ReadManifest(path)
		if err != nil {
			return nil, err
		}
		sets, err := folderSplits(path, man, split)
		if err != nil {
			return nil, err
		}
		var all *Rows
		for _, set := range sets {
			e, ok := man.File(set, f.Party)
			if !ok {
				return nil, fmt.Errorf("%w: split folder %s has no %s file for party %d (the folder of another organisation?)", ErrData, path, set, f.Party)
			}
			if err := e.Verify(path); err != nil {
				return nil, err
			}
			r, err := ReadParty(filepath.Join(path, e.Name), f, split)
			if err != nil {
				return nil, err
			}
			all = appendRows(all, r)
		}
		return all, nil
	}
	if isPartyFile(path) {
		p, err := dataset.LoadPartyFile(path)
		if err != nil {
			return nil, err
		}
		if p.Party != f.Party || p.Lo != f.Columns.Lo || p.Hi != f.Columns.Hi || p.Features != f.Read.Features {
			return nil, fmt.Errorf("%w: %s holds party %d's columns [%d,%d) of %d, the model is party %d's [%d,%d) of %d",
				ErrData, path, p.Party, p.Lo, p.Hi, p.Features, f.Party, f.Columns.Lo, f.Columns.Hi, f.Read.Features)
		}
		return prepare(&Rows{IDs: p.IDs, X: p.X}, f)
	}
	ds, ids, err := openData(path, f.Read, nil)
	if err != nil {
		return nil, err
	}
	return partyRows(ds, ids, f)
}

// ReadLabels reads the aggregator's view of path: ids and labels (a labels
// file of a split folder, or a data file, of which it keeps only those).
func ReadLabels(path string, agg *File, split string) (*LabelRows, error) {
	if dataset.IsSplit(path) {
		man, err := dataset.ReadManifest(path)
		if err != nil {
			return nil, err
		}
		sets, err := folderSplits(path, man, split)
		if err != nil {
			return nil, err
		}
		all := &LabelRows{}
		for _, set := range sets {
			e, ok := man.File(set, 0)
			if !ok {
				return nil, fmt.Errorf("%w: split folder %s has no %s labels file (a party's folder?)", ErrData, path, set)
			}
			if err := e.Verify(path); err != nil {
				return nil, err
			}
			l, err := ReadLabels(filepath.Join(path, e.Name), agg, split)
			if err != nil {
				return nil, err
			}
			all.IDs, all.Y = append(all.IDs, l.IDs...), append(all.Y, l.Y...)
		}
		return all, writtenKeys(path, all)
	}
	if isLabelsFile(path) {
		l, err := dataset.LoadLabels(path)
		if err != nil {
			return nil, err
		}
		if !slices.Equal(l.LabelValues, agg.Labels.Values) {
			return nil, fmt.Errorf("%w: %s has labels %v, the model's classes are %v", ErrData, path, l.LabelValues, agg.Labels.Values)
		}
		return &LabelRows{IDs: l.IDs, Y: l.Y}, nil
	}
	ds, ids, err := openData(path, agg.Read, agg.Labels)
	if err != nil {
		return nil, err
	}
	return &LabelRows{IDs: ids, Y: labelsOf(ds)}, nil
}

// writtenKeys gives l the label holder's keys as written, when the folder
// dir is an alignment's that kept them (align.KeysFile).
func writtenKeys(dir string, l *LabelRows) error {
	keys, err := align.ReadKeys(dir)
	if err != nil || keys == nil {
		return err
	}
	l.Keys, l.Source = make([]string, len(l.IDs)), make([]int, len(l.IDs))
	for i, id := range l.IDs {
		k, ok := keys[id]
		if !ok {
			return fmt.Errorf("%w: %s: %s lacks sample %s", ErrData, dir, align.KeysFile, id)
		}
		l.Keys[i], l.Source[i] = k.Written, k.Row
	}
	return nil
}

// appendRows appends b's rows to a's (a may be nil).
func appendRows(a, b *Rows) *Rows {
	if a == nil {
		return b
	}
	x := &dataset.Matrix{NRows: a.X.NRows + b.X.NRows, NCols: a.X.NCols,
		Indptr:  slices.Concat(a.X.Indptr, make([]int64, b.X.NRows)),
		Indices: slices.Concat(a.X.Indices, b.X.Indices), Values: slices.Concat(a.X.Values, b.X.Values)}
	base := a.X.Indptr[a.X.NRows]
	for i := 1; i <= b.X.NRows; i++ {
		x.Indptr[a.X.NRows+i] = base + b.X.Indptr[i]
	}
	return &Rows{IDs: slices.Concat(a.IDs, b.IDs), X: x}
}

// Resolver, for a split folder that asyrevel align wrote, turns a key as an
// organisation writes it into the sample id of its row (the alignment's
// normalisation, align.Resolver); nil for any other data.
func Resolver(path string) (func(string) string, error) {
	if !dataset.IsSplit(path) {
		return nil, nil
	}
	spec, ok, err := align.SpecOf(path)
	if err != nil || !ok {
		return nil, err
	}
	return align.Resolver(spec)
}

func labelsOf(ds *dataset.Dataset) []int32 {
	if ds.Classes == 0 { // read without labels (unlabelledClass)
		return nil
	}
	return ds.Y
}

func checkAligned(parts []*Rows, lab *LabelRows) error {
	for m, p := range parts {
		if !slices.Equal(p.IDs, lab.IDs) {
			return fmt.Errorf("%w: party %d's rows and the labels list other ids", ErrData, m+1)
		}
	}
	return nil
}

// partyRows takes f's columns of ds and scales them.
func partyRows(ds *dataset.Dataset, ids []string, f *File) (*Rows, error) {
	return prepare(&Rows{IDs: ids, X: ds.X.Columns(f.Columns.Lo, f.Columns.Hi)}, f)
}

// prepare scales r's columns as in training and checks them.
func prepare(r *Rows, f *File) (*Rows, error) {
	if r.X.NCols != f.In {
		return nil, fmt.Errorf("%w: %d columns for party %d, its model takes %d", ErrData, r.X.NCols, f.Party, f.In)
	}
	if len(r.IDs) != r.X.NRows {
		return nil, fmt.Errorf("%w: %d ids for %d rows", ErrData, len(r.IDs), r.X.NRows)
	}
	for k, v := range r.X.Values {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return nil, fmt.Errorf("%w: party %d's column %d holds %v", ErrData, f.Party, r.X.Indices[k], v)
		}
	}
	if s := f.Columns.Scaler; s != nil {
		x, err := s.Apply(r.X)
		if err != nil {
			return nil, err
		}
		r.X = x
	}
	return r, nil
}

// openData reads a whole data file as spec says, with labels fixed to
// labels' values (nil: as the file has them). The ids are the file's id
// column or the row numbers from 0.
func openData(path string, spec ReadSpec, labels *LabelsSpec) (*dataset.Dataset, []string, error) {
	var values []float64
	if labels != nil {
		values = labels.Values
	}
	var ds *dataset.Dataset
	var err error
	hasID := false
	switch spec.Format {
	case dataset.FormatLIBSVM:
		ds, err = dataset.Open(path, dataset.OpenOptions{Format: dataset.FormatLIBSVM, LIBSVM: dataset.LIBSVMOptions{Features: spec.Features, Labels: values}})
	case dataset.FormatIDX:
		var te *dataset.Dataset
		if _, te, err = dataset.OpenPair(path, ""); err == nil {
			ds = te
		}
	case dataset.FormatCSV:
		ds, hasID, err = openCSV(path, spec, values)
	case "split":
		return nil, nil, fmt.Errorf("%w: the models were trained on a split folder: score rows written the same way: a folder of asyrevel data split, or, for an alignment, the organisations' own files (predict --inputs LABELS.csv,P1.csv,... --key COLUMN, docs/journey.md) or a folder that asyrevel align wrote of them", ErrData)
	case dataset.FormatSynthetic:
		return nil, nil, fmt.Errorf("%w: the models were trained on synthetic data, which has no file to score", ErrData)
	default:
		return nil, nil, fmt.Errorf("%w: training data of format %q", ErrData, spec.Format)
	}
	if err != nil {
		return nil, nil, err
	}
	if spec.Preset != "" {
		return nil, nil, fmt.Errorf("%w: the models were trained with --preset %s, whose rows are prepared by the preset: write its split with asyrevel data split --preset and score the split folder", ErrData, spec.Preset)
	}
	if ds.X.NCols != spec.Features {
		return nil, nil, fmt.Errorf("%w: %s has %d features, the models were trained on %d", ErrData, path, ds.X.NCols, spec.Features)
	}
	ids := ds.IDs
	if !hasID {
		ids = make([]string, ds.Len())
		for i := range ids {
			ids[i] = strconv.Itoa(i)
		}
	}
	return ds, ids, nil
}

// labelNames are the label column names the CSV reader recognises
// (dataset.CSVOptions.Label).
var labelNames = []string{"label", "labels", "class", "target", "y",
	"default.payment.next.month", "default payment next month", "SeriousDlqin2yrs"}

// openCSV reads a CSV file with the training set's encoding. A file without
// the label column is read as unlabelled (Classes 0). hasID says whether
// the file has an id column (else its ids are row numbers).
func openCSV(path string, spec ReadSpec, values []float64) (*dataset.Dataset, bool, error) {
	c := spec.CSV
	if c == nil {
		c = &CSVSpec{}
	}
	raw, err := readMaybeGzip(path)
	if err != nil {
		return nil, false, err
	}
	comma := rune(c.Comma)
	if comma == 0 {
		comma = ','
	}
	header, err := csvHeader(raw, comma, c.SkipRows)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w: %w", path, ErrData, err)
	}
	hasID := false
	switch c.ID {
	case "-":
	case "":
		hasID = slices.ContainsFunc(header, func(h string) bool { return strings.EqualFold(h, "id") }) || header[0] == "" && len(header) > 1
	default:
		hasID = hasColumn(header, c.ID)
	}
	if c.ID != "" && c.ID != "-" && !hasID {
		return nil, false, fmt.Errorf("%s: %w: no id column %q (the training set's)", path, ErrData, c.ID)
	}
	hasLabel := false
	if c.Label != "" {
		hasLabel = hasColumn(header, c.Label)
	} else {
		hasLabel = slices.ContainsFunc(header, func(h string) bool {
			return slices.ContainsFunc(labelNames, func(n string) bool { return strings.EqualFold(h, n) })
		})
	}
	opts := dataset.CSVOptions{Comma: comma, SkipRows: c.SkipRows, ID: c.ID, Label: c.Label, Drop: c.Drop, NA: c.NA,
		Missing: dataset.MissingPolicy(c.Missing), Labels: values, Encoding: spec.Encoding}
	if !hasLabel {
		// No labels: a constant label column is added for the reader,
		// and the labels are dropped again.
		raw, err = addLabelColumn(raw, comma, c.SkipRows, values)
		if err != nil {
			return nil, false, fmt.Errorf("%s: %w", path, err)
		}
		opts.Label = unlabelledColumn
	}
	ds, err := dataset.ReadCSV(bytes.NewReader(raw), opts)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", path, err)
	}
	if !hasLabel {
		ds.Y, ds.Classes = make([]int32, ds.Len()), 0
	}
	return ds, hasID, nil
}

const unlabelledColumn = "asyrevel-no-label"

func hasColumn(header []string, name string) bool {
	if slices.Contains(header, name) {
		return true
	}
	j, err := strconv.Atoi(name)
	return err == nil && j >= 0 && j < len(header)
}

func readMaybeGzip(path string) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	br := bufio.NewReader(fh)
	var r io.Reader = br
	if head, _ := br.Peek(2); len(head) == 2 && head[0] == 0x1f && head[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		defer gz.Close()
		r = gz
	}
	return io.ReadAll(r)
}

// csvHeader is the header line of a CSV text after skip lines.
func csvHeader(raw []byte, comma rune, skip int) ([]string, error) {
	rest := raw
	for range skip {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			return nil, fmt.Errorf("csv: fewer than %d lines", skip+1)
		}
		rest = rest[i+1:]
	}
	r := csv.NewReader(bytes.NewReader(bytes.TrimPrefix(rest, []byte("\ufeff"))))
	r.Comma = comma
	r.TrimLeadingSpace = true
	h, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("csv header: %w", err)
	}
	for k := range h {
		h[k] = strings.TrimSpace(h[k])
	}
	if len(h) == 0 {
		return nil, errors.New("csv: empty header")
	}
	return h, nil
}

// addLabelColumn appends a label column holding the first class's value
// to every record of a CSV text.
func addLabelColumn(raw []byte, comma rune, skip int, values []float64) ([]byte, error) {
	v := "0"
	if len(values) > 0 {
		v = strconv.FormatFloat(values[0], 'g', -1, 64)
	}
	var out bytes.Buffer
	rest := raw
	for range skip {
		i := bytes.IndexByte(rest, '\n')
		out.Write(rest[:i+1])
		rest = rest[i+1:]
	}
	r := csv.NewReader(bytes.NewReader(rest))
	r.Comma = comma
	r.FieldsPerRecord = -1
	w := csv.NewWriter(&out)
	w.Comma = comma
	first := true
	for {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: csv: %w", ErrData, err)
		}
		if first {
			rec, first = append(rec, unlabelledColumn), false
		} else {
			rec = append(rec, v)
		}
		if err := w.Write(rec); err != nil {
			return nil, err
		}
	}
	w.Flush()
	return out.Bytes(), w.Error()
}

// isPartyFile and isLabelsFile recognise the files of a split folder by
// their first line.
func isPartyFile(path string) bool  { return firstLineHas(path, "#asyrevel-party ") }
func isLabelsFile(path string) bool { return firstLineHas(path, "#asyrevel-labels ") }

func firstLineHas(path, prefix string) bool {
	fh, err := os.Open(path)
	if err != nil {
		return false
	}
	defer fh.Close()
	br := bufio.NewReader(fh)
	var r io.Reader = br
	if head, _ := br.Peek(2); len(head) == 2 && head[0] == 0x1f && head[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return false
		}
		defer gz.Close()
		r = gz
	}
	buf := make([]byte, len(prefix))
	_, err = io.ReadFull(r, buf)
	return err == nil && string(buf) == prefix
}

// Inputs are the organisations' own files of rows to score, as they write
// them: the label holder's first (its key column, its label column if it
// has one, and its own feature columns), then party 1's, 2's, ... Options
// say how they are read and their keys normalised, as asyrevel align
// read the files the models were trained on (Options.Label names the
// label column; a file without it is scored without metrics).
type Inputs struct {
	Paths   []string
	Options align.ReadOptions
}

// InputsReport is what ReadInputs found.
type InputsReport struct {
	Rows      []int // rows read of each file
	Scored    int   // the label holder's rows that every party holds
	Unscored  []string
	Missing   []dataset.MissingCount // each file's missing values and what was done
	HolderRun int                    // the party the label holder's own features are (0: none)
}

// ReadInputs joins the organisations' files on their normalised keys, as
// asyrevel align matches them (in one process there is nothing to hide:
// a plain join of the same keys), and reads each party's columns by the
// names its model was trained on. The rows are the label holder's rows
// that every party holds, in its file's order, reported by its keys as it
// writes them (LabelRows.Keys). When the models have one party more than
// the files name parties, the label holder's own features are the last
// party's, as asyrevel align lays them out by default.
func ReadInputs(in Inputs, s *Set) ([]*Rows, *LabelRows, *InputsReport, error) {
	q := len(s.Parties)
	partners := len(in.Paths) - 1
	holder := 0
	switch {
	case partners < 1:
		return nil, nil, nil, fmt.Errorf("%w: --inputs needs the label holder's file and the parties' files", ErrData)
	case q == partners+1:
		holder = q
	case q != partners:
		return nil, nil, nil, fmt.Errorf("%w: the models are for %d parties, --inputs names %d parties' files after the label holder's: give %d (or %d, when the label holder ran the last party for its own features)",
			ErrData, q, partners, q, q-1)
	}
	rep := &InputsReport{HolderRun: holder}
	tables := make([]*align.Table, len(in.Paths))
	for i, path := range in.Paths {
		opts := in.Options
		opts.Label, opts.LabelOptional, opts.IgnoreAbsent = "", false, true
		m := i // the party whose columns the file holds
		if i == 0 {
			opts.Label, opts.LabelOptional = in.Options.Label, true
			m = holder
		}
		opts.Encoding = &dataset.Encoding{}
		if m > 0 {
			opts.Encoding = nil
			if names := s.Parties[m-1].Columns.Names; len(names) > 0 {
				opts.Encoding = dataset.EncodingFromNames(names, in.Options.Categorical)
			}
		}
		t, err := align.ReadTable(path, opts)
		if err != nil {
			who := "the label holder"
			if i > 0 {
				who = fmt.Sprintf("party %d", i)
			}
			return nil, nil, nil, fmt.Errorf("%s: %w", who, err)
		}
		tables[i] = t
		rep.Rows = append(rep.Rows, t.Len())
		rep.Missing = append(rep.Missing, t.Missing)
	}
	hub := tables[0]
	index := make([]map[string]int, len(tables))
	for i, t := range tables[1:] {
		index[i+1] = make(map[string]int, t.Len())
		for r, k := range t.Keys {
			index[i+1][k] = r
		}
	}
	var kept []int
	partyRows := make([][]int, len(tables))
	for r, k := range hub.Keys {
		ok := true
		for i := 1; i < len(tables) && ok; i++ {
			_, ok = index[i][k]
		}
		if !ok {
			if len(rep.Unscored) < 5 {
				rep.Unscored = append(rep.Unscored, hub.Written[r])
			}
			continue
		}
		kept = append(kept, r)
		partyRows[0] = append(partyRows[0], r)
		for i := 1; i < len(tables); i++ {
			partyRows[i] = append(partyRows[i], index[i][k])
		}
	}
	rep.Scored = len(kept)
	if len(kept) == 0 {
		return nil, nil, rep, fmt.Errorf("%w: no row of %s is held by every organisation (keys are compared after normalisation: %s)", ErrData, in.Paths[0], in.Options.Norm)
	}
	lab := &LabelRows{IDs: make([]string, len(kept)), Keys: make([]string, len(kept)), Source: make([]int, len(kept))}
	for k, r := range kept {
		lab.IDs[k], lab.Keys[k], lab.Source[k] = align.IDText(hub.Keys[r]), hub.Written[r], int(hub.Source[r])
	}
	if hub.Labels != nil {
		values := s.Aggregator.Labels.Values
		lab.Y = make([]int32, len(kept))
		for k, r := range kept {
			c := slices.Index(values, hub.Labels[r])
			if c < 0 {
				return nil, nil, rep, fmt.Errorf("%w: %s: row of key %s: label %v is not one of the model's classes %v", ErrData, in.Paths[0], hub.Written[r], hub.Labels[r], values)
			}
			lab.Y[k] = int32(c)
		}
	}
	parts := make([]*Rows, q)
	for m := 1; m <= q; m++ {
		i := m // the file of party m
		if m == holder {
			i = 0
		}
		r, err := prepare(&Rows{IDs: lab.IDs, X: tables[i].X.Rows(partyRows[i])}, s.Parties[m-1])
		if err != nil {
			return nil, nil, rep, fmt.Errorf("%s: %w", in.Paths[i], err)
		}
		parts[m-1] = r
	}
	return parts, lab, rep, nil
}
