package report

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// wanMeasured tells wan.csv's measured columns from the columns that
// describe a configuration: a summary compares the algorithms within each
// configuration (every column that is neither measured nor algo nor seed),
// so that rows the experiment adds (another window, pipelining) are
// compared with their like.
func wanMeasured(col string) bool {
	for _, w := range []string{"seconds", "steps", "accuracy", "bytes", "messages", "staleness", "load", "rss", "cpu"} {
		if strings.Contains(col, w) {
			return true
		}
	}
	return false
}

// wanBody renders whatever wan.csv holds: every run, then per
// configuration each algorithm's median time to the target and its time
// over the asynchronous one's.
func wanBody(g *gen) (string, error) {
	t, err := g.table("wan.csv", "algo", "seconds_to_target")
	if err != nil {
		return "", err
	}
	var b strings.Builder
	var tab [][]string
	for i := range t.rows {
		row := make([]string, len(t.header))
		for j, c := range t.header {
			v := strings.TrimSpace(t.rows[i][j])
			switch {
			case c == "seconds_to_target" && math.IsNaN(t.num(i, c)):
				v = "not reached"
			case c == "accuracy" && t.num(i, c) <= 1:
				v = pct(t.num(i, c))
			}
			row[j] = v
		}
		tab = append(tab, row)
	}
	b.WriteString(mdTable(t.header, tab))
	b.WriteString("\nData: `wan.csv`, every run (the table has its columns, in its order). Times are measured wall time on the real broker, " +
		"each party behind a proxy that delays its link as the `links` column says (the aggregator's connection is not delayed); a run " +
		"stops at the target accuracy or at its budget (in the settings), and \"not reached\" is a run that stopped at its budget.\n\n")

	// Configurations: the rows that agree on every descriptive column.
	var design []string
	for _, c := range t.header {
		if c != "algo" && c != "seed" && !wanMeasured(c) {
			design = append(design, c)
		}
	}
	key := func(i int) string {
		var parts []string
		for _, c := range design {
			parts = append(parts, c+" "+t.str(i, c))
		}
		return strings.Join(parts, ", ")
	}
	var configs []string
	for i := range t.rows {
		if k := key(i); !slices.Contains(configs, k) {
			configs = append(configs, k)
		}
	}
	fmt.Fprintf(&b, "Per configuration (the rows that agree on %s), each algorithm's median time to the target over its runs (a run that did not "+
		"reach it counts as longer than any that did), and its time over the first asynchronous algorithm's: the ratio of the geometric "+
		"means with its 95%% interval (Welch's t on the logarithms) when every run of both reached the target.\n\n", list(quote(design)))
	var sum [][]string
	for _, k := range configs {
		rows := func(algo string) (secs []float64, runs int) {
			for i := range t.rows {
				if key(i) == k && t.str(i, "algo") == algo {
					runs++
					if s := t.num(i, "seconds_to_target"); !math.IsNaN(s) {
						secs = append(secs, s)
					}
				}
			}
			return
		}
		algos := t.distinct("algo", func(i int) bool { return key(i) == k })
		base := ""
		for _, a := range algos {
			if strings.HasPrefix(a, "asyrevel") {
				base = a
				break
			}
		}
		bs, bn := rows(base)
		for _, a := range algos {
			secs, n := rows(a)
			med := "not reached"
			if len(secs) > n/2 {
				s := slices.Clone(secs)
				for len(s) < n {
					s = append(s, math.Inf(1))
				}
				med = f(median(s), 2)
			}
			ratio := "-"
			switch {
			case a == base || base == "":
			case len(secs) == n && len(bs) == bn && n > 0 && bn > 0:
				r, lo, hi := geoRatioCI(secs, bs)
				ratio = interval(r, lo, hi, 2)
				ratio += ": " + separated(lo, hi, "slower", "faster", "not separated by the runs")
			default:
				ratio = "no ratio: a run did not reach the target"
			}
			sum = append(sum, []string{k, a, fmt.Sprintf("%d of %d", len(secs), n), med, ratio})
		}
	}
	b.WriteString(mdTable([]string{"configuration", "algorithm", "reached", "median s to the target", "time over " + firstAsync(t) + "'s"}, sum))
	return b.String(), nil
}

func firstAsync(t *table) string {
	for _, a := range t.distinct("algo", nil) {
		if strings.HasPrefix(a, "asyrevel") {
			return a
		}
	}
	return "the asynchronous algorithm"
}

func quote(x []string) []string {
	out := make([]string, len(x))
	for i, s := range x {
		out[i] = "`" + s + "`"
	}
	return out
}
