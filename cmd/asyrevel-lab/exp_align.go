package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/pprof"
	"strconv"

	"github.com/asyrevel/asyrevel/experiment"
)

func expAlign(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("experiment align", "asyrevel experiment align [--quick] [--cases ORGS:IDS:OVERLAP,...]\n\n"+
		"Private entity alignment against its lower bound and a plain hashed join: every case is one\n"+
		"process (asyrevel experiment align --one), every organisation in it on its own connection to an\n"+
		"embedded JetStream broker with the run's users. The bound is the group arithmetic alone (each\n"+
		"id hashed once, raised by its owner, and the hub's and each party's sets raised by the other),\n"+
		"from the library's costs measured here, on the machine's cores. Writes results/align.csv and a\n"+
		"section of results/REPORT.md.", stderr)
	f := newExpFlags(fs)
	casesFlag := fs.String("cases", "", "the cases, ORGS:IDS:OVERLAP comma-separated (default: 2 organisations of 10k, 100k\nand 1M ids with 50% overlap, 3 of 100k, 8 of 100k; --quick: 2 of 10k and 100k, 3 of 20k, 8 of 10k)")
	one := fs.String("one", "", "run one case ORGS:IDS:OVERLAP in this process and print its JSON (used by the experiment)")
	cpuProfile := fs.String("cpuprofile", "", "with --one: write a CPU profile of the case to this `FILE` (go tool pprof)")
	log, err := f.parse(fs, args, stderr)
	if err != nil {
		return err
	}
	if *one != "" {
		c, err := experiment.ParseAlignCases(*one)
		if err != nil || len(c) != 1 {
			return fmt.Errorf("%w: --one %q: %v", errUsage, *one, err)
		}
		dir, err := experiment.AlignTempDir()
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if *cpuProfile != "" {
			pf, err := os.Create(*cpuProfile)
			if err != nil {
				return err
			}
			defer pf.Close()
			if err := pprof.StartCPUProfile(pf); err != nil {
				return err
			}
			defer pprof.StopCPUProfile()
		}
		r, err := experiment.AlignBench(ctx, experiment.AlignBenchConfig{Orgs: c[0].Orgs, IDs: c[0].IDs, Overlap: c[0].Overlap, Seed: f.seed, Dir: dir, Log: log,
			Progress: func(s string) { fmt.Fprintln(stderr, s) }})
		if err != nil {
			return err
		}
		return json.NewEncoder(stdout).Encode(r)
	}
	cases := experiment.AlignCases
	if f.quick {
		cases = experiment.QuickAlignCases
	}
	if *casesFlag != "" {
		if cases, err = experiment.ParseAlignCases(*casesFlag); err != nil {
			return fmt.Errorf("%w: --cases: %v", errUsage, err)
		}
	}
	bin, err := os.Executable()
	if err != nil {
		return err
	}
	cmdline := "asyrevel experiment align"
	if f.quick {
		cmdline += " --quick"
	}
	if *casesFlag != "" {
		cmdline += " --cases " + *casesFlag
	}
	return experiment.Align(ctx, experiment.AlignConfig{Cases: cases, Out: f.out, Command: cmdline,
		Process: func(ctx context.Context, c experiment.AlignCase) *exec.Cmd {
			args := []string{"experiment", "align", "--one", fmt.Sprintf("%d:%d:%g", c.Orgs, c.IDs, c.Overlap),
				"--seed", strconv.FormatUint(f.seed, 10), "--log", "warn"}
			if *cpuProfile != "" {
				args = append(args, "--cpuprofile", fmt.Sprintf("%s.%d-%d", *cpuProfile, c.Orgs, c.IDs))
			}
			return exec.CommandContext(ctx, bin, args...)
		}}, stdout, stderr)
}
