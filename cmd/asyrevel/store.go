package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/asyrevel/asyrevel/run"
)

const storeUsage = `Usage:
  asyrevel store list DIR...        the runs each broker store holds and their size on disk
  asyrevel store rm [--run R] DIR   remove a store, or only run R's stream from it

DIR is a broker store (asyrevel broker --store DIR, asyrevel train --store DIR) or an
--out folder of asyrevel train (its store is DIR/stream). A store holds each run's stream,
the run's audit log; rm refuses a folder that holds anything else. Stop the broker that
serves a store before removing from it.
`

func cmdStore(_ context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, storeUsage)
		return fmt.Errorf("%w: store needs a subcommand: list or rm", errUsage)
	}
	switch args[0] {
	case "list":
		return cmdStoreList(args[1:], stdout, stderr)
	case "rm":
		return cmdStoreRm(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, storeUsage)
		return nil
	}
	return fmt.Errorf("%w: unknown store subcommand %q%s: list or rm", errUsage, args[0], didYouMean(args[0], []string{"list", "rm"}))
}

func cmdStoreList(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("store list", "asyrevel store list DIR...\n\n"+
		"Lists the runs whose streams each store holds, with their size on disk and when\n"+
		"they were last written. DIR may also be an --out folder of asyrevel train.", stderr)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return fmt.Errorf("%w: store list needs a DIR", errUsage)
	}
	for _, dir := range pos {
		st, err := run.OpenStore(dir)
		if err != nil {
			return err
		}
		kind := "store"
		if st.Cluster {
			kind = "cluster store"
		}
		fmt.Fprintf(stdout, "%s %s: %s, %s\n", kind, st.Dir, plural(len(st.Runs), "run"), run.MB(st.Bytes))
		if len(st.Runs) == 0 {
			continue
		}
		w := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "  RUN\tSIZE\tLAST WRITTEN")
		for _, r := range st.Runs {
			fmt.Fprintf(w, "  %s\t%s\t%s\n", r.Run, run.MB(r.Bytes), r.Modified.Format("2006-01-02 15:04:05"))
		}
		w.Flush()
	}
	return nil
}

func cmdStoreRm(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("store rm", "asyrevel store rm [--run R] DIR\n\n"+
		"Removes a broker store, or with --run only run R's stream from it. It refuses a folder\n"+
		"that holds anything but asyrevel runs' streams. Stop the broker that serves the store\n"+
		"first. DIR may also be an --out folder of asyrevel train (its store, DIR/stream, goes).", stderr)
	runID := fs.String("run", "", "remove only this run's stream")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: store rm takes one DIR", errUsage)
	}
	st, err := run.OpenStore(pos[0])
	if err != nil {
		return err
	}
	if *runID != "" {
		var size int64
		for _, r := range st.Runs {
			if r.Run == *runID {
				size = r.Bytes
			}
		}
		if err := st.RemoveRun(*runID); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "removed run %s from %s (%s)\n", *runID, st.Dir, run.MB(size))
		return nil
	}
	if err := st.Remove(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "removed %s (%s, %s)\n", st.Dir, plural(len(st.Runs), "run"), run.MB(st.Bytes))
	return nil
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
