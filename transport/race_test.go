//go:build race

package transport

// raceEnabled is true in a test binary built with -race. The tests of steady-state
// allocations do not hold it to zero: under the race detector sync.Pool drops a quarter of
// what is put back, by design, so a pooled path allocates about once per 1 MiB message
// there, and a test's integer average of allocations would round to 0 or 1 by chance
// (docs/results/tuning.md). Without -race they still must be 0.
const raceEnabled = true
