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
}

// DefaultSplit is the split of a split folder that scoring reads.
const DefaultSplit = "test"

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
		e, ok := man.File(split, f.Party)
		if !ok {
			return nil, fmt.Errorf("%w: split folder %s has no %s file for party %d", ErrData, path, split, f.Party)
		}
		if err := e.Verify(path); err != nil {
			return nil, err
		}
		path = filepath.Join(path, e.Name)
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
		e, ok := man.File(split, 0)
		if !ok {
			return nil, fmt.Errorf("%w: split folder %s has no %s labels file", ErrData, path, split)
		}
		if err := e.Verify(path); err != nil {
			return nil, err
		}
		path = filepath.Join(path, e.Name)
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
		return nil, nil, fmt.Errorf("%w: the models were trained on a split folder: score a split folder (or, for one party, its party file)", ErrData)
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
