package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/asyrevel/asyrevel/experiment"
	"github.com/asyrevel/asyrevel/internal/wan"
)

func expWAN(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("experiment wan", "asyrevel experiment wan [--quick] [--parties 2,4,8] [--delay 10ms --jitter 2ms --slow 50ms]\n\n"+
		"AsyREVEL against SynREVEL to a target accuracy over the real broker, with every party\n"+
		"behind a proxy that delays its link both ways (Toxiproxy, as a library: this machine\n"+
		"has no netem qdisc) and the last party's link slower: a WAN with one distant\n"+
		"organisation. Time to the target is measured wall time, not simulated. Four\n"+
		"configurations separate what asynchrony buys from what pipelining buys: AsyREVEL\n"+
		"at window 1 (the paper's algorithm) and at --window, SynREVEL (one request in flight:\n"+
		"its rounds) at --batch and at --window times --batch (the samples of the window in\n"+
		"one request). Writes results/wan.csv (with each run's window, pipelined, batch and\n"+
		"samples_in_flight) and the wan section of REPORT.md.", stderr)
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
	window := fs.Int("window", 8, "AsyREVEL's requests in flight per party (it runs at window 1 too)")
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
	table := experiment.WANTable(rows, cfg.Budget)
	fmt.Fprint(stdout, table)
	cmdline := "asyrevel experiment wan"
	if f.quick {
		cmdline += " --quick"
	}
	return experiment.WriteSection(f.out, experiment.WANSection(cfg, table, cmdline, t0))
}
