package report

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// ttaBody: time to the target accuracy of each system over its seeds,
// against the single-process reference loop, from time_to_accuracy.csv.
func ttaBody(g *gen) (string, error) {
	t, err := g.table("time_to_accuracy.csv", "system", "seed", "seconds_to_target", "steps_to_target")
	if err != nil {
		return "", err
	}
	reached := func(sys string) (secs, steps, wall []float64, runs int) {
		for _, i := range t.where("system", sys) {
			runs++
			if s := t.num(i, "seconds_to_target"); s >= 0 && !math.IsNaN(s) {
				secs = append(secs, s)
				steps = append(steps, t.num(i, "steps_to_target"))
				wall = append(wall, t.num(i, "wall_seconds"))
			}
		}
		return
	}
	ref, _, _, refRuns := reached("reference")
	var tab [][]string
	for _, sys := range t.distinct("system", nil) {
		secs, steps, wall, runs := reached(sys)
		ratio := "-"
		if sys != "reference" && len(ref) == refRuns && len(secs) == runs && len(ref) > 0 && len(secs) > 0 {
			r, lo, hi := geoRatioCI(secs, ref)
			ratio = interval(r, lo, hi, 2)
		}
		name := sys
		if sys == "reference" {
			name = "reference (one process, no broker)"
		}
		lo, hi := extent(secs)
		tab = append(tab, []string{name, fmt.Sprintf("%d of %d", len(secs), runs), f(median(secs), 3), f(lo, 3) + ".." + f(hi, 3), thousands(median(steps)),
			f(median(wall), 3), ratio})
	}
	var b strings.Builder
	b.WriteString(mdTable([]string{"system", "reached", "median training s to the target", "fastest..slowest", "median steps", "median wall s",
		"time over the reference's: ratio of geometric means [95% interval]"}, tab))
	b.WriteString("\nData: `time_to_accuracy.csv` (every run). The pipeline on each bus (8 parties on a9a; the target accuracy, batch and window are in " +
		"the settings) against the single-process reference loop with the same settings: no broker, no messages, the parties in turn. Training " +
		"time excludes set-up and evaluation; the time is read at the evaluation rounds, which the aggregator spaces by its own measure of a " +
		"round's duration, so a run is known to have reached the target only at the next round. The interval is Welch's t on the logarithms " +
		"(the runs are independent); a ratio whose interval excludes 1 is slower (or faster) than the reference beyond the seeds' spread.\n")
	return b.String(), nil
}

// scaleBody: steps a second and peak memory with more parties and more
// samples, and the memory per party and per sample, from scale.csv.
func scaleBody(g *gen) (string, error) {
	t, err := g.table("scale.csv", "parties", "samples", "features", "steps_per_s", "peak_rss_mb")
	if err != nil {
		return "", err
	}
	var tab [][]string
	complete, withStream := 0, 0
	for i := range t.rows {
		tab = append(tab, []string{t.str(i, "parties"), thousands(t.num(i, "samples")), t.str(i, "features"), thousands(t.num(i, "steps_per_s")),
			f(t.num(i, "peak_rss_mb"), 0), f(t.num(i, "wall_seconds"), 1), pct(t.num(i, "test_accuracy"))})
		if t.str(i, "messages_stored") != "" {
			withStream++
			if t.integer(i, "messages_stored") == t.integer(i, "messages_sent") {
				complete++
			}
		}
	}
	var b strings.Builder
	b.WriteString(mdTable([]string{"parties", "samples", "features", "steps/s", "peak resident MB", "wall s", "test accuracy"}, tab))
	b.WriteString("\nData: `scale.csv`. One `asyrevel train` process a run on synthetic data (batch, window and training time in the settings); " +
		"peak resident memory from the kernel's accounting of the child process.\n\n")
	// Memory per party: least squares over the runs with the first run's
	// samples and features; per sample: the pair of runs with the same
	// parties and features farthest apart in samples.
	var xs, ys []float64
	for i := range t.rows {
		if t.str(i, "samples") == t.str(0, "samples") && t.str(i, "features") == t.str(0, "features") {
			xs, ys = append(xs, t.num(i, "parties")), append(ys, t.num(i, "peak_rss_mb"))
		}
	}
	if len(xs) >= 2 {
		fmt.Fprintf(&b, "- Memory per party: %s MB (least squares over the %d runs of %s samples and %s features).\n",
			f(slope(xs, ys), 2), len(xs), thousands(t.num(0, "samples")), t.str(0, "features"))
	}
	best, ba, bb := 0.0, -1, -1
	for i := range t.rows {
		for j := range t.rows {
			if t.str(i, "parties") == t.str(j, "parties") && t.str(i, "features") == t.str(j, "features") {
				if d := t.num(j, "samples") - t.num(i, "samples"); d > best {
					best, ba, bb = d, i, j
				}
			}
		}
	}
	if ba >= 0 {
		per := (t.num(bb, "peak_rss_mb") - t.num(ba, "peak_rss_mb")) * (1 << 20) / best
		fmt.Fprintf(&b, "- Memory per sample: %s bytes (%s parties, %s features: %s MB with %s samples against %s MB with %s).\n",
			thousands(per), t.str(ba, "parties"), t.str(ba, "features"), f(t.num(bb, "peak_rss_mb"), 0), thousands(t.num(bb, "samples")),
			f(t.num(ba, "peak_rss_mb"), 0), thousands(t.num(ba, "samples")))
	}
	if withStream > 0 {
		fmt.Fprintf(&b, "- The stream stored every message sent in %d of %d runs.\n", complete, withStream)
	}
	return b.String(), nil
}

// slope is the least-squares slope of ys over xs (NaN if xs do not vary).
func slope(xs, ys []float64) float64 {
	var mx, my float64
	for i := range xs {
		mx += xs[i]
		my += ys[i]
	}
	mx /= float64(len(xs))
	my /= float64(len(ys))
	var sxy, sxx float64
	for i := range xs {
		sxy += (xs[i] - mx) * (ys[i] - my)
		sxx += (xs[i] - mx) * (xs[i] - mx)
	}
	if sxx == 0 {
		return math.NaN()
	}
	return sxy / sxx
}

// soakBody: whether resident memory stayed flat over a long run, and how
// fast the store grew, from soak.csv.
func soakBody(g *gen) (string, error) {
	t, err := g.table("soak.csv", "seconds", "rss_mb", "store_mb")
	if err != nil {
		return "", err
	}
	if len(t.rows) == 0 {
		return "`soak.csv` holds no sample.\n", nil
	}
	end := t.num(len(t.rows)-1, "seconds")
	// The window: a minute, or a fifth of the run if that is shorter; the
	// reference window starts one window in (after start-up).
	w := math.Min(60, end/5)
	mem := "rss_mb"
	who := "the training process (the broker inside it)"
	if bs := t.nums(allRows(t), "broker_rss_mb"); len(bs) > 0 && slices.Max(bs) > 0 {
		mem, who = "broker_rss_mb", "the broker process"
	}
	var first, last []float64
	for i := range t.rows {
		s, v := t.num(i, "seconds"), t.num(i, mem)
		if !(v > 0) {
			continue
		}
		if s >= w && s < 2*w {
			first = append(first, v)
		}
		if s > end-w {
			last = append(last, v)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Data: `soak.csv`, %d samples over %s s of one `asyrevel train` run in a process of its own (parties, data and transport in "+
		"the settings).\n\n", len(t.rows), f(end, 0))
	if len(first) > 0 && len(last) > 0 {
		m0, m1 := lowerMedian(first), lowerMedian(last)
		growth := m1/m0 - 1
		verdict := "flat (within 10%)"
		if growth > 0.10 {
			verdict = "**growing** (more than 10%)"
		}
		lo, hi := extent(last)
		fmt.Fprintf(&b, "- Resident memory of %s: median %s MB over the %s s from %s s, %s MB over the last %s s: %s, %s. The last sample: %s MB; "+
			"the samples of the last window range from %s to %s MB (a single sample is not the trend, hence the medians).\n",
			who, f(m0, 1), f(w, 0), f(w, 0), f(m1, 1), f(w, 0), signedPct(growth), verdict, f(t.num(len(t.rows)-1, mem), 1), f(lo, 1), f(hi, 1))
	}
	s0, s1 := math.NaN(), t.num(len(t.rows)-1, "store_mb")
	t0 := math.NaN()
	for i := range t.rows {
		if t.num(i, "seconds") >= w {
			s0, t0 = t.num(i, "store_mb"), t.num(i, "seconds")
			break
		}
	}
	if !math.IsNaN(s0) && end > t0 {
		fmt.Fprintf(&b, "- The store: %s MB at the end, growing by %s MB a minute after the first %s s.\n", thousands(s1), f(60*(s1-s0)/(end-t0), 0), f(w, 0))
	}
	return b.String(), nil
}

func allRows(t *table) []int {
	out := make([]int, len(t.rows))
	for i := range out {
		out[i] = i
	}
	return out
}

// lowerMedian is the median of x, the lower middle of an even count.
func lowerMedian(x []float64) float64 {
	s := slices.Clone(x)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

// adversaryBody: what became of each kind of bad message, from
// adversary.csv.
func adversaryBody(g *gen) (string, error) {
	t, err := g.table("adversary.csv", "category", "sent", "refused_by_broker", "rejected_by_receiver", "accepted")
	if err != nil {
		return "", err
	}
	var tab [][]string
	var sent, refused, rejected, accepted float64
	var through []string
	for i := range t.rows {
		tab = append(tab, []string{t.str(i, "category"), t.str(i, "sent"), t.str(i, "refused_by_broker"), t.str(i, "rejected_by_receiver"), t.str(i, "accepted")})
		sent += t.num(i, "sent")
		refused += t.num(i, "refused_by_broker")
		rejected += t.num(i, "rejected_by_receiver")
		if a := t.num(i, "accepted"); a > 0 {
			accepted += a
			through = append(through, t.str(i, "category"))
		}
	}
	var b strings.Builder
	b.WriteString(mdTable([]string{"kind of message", "sent", "refused by the broker", "rejected and counted by the receiver", "accepted"}, tab))
	fmt.Fprintf(&b, "\nData: `adversary.csv`. A rogue participant sends bad messages of %d kinds during an a9a run on the broker with the trust "+
		"layer on: %s in all, %s refused by the broker (its permissions), %s rejected and counted by their receiver, ", len(t.rows),
		thousands(sent), thousands(refused), thousands(rejected))
	if accepted == 0 {
		b.WriteString("none accepted.\n")
	} else {
		fmt.Fprintf(&b, "**%s accepted** (%s).\n", thousands(accepted), list(through))
	}
	return b.String(), nil
}

// elsewhereBody names the measurements whose commands keep no CSV: their
// figures are not in this report.
func elsewhereBody(*gen) (string, error) {
	return "These are measured by the commands below, which print their figures but keep no CSV file; earlier versions of this report " +
		"quoted them by hand, and this one does not. Run the command to see the figure on your machine.\n\n" +
		"- Hot loops, allocations and the trust layer's primitives: `go test -run '^$' -bench 'Codec|Step|Forward|Loss|Draw|Backward|Handle' " +
		"-benchmem ./schemas ./party ./aggregator ./model ./zoo` and `go test ./trust -bench 'ChainAppend|Publisher|Verifier'`.\n" +
		"- Where a step's CPU goes: `asyrevel train ... --cpuprofile FILE`.\n" +
		"- The store's bytes a step: `asyrevel train --data a9a.gz --test a9a.t.gz --parties 8 --batch 64 --duration 20s --out OUT`, then " +
		"`store_bytes / steps` of OUT/summary.json (where each byte goes: docs/log.md).\n" +
		"- `make run` and the runs that stop when done: their summary.json.\n" +
		"- A cluster of brokers and its fail-over: `go test -count=1 -v -run TestProcessCluster ./cmd/asyrevel`.\n" +
		"- Containers: `make compose-test`.\n" +
		"- Recovery after a broker crash, repeated: `asyrevel experiment faults --cases broker` (each run's faults.csv).\n" +
		"- Large data sets: `ASYREVEL_BIG=1 go test ./dataset -run LargeShapes -v`.\n" +
		"- External black-box models: `asyrevel train ... --model external --model-cmd CMD` (docs/models.md).\n" +
		"- Replay's reading speed: `go test ./replay -run '^$' -bench 'ReadStoppedStore|RawOrdered'`.\n" +
		"- The privacy attacks run by hand (collusion, backdoor, feature inference, inflated outputs): `asyrevel attack NAME` (docs/privacy.md).\n", nil
}
