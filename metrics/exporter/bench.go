package exporter

import (
	"context"
	"net"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Bench holds a benchmark's results as they are measured (`bench --metrics-addr`): one sample
// per collective, operation and message size, as the bench's table prints it, so that a
// dashboard can follow a long sweep and put it beside other runs.
type Bench struct {
	reg                   *prometheus.Registry
	seconds, algBW, busBW *prometheus.GaugeVec
	wrong                 *prometheus.GaugeVec
	sizes                 *prometheus.CounterVec
}

// BenchRow is one measured size of a bench table.
type BenchRow struct {
	Collective, Op string // the algorithm and the operation (allreduce, broadcast, ...)
	Bytes          int64
	Seconds        float64 // time per call, averaged over the ranks
	AlgBW, BusBW   float64 // GB/s, nccl-tests' algorithm and bus bandwidths
	// Wrong is how many elements the checked calls found wrong; Checked is whether any call
	// was checked (Wrong is then 0 because nothing was looked at, not because all was right).
	Wrong   int64
	Checked bool
}

// NewBench returns a Bench with its own registry.
func NewBench() *Bench {
	b := &Bench{reg: prometheus.NewRegistry()}
	gauge := func(name, help string) *prometheus.GaugeVec {
		return newGaugeVec(b.reg, "bench", name, help, "collective", "op", "bytes")
	}
	b.seconds = gauge("time_seconds", "Time per call at this size, averaged over the ranks.")
	b.algBW = gauge("algbw_gigabytes_per_second", "Algorithm bandwidth at this size (bytes / time), GB/s.")
	b.busBW = gauge("busbw_gigabytes_per_second", "Bus bandwidth at this size (nccl-tests' convention), GB/s.")
	b.wrong = gauge("wrong_elements", "Elements the checked calls at this size found wrong (absent when none were checked).")
	b.sizes = newCounterVec(b.reg, "bench", "sizes_total", "Sizes measured so far.", "collective", "op")
	return b
}

// Observe adds one measured size. It is safe for concurrent use.
func (b *Bench) Observe(r BenchRow) {
	l := []string{r.Collective, r.Op, strconv.FormatInt(r.Bytes, 10)}
	b.seconds.WithLabelValues(l...).Set(r.Seconds)
	b.algBW.WithLabelValues(l...).Set(r.AlgBW)
	b.busBW.WithLabelValues(l...).Set(r.BusBW)
	if r.Checked {
		b.wrong.WithLabelValues(l...).Set(float64(r.Wrong))
	}
	b.sizes.WithLabelValues(r.Collective, r.Op).Inc()
}

// Serve serves the results at addr's /metrics until ctx ends, as Exporter.Serve does.
func (b *Bench) Serve(ctx context.Context, addr string) (net.Addr, error) {
	return serve(ctx, addr, b.reg)
}
