package dataset

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unsafe"
)

// MissingPolicy says what ReadCSV does with a missing value (a cell that
// is empty or "NA", see CSVOptions.NA).
type MissingPolicy int

const (
	// MissingZero reads a missing numeric value as 0 (it is not stored)
	// and a missing categorical value as no category (all its indicator
	// columns 0). A missing label is still an error. This is the default:
	// it keeps every row, so the raw shape of a file is what Open reports.
	MissingZero MissingPolicy = iota
	// MissingDrop drops every row with a missing value in a feature or the
	// label column (the id column and dropped columns do not count).
	MissingDrop
	// MissingError makes the first missing value an error.
	MissingError
)

// String names the policy as the command line does: zero, drop or error.
func (p MissingPolicy) String() string {
	switch p {
	case MissingZero:
		return "zero"
	case MissingDrop:
		return "drop"
	case MissingError:
		return "error"
	}
	return "MissingPolicy(" + strconv.Itoa(int(p)) + ")"
}

// CSVOptions configures ReadCSV. The zero value reads a comma-separated
// file with a header, finds the id and label columns by name (see ID and
// Label), reads every other column as a number and reads missing values as
// zeros.
type CSVOptions struct {
	// Comma is the field separator; 0 means ','.
	Comma rune

	// SkipRows is the number of lines before the header line (notes,
	// a title, an export banner) to skip.
	SkipRows int

	// Columns are named by their header name or, if no header name is
	// that, by their 0-based position ("0" is the first column).

	// ID names the id column, whose values name the samples (Dataset.IDs)
	// and are not features. Empty means: the first column named "id" in
	// any case, else an unnamed first column (as pandas writes an index),
	// else none. "-" means none. Without an id column the samples are
	// named by their data row number, 1-based.
	ID string

	// Label names the label column. Empty means: the first column named
	// label, labels, class, target or y in any case, or one of the label
	// columns of the presets (default.payment.next.month,
	// SeriousDlqin2yrs); in scikit-learn's layout (see ReadCSV) the last
	// column. Otherwise the label is not guessed: ReadCSV returns an error
	// wrapping ErrNoLabel. Labels must be integers (class codes such as
	// 0/1, -1/+1 or 0..K-1) with at most MaxClasses distinct values.
	Label string

	// MaxClasses bounds the distinct labels; 0 means DefaultMaxClasses.
	// A column with more is refused as the label: a measurement, not a
	// class (a float column would otherwise make hundreds of classes).
	MaxClasses int

	// Drop lists columns to ignore.
	Drop []string

	// Categorical lists columns to one-hot encode: one 0/1 feature per
	// distinct value (the categories), in increasing numeric order
	// (values that are not numbers come after, in lexical order). "2" and
	// "2.0" are the same category.
	Categorical []string

	// BinaryIndicator encodes a categorical column with exactly two
	// categories as one 0/1 feature, the indicator of the second
	// category, instead of two complementary features (scikit-learn's
	// OneHotEncoder(drop="if_binary")).
	BinaryIndicator bool

	// NA lists the cell values (after trimming spaces) that mean missing;
	// nil means "" and "NA".
	NA []string

	// Missing says what to do with missing values; see MissingPolicy.
	Missing MissingPolicy

	// Report, if not nil, gets what the missing-value policy found and
	// did added to it (Dataset.Missing of every file read with these
	// options: a training and a test file).
	Report *MissingCount `json:"-"`

	// Labels, if not nil, fixes the label to class map as in
	// LIBSVMOptions.Labels (a training set's LabelValues).
	Labels []float64

	// Encoding, if not nil, fixes how columns become features: it is
	// meant to be a training set's Encoding, so that a test file gets the
	// same columns. The file must have every column the encoding names
	// (other columns are ignored), and a category the encoding does not
	// know gives all-zero indicators. Categorical and BinaryIndicator are
	// then ignored.
	Encoding *Encoding
}

// Encoding records how the columns of a CSV file became features, in
// feature order. It is fitted on the rows a data set is built from (the
// training rows for a preset) and reused to read test rows the same way.
type Encoding struct {
	Columns []EncodedColumn `json:"columns"`
}

// EncodedColumn is one CSV column and the features it became.
type EncodedColumn struct {
	Name string `json:"name"`
	// Categories is nil for a numeric column (one feature, its value).
	// Otherwise the column is one-hot encoded: one feature per category,
	// or, if Indicator is set, one feature for Categories[1] only.
	Categories []string `json:"categories,omitempty"`
	Indicator  bool     `json:"indicator,omitempty"`
}

// Width is the number of features the column becomes.
func (c EncodedColumn) Width() int {
	switch {
	case c.Categories == nil:
		return 1
	case c.Indicator:
		return 1
	}
	return len(c.Categories)
}

// Features is the number of features, the sum of the columns' widths.
func (e *Encoding) Features() int {
	n := 0
	for _, c := range e.Columns {
		n += c.Width()
	}
	return n
}

// Names returns the feature names: the column name for a numeric column,
// "NAME=category" for a one-hot feature.
func (e *Encoding) Names() []string {
	names := make([]string, 0, e.Features())
	for _, c := range e.Columns {
		switch {
		case c.Categories == nil:
			names = append(names, c.Name)
		case c.Indicator:
			names = append(names, c.Name+"="+c.Categories[1])
		default:
			for _, v := range c.Categories {
				names = append(names, c.Name+"="+v)
			}
		}
	}
	return names
}

// DefaultMaxClasses is the default CSVOptions.MaxClasses.
const DefaultMaxClasses = 100

// ErrNoLabel reports a CSV file whose label column is not named like one
// (see CSVOptions.Label) or not given, or a label column that cannot be one.
var ErrNoLabel = fmt.Errorf("%w (label column)", ErrFormat)

// Given reports whether opts asks for anything about the columns or rows
// of a file (more than the zero value's inference).
func (o *CSVOptions) Given() bool {
	return o.SkipRows != 0 || o.ID != "" || o.Label != "" || len(o.Drop) > 0 || len(o.Categorical) > 0
}

// labelNames are the column names the CSV reader takes for the label
// column, compared in any case, when CSVOptions.Label is empty.
var labelNames = []string{"label", "labels", "class", "target", "y",
	"default.payment.next.month", "default payment next month", "SeriousDlqin2yrs"}

// ReadCSV reads a data set in CSV format from r: a header line naming the
// columns, then one sample a line. See CSVOptions for the id and label
// columns, categorical columns and missing values. Fields may be quoted
// (RFC 4180); spaces around a value are ignored; CRLF line ends and a
// UTF-8 byte order mark are accepted.
//
// scikit-learn's layout of its sample data (iris.csv, wine_data.csv,
// breast_cancer.csv) is read too: a first line "n_samples,n_features,
// class names..." instead of a header, then rows of n_features values and
// the class code last. The columns are then named x0, x1, ... and
// "target", the last column is the label and the class names are
// Dataset.ClassNames.
//
// Every remaining column is a feature: a numeric column is read as
// float32 (zeros are not stored), a categorical column is one-hot encoded
// (see CSVOptions.Categorical). The categories and the classes are those
// of the rows read, unless opts.Encoding and opts.Labels fix them. The
// Dataset's IDs are the id column's values, which must be unique, or the
// data row numbers.
//
// The file is held in memory column by column before it is encoded (4
// bytes a numeric cell), so ReadCSV suits files of up to a few million
// cells per GB; use LIBSVM for larger sparse data. Errors caused by the
// input wrap ErrFormat and name the line and column.
func ReadCSV(r io.Reader, opts CSVOptions) (*Dataset, error) {
	d, _, err := readCSV(r, opts)
	return d, err
}

// readCSV is ReadCSV, also returning the parsed table (for its statistics).
func readCSV(r io.Reader, opts CSVOptions) (*Dataset, *csvTable, error) {
	t, err := readTable(r, opts)
	if err != nil {
		return nil, nil, err
	}
	rows := t.keptRows(allRows(t.n), opts.Missing)
	d, err := t.dataset(rows, rows, opts)
	if err != nil {
		return nil, nil, err
	}
	d.Missing = t.count(opts.Missing)
	if opts.Report != nil {
		opts.Report.Add(d.Missing)
	}
	return d, t, nil
}

// csvTable is a CSV file parsed into columns, not yet encoded.
type csvTable struct {
	header     []string
	n          int       // data rows
	lines      []int32   // the line of each row, for error messages
	ids        []string  // id column, nil if none
	labels     []float64 // NaN if missing
	label      string    // label column name
	labelCol   int       // its position in the header
	labelWhy   string    // why it is the label, for people
	idCol      int       // the id column's position, -1 if none
	idWhy      string    // why it is the id column ("" if none)
	classNames []string  // scikit-learn layout: the class names of its first line
	cols       []tableColumn
	missing    []bool // the row has a missing feature or label
	nMissing   int    // missing cells in feature and label columns
}

// tableColumn is one feature column of a csvTable.
type tableColumn struct {
	name string
	cat  bool
	num  []float32        // numeric: NaN if missing
	code []int32          // categorical: index into dict, -1 if missing
	dict []string         // categorical: canonical values, first seen first
	seen map[string]int32 // categorical: value -> index
}

// allRows returns 0..n-1.
func allRows(n int) []int {
	rows := make([]int, n)
	for i := range rows {
		rows[i] = i
	}
	return rows
}

// count is what the missing-value policy p found and did.
func (t *csvTable) count(p MissingPolicy) MissingCount {
	c := MissingCount{Policy: p, Cells: t.nMissing}
	for _, m := range t.missing {
		if m {
			c.Rows++
		}
	}
	return c
}

// keptRows returns the rows that the missing policy keeps.
func (t *csvTable) keptRows(rows []int, p MissingPolicy) []int {
	if p != MissingDrop {
		return rows
	}
	kept := rows[:0:0]
	for _, i := range rows {
		if !t.missing[i] {
			kept = append(kept, i)
		}
	}
	return kept
}

// readTable parses the header and the rows.
func readTable(r io.Reader, opts CSVOptions) (*csvTable, error) {
	br := bufio.NewReaderSize(r, readBufferSize)
	if bom, _ := br.Peek(3); string(bom) == "\uFEFF" {
		br.Discard(3)
	}
	for k := range opts.SkipRows {
		if _, err := br.ReadSlice('\n'); err == io.EOF {
			return nil, fmt.Errorf("%w: csv: the file has %d lines, --skip-rows %d skips them all", ErrFormat, k, opts.SkipRows)
		} else if err != nil && err != bufio.ErrBufferFull {
			return nil, fmt.Errorf("dataset: csv: %w", err)
		}
	}
	skipped := int32(opts.SkipRows)
	cr := csv.NewReader(br)
	if opts.Comma != 0 {
		cr.Comma = opts.Comma
	}
	cr.ReuseRecord = true
	cr.FieldsPerRecord = -1 // the first line may be scikit-learn's, not a header
	head, err := cr.Read()
	if err == io.EOF {
		return nil, fmt.Errorf("%w: csv: no header line", ErrFormat)
	}
	if err != nil {
		return nil, csvError(err, skipped)
	}
	header := make([]string, len(head))
	for j, h := range head {
		header[j] = strings.TrimSpace(h)
	}
	head0 := header[0]
	// The first data row, read ahead to recognise scikit-learn's layout.
	var pending []string
	var classNames []string
	sklearn := false
	if rec, err := cr.Read(); err == nil {
		pending = slices.Clone(rec)
		if d, names, ok := sklearnHeader(header); ok && len(rec) == d+1 {
			sklearn, classNames = true, names
			header = make([]string, d+1)
			for j := range d {
				header[j] = "x" + strconv.Itoa(j)
			}
			header[d] = "target"
		}
		if len(pending) != len(header) {
			line, _ := cr.FieldPos(0)
			return nil, fmt.Errorf("%w: csv: line %d has %d fields, the header %d", ErrFormat, int32(line)+skipped, len(pending), len(header))
		}
	} else if err != io.EOF {
		return nil, csvError(err, skipped)
	}
	cr.FieldsPerRecord = len(header)
	if !sklearn && len(header) > 1 && !slices.ContainsFunc(header, func(h string) bool {
		_, ok := parseFloat(stringBytes(h), 64)
		return !ok
	}) {
		return nil, fmt.Errorf("%w: csv: line %d is numbers (%s), not column names: a CSV file needs a header line naming its columns (--skip-rows N skips lines before it)",
			ErrFormat, skipped+1, shortList(header))
	}
	index := make(map[string]int, len(header))
	for j, h := range header {
		if k, dup := index[h]; dup {
			return nil, fmt.Errorf("%w: csv: header names column %d and %d both %q", ErrFormat, k+1, j+1, h)
		}
		index[h] = j
	}
	// lookup finds a column by name or, failing that, by 0-based position.
	lookup := func(what, name string) (int, error) {
		if j, ok := index[name]; ok {
			return j, nil
		}
		if j, err := strconv.Atoi(name); err == nil && j >= 0 && j < len(header) {
			return j, nil
		}
		return 0, fmt.Errorf("%w: csv: %s column %q is neither a name in the header %s nor a position 0..%d", ErrFormat, what, name, shortList(header), len(header)-1)
	}

	// Which column is what.
	idCol, idWhy := -1, ""
	switch opts.ID {
	case "-":
	case "":
		for j, h := range header {
			if strings.EqualFold(h, "id") {
				idCol, idWhy = j, "named like an id"
				break
			}
		}
		if idCol < 0 && header[0] == "" && len(header) > 1 {
			idCol, idWhy = 0, "unnamed first column (an index, as pandas writes it)"
		}
	default:
		if idCol, err = lookup("id", opts.ID); err != nil {
			return nil, err
		}
		idWhy = "given (--id-column)"
	}
	labelCol, labelWhy := -1, ""
	switch {
	case opts.Label != "":
		if labelCol, err = lookup("label", opts.Label); err != nil {
			return nil, err
		}
		labelWhy = "given (--label)"
	case sklearn:
		labelCol, labelWhy = len(header)-1, "the last column, in scikit-learn's layout (first line n_samples,n_features,class names)"
	default:
	find:
		for _, name := range labelNames {
			for j, h := range header {
				if j != idCol && strings.EqualFold(h, name) {
					labelCol, labelWhy = j, "named like a label ("+name+"; --label chooses another)"
					break find
				}
			}
		}
		if labelCol < 0 {
			var cols []string
			for j, h := range header[:min(len(header), 12)] {
				cols = append(cols, fmt.Sprintf("%d %q", j, h))
			}
			if len(header) > 12 {
				cols = append(cols, fmt.Sprintf("... (%d columns)", len(header)))
			}
			return nil, fmt.Errorf("%w: csv: no column is named label, class, target or y, and asyrevel does not guess: give the label column with --label NAME or --label INDEX; columns: %s",
				ErrNoLabel, strings.Join(cols, ", "))
		}
	}
	if labelCol == idCol {
		return nil, fmt.Errorf("%w: csv: column %q cannot be both the id and the label", ErrFormat, header[labelCol])
	}
	role := make([]byte, len(header)) // 0 numeric feature, 'c' categorical, 'x' not a feature
	role[labelCol] = 'x'
	if idCol >= 0 {
		role[idCol] = 'x'
	}
	for _, name := range opts.Drop {
		j, err := lookup("dropped", name)
		if err != nil {
			return nil, err
		}
		role[j] = 'x'
	}
	if opts.Encoding != nil {
		use := make([]bool, len(header))
		for _, c := range opts.Encoding.Columns {
			j, ok := index[c.Name]
			if !ok {
				return nil, fmt.Errorf("%w: csv: column %q of the training set is not in this file's header %s", ErrMismatch, c.Name, shortList(header))
			}
			if role[j] == 'x' {
				return nil, fmt.Errorf("%w: csv: column %q of the training set is this file's id, label or a dropped column", ErrMismatch, c.Name)
			}
			use[j] = true
			if c.Categories != nil {
				role[j] = 'c'
			}
		}
		for j := range role {
			if !use[j] {
				role[j] = 'x'
			}
		}
	} else {
		for _, name := range opts.Categorical {
			j, err := lookup("categorical", name)
			if err != nil {
				return nil, err
			}
			if role[j] == 'x' {
				return nil, fmt.Errorf("%w: csv: categorical column %q is the id, label or a dropped column", ErrFormat, name)
			}
			role[j] = 'c'
		}
	}

	t := &csvTable{header: header, label: header[labelCol], labelCol: labelCol, labelWhy: labelWhy,
		idCol: idCol, idWhy: idWhy, classNames: classNames}
	colOf := make([]int, len(header)) // header column -> t.cols index, or -1
	for j, h := range header {
		colOf[j] = -1
		if role[j] != 'x' {
			colOf[j] = len(t.cols)
			c := tableColumn{name: h, cat: role[j] == 'c'}
			if c.cat {
				c.seen = make(map[string]int32)
			}
			t.cols = append(t.cols, c)
		}
	}
	if idCol >= 0 {
		t.ids = []string{}
	}
	na := opts.NA
	if na == nil {
		na = []string{"", "NA"}
	}
	isNA := func(s string) bool { return slices.Contains(na, s) }
	idLine := map[string]int32{}

	for {
		var rec []string
		var line int32
		if pending != nil {
			rec, pending = pending, nil
			line = 2 + skipped
		} else {
			var err error
			if rec, err = cr.Read(); err == io.EOF {
				break
			} else if err != nil {
				return nil, csvError(err, skipped)
			}
			line32, _ := cr.FieldPos(0)
			line = int32(line32) + skipped
		}
		t.lines = append(t.lines, line)
		missing := false
		for j, cell := range rec {
			cell = strings.TrimSpace(cell)
			switch {
			case j == idCol:
				if isNA(cell) {
					return nil, fmt.Errorf("%w: csv: line %d: the id column %q is empty", ErrFormat, line, header[j])
				}
				if prev, dup := idLine[cell]; dup {
					return nil, fmt.Errorf("%w: csv: line %d: id %s already used on line %d", ErrFormat, line, strconv.Quote(cell), prev)
				}
				idLine[cell] = line
				t.ids = append(t.ids, cell)
			case j == labelCol:
				v := math.NaN()
				if isNA(cell) {
					if opts.Missing != MissingDrop {
						return nil, fmt.Errorf("%w: csv: line %d: the label (column %q) is missing", ErrFormat, line, header[j])
					}
					missing = true
					t.nMissing++
				} else if f, ok := parseFloat(stringBytes(cell), 64); ok {
					v = f
				} else {
					return nil, fmt.Errorf("%w: csv: line %d: label %s (column %q) is not a finite number", ErrFormat, line, quote(stringBytes(cell)), header[j])
				}
				t.labels = append(t.labels, v)
			case colOf[j] >= 0:
				c := &t.cols[colOf[j]]
				if isNA(cell) {
					if opts.Missing == MissingError {
						return nil, fmt.Errorf("%w: csv: %s", ErrFormat, MissingAdvice(int(line), header[j], j, cell))
					}
					missing = true
					t.nMissing++
					if c.cat {
						c.code = append(c.code, -1)
					} else {
						c.num = append(c.num, float32(math.NaN()))
					}
					continue
				}
				if c.cat {
					c.code = append(c.code, c.intern(cell))
					continue
				}
				v, ok := parseValue(stringBytes(cell))
				if !ok {
					return nil, fmt.Errorf("%w: csv: %s", ErrFormat, NotANumberAdvice(int(line), header[j], j, cell))
				}
				c.num = append(c.num, v)
			}
		}
		t.missing = append(t.missing, missing)
		t.n++
	}
	if sklearn {
		if n, _ := strconv.Atoi(head0); n != t.n {
			return nil, fmt.Errorf("%w: csv: the first line (scikit-learn's layout) says %d samples, the file has %d", ErrFormat, n, t.n)
		}
	}
	return t, nil
}

// csvError wraps an encoding/csv error as ErrFormat; skipped lines come
// before those the csv reader counts.
func csvError(err error, skipped int32) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return fmt.Errorf("%w: csv: line %d, field %d: %w", ErrFormat, pe.Line+int(skipped), pe.Column, pe.Err)
	}
	return fmt.Errorf("dataset: csv: %w", err)
}

// flagValue is how a column is named on the command line: by its name,
// or by its position if the name would not survive the shell or a comma
// separated list.
func flagValue(name string, j int) string {
	if name == "" || strings.ContainsAny(name, ", \t\"'$`\\") {
		return strconv.Itoa(j)
	}
	return name
}

// sklearnHeader recognises the first line of scikit-learn's sample data
// layout: n_samples, n_features, then the class names.
func sklearnHeader(h []string) (features int, classNames []string, ok bool) {
	if len(h) < 2 {
		return 0, nil, false
	}
	n, err1 := strconv.Atoi(h[0])
	d, err2 := strconv.Atoi(h[1])
	if err1 != nil || err2 != nil || n < 0 || d < 1 {
		return 0, nil, false
	}
	return d, slices.Clone(h[2:]), true
}

// shortList formats a header for an error message.
func shortList(names []string) string {
	const limit = 12
	q := make([]string, 0, limit+1)
	for _, n := range names[:min(len(names), limit)] {
		q = append(q, strconv.Quote(n))
	}
	if len(names) > limit {
		q = append(q, fmt.Sprintf("... (%d columns)", len(names)))
	}
	return "[" + strings.Join(q, " ") + "]"
}

// stringBytes views s as bytes for the parsers, which do not modify or
// retain them.
func stringBytes(s string) []byte {
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

// canonicalCategory makes "2", "2.0" and "+2" the same category.
func canonicalCategory(s string) string {
	if v, ok := parseFloat(stringBytes(s), 64); ok {
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	return s
}

// intern returns the index of the category of cell.
func (c *tableColumn) intern(cell string) int32 {
	if k, ok := c.seen[cell]; ok {
		return k
	}
	v := canonicalCategory(cell)
	k, ok := c.seen[v]
	if !ok {
		k = int32(len(c.dict))
		c.dict = append(c.dict, v)
		c.seen[v] = k
	}
	c.seen[strings.Clone(cell)] = k
	return k
}

// categoryCompare orders categories: numbers first, by value, then the
// others lexically.
func categoryCompare(a, b string) int {
	x, xok := parseFloat(stringBytes(a), 64)
	y, yok := parseFloat(stringBytes(b), 64)
	switch {
	case xok && yok:
		if x < y {
			return -1
		} else if x > y {
			return 1
		}
		return 0
	case xok:
		return -1
	case yok:
		return 1
	}
	return strings.Compare(a, b)
}

// fit computes the encoding from the given rows.
func (t *csvTable) fit(rows []int, binaryIndicator bool) *Encoding {
	enc := &Encoding{Columns: make([]EncodedColumn, len(t.cols))}
	for k := range t.cols {
		c := &t.cols[k]
		ec := EncodedColumn{Name: c.name}
		if c.cat {
			used := make([]bool, len(c.dict))
			for _, i := range rows {
				if code := c.code[i]; code >= 0 {
					used[code] = true
				}
			}
			ec.Categories = []string{}
			for code, u := range used {
				if u {
					ec.Categories = append(ec.Categories, c.dict[code])
				}
			}
			slices.SortFunc(ec.Categories, categoryCompare)
			ec.Indicator = binaryIndicator && len(ec.Categories) == 2
		}
		enc.Columns[k] = ec
	}
	return enc
}

// fitLabels returns the classes of the labels of rows: the sorted distinct
// values, a single one of -1, 0, +1 completed to its binary pair.
func (t *csvTable) fitLabels(rows []int) []float64 {
	seen := map[float64]bool{}
	var values []float64
	for _, i := range rows {
		if v := t.labels[i]; !math.IsNaN(v) && !seen[v] {
			seen[v] = true
			values = append(values, v)
		}
	}
	slices.Sort(values)
	if len(values) == 1 {
		switch values[0] {
		case -1, 1:
			values = []float64{-1, 1}
		case 0:
			values = []float64{0, 1}
		}
	}
	return values
}

// checkLabels refuses a label column that holds measurements, not class
// codes: values that are not whole numbers, or too many of them.
func (t *csvTable) checkLabels(values []float64, maxClasses int) error {
	if maxClasses <= 0 {
		maxClasses = DefaultMaxClasses
	}
	frac := ""
	for _, v := range values {
		if v != math.Trunc(v) {
			frac = fmt.Sprintf(", not whole numbers (%v)", v)
			break
		}
	}
	if frac == "" && len(values) <= maxClasses {
		return nil
	}
	return fmt.Errorf("%w: csv: column %q (%s) cannot be the label: it holds %d distinct values%s, so it would make %d classes, and a label is a class code (0/1, -1/+1, 0..K-1, at most %d classes): give the label column with --label NAME or --label INDEX",
		ErrNoLabel, t.label, t.labelWhy, len(values), frac, len(values), maxClasses)
}

// dataset encodes the rows of t. The encoding and the classes are fitted
// on fitRows unless opts fixes them.
func (t *csvTable) dataset(rows, fitRows []int, opts CSVOptions) (*Dataset, error) {
	enc := opts.Encoding
	if enc == nil {
		enc = t.fit(fitRows, opts.BinaryIndicator)
	}
	labelValues := opts.Labels
	if labelValues == nil {
		labelValues = t.fitLabels(fitRows)
		if err := t.checkLabels(labelValues, opts.MaxClasses); err != nil {
			return nil, err
		}
	}
	classOf := make(map[float64]int32, len(labelValues))
	for c, v := range labelValues {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("dataset: csv: label value %v is not finite", v)
		}
		if _, dup := classOf[v]; dup {
			return nil, fmt.Errorf("dataset: csv: label value %v given twice", v)
		}
		classOf[v] = int32(c)
	}

	// For each table column: its first feature and, for a categorical
	// one, the feature of each dictionary entry (-1: none).
	type plan struct {
		col    *tableColumn
		offset int32
		feat   []int32
	}
	byName := make(map[string]int, len(t.cols))
	for k, c := range t.cols {
		byName[c.name] = k
	}
	plans := make([]plan, 0, len(enc.Columns))
	offset := int32(0)
	for _, ec := range enc.Columns {
		k, ok := byName[ec.Name]
		if !ok || t.cols[k].cat != (ec.Categories != nil) {
			return nil, fmt.Errorf("%w: csv: column %q of the training set is not a %s column in this file", ErrMismatch, ec.Name, map[bool]string{true: "categorical", false: "numeric"}[ec.Categories != nil])
		}
		p := plan{col: &t.cols[k], offset: offset}
		if ec.Categories != nil {
			p.feat = make([]int32, len(p.col.dict))
			for code, v := range p.col.dict {
				p.feat[code] = -1
				if i := slices.Index(ec.Categories, v); i >= 0 {
					switch {
					case !ec.Indicator:
						p.feat[code] = offset + int32(i)
					case i == 1:
						p.feat[code] = offset
					}
				}
			}
		}
		plans = append(plans, p)
		offset += int32(ec.Width())
	}

	indptr := make([]int64, 1, len(rows)+1)
	var indices []int32
	var values []float32
	y := make([]int32, len(rows))
	ids := make([]string, len(rows))
	for r, i := range rows {
		c, ok := classOf[t.labels[i]]
		if !ok {
			if math.IsNaN(t.labels[i]) {
				return nil, fmt.Errorf("%w: csv: line %d: the label (column %q) is missing", ErrFormat, t.lines[i], t.label)
			}
			return nil, fmt.Errorf("%w: csv: line %d: label %v is not one of the %d training labels %v (%w)",
				ErrFormat, t.lines[i], t.labels[i], len(labelValues), labelValues, ErrMismatch)
		}
		y[r] = c
		if t.ids != nil {
			ids[r] = t.ids[i]
		} else {
			ids[r] = strconv.Itoa(i + 1)
		}
		for _, p := range plans {
			if p.feat == nil {
				if v := p.col.num[i]; v != 0 && v == v {
					indices = append(indices, p.offset)
					values = append(values, v)
				}
				continue
			}
			if code := p.col.code[i]; code >= 0 {
				if f := p.feat[code]; f >= 0 {
					indices = append(indices, f)
					values = append(values, 1)
				}
			}
		}
		indptr = append(indptr, int64(len(indices)))
	}
	var classNames []string
	if len(t.classNames) > 0 {
		// scikit-learn's class codes are 0..K-1, naming its class names.
		classNames = make([]string, len(labelValues))
		for c, v := range labelValues {
			if i := int(v); float64(i) == v && i >= 0 && i < len(t.classNames) {
				classNames[c] = t.classNames[i]
			}
		}
	}
	return &Dataset{
		ClassNames:  classNames,
		Format:      FormatCSV,
		X:           &Matrix{NRows: len(rows), NCols: int(offset), Indptr: indptr, Indices: slices.Clip(indices), Values: slices.Clip(values)},
		Y:           y,
		Classes:     len(labelValues),
		LabelValues: labelValues,
		IDs:         ids,
		Encoding:    enc,
	}, nil
}

// CanonicalCategory is the category a cell stands for: "2", "2.0" and
// "+2" are one category. Readers of other CSV layouts (asyrevel align)
// encode categories with it and SortCategories as ReadCSV does.
func CanonicalCategory(s string) string { return canonicalCategory(s) }

// SortCategories sorts categories as ReadCSV orders a one-hot column's:
// numbers first, by value, then the others lexically; it returns c.
func SortCategories(c []string) []string {
	slices.SortFunc(c, categoryCompare)
	return c
}

// EncodingFromNames is the encoding whose feature names (Encoding.Names)
// are names, given which columns are categorical: a run's saved feature
// names, to read new rows into the same features. A name "C=v" of a
// categorical column C is its category v (consecutive names of C make one
// one-hot column); any other name is a numeric column.
func EncodingFromNames(names, categorical []string) *Encoding {
	enc := &Encoding{}
	for _, n := range names {
		cat := ""
		for _, c := range categorical {
			if strings.HasPrefix(n, c+"=") {
				cat = c
				break
			}
		}
		if cat == "" {
			enc.Columns = append(enc.Columns, EncodedColumn{Name: n})
			continue
		}
		v := strings.TrimPrefix(n, cat+"=")
		if k := len(enc.Columns) - 1; k >= 0 && enc.Columns[k].Name == cat && enc.Columns[k].Categories != nil {
			enc.Columns[k].Categories = append(enc.Columns[k].Categories, v)
			continue
		}
		enc.Columns = append(enc.Columns, EncodedColumn{Name: cat, Categories: []string{v}})
	}
	return enc
}
