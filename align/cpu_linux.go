package align

import "golang.org/x/sys/unix"

// threadCPU is the calling thread's CPU time in seconds.
func threadCPU() float64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return float64(ts.Sec) + 1e-9*float64(ts.Nsec)
}

// processCPU is the process's user and system CPU time in seconds.
func processCPU() float64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return float64(ts.Sec) + 1e-9*float64(ts.Nsec)
}
