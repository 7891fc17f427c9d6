package run

import (
	"math"
	"os"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/asyrevel/asyrevel/aggregator"
)

// labels returns n labels, the first pos of them 1.
func labels(n, pos int) []int32 {
	y := make([]int32, n)
	for i := range pos {
		y[i] = 1
	}
	return y
}

// The learning checks warn when a run predicts the largest class and its
// loss is no better than the constant prediction's, or its loss grows; and
// stay quiet when an imbalanced set's model has learnt although its
// accuracy is near the largest class's share.
func TestProgressWarnings(t *testing.T) {
	// w8a-like: 3% positives. The constant prediction's loss is the
	// entropy, about 0.135.
	imbalanced := &Data{TrainY: labels(1000, 30), TestY: labels(1000, 30), Classes: 2}
	balanced := &Data{TrainY: labels(1000, 500), TestY: labels(1000, 500), Classes: 2}
	noTest := &Data{TrainY: labels(1000, 500), Classes: 2}
	pt := func(loss, acc float64) aggregator.Point {
		return aggregator.Point{TrainLoss: loss, TestAccuracy: acc}
	}
	cases := []struct {
		name   string
		data   *Data
		during []aggregator.Point
		final  aggregator.Point
		want   string // a warning containing this; "" for none
	}{
		{"imbalanced, learnt (w8a at 97.30%)", imbalanced, nil, pt(0.087, 0.9730), ""},
		{"imbalanced, stuck at the majority", imbalanced, nil, pt(0.135, 0.9700), "learnt nothing"},
		{"imbalanced, above the margin", imbalanced, nil, pt(0.13, 0.98), ""},
		{"balanced, stuck", balanced, nil, pt(0.70, 0.50), "learnt nothing"},
		{"balanced, learnt", balanced, nil, pt(0.35, 0.85), ""},
		{"no test set, loss at the entropy", noTest, nil, pt(0.693, math.NaN()), "no better than predicting"},
		{"no test set, learnt", noTest, nil, pt(0.4, math.NaN()), ""},
		{"loss grows", balanced, []aggregator.Point{pt(0.6, 0.7)}, pt(1.2, 0.7), "training loss grows"},
		{"loss NaN", balanced, []aggregator.Point{pt(0.6, 0.7)}, pt(math.NaN(), 0.7), "training loss grows"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &job{Config: New(func(c *Config) {
				c.LR = 0.1
				c.Mu = 1e-3
			})}
			p := newProgress(cfg, tc.data)
			for _, q := range tc.during {
				p.check(q)
			}
			s := &Summary{}
			final := tc.final
			final.Final = true
			s.Curve = append(s.Curve, final)
			p.finish(s)
			got := strings.Join(s.Warnings, "\n")
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Fatalf("warnings %q, want one containing %q", got, tc.want)
			}
		})
	}
}

// During the run, the majority warning comes once every evaluation so far
// has been at the majority, and only once.
func TestProgressStuckDuringRun(t *testing.T) {
	cfg := &job{Config: New(func(c *Config) {
		c.LR = 0.1
		c.Mu = 1e-3
	})}
	p := newProgress(cfg, &Data{TrainY: labels(100, 50), TestY: labels(100, 50), Classes: 2})
	for i := range 2 * stuckPoints {
		p.check(aggregator.Point{TrainLoss: 0.7, TestAccuracy: 0.5})
		if n := len(p.warnings); (i+1 < stuckPoints && n != 0) || (i+1 >= stuckPoints && n != 1) {
			t.Fatalf("after %d stuck evaluations: %d warnings", i+1, n)
		}
	}
}

// The first progress line has no msg/s: its count would be the table's
// initial fill over a moment (issue 34: msg/s=2395557); the lines after it
// give the rate since the previous one, and curve.csv leaves the first
// row's rate empty.
func TestFirstProgressLineRate(t *testing.T) {
	var b strings.Builder
	cfg := &job{Config: Defaults(), hooks: Hooks{Log: zerolog.New(&b)}}
	p := newProgress(cfg, &Data{TrainY: labels(100, 50), TestY: labels(100, 50), Classes: 2})
	first := aggregator.Point{Seconds: 0.001, Steps: 0, TrainLoss: 0.69, TestAccuracy: 0.5, MsgsPerSec: 2395557}
	last := aggregator.Point{Seconds: 2, Steps: 900, TrainLoss: 0.4, TestAccuracy: 0.8, MsgsPerSec: 1234, Final: true}
	p.point(first)
	p.point(last)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 || strings.Contains(lines[0], "msg/s") || strings.Contains(lines[0], "2395557") || !strings.Contains(lines[1], `"msg/s":"1234"`) {
		t.Errorf("progress lines:\n%s", b.String())
	}
	dir := t.TempDir()
	if err := writeCurveCSV(dir+"/curve.csv", []aggregator.Point{first, last}); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(dir + "/curve.csv")
	rows := strings.Split(strings.TrimSpace(string(raw)), "\n")
	if len(rows) != 3 || strings.Contains(rows[1], "2395557") || !strings.Contains(rows[2], ",1234,") {
		t.Errorf("curve.csv:\n%s", raw)
	}
}
