package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/asyrevel/asyrevel/audit"
	"github.com/asyrevel/asyrevel/replay"
	"github.com/asyrevel/asyrevel/trust"
)

const auditUsage = `asyrevel audit verify (--store DIR | --nats URL [--key auditor.nk] | --archive FILE) --run R [--roster FILE] [--receipts DIR ...] [--json]

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
OUT/keys/roster.json and --receipts to OUT/receipts. A broker that admits
only the run's keys (asyrevel broker --roster, or a stock server configured
with asyrevel keys server-config) is read as the run's auditor: --key
auditor.nk, made by asyrevel keys --run R --parties Q --auditor.
`

// explainBrokerRefusal names the fix when a broker refuses the reader: a
// broker that admits only the run's keys takes the auditor's key, or
// refuses one that is not the roster's auditor.
func explainBrokerRefusal(err error, lf *logFlags) error {
	msg := strings.ToLower(err.Error())
	if lf.nats == "" || !strings.Contains(msg, "authorization violation") && !strings.Contains(msg, "permissions violation") {
		return err
	}
	if lf.key == "" {
		return fmt.Errorf("%w\nthe broker at %s admits only the run's keys: read the log as the run's auditor with --key auditor.nk\n"+
			"(asyrevel keys --run R --parties Q --auditor makes one and lists it in the roster; the broker must run with that roster)", err, lf.nats)
	}
	return fmt.Errorf("%w\nthe broker at %s refused the key %s: give the roster's auditor key (--as-auditor %s; asyrevel keys --auditor makes\n"+
		"one), and check that the broker runs with the roster that lists it", err, lf.nats, lf.key, lf.as)
}

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
		rs, err := audit.ReadReceiptTree(dir)
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
		return explainBrokerRefusal(err, lf)
	}
	defer log.Close()
	rep, err := audit.Check(ctx, func(f func(*replay.Record)) error { return audit.Each(ctx, log, f) }, roster, receipts, log.Damage()...)
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
