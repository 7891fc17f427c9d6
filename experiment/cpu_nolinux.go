//go:build !linux

package experiment

import (
	"errors"
	"math"
	"time"
)

// threadCPU is not available here: the costs fall back to wall time.
func threadCPU() (time.Duration, bool) { return 0, false }

// processCPU is not available here (validate needs Linux's cgroups anyway).
func processCPU(int) (time.Duration, error) { return 0, errors.ErrUnsupported }

// selfCPU is not available here.
func selfCPU() time.Duration { return 0 }

// loadAverage is not available here.
func loadAverage() float64 { return math.NaN() }
