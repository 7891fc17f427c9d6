//go:build !unix

package experiment

import "os"

// peakRSS is 0 where the peak resident memory of a process is not known.
func peakRSS(*os.ProcessState) int64 { return 0 }
