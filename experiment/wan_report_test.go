package experiment

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The WAN table gives each run with its window and batch and, per
// number of parties, each factor apart: asynchrony alone (both window 1),
// pipelining alone, both, and SynREVEL with the samples of the window in
// one request; a lower bound when the slower never reached the target, or
// that the faster did not.
func TestWANTable(t *testing.T) {
	nan := math.NaN()
	rows := []WANRow{
		{Parties: 2, Algo: "asyrevel-gau", Window: 8, Batch: 64, Seed: 1, Seconds: 10, Steps: 100, Accuracy: 0.845},
		{Parties: 2, Algo: "asyrevel-gau", Window: 1, Batch: 64, Seed: 1, Seconds: 15, Steps: 100, Accuracy: 0.845},
		{Parties: 2, Algo: "synrevel-gau", Window: 1, Batch: 64, Seed: 1, Seconds: 25, Steps: 90, Accuracy: 0.841},
		{Parties: 2, Algo: "synrevel-gau", Window: 1, Batch: 512, Seed: 1, Seconds: 20, Steps: 90, Accuracy: 0.841},
		{Parties: 4, Algo: "asyrevel-gau", Window: 8, Batch: 64, Seed: 1, Seconds: 20, Steps: 100, Accuracy: 0.842},
		{Parties: 4, Algo: "asyrevel-gau", Window: 1, Batch: 64, Seed: 1, Seconds: nan, Steps: 100, Accuracy: 0.83},
		{Parties: 4, Algo: "synrevel-gau", Window: 1, Batch: 64, Seed: 1, Seconds: nan, Steps: 50, Accuracy: 0.80},
		{Parties: 4, Algo: "synrevel-gau", Window: 1, Batch: 512, Seed: 1, Seconds: nan, Steps: 50, Accuracy: 0.80},
	}
	got := WANTable(rows, 30*time.Second)
	for _, want := range []string{
		"| window", "| batch", "| 2 ", "| 10.00 ", "| 25.00 ", "| 512 ", "not within 30s", "84.50%",
		"- asynchrony alone (SynREVEL over AsyREVEL, both window 1: the paper's comparison): q = 2: 1.67x; q = 4: asyrevel-gau window 1 batch 64 did not reach it;",
		"- pipelining alone (AsyREVEL window 1 over window 8): q = 2: 1.50x; q = 4: more than 1.5x (asyrevel-gau window 1 batch 64 did not reach it within 30s);",
		"- asynchrony and pipelining (SynREVEL window 1 over AsyREVEL window 8): q = 2: 2.50x; q = 4: more than 1.5x",
		"- the same samples in flight (SynREVEL batch 512 over AsyREVEL window 8, batch 64): q = 2: 2.00x;",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the table lacks %q:\n%s", want, got)
		}
	}
	// Without the window-1 and same-samples arms, only the factors measured.
	got = WANTable([]WANRow{rows[0], rows[2]}, 30*time.Second)
	if !strings.Contains(got, "- asynchrony and pipelining") || strings.Contains(got, "alone") || strings.Contains(got, "same samples") {
		t.Errorf("with two arms:\n%s", got)
	}
	cfg := WANConfig{Set: Set{Name: "a9a"}, Batch: 64, Window: 8, Target: 0.84, Budget: 30 * time.Second}
	sec := WANSection(cfg, got, "asyrevel experiment wan --quick", time.Now())
	if sec.Name != "wan" || !strings.HasPrefix(sec.Body, got) || !strings.Contains(sec.Body, "AsyREVEL at window 1 (the paper's algorithm) and at window 8") ||
		!strings.Contains(sec.Body, "with batch 512") || sec.Command != "asyrevel experiment wan --quick" {
		t.Errorf("section %+v", sec)
	}
}

// The default arms separate asynchrony from pipelining; with window 1
// there is nothing to separate.
func TestWANArms(t *testing.T) {
	got := WANArms(8, 64)
	want := []WANArm{{"asyrevel-gau", 8, 64}, {"asyrevel-gau", 1, 64}, {"synrevel-gau", 1, 64}, {"synrevel-gau", 1, 512}}
	if len(got) != len(want) {
		t.Fatalf("arms %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("arm %d: %v, want %v", i, got[i], want[i])
		}
	}
	if got := WANArms(1, 64); len(got) != 2 {
		t.Errorf("window 1: arms %v, want AsyREVEL and SynREVEL", got)
	}
}

// wan.csv says what each row measured: window, pipelined, batch and the
// samples in flight beside the algorithm.
func TestWriteWANColumns(t *testing.T) {
	dir := t.TempDir()
	rows := []WANRow{{Parties: 2, Algo: "asyrevel-gau", Window: 8, Batch: 64, Seed: 1, Link: "10ms each way", Seconds: 1.5, Steps: 10, Accuracy: 0.84, Wall: 3},
		{Parties: 2, Algo: "synrevel-gau", Window: 1, Batch: 512, Seed: 1, Link: "10ms each way", Seconds: math.NaN(), Steps: 5, Accuracy: 0.8, Wall: 31}}
	if err := WriteWAN(dir, rows); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "wan.csv"))
	if err != nil {
		t.Fatal(err)
	}
	want := "parties,algo,window,pipelined,batch,samples_in_flight,seed,links,seconds_to_target,steps,accuracy,wall_seconds\n" +
		"2,asyrevel-gau,8,true,64,512,1,10ms each way,1.500,10,0.8400,3.00\n" +
		"2,synrevel-gau,1,false,512,512,1,10ms each way,NaN,5,0.8000,31.00\n"
	if string(raw) != want {
		t.Errorf("wan.csv:\n%s\nwant:\n%s", raw, want)
	}
}
