package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/run"
)

const storeUsage = `Usage:
  asyrevel store list DIR...        the runs each broker store holds and their size on disk
  asyrevel store rm [--run R] DIR   remove a store, or only run R's stream from it
  asyrevel store export --store DIR --run R --out FILE [--roster FILE] [--receipts DIR ...]
                                    one self-contained archive of a run: its stream, roster
                                    and receipts (audit verify --archive, replay --archive)
  asyrevel store prune DIR (--older-than AGE | --max-size SIZE) [--dry-run]
                                    retention: remove whole runs, oldest first, until what
                                    is left is younger or smaller; says what it keeps
  asyrevel store check DIR          reads every record of the store's files against the
                                    store's own checksums (exit 1 if any is damaged)
  asyrevel store repair DIR NEWDIR  copies DIR to NEWDIR without its damaged records; the
                                    audit of the copy shows the holes they leave

DIR is a broker store (asyrevel broker --store DIR, asyrevel train --store DIR) or an
--out folder of asyrevel train (its store is DIR/stream). A store holds each run's stream,
the run's audit log; rm refuses a folder that holds anything else. Stop the broker that
serves a store before removing from it.
`

func cmdStore(_ context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, storeUsage)
		return fmt.Errorf("%w: store needs a subcommand: list, rm, export, prune, check or repair", errUsage)
	}
	switch args[0] {
	case "list":
		return cmdStoreList(args[1:], stdout, stderr)
	case "rm":
		return cmdStoreRm(args[1:], stdout, stderr)
	case "export":
		return cmdStoreExport(args[1:], stdout, stderr)
	case "prune":
		return cmdStorePrune(args[1:], stdout, stderr)
	case "check":
		return cmdStoreCheck(args[1:], stdout, stderr)
	case "repair":
		return cmdStoreRepair(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, storeUsage)
		return nil
	}
	return fmt.Errorf("%w: unknown store subcommand %q%s: list, rm, export, prune, check or repair", errUsage, args[0], didYouMean(args[0], []string{"list", "rm", "export", "prune", "check", "repair"}))
}

// errStoreDamaged ends `store check` with exit 1 after its report.
var errStoreDamaged = errors.New("the store has damaged records; `asyrevel store repair` copies the rest")

func cmdStoreCheck(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("store check", "asyrevel store check DIR\n\n"+
		"Reads every record of every message file in the store and checks it against the\n"+
		"store's own checksum. A broker refuses to start on a damaged store; audit verify\n"+
		"and replay read it without the damaged records and report them.", stderr)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: store check needs one DIR", errUsage)
	}
	st, err := run.OpenStore(pos[0])
	if err != nil {
		return err
	}
	c, err := broker.CheckStore(st.Dir)
	if err != nil {
		return err
	}
	writeStoreCheck(stdout, st.Dir, c)
	if len(c.Damaged) > 0 {
		return errStoreDamaged
	}
	return nil
}

func writeStoreCheck(w io.Writer, dir string, c broker.StoreCheck) {
	fmt.Fprintf(w, "%s: %d message files, %d records intact, %d damaged\n", dir, c.Blocks, c.Records, len(c.Damaged))
	for _, d := range c.Damaged {
		fmt.Fprintf(w, "  damaged: %s\n", d)
	}
	for _, t := range c.TornTails {
		fmt.Fprintf(w, "  torn tail (a write cut by a crash; the broker drops it): %s\n", t)
	}
	for _, s := range c.Skipped {
		fmt.Fprintf(w, "  not checked: %s\n", s)
	}
}

func cmdStoreRepair(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("store repair", "asyrevel store repair DIR NEWDIR\n\n"+
		"Copies the store DIR to NEWDIR (which must not exist) without the records that fail\n"+
		"the store's own checksum. DIR is left as it is, as evidence. A broker started on\n"+
		"NEWDIR serves what was intact; the audit of NEWDIR shows the holes.", stderr)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return fmt.Errorf("%w: store repair needs DIR and NEWDIR", errUsage)
	}
	st, err := run.OpenStore(pos[0])
	if err != nil {
		return err
	}
	c, err := broker.ScrubStore(st.Dir, pos[1])
	if err != nil {
		return err
	}
	writeStoreCheck(stdout, st.Dir, c)
	fmt.Fprintf(stdout, "copied to %s without the %d damaged records\n", pos[1], len(c.Damaged))
	return nil
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

func cmdStoreExport(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("store export", "asyrevel store export --store DIR --run R --out FILE [--roster FILE] [--receipts DIR ...]\n\n"+
		"Writes one self-contained archive (gzip-compressed tar) of run R: its stream from the\n"+
		"store, its roster and the receipts the parties kept (--receipts once per folder: each\n"+
		"party's process keeps its own), with a manifest and a digest of\n"+
		"the whole. audit verify --archive FILE and replay --archive FILE read it offline, on\n"+
		"any machine. With --store OUT/stream (train --out OUT), the roster and receipts default\n"+
		"to OUT/keys/roster.json and OUT/receipts. Stop the broker that serves the store first.", stderr)
	store := fs.String("store", "", "the broker store (or an --out folder of train)")
	runID := fs.String("run", "", "the run to export")
	out := fs.String("out", "", "the archive file to write, e.g. run.tar.gz")
	roster := fs.String("roster", "", "the run's roster.json (default OUT/keys/roster.json)")
	var receipts stringList
	fs.Var(&receipts, "receipts", "a folder of receipts kept by a party (`DIR`; repeatable: every folder goes into the\narchive; default OUT/receipts)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 || *store == "" || *runID == "" || *out == "" {
		return fmt.Errorf("%w: store export needs --store DIR, --run R and --out FILE", errUsage)
	}
	st, err := run.OpenStore(*store)
	if err != nil {
		return err
	}
	base := filepath.Dir(filepath.Clean(st.Dir))
	if *roster == "" {
		if p := filepath.Join(base, "keys", "roster.json"); fileExists(p) {
			*roster = p
		}
	}
	if len(receipts) == 0 {
		if p := filepath.Join(base, "receipts"); fileExists(p) {
			receipts = append(receipts, p)
		}
	}
	for _, d := range receipts {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			return fmt.Errorf("--receipts %s: not a folder of receipts (%v)", d, err)
		}
	}
	man, err := run.ExportRun(st.Dir, *runID, *roster, receipts, *out)
	if err != nil {
		return err
	}
	fi, _ := os.Stat(*out)
	fmt.Fprintf(stdout, "run %s: %d files (stream %s", man.Run, man.Files, run.MB(man.Bytes))
	if man.Roster {
		fmt.Fprint(stdout, ", roster")
	}
	fmt.Fprintf(stdout, ", %d receipts) into %s, %s; sha256 %s\n", man.Receipts, *out, run.MB(fi.Size()), man.SHA256)
	if !man.Roster {
		fmt.Fprintln(stdout, "note: no roster in the archive: audit verify --archive will need --roster")
	}
	return nil
}

func cmdStorePrune(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("store prune", "asyrevel store prune DIR (--older-than AGE | --max-size SIZE) [--dry-run]\n\n"+
		"Retention for a broker store: removes whole runs (never single messages: a run's log is\n"+
		"whole or gone), oldest first, until every run left is younger than --older-than and all\n"+
		"of them together fit in --max-size. It says which runs it removes and which it keeps.\n"+
		"Export a run first (store export) to keep its archive. Stop the broker first.", stderr)
	older := fs.Duration("older-than", 0, "remove the runs last written longer ago than this (e.g. 720h)")
	var maxSize sizeFlag
	fs.Var(&maxSize, "max-size", "remove the oldest runs until the rest fit in this size (e.g. 100GB)")
	dry := fs.Bool("dry-run", false, "only say what would be removed")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || (*older <= 0 && maxSize <= 0) {
		return fmt.Errorf("%w: store prune needs one DIR and --older-than AGE or --max-size SIZE", errUsage)
	}
	st, err := run.OpenStore(pos[0])
	if err != nil {
		return err
	}
	var total int64
	for _, r := range st.Runs {
		total += r.Bytes
	}
	now := time.Now()
	var removed []run.StoreRun
	for _, r := range st.Runs { // oldest first
		if (*older > 0 && now.Sub(r.Modified) > *older) || (maxSize > 0 && total > int64(maxSize)) {
			removed = append(removed, r)
			total -= r.Bytes
		}
	}
	verb := "removed"
	if *dry {
		verb = "would remove"
	}
	for _, r := range removed {
		if !*dry {
			if err := st.RemoveRun(r.Run); err != nil {
				return err
			}
		}
		fmt.Fprintf(stdout, "%s run %s (%s, last written %s)\n", verb, r.Run, run.MB(r.Bytes), r.Modified.Format("2006-01-02 15:04"))
	}
	fmt.Fprintf(stdout, "kept %s, %s", plural(len(st.Runs)-len(removed), "run"), run.MB(total))
	if len(st.Runs) > len(removed) {
		fmt.Fprintf(stdout, ", the oldest last written %s", st.Runs[len(removed)].Modified.Format("2006-01-02 15:04"))
	}
	fmt.Fprintln(stdout)
	return nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
