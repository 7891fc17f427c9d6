//go:build !linux

package experiment

import "time"

// threadCPU is not available here: the costs fall back to wall time.
func threadCPU() (time.Duration, bool) { return 0, false }
