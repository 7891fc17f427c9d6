package report

import (
	"fmt"
	"strings"
)

// alignBody: private entity alignment against its group-arithmetic bound
// and a plain join, from align.csv.
func alignBody(g *gen) (string, error) {
	t, err := g.table("align.csv", "orgs", "ids_per_org", "overlap", "intersection", "seconds", "bound_seconds", "cpu_seconds", "bound_cpu_seconds", "correct")
	if err != nil {
		return "", err
	}
	var tab [][]string
	correct := 0
	var cpuRatios []float64
	for i := range t.rows {
		ratio := t.num(i, "seconds") / t.num(i, "bound_seconds")
		cpuRatio := t.num(i, "cpu_seconds") / t.num(i, "bound_cpu_seconds")
		cpuRatios = append(cpuRatios, cpuRatio)
		if t.boolean(i, "correct") {
			correct++
		}
		tab = append(tab, []string{t.str(i, "orgs"), thousands(t.num(i, "ids_per_org")), f(100*t.num(i, "overlap"), 0) + "%", thousands(t.num(i, "intersection")),
			f(t.num(i, "seconds"), 1), f(t.num(i, "bound_seconds"), 1), times(ratio), f(t.num(i, "cpu_seconds"), 1), f(t.num(i, "bound_cpu_seconds"), 1),
			times(cpuRatio), f(t.num(i, "peak_rss_mb"), 0) + " MB", f(t.num(i, "wire_bytes_per_id"), 1), f(t.num(i, "wire_bytes_per_org_id"), 1),
			f(t.num(i, "plain_join_seconds"), 3) + " s", t.str(i, "correct"),
			fmt.Sprintf("%s%% (%s to %s)", f(100*t.num(i, "core_share"), 0), f(t.num(i, "load_start"), 1), f(t.num(i, "load_end"), 1)),
			f(100*t.num(i, "go_idle_share"), 2) + "%", fmt.Sprintf("%s s (%s)", f(t.num(i, "alone_seconds"), 1), times(t.num(i, "alone_ratio")))})
	}
	var b strings.Builder
	b.WriteString(mdTable([]string{"organisations", "ids each", "overlap", "in common", "seconds", "bound", "ratio", "CPU s", "CPU bound", "CPU ratio",
		"peak memory", "wire bytes an id (all ids)", "per id of one organisation", "plain join", "correct", "core share (load average at the start to the end)",
		"Go scheduler idle", "cores to itself (ratio)"}, tab))
	b.WriteString("\n")
	fmt.Fprintf(&b, "- Correct (every organisation's rows the plain intersection, in the same order) in %d of %d cases.\n", correct, len(t.rows))
	lo, hi := extent(cpuRatios)
	fmt.Fprintf(&b, "- CPU time over the bound's: %s to %s (wall time over the bound: the table's ratio column, which follows the load).\n", times(lo), times(hi))
	if t.has("hash_us") && t.has("mult_us") && len(t.rows) > 0 {
		fmt.Fprintf(&b, "- Group costs on one core (cloudflare/circl ristretto255), measured by the command before the cases: hash-to-group %s µs, "+
			"scalar multiplication %s µs.\n", f(t.num(0, "hash_us"), 1), f(t.num(0, "mult_us"), 1))
	}
	b.WriteString("\nData: `align.csv`. The bound counts hashes and multiplications only, on the machine's cores (`cores`): for two " +
		"organisations each id is hashed once and multiplied twice; with more, the hub's set is raised by every party and every party's set " +
		"by the hub. The protocol also encodes every element it sends and decodes every element it receives, which the bound leaves out. Peak " +
		"memory is the resident maximum of the case's process, which holds every organisation and the embedded broker. Wire bytes are what the " +
		"organisations published (payload, subject, headers), per id of all organisations and per id of one organisation. The plain join is a " +
		"hash set of the hub's keys probed with every party's, in the clear, in one goroutine. Wall times against the bound depend on the " +
		"machine's load as well as on the protocol (the load average is in each row); the CPU columns (user and system time of the case's " +
		"process against the bound's operations on one core) do not depend on it. Core share is the protocol's CPU time over its wall time " +
		"times the cores; the Go scheduler's idle share is the part of that time in which no goroutine was ready to run (runtime/metrics: " +
		"the code's own want of parallelism, which the load does not change); cores to itself is the protocol's CPU time over the cores and " +
		"the busy share, an estimate of its wall time on an idle machine.\n")
	return b.String(), nil
}
