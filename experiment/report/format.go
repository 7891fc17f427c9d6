package report

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// mdTable renders a markdown table.
func mdTable(header []string, rows [][]string) string {
	var b strings.Builder
	b.WriteString("| " + strings.Join(header, " | ") + " |\n|")
	for range header {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, r := range rows {
		b.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
	return b.String()
}

// f formats v with prec decimals: "-" for NaN, "inf" for +Inf.
func f(v float64, prec int) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case math.IsInf(v, 1):
		return "inf"
	case math.IsInf(v, -1):
		return "-inf"
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

// thousands formats an integral v with commas between thousands.
func thousands(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return f(v, 0)
	}
	s := strconv.FormatFloat(math.Abs(math.Round(v)), 'f', 0, 64)
	var b strings.Builder
	if v < 0 && s != "0" {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// pct formats a fraction as a percentage with two decimals ("-" for NaN).
func pct(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return f(100*v, 2) + "%"
}

// signedPct formats a fraction as a signed percentage without decimals.
func signedPct(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%+.0f%%", 100*v)
}

// times formats a ratio as "1.23x".
func times(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return f(v, 2)
	}
	return f(v, 2) + "x"
}

// interval formats a value and its interval as "1.23 [1.01..1.50]".
func interval(v, lo, hi float64, prec int) string {
	if math.IsNaN(lo) || math.IsNaN(hi) {
		return f(v, prec)
	}
	return fmt.Sprintf("%s [%s..%s]", f(v, prec), f(lo, prec), f(hi, prec))
}

// list joins items as "a, b and c".
func list(items []string) string {
	switch len(items) {
	case 0:
		return ""
	case 1:
		return items[0]
	}
	return strings.Join(items[:len(items)-1], ", ") + " and " + items[len(items)-1]
}

// plural is "1 run", "2 runs".
func plural(n int, one string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %ss", n, one)
}
