package experiment

import (
	"math"
	"os"
	"runtime"
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
	// 100 ms of CPU by getrusage's count, not of the wall clock: at load
	// 20 on 2 cores, 100 ms of the wall clock gave this process about
	// 10 ms of CPU, the floor asserted below.
	for c0 := selfCPU(); selfCPU()-c0 < 100*time.Millisecond; {
		for range 1000 {
			_ = math.Sqrt(float64(time.Now().UnixNano()))
		}
	}
	after, err := processCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	self := selfCPU()
	if after-before < 50*time.Millisecond {
		t.Errorf("100 ms of work read as %v of CPU", after-before)
	}
	if d := self - after; d < -20*time.Millisecond || d > time.Second {
		t.Errorf("/proc says %v, getrusage %v", after, self)
	}
	if _, err := processCPU(1 << 30); err == nil {
		t.Error("a process that does not exist: no error")
	}
}
