//go:build !linux

package align

import "time"

var cpuStart = time.Now()

// threadCPU is wall time where the thread's CPU time is not at hand.
func threadCPU() float64 { return time.Since(cpuStart).Seconds() }

// processCPU is 0 where the process's CPU time is not at hand.
func processCPU() float64 { return 0 }
