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
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInput, err)
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<16)
	var r io.Reader = br
	if head, _ := br.Peek(2); len(head) == 2 && head[0] == 0x1f && head[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrInput, path, err)
		}
		defer gz.Close()
		r = gz
	}
	t, err := readCSV(r, opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	t.Path = path
	return t, nil
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
	seen := make(map[string]int32)
	cells := make([]string, len(keyCols))
	dups, firstDup, firstOrig := 0, 0, 0
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
		if first, dup := seen[key]; dup {
			if dups == 0 {
				firstDup, firstOrig = line, int(first)
			}
			dups++
			continue
		}
		seen[key] = int32(line)
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
	if dups > 0 && opts.Dedupe == DedupeRefuse {
		return nil, fmt.Errorf("%w: %d rows repeat an earlier row's key (the first: line %d repeats line %d); give --dedupe first to keep each key's first row",
			ErrDuplicate, dups, firstDup, firstOrig)
	}
	t.Dropped = dups
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
