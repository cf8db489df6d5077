//go:build race

package bench

// raceEnabled is true in a test binary built with -race.
const raceEnabled = true
