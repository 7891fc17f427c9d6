//go:build !linux

package ckpt

import "time"

// threadCPU: no thread clock here; Save counts the hand-over's wall time.
func threadCPU() (time.Duration, bool) { return 0, false }
