package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/asyrevel/asyrevel/broker"
	"github.com/asyrevel/asyrevel/replay"
	"github.com/asyrevel/asyrevel/schemas"
	"github.com/asyrevel/asyrevel/serve"
	"github.com/asyrevel/asyrevel/trust"
)

const auditUsage = `asyrevel audit verify (--store DIR | --nats URL) --run R [--roster FILE] [--receipts DIR ...] [--json]

Walks a run's whole log and checks every message's chain and signatures
against the run's roster (the participants' public keys), the signed
checkpoints the aggregator left in the log, the receipts the parties
countersigned in the log, and every receipt folder given (the copies the
parties kept outside the broker: a log cut or rewritten after them is
caught even against whoever runs the broker). It prints the messages by
sender and kind, the checkpoints and receipts verified, and every problem
with its stream sequence: bad signature, a message signed with another
participant's key, broken chain, gap, reordering, replay, truncation
against a receipt, unsigned tail. Exit status 0 only when the log is
complete and intact, 1 otherwise.

With --store OUT/stream of 'asyrevel train --out OUT', --roster defaults to
OUT/keys/roster.json and --receipts to OUT/receipts.
`

// errNotIntact is returned after the report of a log that is not intact.
var errNotIntact = errors.New("the log is not intact")

func cmdAudit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, "Usage: "+auditUsage)
		return fmt.Errorf("%w: audit needs a subcommand: verify", errUsage)
	}
	switch args[0] {
	case "verify":
		return cmdAuditVerify(ctx, args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, "Usage: "+auditUsage)
		return nil
	}
	return fmt.Errorf("%w: unknown audit subcommand %q%s: verify", errUsage, args[0], didYouMean(args[0], []string{"verify"}))
}

// stringList is a repeatable flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

func cmdAuditVerify(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("audit verify", auditUsage, stderr)
	lf := addLogFlags(fs)
	rosterFile := fs.String("roster", "", "the run's roster.json (`FILE`; default OUT/keys/roster.json next to --store OUT/stream)")
	var receiptDirs stringList
	fs.Var(&receiptDirs, "receipts", "a folder of receipts kept by a party (`DIR`; repeatable; a folder of such\nfolders too, as OUT/receipts; default OUT/receipts next to --store OUT/stream)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := fs.Parse(args); err != nil {
		return usageErr(err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	out := ""
	if err := lf.unpack(); err != nil {
		return err
	}
	defer lf.close()
	if lf.store != "" && filepath.Base(filepath.Clean(lf.store)) == "stream" {
		out = filepath.Dir(filepath.Clean(lf.store))
	}
	if *rosterFile == "" && out != "" {
		*rosterFile = filepath.Join(out, "keys", "roster.json")
	}
	if *rosterFile == "" {
		return fmt.Errorf("%w: audit verify needs the run's --roster FILE", errUsage)
	}
	roster, err := trust.ReadRoster(*rosterFile)
	if err != nil {
		return err
	}
	if lf.run == "" {
		lf.run = roster.Run
	}
	if roster.Run != lf.run {
		return fmt.Errorf("%w: the roster is run %s's, not %s's", errUsage, roster.Run, lf.run)
	}
	if len(receiptDirs) == 0 && out != "" {
		if _, err := os.Stat(filepath.Join(out, "receipts")); err == nil {
			receiptDirs = append(receiptDirs, filepath.Join(out, "receipts"))
		}
	}
	var receipts []*trust.Receipt
	others := 0
	for _, dir := range receiptDirs {
		rs, err := readReceiptTree(dir)
		if err != nil {
			return err
		}
		// A folder may keep the receipts of several runs (a second run
		// into the same --out): only this run's are evidence here.
		for _, rc := range rs {
			if rc.Checkpoint.Run != roster.Run {
				others++
				continue
			}
			receipts = append(receipts, rc)
		}
	}
	if others > 0 {
		fmt.Fprintf(stderr, "%d receipts of other runs in the receipts folders: not this run's evidence, left aside\n", others)
	}
	log, err := lf.open(ctx)
	if err != nil {
		return err
	}
	defer log.Close()
	rep, err := auditLog(ctx, func(f func(*replay.Record)) error { return eachRecord(ctx, log, f) }, roster, receipts, log.Damage()...)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(stdout, "roster %s; %d receipts from %d folders\n", *rosterFile, len(receipts), len(receiptDirs))
		if err := rep.WriteText(stdout); err != nil {
			return err
		}
	}
	if !rep.Intact() {
		return errNotIntact
	}
	return nil
}

// readReceiptTree reads the receipts of dir and of its subfolders (one
// level: OUT/receipts/party-m).
func readReceiptTree(dir string) ([]*trust.Receipt, error) {
	rs, err := trust.ReadReceipts(dir)
	if err != nil {
		return nil, fmt.Errorf("--receipts %s: %w", dir, err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		if e.IsDir() {
			sub, err := trust.ReadReceipts(filepath.Join(dir, e.Name()))
			if err != nil {
				return nil, fmt.Errorf("--receipts %s: %w", filepath.Join(dir, e.Name()), err)
			}
			rs = append(rs, sub...)
		}
	}
	return rs, nil
}

// auditLog checks log against the roster: a first pass collects the
// checkpoints (seal controls) and receipts the log holds, a second gives
// the auditor every message in stream order.
func auditLog(ctx context.Context, each func(func(*replay.Record)) error, roster *trust.Roster, receipts []*trust.Receipt, damage ...broker.DamagedRecord) (*trust.AuditReport, error) {
	// As the receivers judged: a rogue's refused messages are listed, not
	// held against the log.
	a, err := trust.NewAuditor(roster, trust.AuditOptions{AsReceiver: true, AnchorReceipts: true})
	if err != nil {
		return nil, err
	}
	for i, rc := range receipts {
		// A receipt that does not verify is reported by the auditor.
		_ = a.AddReceipt(rc, fmt.Sprintf("receipt file %d (%s, checkpoint %d)", i+1, rc.Party, rc.Checkpoint.Number))
	}
	var evidence []func()
	err = each(func(rec *replay.Record) {
		if c := rec.Control(); c != nil && c.Op == schemas.CtlSeal {
			if cp, err := trust.DecodeCheckpointHeader(headerValue(rec, trust.CheckpointHeader)); err == nil {
				src := fmt.Sprintf("checkpoint %d in the log (stream seq %d)", cp.Number, rec.Seq)
				evidence = append(evidence, func() { _ = a.AddLogCheckpoint(cp, src) })
			}
		}
		if roster.SubjectKind(rec.Subject) == "rcpt" {
			if _, rc, err := trust.ParseReceiptMessage(rec.Data); err == nil {
				src := fmt.Sprintf("receipt of %s in the log (stream seq %d)", rc.Party, rec.Seq)
				evidence = append(evidence, func() { _ = a.AddLogReceipt(rc, src) })
			}
		}
	})
	if err != nil {
		return nil, err
	}
	for _, f := range evidence {
		f()
	}
	err = each(func(rec *replay.Record) {
		m := trust.Msg{StreamSeq: rec.Seq, Subject: rec.Subject, Payload: rec.Data,
			Sig: headerValue(rec, trust.SigHeader), Prev: headerValue(rec, trust.PrevHeader)}
		switch {
		case rec.Msg != nil:
			m.Seq = rec.Msg.Head().Seq
			// Causal links: a reply names the request it answers.
			if rec.Kind == schemas.KindOutput {
				m.ID = schemas.RequestDigest(nil, rec.Data)
			} else if r := rec.Reply(); r != nil && len(r.Cause) > 0 {
				m.Cites = r.Cause
			}
		case roster.SubjectKind(rec.Subject) == "rcpt":
			m.Seq, _, _ = trust.ParseReceiptMessage(rec.Data)
		case roster.SubjectKind(rec.Subject) == schemas.AlignToken || roster.SubjectKind(rec.Subject) == schemas.AlignHubToken:
			m.Seq = schemas.AlignSeqHead(rec.Data) // private entity alignment
		case roster.SubjectKind(rec.Subject) == trust.ScoreToken || roster.SubjectKind(rec.Subject) == trust.ScoredToken:
			m.Seq = serve.SeqOf(rec.Data) // scoring with the saved models
		}
		a.Add(&m)
	})
	if err != nil {
		return nil, err
	}
	for _, d := range damage {
		a.AddStoreDamage(d.String() + "; the record was left out of what was read")
	}
	return a.Finish(), nil
}

// eachRecord calls f for every record of the log, in stream order.
func eachRecord(ctx context.Context, log *replay.Log, f func(*replay.Record)) error {
	rd, err := log.Read(ctx, replay.ReadOptions{})
	if err != nil {
		return err
	}
	defer rd.Close()
	for {
		rec, err := rd.Next(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		f(rec)
	}
}

func headerValue(rec *replay.Record, key string) string {
	if v := rec.Header[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}
