//go:build !linux

package align

import "time"

var cpuStart = time.Now()

// threadCPU is wall time where the thread's CPU time is not at hand.
func threadCPU() float64 { return time.Since(cpuStart).Seconds() }
