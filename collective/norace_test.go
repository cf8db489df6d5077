//go:build !race

package collective

// raceEnabled is true in a test binary built with -race.
const raceEnabled = false
