package align

import (
	"bufio"
	"compress/gzip"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/asyrevel/asyrevel/dataset"
)

// Input errors callers may branch on.
var (
	// ErrDuplicate reports keys that repeat in one organisation's file
	// (after normalisation) when duplicates are refused.
	ErrDuplicate = errors.New("align: duplicate keys")
	// ErrInput reports a file that cannot be aligned: empty, no header,
	// a key or label column missing, a cell that is not a number.
	ErrInput = errors.New("align: bad input")
)

// Dedupe says what to do with keys that repeat in one file.
type Dedupe int

const (
	// DedupeRefuse refuses a file whose keys repeat (ErrDuplicate, with
	// their count).
	DedupeRefuse Dedupe = iota
	// DedupeFirst keeps the first row of each key.
	DedupeFirst
)

// ParseDedupe reads --dedupe: "" or "refuse", or "first".
func ParseDedupe(s string) (Dedupe, error) {
	switch s {
	case "", "refuse", "none":
		return DedupeRefuse, nil
	case "first":
		return DedupeFirst, nil
	}
	return 0, fmt.Errorf("--dedupe %q: want first or refuse", s)
}

// ReadOptions says how to read one organisation's file.
type ReadOptions struct {
	Key   []string // key column names (or 0-based positions)
	Label string   // the label column (the hub's file only), "" for none
	Norm  Normalization
	Dedupe
	// Format is "csv", "libsvm" or "" (told from the file: LIBSVM lines
	// hold index:value pairs and no commas). See ReadLIBSVM.
	Format string

	// How a CSV file's cells are read, as data split and train read them
	// (dataset.CSVOptions): Missing says what to do with a missing cell
	// (one of NA; nil NA means "" and "NA"): the zero value reads it as 0,
	// the command line refuses it unless told (--missing). Drop lists
	// columns to leave out, Categorical columns to one-hot encode (the
	// categories those of the file's rows, sorted as dataset sorts them),
	// by name or 0-based position. Encoding, if not nil, fixes the feature
	// columns and their categories (new rows scored with a model trained
	// on an alignment): columns it does not name are left out.
	Missing dataset.MissingPolicy
	// LabelOptional reads a CSV file without the Label column as a file
	// without labels (Table.Labels nil): new rows to score.
	LabelOptional bool
	// IgnoreAbsent ignores Drop and Categorical columns the file lacks
	// (Table.Absent lists them): the in-process form gives every file the
	// same flags, and each column is one organisation's.
	IgnoreAbsent bool
	NA           []string
	Drop         []string
	Categorical  []string
	Encoding     *dataset.Encoding
}

// ReadTable reads one organisation's file in opts.Format: CSV with a
// header (ReadCSV) or LIBSVM with an id column (ReadLIBSVM).
func ReadTable(path string, opts ReadOptions) (*Table, error) {
	format := opts.Format
	if format == "" {
		var err error
		if format, err = sniffFormat(path); err != nil {
			return nil, err
		}
	}
	switch format {
	case "csv":
		return ReadCSV(path, opts)
	case "libsvm":
		return ReadLIBSVM(path, opts)
	}
	return nil, fmt.Errorf("%w: format %q: want csv or libsvm", ErrInput, format)
}

// openText opens a plain or gzip file.
func openText(path string) (io.Reader, func(), error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrInput, err)
	}
	br := bufio.NewReaderSize(f, 1<<16)
	if head, _ := br.Peek(2); len(head) == 2 && head[0] == 0x1f && head[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("%w: %s: %w", ErrInput, path, err)
		}
		return gz, func() { gz.Close(); f.Close() }, nil
	}
	return br, func() { f.Close() }, nil
}

// sniffFormat tells LIBSVM from CSV by the first line that is not a
// comment: a LIBSVM line has no comma, and after its id only
// index:value pairs, or a number (the label) and then pairs. A file of
// comments alone is LIBSVM (a CSV file starts with its header).
func sniffFormat(path string) (string, error) {
	r, done, err := openText(path)
	if err != nil {
		return "", err
	}
	defer done()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 1<<24)
	comments := false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if strings.HasPrefix(line, "#") {
			comments = true
			continue
		}
		f := strings.Fields(line)
		if strings.Contains(line, ",") || len(f) < 2 {
			return "csv", nil
		}
		for i, tok := range f[1:] {
			if c := strings.IndexByte(tok, ':'); c > 0 {
				if _, err := strconv.Atoi(tok[:c]); err == nil {
					continue
				}
			} else if _, err := strconv.ParseFloat(tok, 64); err == nil && i == 0 {
				continue
			}
			return "csv", nil
		}
		return "libsvm", nil
	}
	if comments {
		return "libsvm", nil
	}
	return "csv", nil // empty: ReadCSV says so
}

// ReadLIBSVM reads LIBSVM text with an id column (plain or gzip): each
// line is the key, then the label if opts.Label is set (the label
// holder's file), then index:value pairs with 1-based, strictly
// increasing indices; lines starting with '#' are comments. This is the
// layout of a split folder's party files (dataset.WriteSplit), and of
// LIBSVM exports with an id in front (FATE's svmlight with an id):
//
//	cust-0017 1 3:0.5 17:1
//
// The key is the first field, so --key must name it: "id" or "0". The
// label, when asked, is the second field, so --label names nothing in
// particular ("label" by convention). Features are named f1, f2, ...
func ReadLIBSVM(path string, opts ReadOptions) (*Table, error) {
	if len(opts.Key) != 1 || (opts.Key[0] != "id" && opts.Key[0] != "0") {
		return nil, fmt.Errorf("%w: %s: LIBSVM with an id column has one key, its first field: give --key id (got %q)", ErrInput, path, strings.Join(opts.Key, ","))
	}
	return readFile(path, opts, readLIBSVM)
}

// readFile opens path (plain or gzip) and reads it with read.
func readFile(path string, opts ReadOptions, read func(io.Reader, ReadOptions) (*Table, error)) (*Table, error) {
	r, done, err := openText(path)
	if err != nil {
		return nil, err
	}
	defer done()
	t, err := read(r, opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	t.Path = path
	return t, nil
}

func readLIBSVM(r io.Reader, opts ReadOptions) (*Table, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 1<<26)
	t := &Table{X: &dataset.Matrix{Indptr: []int64{0}}, KeyNames: []string{"id"}}
	seen := keySet{lines: make(map[string]int32)}
	cell := make([]string, 1)
	rows := 0 // data lines read
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		f := strings.Fields(text)
		row := rows
		rows++
		cell[0] = f[0]
		key, err := opts.Norm.Key(cell)
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: %w", ErrInput, line, err)
		}
		if strings.Contains(f[0], ":") {
			return nil, fmt.Errorf("%w: line %d: the first field %q is an index:value pair, not an id (LIBSVM without ids cannot be aligned)", ErrInput, line, clip(f[0]))
		}
		if !seen.first(key, line) {
			continue
		}
		t.Written = append(t.Written, f[0])
		t.Source = append(t.Source, int32(row))
		rest := f[1:]
		if opts.Label != "" {
			if len(rest) == 0 {
				return nil, fmt.Errorf("%w: line %d: no label after the id", ErrInput, line)
			}
			v, err := strconv.ParseFloat(rest[0], 64)
			if err != nil || math.IsInf(v, 0) || math.IsNaN(v) || v != math.Trunc(v) {
				return nil, fmt.Errorf("%w: line %d: label %q is not an integer class code", ErrInput, line, clip(rest[0]))
			}
			t.Labels = append(t.Labels, v)
			rest = rest[1:]
		}
		t.Keys = append(t.Keys, key)
		prev := 0
		for _, tok := range rest {
			i := strings.IndexByte(tok, ':')
			if i <= 0 {
				return nil, fmt.Errorf("%w: line %d: %q is not index:value", ErrInput, line, clip(tok))
			}
			idx, err := strconv.Atoi(tok[:i])
			if err != nil || idx < 1 || idx > 1<<24 {
				return nil, fmt.Errorf("%w: line %d: index %q is not a whole number from 1 to %d", ErrInput, line, clip(tok[:i]), 1<<24)
			}
			if idx <= prev {
				return nil, fmt.Errorf("%w: line %d: index %d after %d (indices must increase)", ErrInput, line, idx, prev)
			}
			prev = idx
			v, err := strconv.ParseFloat(tok[i+1:], 32)
			if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
				return nil, fmt.Errorf("%w: line %d: %q is not a finite number", ErrInput, line, clip(tok[i+1:]))
			}
			if idx > t.X.NCols {
				t.X.NCols = idx
			}
			if v != 0 {
				t.X.Indices = append(t.X.Indices, int32(idx-1))
				t.X.Values = append(t.X.Values, float32(v))
			}
		}
		t.X.Indptr = append(t.X.Indptr, int64(len(t.X.Indices)))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInput, err)
	}
	t.X.NRows = len(t.Keys)
	for j := 1; j <= t.X.NCols; j++ {
		t.Names = append(t.Names, fmt.Sprintf("f%d", j))
	}
	if err := seen.check(opts.Dedupe); err != nil {
		return nil, err
	}
	t.Dropped = seen.dups
	if t.Len() == 0 {
		return nil, fmt.Errorf("%w: the file is empty (no rows, only comments)", ErrInput)
	}
	return t, nil
}

// keySet is the keys of a file read so far, with the line of each and
// the keys that repeat.
type keySet struct {
	lines              map[string]int32
	dups               int
	firstDup, firstOrg int // the first repeat's line and the line it repeats
}

// first records key at line and reports whether it is new.
func (k *keySet) first(key string, line int) bool {
	if orig, dup := k.lines[key]; dup {
		if k.dups == 0 {
			k.firstDup, k.firstOrg = line, int(orig)
		}
		k.dups++
		return false
	}
	k.lines[key] = int32(line)
	return true
}

// check refuses repeated keys unless d keeps the first of each.
func (k *keySet) check(d Dedupe) error {
	if k.dups > 0 && d == DedupeRefuse {
		return fmt.Errorf("%w: %d rows repeat an earlier row's key (the first: line %d repeats line %d); give --dedupe first to keep each key's first row",
			ErrDuplicate, k.dups, k.firstDup, k.firstOrg)
	}
	return nil
}

// Table is one organisation's rows: their normalised keys, and the
// remaining columns as numeric features (and labels, for the hub).
type Table struct {
	Path     string
	Keys     []string // normalised, one a row, distinct
	Names    []string // feature column names ("NAME=category" for a one-hot column)
	X        *dataset.Matrix
	Labels   []float64 // nil unless ReadOptions.Label
	Dropped  int       // rows dropped as duplicates (DedupeFirst)
	KeyNames []string
	// Written is each row's key as the file writes it (the cells of a
	// composite key joined by ","), Source its 0-based data row in the
	// file: what predictions are reported by, in the file's order.
	Written []string
	Source  []int32
	// Missing is what the missing-value policy found and did (CSV).
	Missing dataset.MissingCount
	// Encoding is how the CSV columns became the features (nil for LIBSVM).
	Encoding *dataset.Encoding
	// Absent are the Drop and Categorical columns the file lacks
	// (ReadOptions.IgnoreAbsent).
	Absent []string
}

// Len is the number of rows.
func (t *Table) Len() int { return len(t.Keys) }

// ReadCSV reads a CSV file (plain or gzip) with a header line: the key
// columns, the label column if asked, and every other column as a feature
// (numeric, or one-hot for ReadOptions.Categorical; ReadOptions.Drop left
// out), missing cells as ReadOptions.Missing says.
func ReadCSV(path string, opts ReadOptions) (*Table, error) {
	return readFile(path, opts, readCSV)
}

// csvColumn is one feature column of a CSV file being read.
type csvColumn struct {
	j    int  // position in the header
	cat  bool // one-hot encoded
	dict map[string]int32
	vals []string // categories, first seen first (canonical form)
}

func readCSV(r io.Reader, opts ReadOptions) (*Table, error) {
	if len(opts.Key) == 0 {
		return nil, fmt.Errorf("%w: no key column given (--key)", ErrInput)
	}
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	cr.TrimLeadingSpace = true
	header, err := cr.Read()
	if err == io.EOF {
		return nil, fmt.Errorf("%w: the file is empty (no header line)", ErrInput)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: header: %w", ErrInput, err)
	}
	header = slices.Clone(header)
	if len(header) > 0 {
		header[0] = strings.TrimPrefix(header[0], "\ufeff")
	}
	for j := range header {
		header[j] = strings.TrimSpace(header[j])
	}
	col := func(name string) int {
		for j, h := range header {
			if h == name {
				return j
			}
		}
		if j, err := strconv.Atoi(name); err == nil && j >= 0 && j < len(header) {
			return j
		}
		return -1
	}
	role := map[int]string{}
	keyCols := make([]int, len(opts.Key))
	for i, k := range opts.Key {
		j := col(k)
		if j < 0 {
			return nil, fmt.Errorf("%w: key column %q missing (the header has %s)", ErrInput, k, shortList(header))
		}
		if role[j] != "" {
			return nil, fmt.Errorf("%w: column %q named twice in --key", ErrInput, k)
		}
		keyCols[i], role[j] = j, "key"
	}
	labelCol := -1
	if opts.Label != "" {
		labelCol = col(opts.Label)
		switch {
		case labelCol < 0 && opts.LabelOptional:
		case labelCol < 0:
			return nil, fmt.Errorf("%w: label column %q missing (the header has %s)", ErrInput, opts.Label, shortList(header))
		case role[labelCol] != "":
			return nil, fmt.Errorf("%w: column %q is both key and label", ErrInput, opts.Label)
		default:
			role[labelCol] = "label"
		}
	}
	// flagged finds the columns a flag names that are features so far:
	// one the file lacks is an error, or left for Table.Absent.
	var absent []string
	flagged := func(flag string, names []string) ([]int, error) {
		var js []int
		for _, name := range names {
			j := col(name)
			switch {
			case j < 0 && opts.IgnoreAbsent:
				absent = append(absent, name)
			case j < 0:
				return nil, fmt.Errorf("%w: --%s %q: no such column (the header has %s)", ErrInput, flag, name, shortList(header))
			case role[j] != "":
				return nil, fmt.Errorf("%w: --%s %q: it is the %s column", ErrInput, flag, name, role[j])
			default:
				js = append(js, j)
			}
		}
		return js, nil
	}
	dropped, err := flagged("drop", opts.Drop)
	if err != nil {
		return nil, err
	}
	for _, j := range dropped {
		role[j] = "dropped"
	}
	cat := map[int]bool{}
	if opts.Encoding != nil {
		use := map[int]bool{}
		for _, c := range opts.Encoding.Columns {
			j := col(c.Name)
			if j < 0 || role[j] != "" {
				return nil, fmt.Errorf("%w: column %q of the training set is not a feature column of this file (the header has %s)", ErrInput, c.Name, shortList(header))
			}
			use[j], cat[j] = true, c.Categories != nil
		}
		for j := range header {
			if role[j] == "" && !use[j] {
				role[j] = "dropped"
			}
		}
	} else {
		js, err := flagged("categorical", opts.Categorical)
		if err != nil {
			return nil, err
		}
		for _, j := range js {
			cat[j] = true
		}
	}
	// The feature columns, in the file's order or the encoding's.
	var order []int
	if opts.Encoding != nil {
		for _, c := range opts.Encoding.Columns {
			order = append(order, col(c.Name))
		}
	} else {
		for j := range header {
			if role[j] == "" {
				order = append(order, j)
			}
		}
	}
	var cols []csvColumn
	for _, j := range order {
		c := csvColumn{j: j, cat: cat[j]}
		if c.cat {
			c.dict = map[string]int32{}
		}
		cols = append(cols, c)
	}
	na := opts.NA
	if na == nil {
		na = []string{"", "NA"}
	}
	// Numeric cells go straight into a sparse matrix indexed by the
	// column's place among the feature columns; categorical cells are
	// kept as codes and one-hot encoded at the end, when the categories
	// are known.
	t := &Table{X: &dataset.Matrix{Indptr: []int64{0}}, KeyNames: opts.Key, Absent: absent}
	codes := make([][]int32, len(cols))
	seen := keySet{lines: make(map[string]int32)}
	cells := make([]string, len(keyCols))
	rowCodes := make([]int32, len(cols))
	miss := dataset.MissingCount{Policy: opts.Missing}
	for line, row := 2, 0; ; line, row = line+1, row+1 {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInput, err)
		}
		for i, j := range keyCols {
			cells[i] = rec[j]
		}
		key, err := opts.Norm.Key(cells)
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: %w", ErrInput, line, err)
		}
		mark := len(t.X.Indices)
		missing := 0
		label := math.NaN()
		if labelCol >= 0 {
			s := strings.TrimSpace(rec[labelCol])
			if slices.Contains(na, s) {
				if opts.Missing != dataset.MissingDrop {
					return nil, fmt.Errorf("%w: line %d: the label (column %q) is missing: give the row its label, or --missing drop to leave such rows out", ErrInput, line, header[labelCol])
				}
				missing++
			} else {
				v, err := strconv.ParseFloat(s, 64)
				if err != nil || math.IsInf(v, 0) || math.IsNaN(v) || v != math.Trunc(v) {
					return nil, fmt.Errorf("%w: line %d: label %q is not an integer class code", ErrInput, line, clip(rec[labelCol]))
				}
				label = v
			}
		}
		for k := range cols {
			c := &cols[k]
			s := strings.TrimSpace(rec[c.j])
			rowCodes[k] = -1
			if slices.Contains(na, s) {
				if opts.Missing == dataset.MissingError {
					return nil, fmt.Errorf("%w: %s", ErrInput, dataset.MissingAdvice(line, header[c.j], c.j, s))
				}
				missing++
				continue
			}
			if c.cat {
				rowCodes[k] = c.code(s)
				continue
			}
			v, err := strconv.ParseFloat(s, 32)
			if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
				return nil, fmt.Errorf("%w: %s", ErrInput, dataset.NotANumberAdvice(line, header[c.j], c.j, s))
			}
			if v != 0 {
				t.X.Indices = append(t.X.Indices, int32(k))
				t.X.Values = append(t.X.Values, float32(v))
			}
		}
		if missing > 0 {
			miss.Cells += missing
			miss.Rows++
			if opts.Missing == dataset.MissingDrop {
				t.X.Indices, t.X.Values = t.X.Indices[:mark], t.X.Values[:mark]
				continue
			}
		}
		if !seen.first(key, line) {
			t.X.Indices, t.X.Values = t.X.Indices[:mark], t.X.Values[:mark]
			continue
		}
		t.Keys = append(t.Keys, key)
		t.Written = append(t.Written, writtenKey(rec, keyCols))
		t.Source = append(t.Source, int32(row))
		if labelCol >= 0 {
			t.Labels = append(t.Labels, label)
		}
		for k, c := range cols {
			if c.cat {
				codes[k] = append(codes[k], rowCodes[k])
			}
		}
		t.X.Indptr = append(t.X.Indptr, int64(len(t.X.Indices)))
	}
	t.X.NRows = len(t.Keys)
	t.X.NCols = len(cols)
	t.Missing = miss
	if err := seen.check(opts.Dedupe); err != nil {
		return nil, err
	}
	t.Dropped = seen.dups
	if t.Len() == 0 {
		if miss.Rows > 0 {
			return nil, fmt.Errorf("%w: no rows left: every row has a missing value (--missing drop)", ErrInput)
		}
		return nil, fmt.Errorf("%w: a header but no rows", ErrInput)
	}
	enc := opts.Encoding
	if enc == nil {
		enc = &dataset.Encoding{}
		for _, c := range cols {
			ec := dataset.EncodedColumn{Name: header[c.j]}
			if c.cat {
				ec.Categories = dataset.SortCategories(slices.Clone(c.vals))
			}
			enc.Columns = append(enc.Columns, ec)
		}
	}
	t.Encoding, t.Names = enc, enc.Names()
	if slices.ContainsFunc(cols, func(c csvColumn) bool { return c.cat }) {
		t.X = oneHot(t.X, cols, codes, enc)
	}
	return t, nil
}

// code is the index of a category cell in c's first-seen list.
func (c *csvColumn) code(s string) int32 {
	if k, ok := c.dict[s]; ok {
		return k
	}
	v := dataset.CanonicalCategory(s)
	k, ok := c.dict[v]
	if !ok {
		k = int32(len(c.vals))
		c.vals = append(c.vals, v)
		c.dict[v] = k
	}
	c.dict[s] = k
	return k
}

// oneHot lays out x's columns (numeric ones in place, categorical ones as
// codes) as enc's features: a numeric column one feature, a categorical
// one a 0/1 feature per category of enc (a category enc does not know,
// or a missing cell, none).
func oneHot(x *dataset.Matrix, cols []csvColumn, codes [][]int32, enc *dataset.Encoding) *dataset.Matrix {
	offset := make([]int32, len(cols))
	feat := make([][]int32, len(cols)) // categorical: code -> feature, -1 none
	width := int32(0)
	for k, c := range cols {
		ec := enc.Columns[k]
		offset[k] = width
		if c.cat {
			feat[k] = make([]int32, len(c.vals))
			for code, v := range c.vals {
				feat[k][code] = -1
				if i := slices.Index(ec.Categories, v); i >= 0 {
					switch {
					case !ec.Indicator:
						feat[k][code] = width + int32(i)
					case i == 1:
						feat[k][code] = width
					}
				}
			}
		}
		width += int32(ec.Width())
	}
	out := &dataset.Matrix{NRows: x.NRows, NCols: int(width), Indptr: make([]int64, 1, x.NRows+1)}
	for i := range x.NRows {
		idx, val := x.Row(i)
		n := 0
		for k, c := range cols {
			if c.cat {
				if code := codes[k][i]; code >= 0 {
					if f := feat[k][code]; f >= 0 {
						out.Indices = append(out.Indices, f)
						out.Values = append(out.Values, 1)
					}
				}
				continue
			}
			if n < len(idx) && int(idx[n]) == k {
				out.Indices = append(out.Indices, offset[k])
				out.Values = append(out.Values, val[n])
				n++
			}
		}
		out.Indptr = append(out.Indptr, int64(len(out.Indices)))
	}
	return out
}

// writtenKey is a row's key as the file writes it: its cells, trimmed,
// joined by "," for a composite key.
func writtenKey(rec []string, keyCols []int) string {
	if len(keyCols) == 1 {
		return strings.TrimSpace(rec[keyCols[0]])
	}
	parts := make([]string, len(keyCols))
	for i, j := range keyCols {
		parts[i] = strings.TrimSpace(rec[j])
	}
	return strings.Join(parts, ",")
}

func shortList(names []string) string {
	if len(names) > 12 {
		return strings.Join(names[:12], ", ") + fmt.Sprintf(", ... (%d columns)", len(names))
	}
	return strings.Join(names, ", ")
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
