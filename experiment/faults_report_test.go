package experiment

import (
	"math"
	"strings"
	"testing"
	"time"
)

// The faults table (what the command prints) gives every case with its
// audit verdict, and the failure of a failed case after the table.
func TestFaultsTable(t *testing.T) {
	rows := []FaultRow{
		{Case: "aggregator-kill", Accuracy: 0.84, Uninterrupted: 0.845, Trust: true, AuditOK: true, AuditReceipts: 12},
		{Case: "party-kill", Accuracy: 0.83, Uninterrupted: 0.845, Trust: true, AuditProblems: 3, Err: "lost 2 messages"},
		{Case: "broker", Accuracy: 0.84, Uninterrupted: 0.845},
	}
	got := FaultsTable(rows)
	for _, want := range []string{"| aggregator-kill", "ok (12 receipts)", "not run", "| -", "84.00%", "\nThe party-kill case failed: lost 2 messages\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("the table lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "The broker case failed") {
		t.Errorf("a case without an error is said to have failed:\n%s", got)
	}
	// The record: the settings that faults.csv does not hold.
	for _, noTrust := range []bool{false, true} {
		sec := FaultsSection(FaultConfig{Data: "a9a.gz", Parties: 4, Batch: 64, Window: 8, Steps: 100, NoTrust: noTrust}, got, "asyrevel experiment faults", time.Now())
		settings := strings.Join(sec.Settings, "\n")
		if sec.Name != "faults" || strings.Contains(settings, "--no-trust: no keys") != noTrust || !strings.Contains(settings, "data a9a.gz, 4 parties, batch 64") {
			t.Errorf("no-trust %v: section %+v", noTrust, sec)
		}
	}
}

// The first point of a curve at or after a time: how long after it came,
// -1 if none did.
func TestFirstPointAfter(t *testing.T) {
	ts := []float64{0, 0.6, 2.015, 16.963, 17.5}
	for _, tc := range []struct{ at, want float64 }{
		{8.12, 16.963 - 8.12},
		{2.015, 0},
		{0, 0},
		{18, -1},
	} {
		if got := firstPointAfter(ts, tc.at); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("firstPointAfter(%v) = %v, want %v", tc.at, got, tc.want)
		}
	}
}
