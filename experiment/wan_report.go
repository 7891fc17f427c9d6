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

// WANTable is the WAN experiment's table of runs and its speed-ups
// (SynREVEL's time to the target over AsyREVEL's), in Markdown: what the
// command prints and the report's section begins with.
func WANTable(rows []WANRow, budget time.Duration) string {
	var sb strings.Builder
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "| parties\t| algorithm\t| seed\t| seconds to target\t| steps\t| accuracy at the end\t|")
	fmt.Fprintln(tw, "|---:\t|---\t|---:\t|---:\t|---:\t|---:\t|")
	for _, r := range rows {
		s := fmtSeconds(r.Seconds, budget)
		fmt.Fprintf(tw, "| %d\t| %s\t| %d\t| %s\t| %d\t| %.2f%%\t|\n", r.Parties, r.Algo, r.Seed, s, r.Steps, 100*r.Accuracy)
	}
	tw.Flush()
	sp := WANSpeedups(rows)
	qs := make([]int, 0, len(sp))
	for q := range sp {
		qs = append(qs, q)
	}
	sort.Ints(qs)
	sb.WriteString("\nSynREVEL's time to the target over AsyREVEL's (median over the seeds):")
	for _, q := range qs {
		switch a := WANMedian(rows, q, "asyrevel-gau"); {
		case !math.IsNaN(sp[q]):
			fmt.Fprintf(&sb, " q = %d: %.2fx;", q, sp[q])
		case !math.IsInf(a, 0) && !math.IsNaN(a) && math.IsInf(WANMedian(rows, q, "synrevel-gau"), 1):
			// SynREVEL did not get there within the budget: at least this.
			fmt.Fprintf(&sb, " q = %d: more than %.1fx (SynREVEL did not reach it within %v);", q, budget.Seconds()/a, budget)
		default:
			fmt.Fprintf(&sb, " q = %d: AsyREVEL did not reach it;", q)
		}
	}
	sb.WriteString("\n")
	return sb.String()
}

// WANSection is the report's section of a WAN experiment of cfg whose
// table is table.
func WANSection(cfg WANConfig, table, command string, started time.Time) Section {
	body := table + fmt.Sprintf("\nData %s; batch %d, AsyREVEL's window %d, --privacy off (the paper's algorithm); links: every party %v, the last party %v "+
		"(a proxy per party in front of an embedded broker on TCP loopback; the aggregator's connection is not delayed); target %.1f%% test accuracy, "+
		"evaluated every 500 ms; a run stops at the target or after %v of training. Measured wall time on this machine, shared with other work.\n",
		cfg.Set.Name, cfg.Batch, cfg.Window, cfg.Link, cfg.Slow, 100*cfg.Target, cfg.Budget)
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
