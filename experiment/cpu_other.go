//go:build !unix

package experiment

import "time"

// cpuTime is 0 where the process's CPU time is not available.
func cpuTime() time.Duration { return 0 }
