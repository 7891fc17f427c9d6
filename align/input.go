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
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		f := strings.Fields(text)
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
	Names    []string // feature column names
	X        *dataset.Matrix
	Labels   []float64 // nil unless ReadOptions.Label
	Dropped  int       // rows dropped as duplicates (DedupeFirst)
	KeyNames []string
}

// Len is the number of rows.
func (t *Table) Len() int { return len(t.Keys) }

// ReadCSV reads a CSV file (plain or gzip) with a header line: the key
// columns, the label column if asked, and every other column as a
// numeric feature (empty and NA cells are 0).
func ReadCSV(path string, opts ReadOptions) (*Table, error) {
	return readFile(path, opts, readCSV)
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
	col := func(name string) int {
		for j, h := range header {
			if strings.TrimSpace(h) == name {
				return j
			}
		}
		if j, err := strconv.Atoi(name); err == nil && j >= 0 && j < len(header) {
			return j
		}
		return -1
	}
	role := map[int]bool{}
	keyCols := make([]int, len(opts.Key))
	for i, k := range opts.Key {
		j := col(k)
		if j < 0 {
			return nil, fmt.Errorf("%w: key column %q missing (the header has %s)", ErrInput, k, shortList(header))
		}
		if role[j] {
			return nil, fmt.Errorf("%w: column %q named twice in --key", ErrInput, k)
		}
		keyCols[i], role[j] = j, true
	}
	labelCol := -1
	if opts.Label != "" {
		if labelCol = col(opts.Label); labelCol < 0 {
			return nil, fmt.Errorf("%w: label column %q missing (the header has %s)", ErrInput, opts.Label, shortList(header))
		}
		if role[labelCol] {
			return nil, fmt.Errorf("%w: column %q is both key and label", ErrInput, opts.Label)
		}
		role[labelCol] = true
	}
	var feats []int
	t := &Table{X: &dataset.Matrix{Indptr: []int64{0}}, KeyNames: opts.Key}
	for j, h := range header {
		if !role[j] {
			feats = append(feats, j)
			t.Names = append(t.Names, strings.TrimSpace(h))
		}
	}
	t.X.NCols = len(feats)
	seen := keySet{lines: make(map[string]int32)}
	cells := make([]string, len(keyCols))
	for line := 2; ; line++ {
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
		if !seen.first(key, line) {
			continue
		}
		t.Keys = append(t.Keys, key)
		if labelCol >= 0 {
			v, err := strconv.ParseFloat(strings.TrimSpace(rec[labelCol]), 64)
			if err != nil || math.IsInf(v, 0) || math.IsNaN(v) || v != math.Trunc(v) {
				return nil, fmt.Errorf("%w: line %d: label %q is not an integer class code", ErrInput, line, clip(rec[labelCol]))
			}
			t.Labels = append(t.Labels, v)
		}
		for k, j := range feats {
			s := strings.TrimSpace(rec[j])
			if s == "" || s == "NA" {
				continue
			}
			v, err := strconv.ParseFloat(s, 32)
			if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
				return nil, fmt.Errorf("%w: line %d, column %q: %q is not a finite number", ErrInput, line, header[j], clip(s))
			}
			if v != 0 {
				t.X.Indices = append(t.X.Indices, int32(k))
				t.X.Values = append(t.X.Values, float32(v))
			}
		}
		t.X.Indptr = append(t.X.Indptr, int64(len(t.X.Indices)))
	}
	t.X.NRows = len(t.Keys)
	if err := seen.check(opts.Dedupe); err != nil {
		return nil, err
	}
	t.Dropped = seen.dups
	if t.Len() == 0 {
		return nil, fmt.Errorf("%w: a header but no rows", ErrInput)
	}
	return t, nil
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
