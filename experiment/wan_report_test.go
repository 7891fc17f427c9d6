package experiment

import (
	"math"
	"strings"
	"testing"
	"time"
)

// The WAN table gives each run and, per number of parties, the speed-up,
// a lower bound when SynREVEL never reached the target, or that AsyREVEL
// did not.
func TestWANTable(t *testing.T) {
	nan := math.NaN()
	rows := []WANRow{
		{Parties: 2, Algo: "asyrevel-gau", Seed: 1, Seconds: 10, Steps: 100, Accuracy: 0.845},
		{Parties: 2, Algo: "synrevel-gau", Seed: 1, Seconds: 25, Steps: 90, Accuracy: 0.841},
		{Parties: 4, Algo: "asyrevel-gau", Seed: 1, Seconds: 20, Steps: 100, Accuracy: 0.842},
		{Parties: 4, Algo: "synrevel-gau", Seed: 1, Seconds: nan, Steps: 50, Accuracy: 0.80},
		{Parties: 8, Algo: "asyrevel-gau", Seed: 1, Seconds: nan, Steps: 50, Accuracy: 0.70},
		{Parties: 8, Algo: "synrevel-gau", Seed: 1, Seconds: nan, Steps: 40, Accuracy: 0.70},
	}
	got := WANTable(rows, 30*time.Second)
	for _, want := range []string{
		"| 2 ", "| 10.00 ", "| 25.00 ", "not within 30s", "84.50%",
		"q = 2: 2.50x;",
		"q = 4: more than 1.5x (SynREVEL did not reach it within 30s);",
		"q = 8: AsyREVEL did not reach it;",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the table lacks %q:\n%s", want, got)
		}
	}
	cfg := WANConfig{Set: Set{Name: "a9a"}, Batch: 64, Window: 8, Target: 0.84, Budget: 30 * time.Second}
	sec := WANSection(cfg, got, "asyrevel experiment wan --quick", time.Now())
	if sec.Name != "wan" || !strings.HasPrefix(sec.Body, got) || !strings.Contains(sec.Body, "Data a9a; batch 64, AsyREVEL's window 8") || sec.Command != "asyrevel experiment wan --quick" {
		t.Errorf("section %+v", sec)
	}
}
