package report

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// ErrUnreadable marks a CSV file the report could not read: missing
// columns, a malformed row. Its section says so in place of its figures.
var ErrUnreadable = errors.New("unreadable results")

// table is a CSV file read by its column names, so that a section reads
// the columns it needs whatever others the file holds, and in any order.
type table struct {
	name   string // the file's name, e.g. fig3.csv
	header []string
	rows   [][]string
	col    map[string]int
}

// readTable reads dir/name; nil and no error if the file does not exist.
// It fails (ErrUnreadable) when a column of need is missing.
func readTable(dir, name string, need ...string) (*table, error) {
	f, err := os.Open(filepath.Join(dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.FieldsPerRecord = -1
	recs, err := r.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrUnreadable, name, err)
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("%w: %s: no header", ErrUnreadable, name)
	}
	t := &table{name: name, header: recs[0], rows: recs[1:], col: map[string]int{}}
	for i, h := range t.header {
		t.col[strings.TrimSpace(h)] = i
	}
	var missing []string
	for _, c := range need {
		if _, ok := t.col[c]; !ok {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: %s has no column %s", ErrUnreadable, name, strings.Join(missing, ", "))
	}
	for i, row := range t.rows {
		if len(row) != len(t.header) {
			return nil, fmt.Errorf("%w: %s: row %d has %d fields, the header %d", ErrUnreadable, name, i+2, len(row), len(t.header))
		}
	}
	return t, nil
}

func (t *table) has(col string) bool { _, ok := t.col[col]; return ok }

// str is row i's value of col ("" if the file has no such column).
func (t *table) str(i int, col string) string {
	j, ok := t.col[col]
	if !ok {
		return ""
	}
	return strings.TrimSpace(t.rows[i][j])
}

// num is row i's value of col as a number: NaN when empty, not a number
// or missing; "inf" is +Inf.
func (t *table) num(i int, col string) float64 {
	s := t.str(i, col)
	switch strings.ToLower(s) {
	case "", "nan", "-", "n/a":
		return math.NaN()
	case "inf", "+inf":
		return math.Inf(1)
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return math.NaN()
	}
	return v
}

// integer is row i's value of col as an integer (0 if not one).
func (t *table) integer(i int, col string) int64 {
	v := t.num(i, col)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return int64(math.Round(v))
}

// boolean is row i's value of col as a boolean (false unless "true").
func (t *table) boolean(i int, col string) bool {
	return strings.EqualFold(t.str(i, col), "true")
}

// distinct lists the values of col in the order they first appear, among
// the rows keep accepts (all with keep nil).
func (t *table) distinct(col string, keep func(i int) bool) []string {
	var out []string
	for i := range t.rows {
		if keep != nil && !keep(i) {
			continue
		}
		if v := t.str(i, col); !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

// where lists the rows whose columns equal the values given in pairs
// (column, value, column, value, ...).
func (t *table) where(kv ...string) []int {
	var out []int
	for i := range t.rows {
		ok := true
		for k := 0; k+1 < len(kv); k += 2 {
			if t.str(i, kv[k]) != kv[k+1] {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, i)
		}
	}
	return out
}

// nums is col's numbers at rows, NaN left out.
func (t *table) nums(rows []int, col string) []float64 {
	var out []float64
	for _, i := range rows {
		if v := t.num(i, col); !math.IsNaN(v) {
			out = append(out, v)
		}
	}
	return out
}
