//go:build race

package run

// raceEnabled: this test binary runs under the race detector, which makes
// compute-bound code 10 to 30 times slower.
const raceEnabled = true
