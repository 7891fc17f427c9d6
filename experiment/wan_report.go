package experiment

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// wanComparison is a ratio of the WAN table: slow's median time to the
// target over fast's, and what that factor measures.
type wanComparison struct {
	slow, fast WANArm
	measures   string
}

// wanComparisons are the factors the table separates, for AsyREVEL's
// pipelined window w and the batch b: asynchrony alone (the paper's
// comparison: both one request in flight), pipelining alone, both
// together, and SynREVEL carrying in one request the samples of w.
func wanComparisons(w, b int) []wanComparison {
	asy1, asyW := WANArm{"asyrevel-gau", 1, b}, WANArm{"asyrevel-gau", w, b}
	syn, synWB := WANArm{"synrevel-gau", 1, b}, WANArm{"synrevel-gau", 1, w * b}
	cs := []wanComparison{{syn, asy1, "asynchrony alone (SynREVEL over AsyREVEL, both window 1: the paper's comparison)"}}
	if w > 1 {
		cs = append(cs,
			wanComparison{asy1, asyW, fmt.Sprintf("pipelining alone (AsyREVEL window 1 over window %d)", w)},
			wanComparison{syn, asyW, fmt.Sprintf("asynchrony and pipelining (SynREVEL window 1 over AsyREVEL window %d)", w)},
			wanComparison{synWB, asyW, fmt.Sprintf("the same samples in flight (SynREVEL batch %d over AsyREVEL window %d, batch %d)", w*b, w, b)})
	}
	return cs
}

// wanShape finds the pipelined window and the batch of AsyREVEL's rows.
func wanShape(rows []WANRow) (window, batch int) {
	window = 1
	for _, r := range rows {
		if r.Algo == "asyrevel-gau" {
			window, batch = max(window, r.Window), r.Batch
		}
	}
	return window, batch
}

// WANTable is the WAN experiment's table of runs and its ratios of
// median times to the target, each saying what it measures, in Markdown:
// what the command prints and the report's section begins with.
func WANTable(rows []WANRow, budget time.Duration) string {
	var sb strings.Builder
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "| parties\t| algorithm\t| window\t| batch\t| seed\t| seconds to target\t| steps\t| accuracy at the end\t|")
	fmt.Fprintln(tw, "|---:\t|---\t|---:\t|---:\t|---:\t|---:\t|---:\t|---:\t|")
	for _, r := range rows {
		s := fmtSeconds(r.Seconds, budget)
		fmt.Fprintf(tw, "| %d\t| %s\t| %d\t| %d\t| %d\t| %s\t| %d\t| %.2f%%\t|\n", r.Parties, r.Algo, r.Window, r.Batch, r.Seed, s, r.Steps, 100*r.Accuracy)
	}
	tw.Flush()
	w, b := wanShape(rows)
	sb.WriteString("\nMedian time to the target over the seeds, one configuration's over another's:\n")
	for _, c := range wanComparisons(w, b) {
		sp := WANSpeedup(rows, c.slow, c.fast)
		qs := make([]int, 0, len(sp))
		for q := range sp {
			if !math.IsNaN(WANMedian(rows, q, c.slow)) && !math.IsNaN(WANMedian(rows, q, c.fast)) {
				qs = append(qs, q)
			}
		}
		if len(qs) == 0 {
			continue // an arm not run
		}
		sort.Ints(qs)
		fmt.Fprintf(&sb, "- %s:", c.measures)
		for _, q := range qs {
			switch fast := WANMedian(rows, q, c.fast); {
			case !math.IsNaN(sp[q]):
				fmt.Fprintf(&sb, " q = %d: %.2fx;", q, sp[q])
			case !math.IsInf(fast, 0) && math.IsInf(WANMedian(rows, q, c.slow), 1):
				// The slower one did not get there within the budget: at least this.
				fmt.Fprintf(&sb, " q = %d: more than %.1fx (%s did not reach it within %v);", q, budget.Seconds()/fast, c.slow, budget)
			default:
				fmt.Fprintf(&sb, " q = %d: %s did not reach it;", q, c.fast)
			}
		}
		sb.WriteString("\n")
	}
	return sb.String()
}

// WANSection is the report's section of a WAN experiment of cfg whose
// table is table.
func WANSection(cfg WANConfig, table, command string, started time.Time) Section {
	body := table + fmt.Sprintf("\nData %s; batch %d; AsyREVEL at window 1 (the paper's algorithm) and at window %d (pipelined), SynREVEL at window 1 "+
		"(its rounds allow one request in flight) with batch %d and with batch %d (the samples of AsyREVEL's window in one request); --privacy off; "+
		"links: every party %v, the last party %v "+
		"(a proxy per party in front of an embedded broker on TCP loopback; the aggregator's connection is not delayed); target %.1f%% test accuracy, "+
		"evaluated every 500 ms; a run stops at the target or after %v of training. Measured wall time on this machine, shared with other work.\n",
		cfg.Set.Name, cfg.Batch, cfg.Window, cfg.Batch, cfg.Window*cfg.Batch, cfg.Link, cfg.Slow, 100*cfg.Target, cfg.Budget)
	return Section{Name: "wan", Title: "A real network: AsyREVEL against SynREVEL over delayed links",
		Command: command, Machine: Machine(), Started: started, Duration: time.Since(started), Body: body}
}

// fmtSeconds prints a time to the target, or that it was not reached.
func fmtSeconds(s float64, budget time.Duration) string {
	if math.IsNaN(s) {
		return "not within " + budget.String()
	}
	return strconv.FormatFloat(s, 'f', 2, 64)
}
