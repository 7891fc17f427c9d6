package experiment

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asyrevel/asyrevel/dataset"
	"github.com/asyrevel/asyrevel/run"

	"github.com/rs/zerolog"
)

func TestThroughputWritesResults(t *testing.T) {
	if testing.Short() {
		t.Skip("short: the throughput experiment end to end")
	}
	rows, err := Throughput(context.Background(), ThroughputConfig{
		Data: smallData(t, 4), Parties: 4, Variants: []string{"memory", "capture-tcp", "core-inprocess"},
		Windows: []int{8}, Batches: []int{1, 16}, Duration: time.Second, Seed: 1, Log: zerolog.Nop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 6 {
		t.Fatalf("%d rows, want 6", len(rows))
	}
	for _, r := range rows {
		if r.Steps == 0 || r.StepsPerSec <= 0 || r.BytesPerStep <= 0 || r.MessagesSent <= 0 {
			t.Errorf("row %+v: no work measured", r)
		}
		if r.Variant == "memory" && r.Ratio != 1 {
			t.Errorf("memory ratio %v", r.Ratio)
		}
		switch r.Variant {
		case "core-inprocess":
			if r.MessagesStored != -1 {
				t.Errorf("core keeps no log, yet %d stored", r.MessagesStored)
			}
		default:
			// Lossless: the log holds every message sent.
			if r.MessagesStored != r.MessagesSent || r.Lost != 0 {
				t.Errorf("%s: %d sent, %d stored", r.Variant, r.MessagesSent, r.MessagesStored)
			}
		}
		// The steps' own wire bytes come from the difference with a
		// shorter calibration run; on a loaded machine the main run may
		// make fewer steps than it, and the figure is then left out
		// (NaN) rather than guessed. When given, it must make sense.
		if r.Variant != "memory" && !math.IsNaN(r.StepWireBytes) && !(r.StepWireBytes > 0 && r.StepWireBytes < r.WireBytesPerStep) {
			t.Errorf("%s: step wire bytes %v, all wire bytes per step %v", r.Variant, r.StepWireBytes, r.WireBytesPerStep)
		}
	}
	// A batch-16 step carries 16 ids and 32 floats up and 32 floats down
	// (float32 on the wire).
	for _, r := range rows {
		if r.Batch == 16 && r.BytesPerStep < 16*4+16*4*4 {
			t.Errorf("%s batch 16: %.0f bytes per step is less than the payload", r.Bus, r.BytesPerStep)
		}
	}
	dir := t.TempDir()
	if err := WriteThroughput(dir, rows); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "throughput.csv"))
	if err != nil || !strings.HasPrefix(string(raw), "variant,bus,design,window,batch,steps_per_s,ratio_to_memory") {
		t.Fatalf("throughput.csv: %v %q", err, raw)
	}
	if st, err := os.Stat(filepath.Join(dir, "throughput.png")); err != nil || st.Size() == 0 {
		t.Fatalf("throughput.png: %v", err)
	}
}

func TestTimeToAccuracy(t *testing.T) {
	rows, err := TimeToAccuracy(context.Background(), TTAConfig{
		Data: smallData(t, 4), Parties: 4, Target: 0.9, Seeds: []uint64{1}, Batch: 16, Window: 2,
		Variants: []string{"memory"}, Budget: 20 * time.Second, EvalEvery: 50 * time.Millisecond, Log: zerolog.Nop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 {
		t.Fatalf("%d rows", len(rows))
	}
	for _, r := range rows {
		if r.Seconds < 0 || r.Steps <= 0 {
			t.Errorf("%s did not reach 90%%: %+v", r.System, r)
		}
	}
	if m := MedianSeconds(rows, "reference"); m != rows[0].Seconds {
		t.Errorf("median of one run %v, want %v", m, rows[0].Seconds)
	}
	if err := WriteTTA(t.TempDir(), rows); err != nil {
		t.Fatal(err)
	}
}

func TestParseVariant(t *testing.T) {
	for _, tc := range []struct {
		name, design, conn, persist, compr string
		ok                                 bool
	}{
		{"memory", "memory", "memory", "", "", true},
		{"capture-tcp", "capture", "tcp", "", "", true},
		{"jetstream-tcp", "capture", "tcp", "", "", true},
		{"acked-sync-plain-cluster", "acked", "cluster", "sync", "none", true},
		{"capture-s2-tcp", "capture", "tcp", "", "s2", true},
		{"ordered-inprocess", "ordered", "inprocess", "", "", true},
		{"capture", "", "", "", "", false},
		{"memory-tcp", "", "", "", "", false},
		{"capture-fast-tcp", "", "", "", "", false},
		{"capture-udp", "", "", "", "", false},
	} {
		v, err := parseVariant(tc.name)
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if err == nil && (string(v.design) != tc.design || v.conn != tc.conn || v.persist != tc.persist || v.compr != tc.compr) {
			t.Errorf("%s: %+v", tc.name, v)
		}
	}
	for _, name := range Variants {
		if _, err := parseVariant(name); err != nil {
			t.Errorf("default variant %s: %v", name, err)
		}
	}
}

func TestScaleSlopes(t *testing.T) {
	mb := int64(1 << 20)
	rows := []ScaleRow{
		{ScaleRun: ScaleRun{8, 1000, 64}, PeakRSS: 100 * mb},
		{ScaleRun: ScaleRun{32, 1000, 64}, PeakRSS: 148 * mb},
		{ScaleRun: ScaleRun{128, 1000, 64}, PeakRSS: 340 * mb},
		{ScaleRun: ScaleRun{8, 101000, 64}, PeakRSS: 300 * mb},
	}
	perParty, perSample := ScaleSlopes(rows)
	if math.Abs(perParty-2*float64(mb)) > 1 {
		t.Errorf("per party %v, want 2 MiB", perParty)
	}
	if math.Abs(perSample-2*float64(mb)/1000) > 1e-6 {
		t.Errorf("per sample %v, want 2 KiB", perSample)
	}
	if p, s := ScaleSlopes(rows[:1]); !math.IsNaN(p) || !math.IsNaN(s) {
		t.Errorf("one run: %v %v", p, s)
	}
}

// small is a synthetic problem that a linear model learns to about 95%
// (the simulator's tests use the same).
func small() *dataset.SyntheticConfig {
	return &dataset.SyntheticConfig{Samples: 4000, TestSamples: 1000, Features: 24, Classes: 2, Noise: 0.02, Seed: 3}
}

// smallData is small() split over q parties.
func smallData(t *testing.T, q int) *run.Data {
	t.Helper()
	tr, te, err := dataset.Synthetic(*small())
	if err != nil {
		t.Fatal(err)
	}
	d, err := Split(tr, te, q)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
