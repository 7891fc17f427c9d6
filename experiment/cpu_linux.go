//go:build linux

package experiment

import (
	"syscall"
	"time"
)

// rusageThread is Linux's RUSAGE_THREAD: the calling thread's usage.
const rusageThread = 1

// threadCPU is the CPU time (user + system) of the calling OS thread, and
// true; the caller locks its goroutine to the thread. CPU time, not wall
// time: a step's cost on a processor of its own, whatever else this
// machine is running.
func threadCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
