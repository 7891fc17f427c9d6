package experiment

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"
)

// FaultsTable is the faults experiment's table, in Markdown, followed by
// the failure of every case that failed: what the command prints and the
// report's section begins with.
func FaultsTable(rows []FaultRow) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "| case\t| accuracy\t| uninterrupted\t| lost\t| duplicated\t| recovery s\t| re-applied (differ)\t| rejected\t| audit verify\t| departed\t| killed\t| paused\t|")
	fmt.Fprintln(tw, "|---\t|---\t|---\t|---\t|---\t|---\t|---\t|---\t|---\t|---\t|---\t|---\t|")
	for _, r := range rows {
		fmt.Fprintf(tw, "| %s\t| %.2f%%\t| %.2f%%\t| %d\t| %d\t| %.2f\t| %d (%d)\t| %d\t| %s\t| %d\t| %v\t| %v\t|\n", r.Case, 100*r.Accuracy, 100*r.Uninterrupted,
			r.Lost, r.Duplicated, r.RecoverySeconds, r.Reapplied, r.Mismatched, r.Rejected, auditVerdict(r), r.Departed, r.Killed, r.Paused)
	}
	tw.Flush()
	for _, r := range rows {
		if r.Err != "" {
			fmt.Fprintf(&b, "\nThe %s case failed: %s\n", r.Case, r.Err)
		}
	}
	return b.String()
}

// FaultsSection is the report's section of a faults experiment of cfg
// whose table is table.
func FaultsSection(cfg FaultConfig, table, command string, started time.Time) Section {
	trustNote := "The trust layer is on (the default): each case has its own keys (asyrevel keys) and broker (--roster: only the roster's participants, each on its own subjects); " +
		"every participant, resumed ones too, signs and verifies with its --key and --roster, the parties keep their receipts, and asyrevel audit verify " +
		"(the roster and every party's receipts folder) walks the stream at the end: \"ok\" is exit 0 (the log intact), else the count of problems; " +
		"rejected counts the messages the aggregator and the parties that ended rejected. "
	if cfg.NoTrust {
		trustNote = "Run with --no-trust: no keys, a broker that admits anyone, nothing signed or audited. "
	}
	body := table + fmt.Sprintf("\nData %s, %d parties, batch %d, window %d, %d steps a run; the kill %v after training starts, the restart %v later; "+
		"checkpoints every 250 ms. "+trustNote+"Lost and duplicated are read from the stream (each subject's sequence numbers 1, 2, 3, ... and one reply per request); "+
		"recovery is the time from the restart of the killed process to its log line saying it resumed (data loading, checkpoint, reading the stream). "+
		"A party killed for good is not expected to reach the uninterrupted accuracy: its columns stay as they were. "+
		"The broker case: the broker is killed with -9 and restarted on its store and port, and nobody touches the participants: "+
		"each resumes by itself from its checkpoint and the stream once the broker is back (paused: the run stalled instead, and every participant "+
		"was restarted with --resume); its recovery time runs from the broker's restart to the aggregator's log line saying it resumed.\n",
		cfg.Data, cfg.Parties, cfg.Batch, cfg.Window, cfg.Steps, cfg.KillAfter, cfg.Down)
	return Section{Name: "faults", Title: "Faults: kill -9 and SIGTERM of the aggregator and a party, resumed from checkpoints",
		Command: command, Machine: Machine(), Started: started, Duration: time.Since(started), Body: body}
}

// auditVerdict is a fault row's audit verify column.
func auditVerdict(r FaultRow) string {
	switch {
	case !r.Trust:
		return "-"
	case r.AuditOK:
		return fmt.Sprintf("ok (%d receipts)", r.AuditReceipts)
	case r.Audit == nil:
		return "not run"
	}
	return fmt.Sprintf("FAILED: %d problems", r.AuditProblems)
}
