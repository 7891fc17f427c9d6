package experiment

import (
	"math"
	"os"
	"runtime"
	"slices"
	"testing"
	"time"
)

// processCPU reads a process's CPU from /proc: this process's grows with
// the work it does and agrees with getrusage to /proc's resolution; a
// process that does not exist is an error.
func TestProcessCPU(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc is Linux's")
	}
	before, err := processCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for t0 := time.Now(); time.Since(t0) < 100*time.Millisecond; {
		_ = math.Sqrt(float64(time.Now().UnixNano()))
	}
	after, err := processCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	self := selfCPU()
	if after-before < 10*time.Millisecond {
		t.Errorf("100 ms of work read as %v of CPU", after-before)
	}
	if d := self - after; d < -20*time.Millisecond || d > time.Second {
		t.Errorf("/proc says %v, getrusage %v", after, self)
	}
	if _, err := processCPU(1 << 30); err == nil {
		t.Error("a process that does not exist: no error")
	}
}

func TestValidatedQs(t *testing.T) {
	for _, tc := range []struct {
		name string
		rows []ValidateRow
		want []int
	}{
		{"none", nil, nil},
		{"both modes within", []ValidateRow{{Q: 1, Error: 0.1}, {Q: 1, Error: -0.14}}, []int{1}},
		{"one mode out", []ValidateRow{{Q: 1, Error: 0.1}, {Q: 1, Error: -0.3}, {Q: 2, Error: 0}, {Q: 2, Error: 0.05}}, []int{2}},
		{"NaN is not validated", []ValidateRow{{Q: 4, Error: math.NaN()}, {Q: 2, Error: 0.01}}, []int{2}},
	} {
		if got := ValidatedQs(tc.rows); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A CFS quota runs work at full speed until the period's budget is
// spent, then waits for the next period; over many periods a busy party
// gets share of a processor, an idle one its bursts at full speed.
func TestCFSQuota(t *testing.T) {
	const period = 0.010
	for _, tc := range []struct {
		name      string
		share     float64
		start     float64
		cpu       float64
		want      float64
		usedFirst float64 // CPU already spent in the first period
	}{
		{"within the budget: full speed", 0.25, 0.001, 0.0005, 0.0015, 0},
		{"budget spent: next period", 0.25, 0.001, 0.003, 0.0105, 0},
		{"three periods", 0.25, 0, 0.0075, 0.0225, 0},
		{"budget already spent", 0.25, 0.004, 0.001, 0.011, 0.0025},
		{"period ends before the budget", 0.5, 0.008, 0.004, 0.012, 0},
	} {
		c := &cfsQuota{share: tc.share, period: period, cur: 0, used: tc.usedFirst}
		if got := c.run(tc.start, tc.cpu); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%s: ends at %.6f, want %.6f", tc.name, got, tc.want)
		}
	}
	// A party always busy gets its share: 1,000 steps of 0.3 ms at a
	// quarter of a processor take 1.2 s.
	c := &cfsQuota{share: 0.25, period: period, cur: -1}
	t1 := 0.0
	for range 1000 {
		t1 = c.run(t1, 0.0003)
	}
	if math.Abs(t1-1.2) > period {
		t.Errorf("1,000 steps of 0.3 ms at share 0.25 end at %.4f s, want 1.2 s", t1)
	}
}
