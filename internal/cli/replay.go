package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/asyrevel/asyrevel/replay"
	"github.com/asyrevel/asyrevel/run"
	"github.com/asyrevel/asyrevel/trust"
)

// logFlags are the flags that name a run's log.
type logFlags struct {
	store, nats, run string
	key, as          string
	archive          string
	done             func() // removes an unpacked archive
}

// unpack unpacks --archive, if given, and reads it as a store: its
// stream, roster and receipts sit as an --out folder's do. Call close
// when done.
func (f *logFlags) unpack() error {
	if f.archive == "" || f.done != nil {
		return nil
	}
	if f.store != "" || f.nats != "" {
		return fmt.Errorf("%w: --archive is the log: give no --store or --nats with it", errUsage)
	}
	dir, man, done, err := run.OpenArchive(f.archive)
	if err != nil {
		return fmt.Errorf("--archive: %w", err)
	}
	if f.run == "" {
		f.run = man.Run
	}
	if f.run != man.Run {
		done()
		return fmt.Errorf("%w: --archive holds run %s, not %s", errUsage, man.Run, f.run)
	}
	f.store, f.done = filepath.Join(dir, "stream"), done
	return nil
}

// fromSummary fills in, from the summary.json of a train --out folder,
// what the command line left out: the run id, and the store beside the
// summary (OUT/stream) when no source was given. So `replay --reexecute
// --summary OUT/summary.json` needs nothing else.
func (f *logFlags) fromSummary(path string) {
	if path == "" || f.archive != "" {
		return
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return // --summary's own reading says why
	}
	var s struct {
		Run string `json:"run"`
	}
	if json.Unmarshal(raw, &s) != nil {
		return
	}
	if f.run == "" {
		f.run = s.Run
	}
	if f.store == "" && f.nats == "" {
		if st := filepath.Join(filepath.Dir(path), "stream"); isDir(st) {
			f.store = st
		}
	}
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

func (f *logFlags) close() {
	if f.done != nil {
		f.done()
	}
}

func addLogFlags(fs *flag.FlagSet) *logFlags {
	f := &logFlags{}
	fs.StringVar(&f.store, "store", "", "store folder of a stopped run (train --store DIR, or OUT/stream of train --out OUT)")
	fs.StringVar(&f.nats, "nats", "", "URL of a NATS server holding the run's stream (a live or standalone broker)")
	fs.StringVar(&f.run, "run", "", "run id (the stream ASYREVEL_<run>)")
	fs.StringVar(&f.key, "key", "", "with --nats: read as the roster's auditor whose key `FILE` this is (asyrevel keys\n--auditor): a broker that admits only the roster lets an auditor read the stream\nmessage by message, and nothing else")
	fs.StringVar(&f.as, "as-auditor", trust.AuditorID, "with --key: the auditor's id in the roster")
	fs.StringVar(&f.archive, "archive", "", "a run's archive `FILE` (asyrevel store export): its stream, roster and receipts,\nread offline")
	return f
}

func (f *logFlags) open(ctx context.Context) (*replay.Log, error) {
	if err := f.unpack(); err != nil {
		return nil, err
	}
	if (f.store == "") == (f.nats == "") || f.run == "" {
		return nil, fmt.Errorf("%w: give --run R and one of --store DIR and --nats URL", errUsage)
	}
	src := replay.Source{Store: f.store, URL: f.nats, Run: f.run}
	if f.key != "" {
		if f.nats == "" {
			return nil, fmt.Errorf("%w: --key is for reading a live broker (--nats URL); a store folder needs no key", errUsage)
		}
		k, err := trust.ReadKeyFile(f.key)
		if err != nil {
			return nil, fmt.Errorf("--key: %w", err)
		}
		if !trust.IsAuditorID(f.as) {
			return nil, fmt.Errorf("%w: --as-auditor %q: want auditor or auditor-NAME", errUsage, f.as)
		}
		src.Options = append(src.Options, k.NATSOption(), nats.CustomInboxPrefix(trust.InboxPrefix(f.run, f.as)))
		src.Direct = true
	}
	return replay.Open(ctx, src)
}

func cmdReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("replay", "asyrevel replay (--store DIR | --nats URL) --run R [--from SEQ | --since TIME] [--party M] --out DIR\n"+
		"       asyrevel replay ... --reexecute [--data PATH] [--summary FILE]\n\n"+
		"Reads a run's log in stream order and writes, into --out, one transcript per party\n"+
		"(party-M.csv: stream_seq, time, kind, sender, seq, req_seq, sample_ids, values,\n"+
		"staleness: what that party sent and received) and summary.json. A store folder is\n"+
		"opened read-only in spirit: an embedded server is started on it in this process; a\n"+
		"store that a live broker holds is refused (read it through that broker: --nats).\n\n"+
		"--reexecute feeds the recorded party messages, in log order, to a fresh aggregator\n"+
		"built from the run's settings (summary.json of the run) and the aggregator's labels\n"+
		"(--data), and checks that it computes every recorded reply exactly.", stderr)
	lf := addLogFlags(fs)
	from := fs.Uint64("from", 0, "first stream sequence to read")
	since := fs.String("since", "", "read from this time (RFC 3339, e.g. 2026-01-02T15:04:05Z, or a duration\nbefore the end of the log, e.g. 30s)")
	partyID := fs.Int("party", 0, "only what party M sent and received")
	out := fs.String("out", "", "output folder for the transcripts and summary.json")
	evalValues := fs.Bool("eval-values", false, "write the outputs of evaluation messages too (large)")
	re := addReexecFlags(fs)
	if err := fs.Parse(args); err != nil {
		return usageErr(err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if *out == "" && !re.on {
		return fmt.Errorf("%w: replay needs --out DIR (or --reexecute)", errUsage)
	}
	lf.fromSummary(re.summary)
	l, err := lf.open(ctx)
	defer lf.close()
	if err != nil {
		return err
	}
	defer l.Close()
	info := l.Info()
	fmt.Fprintf(stdout, "run %s: %d messages (stream sequences %d..%d, %s to %s)\n", info.Run, info.Messages,
		info.FirstSeq, info.LastSeq, info.First.Format(time.RFC3339), info.Last.Format(time.RFC3339))
	if re.on {
		return re.run(ctx, l, stdout, stderr)
	}
	opts := replay.ReadOptions{From: *from, Party: *partyID}
	if *since != "" {
		if d, err := time.ParseDuration(*since); err == nil {
			opts.Since = info.Last.Add(-d)
		} else if t, err := time.Parse(time.RFC3339Nano, *since); err == nil {
			opts.Since = t
		} else {
			return fmt.Errorf("%w: --since %q: want an RFC 3339 time or a duration", errUsage, *since)
		}
	}
	t0 := time.Now()
	s, err := replay.WriteTranscripts(ctx, l, opts, replay.TranscriptOptions{Dir: *out, EvalValues: *evalValues,
		ProgressEvery: 500000, Progress: func(n uint64) {
			fmt.Fprintf(stderr, "%d messages read (%.0f/s)\n", n, float64(n)/time.Since(t0).Seconds())
		}})
	if err != nil {
		if errors.Is(err, replay.ErrSource) {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		return err
	}
	fmt.Fprintf(stdout, "read %d messages in %.2f s (%.0f/s)", s.Records, s.ReadSeconds, s.RecordsPerS)
	if len(s.Undecodable) > 0 {
		fmt.Fprintf(stdout, "; undecodable: %v", s.Undecodable)
	}
	fmt.Fprintln(stdout)
	for _, p := range s.Parties {
		fmt.Fprintf(stdout, "party %d: %d requests, %d replies (%s), %d samples covered, max staleness %d -> %s\n",
			p.Party, p.Requests, p.Replies, p.ReplyFormat, p.SamplesCovered, p.MaxStaleness,
			strings.TrimSuffix(*out, "/")+"/party-"+strconv.Itoa(p.Party)+".csv")
	}
	fmt.Fprintf(stdout, "summary: %s/summary.json\n", strings.TrimSuffix(*out, "/"))
	return nil
}
