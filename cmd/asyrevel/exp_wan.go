package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/asyrevel/asyrevel/experiment"
	"github.com/asyrevel/asyrevel/internal/wan"
)

func expWAN(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("experiment wan", "asyrevel experiment wan [--quick] [--parties 2,4,8] [--delay 10ms --jitter 2ms --slow 50ms]\n\n"+
		"AsyREVEL against SynREVEL to a target accuracy over the real broker, with every party\n"+
		"behind a proxy that delays its link both ways (Toxiproxy, as a library: this machine\n"+
		"has no netem qdisc) and the last party's link slower: a WAN with one distant\n"+
		"organisation. Time to the target is measured wall time, not simulated. Writes\n"+
		"results/wan.csv and the wan section of REPORT.md.", stderr)
	f := newExpFlags(fs)
	setName := fs.String("set", "a9a", "data set")
	partiesFlag := fs.String("parties", "2,4,8", "numbers of parties")
	delay := fs.Duration("delay", 10*time.Millisecond, "every party's delay each way (a round trip takes twice this)")
	jitter := fs.Duration("jitter", 2*time.Millisecond, "the delay's jitter each way (uniform, at most --delay)")
	slow := fs.Duration("slow", 50*time.Millisecond, "the last party's delay each way")
	target := fs.Float64("target", 0.84, "test accuracy to reach")
	budget := fs.Duration("budget", 90*time.Second, "give up after this much training (--quick: 30s)")
	seeds := fs.Int("seeds", 1, "runs per configuration")
	batch := fs.Int("batch", 64, "samples per request")
	window := fs.Int("window", 8, "AsyREVEL's requests in flight per party")
	log, err := f.parse(fs, args, stderr)
	if err != nil {
		return err
	}
	set, err := experiment.LookupSet(*setName)
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	var parties []int
	for _, p := range strings.Split(*partiesFlag, ",") {
		q, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || q < 1 {
			return fmt.Errorf("%w: --parties: %q is not a number of parties", errUsage, p)
		}
		parties = append(parties, q)
	}
	b := *budget
	if f.quick && !flagGiven(fs, "budget") {
		b = 30 * time.Second
	}
	cfg := experiment.WANConfig{
		Set: set, Locate: f.path, Parties: parties,
		Link: wan.Link{Delay: *delay, Jitter: min(*jitter, *delay)}, Slow: wan.Link{Delay: *slow, Jitter: min(*jitter, *slow)},
		Target: *target, Budget: b, Batch: *batch, Window: *window, EvalEvery: 500 * time.Millisecond, Log: log,
	}
	for i := range *seeds {
		cfg.Seeds = append(cfg.Seeds, f.seed+uint64(i))
	}
	t0 := time.Now()
	rows, err := experiment.WAN(ctx, cfg)
	if err != nil {
		return err
	}
	if err := experiment.WriteWAN(f.out, rows); err != nil {
		return err
	}
	var sb strings.Builder
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "| parties\t| algorithm\t| seed\t| seconds to target\t| steps\t| accuracy at the end\t|")
	fmt.Fprintln(tw, "|---:\t|---\t|---:\t|---:\t|---:\t|---:\t|")
	for _, r := range rows {
		s := fmtSeconds(r.Seconds, cfg.Budget)
		fmt.Fprintf(tw, "| %d\t| %s\t| %d\t| %s\t| %d\t| %.2f%%\t|\n", r.Parties, r.Algo, r.Seed, s, r.Steps, 100*r.Accuracy)
	}
	tw.Flush()
	sp := experiment.WANSpeedups(rows)
	qs := make([]int, 0, len(sp))
	for q := range sp {
		qs = append(qs, q)
	}
	sort.Ints(qs)
	sb.WriteString("\nSynREVEL's time to the target over AsyREVEL's (median over the seeds):")
	for _, q := range qs {
		switch a := experiment.WANMedian(rows, q, "asyrevel-gau"); {
		case !math.IsNaN(sp[q]):
			fmt.Fprintf(&sb, " q = %d: %.2fx;", q, sp[q])
		case !math.IsInf(a, 0) && !math.IsNaN(a) && math.IsInf(experiment.WANMedian(rows, q, "synrevel-gau"), 1):
			// SynREVEL did not get there within the budget: at least this.
			fmt.Fprintf(&sb, " q = %d: more than %.1fx (SynREVEL did not reach it within %v);", q, cfg.Budget.Seconds()/a, cfg.Budget)
		default:
			fmt.Fprintf(&sb, " q = %d: AsyREVEL did not reach it;", q)
		}
	}
	sb.WriteString("\n")
	fmt.Fprint(stdout, sb.String())
	cmdline := "asyrevel experiment wan"
	if f.quick {
		cmdline += " --quick"
	}
	body := sb.String() + fmt.Sprintf("\nData %s; batch %d, AsyREVEL's window %d, --privacy off (the paper's algorithm); links: every party %v, the last party %v "+
		"(a proxy per party in front of an embedded broker on TCP loopback; the aggregator's connection is not delayed); target %.1f%% test accuracy, "+
		"evaluated every 500 ms; a run stops at the target or after %v of training. Measured wall time on this machine, shared with other work.\n",
		set.Name, *batch, *window, cfg.Link, cfg.Slow, 100**target, cfg.Budget)
	sec := experiment.Section{Name: "wan", Title: "A real network: AsyREVEL against SynREVEL over delayed links",
		Command: cmdline, Machine: experiment.Machine(), Started: t0, Duration: time.Since(t0), Body: body}
	return experiment.WriteSection(f.out, sec)
}

// fmtSeconds prints a time to the target, or that it was not reached.
func fmtSeconds(s float64, budget time.Duration) string {
	if math.IsNaN(s) {
		return "not within " + budget.String()
	}
	return strconv.FormatFloat(s, 'f', 2, 64)
}
