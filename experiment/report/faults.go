package report

import (
	"fmt"
	"math"
	"strings"
)

// faultsBody: each fault case's accuracy against the uninterrupted run,
// what the stream says was lost or duplicated, the recovery time and the
// audit, from faults.csv.
func faultsBody(g *gen) (string, error) {
	t, err := g.table("faults.csv", "case", "accuracy", "uninterrupted_accuracy", "lost", "duplicated", "recovery_seconds")
	if err != nil {
		return "", err
	}
	audit := func(i int) string {
		switch {
		case !t.boolean(i, "trust"):
			return "-"
		case t.boolean(i, "audit_ok"):
			return fmt.Sprintf("ok (%d receipts)", t.integer(i, "audit_receipts"))
		}
		return fmt.Sprintf("FAILED: %d problems", t.integer(i, "audit_problems"))
	}
	var tab [][]string
	var failed []string
	trusted := 0
	lost, dup, intact := 0, 0, 0
	var worst float64
	for i := range t.rows {
		tab = append(tab, []string{t.str(i, "case"), pct(t.num(i, "accuracy")), pct(t.num(i, "uninterrupted_accuracy")), t.str(i, "lost"), t.str(i, "duplicated"),
			f(t.num(i, "recovery_seconds"), 2), fmt.Sprintf("%s (%s)", t.str(i, "reapplied"), t.str(i, "mismatched")), t.str(i, "rejected"), audit(i),
			t.str(i, "departed"), t.str(i, "killed"), t.str(i, "paused")})
		if e := t.str(i, "error"); e != "" {
			failed = append(failed, fmt.Sprintf("- The %s case failed: %s", t.str(i, "case"), e))
		}
		if t.integer(i, "lost") > 0 {
			lost++
		}
		if t.integer(i, "duplicated") > 0 {
			dup++
		}
		if t.boolean(i, "trust") {
			trusted++
			if t.boolean(i, "audit_ok") {
				intact++
			}
		}
		if c := t.str(i, "case"); c != "none" && c != "party-gone" && t.str(i, "error") == "" {
			worst = math.Max(worst, math.Abs(t.num(i, "accuracy")-t.num(i, "uninterrupted_accuracy")))
		}
	}
	var b strings.Builder
	b.WriteString(mdTable([]string{"case", "accuracy", "uninterrupted", "lost", "duplicated", "recovery s", "re-applied (differ)", "rejected",
		"audit verify", "departed", "killed", "paused"}, tab))
	b.WriteString("\n")
	fmt.Fprintf(&b, "- Of %d cases, %d lost a message and %d applied one twice (read from the stream).\n", len(t.rows), lost, dup)
	if trusted > 0 {
		fmt.Fprintf(&b, "- The audit (`asyrevel audit verify`) found the log intact in %d of the %d cases run with the trust layer.\n", intact, trusted)
	}
	fmt.Fprintf(&b, "- Every case resumed from its checkpoints ended within %s points of the uninterrupted run's accuracy.\n", f(100*worst, 2))
	if len(failed) > 0 {
		b.WriteString("\n" + strings.Join(failed, "\n") + "\n")
	}
	b.WriteString(faultTimes(t))
	b.WriteString("\nData: `faults.csv`; the data set, parties, batch, window, steps, kill and restart times are in the settings. Each case " +
		"runs the broker, the aggregator and the parties as processes of their own. With the trust layer (the `trust` column), each case " +
		"has its own keys (asyrevel keys) and broker (--roster: only the roster's participants, each on its own subjects); every participant, " +
		"resumed ones too, signs and verifies with its --key and --roster, the parties keep their receipts, and asyrevel audit verify (the " +
		"roster and every party's receipts folder) walks the stream at the end: \"ok\" is exit 0 (the log intact), else the count of " +
		"problems; rejected counts the messages the aggregator and the parties that ended rejected. Lost and duplicated are read from the " +
		"stream (each subject's sequence numbers 1, 2, 3, ... and one reply per request); recovery is the time from the restart of the " +
		"killed process to its log line saying it resumed (data loading, checkpoint, reading the stream). A party killed for good " +
		"(party-gone) is not expected to reach the uninterrupted accuracy: its columns stay as they were. The broker case: the broker is " +
		"killed with -9 and restarted on its store and port, and nobody touches the participants: each resumes by itself from its " +
		"checkpoint and the stream once the broker is back (paused: the run stalled instead, and every participant was restarted with " +
		"--resume); its recovery time runs from the broker's restart to the aggregator's log line saying it resumed.\n")
	return b.String(), nil
}

// faultTimes is the table of the cases that resumed the aggregator: when
// the kill came, how long the process stayed down, and how long from its
// restart until the aggregator had resumed and until training went on;
// what the resume read, and the longest gap between two evaluations
// (faults.csv from this build on: "" for an older file).
func faultTimes(t *table) string {
	if !t.has("training_on_seconds") {
		return ""
	}
	var tab [][]string
	for i := range t.rows {
		on := t.num(i, "training_on_seconds")
		if on < 0 && t.str(i, "case") != "broker" {
			continue
		}
		cell := f(on, 2)
		if on < 0 {
			cell = "not said"
		}
		from := "floor"
		if t.str(i, "read_from_start") != "" {
			from = "start"
		}
		tab = append(tab, []string{t.str(i, "case"), f(t.num(i, "kill_after_seconds"), 3), f(t.num(i, "down_seconds"), 3),
			f(t.num(i, "recovery_seconds"), 2), cell, t.str(i, "resume_read"), from, t.str(i, "reapplied"),
			f(t.num(i, "max_eval_gap_seconds"), 2), f(t.num(i, "median_eval_gap_seconds"), 2)})
	}
	if len(tab) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\nHow long the recoveries took (seconds from the restart of the killed process: the broker's, for the broker case):\n\n")
	b.WriteString(mdTable([]string{"case", "killed after s", "down s", "resumed s", "training on s", "resume read", "read from",
		"re-applied", "longest eval gap s", "median eval gap s"}, tab))
	b.WriteString("\n\"Resumed\" is the aggregator's line saying it resumed, \"training on\" its line saying a request was answered live " +
		"again (not applied again from the stream); \"resume read\" the messages its last resume read from the stream, from its checkpoint's " +
		"floor or from the stream's start; the eval gaps are the longest and the median time between two points of the curve (training seconds).\n")
	return b.String()
}
