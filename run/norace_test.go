//go:build !race

package run

// raceEnabled: this test binary runs under the race detector.
const raceEnabled = false
