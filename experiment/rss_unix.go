//go:build unix

package experiment

import (
	"os"
	"runtime"
	"syscall"
)

// peakRSS is the peak resident memory of a finished process, in bytes (0
// if unknown).
func peakRSS(ps *os.ProcessState) int64 {
	if ps == nil {
		return 0
	}
	ru, ok := ps.SysUsage().(*syscall.Rusage)
	if !ok {
		return 0
	}
	if runtime.GOOS == "darwin" {
		return ru.Maxrss // bytes there, kilobytes elsewhere
	}
	return ru.Maxrss * 1024
}
