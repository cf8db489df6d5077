// Package exporter serves a training job's live metrics in the Prometheus exposition format
// (`train --metrics-addr`): per rank, the rounds, samples and samples per second, the
// training loss, the compute, communication and wait seconds and the bytes moved, and rank 0's
// latest test accuracy, updated as each round ends. Bench does the same for a benchmark's
// results (`bench --metrics-addr`): per collective, operation and size, the time per call,
// the bandwidths and the wrong elements, as each size is measured.
//
// Every Exporter and Bench has a registry of its own (never the client library's global
// default), so that several jobs, or several ranks of one process, do not share counters.
//
// It must never decide anything about training or a benchmark, or block them: Observe is a
// few counter updates under the client's own locks, and the HTTP server runs on goroutines of
// its own until its context ends.
package exporter
