package dataset

import (
	"fmt"
	"strconv"
)

// MissingCount is what a missing-value policy found in a file and did:
// the missing cells (empty, or one of CSVOptions.NA) of feature and label
// columns, and the rows that hold one. Every command that reads a CSV file
// (data inspect, data split, train, align) says it in the same words
// (String, Undecided).
type MissingCount struct {
	Policy MissingPolicy `json:"policy"`
	Cells  int           `json:"cells"`
	Rows   int           `json:"rows"`
}

// Add adds o's counts to c (a training and a test file); the policy is o's.
func (c *MissingCount) Add(o MissingCount) {
	c.Policy = o.Policy
	c.Cells += o.Cells
	c.Rows += o.Rows
}

// String says what the policy did: "16 missing values in 12 rows, read as
// 0 (--missing zero)", "..., those 12 rows left out (--missing drop)"; ""
// when nothing was missing.
func (c MissingCount) String() string {
	if c.Cells == 0 {
		return ""
	}
	what := c.what()
	switch c.Policy {
	case MissingZero:
		return what + ", read as 0 (--missing zero; a categorical cell as no category)"
	case MissingDrop:
		return fmt.Sprintf("%s, %s left out (--missing drop)", what, plural(c.Rows, "that row", "those "+strconv.Itoa(c.Rows)+" rows"))
	}
	return what + ": refused (--missing error)"
}

// Undecided says what the policies would do, for a file read without
// --missing (data inspect): the other commands refuse it until told.
func (c MissingCount) Undecided() string {
	if c.Cells == 0 {
		return ""
	}
	return fmt.Sprintf("%s: data split, train and align refuse the file until told what to do: --missing zero (read them as 0) or --missing drop (leave the %s out)",
		c.what(), plural(c.Rows, "row", strconv.Itoa(c.Rows)+" rows"))
}

func (c MissingCount) what() string {
	return fmt.Sprintf("%s in %s", plural(c.Cells, "1 missing value", strconv.Itoa(c.Cells)+" missing values"),
		plural(c.Rows, "1 row", strconv.Itoa(c.Rows)+" rows"))
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// MissingAdvice is the error text for a missing cell read with
// MissingError: the same words from every command.
func MissingAdvice(line int, column string, position int, cell string) string {
	what := "an empty cell"
	if cell != "" {
		what = "missing value " + strconv.Quote(cell)
	}
	return fmt.Sprintf("line %d, column %d (%q): %s: say how to fill it: --missing zero (read as 0) or --missing drop (leave such rows out)",
		line, position+1, column, what)
}

// NotANumberAdvice is the error text for a cell of a numeric column that
// is not a number: the flags that read it otherwise, in the same words
// from every command.
func NotANumberAdvice(line int, column string, position int, cell string) string {
	v := flagValue(column, position)
	return fmt.Sprintf("line %d: column %q: value %s is not a finite number: if the column is categorical, give --categorical %s (one-hot encoding); to leave it out, --drop %s; if the value means missing, give --na %s",
		line, column, quote(stringBytes(cell)), v, v, quote(stringBytes(cell)))
}

// ParseMissing reads --missing: error, zero or drop.
func ParseMissing(s string) (MissingPolicy, error) {
	switch s {
	case "error":
		return MissingError, nil
	case "zero":
		return MissingZero, nil
	case "drop":
		return MissingDrop, nil
	}
	return 0, fmt.Errorf("--missing %q: want error, zero or drop", s)
}
