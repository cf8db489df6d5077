//go:build race

package transport

// raceEnabled is true in a test binary built with -race. The tests of steady-state
// allocations do not hold it to zero: under the race detector sync.Pool drops a quarter of
// what is put back, by design, so a pooled path allocates about once per 1 MiB message
// there (0.8–1.1 per message measured, before and after the raw socket I/O), and whether the
// test's integer average came out 0 or 1 was chance. Without -race they still must be 0.
const raceEnabled = true
