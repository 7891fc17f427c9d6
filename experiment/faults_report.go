package experiment

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"
)

// FaultsTable is the faults experiment's table, in Markdown, followed by
// the failure of every case that failed: what the command prints (the
// report writes its own from faults.csv).
func FaultsTable(rows []FaultRow) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "| case\t| accuracy\t| uninterrupted\t| lost\t| duplicated\t| recovery s\t| re-applied (differ)\t| rejected\t| audit verify\t| departed\t| killed\t| paused\t|")
	fmt.Fprintln(tw, "|---\t|---\t|---\t|---\t|---\t|---\t|---\t|---\t|---\t|---\t|---\t|---\t|")
	for _, r := range rows {
		fmt.Fprintf(tw, "| %s\t| %.2f%%\t| %.2f%%\t| %d\t| %d\t| %.2f\t| %d (%d)\t| %d\t| %s\t| %d\t| %v\t| %v\t|\n", r.Case, 100*r.Accuracy, 100*r.Uninterrupted,
			r.Lost, r.Duplicated, r.RecoverySeconds, r.Reapplied, r.Mismatched, r.Rejected, auditVerdict(r), r.Departed, r.Killed, r.Paused)
	}
	var timed []FaultRow
	for _, r := range rows {
		if r.TrainingOnSeconds >= 0 || r.Case == FaultBroker {
			timed = append(timed, r)
		}
	}
	if len(timed) > 0 {
		fmt.Fprintln(tw, "\n| case\t| killed after s\t| down s\t| resumed s\t| training on s\t| resume read\t| from the start\t| re-applied\t| longest eval gap s\t|")
		fmt.Fprintln(tw, "|---\t|---\t|---\t|---\t|---\t|---\t|---\t|---\t|---\t|")
		for _, r := range timed {
			fmt.Fprintf(tw, "| %s\t| %.3g\t| %.3g\t| %.2f\t| %.2f\t| %d\t| %v\t| %d\t| %.2f\t|\n", r.Case, r.KillAfter.Seconds(), r.Down.Seconds(),
				r.RecoverySeconds, r.TrainingOnSeconds, r.ResumeRead, r.FromStart != "", r.Reapplied, r.EvalGap)
		}
	}
	tw.Flush()
	for _, r := range rows {
		if r.Err != "" {
			fmt.Fprintf(&b, "\nThe %s case failed: %s\n", r.Case, r.Err)
		}
	}
	return b.String()
}

// FaultsSection is the record of a faults experiment of cfg that started
// at started (table is what the command printed: the report makes its own
// from faults.csv).
func FaultsSection(cfg FaultConfig, table, command string, started time.Time) Section {
	trust := "the trust layer on: each case with its own keys, a broker admitting only the roster, receipts kept and audit verify at the end"
	if cfg.NoTrust {
		trust = "--no-trust: no keys, a broker that admits anyone, nothing signed or audited"
	}
	return Section{Name: "faults", Command: command, Started: started, Duration: time.Since(started),
		Settings: []string{
			fmt.Sprintf("data %s, %d parties, batch %d, window %d, %d steps a run", cfg.Data, cfg.Parties, cfg.Batch, cfg.Window, cfg.Steps),
			fmt.Sprintf("the kill %v after training starts, the restart %v later; checkpoints %s", cfg.KillAfter, cfg.Down, cfg.checkpointText()),
			trust,
		}}
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
