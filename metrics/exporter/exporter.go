package exporter

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/hetsync/hetsync/metrics"
)

// Exporter holds the metrics of the ranks that report to it.
type Exporter struct {
	reg *prometheus.Registry

	rounds, samples, computeS, commS, waitS, sent, recv *prometheus.CounterVec
	round, rate, loss                                   *prometheus.GaugeVec
	accuracy, testLoss                                  prometheus.Gauge

	mu   sync.Mutex
	last map[int]float64 // rank → time_s of its previous round, for the rate
}

// New returns an Exporter with its own registry.
func New() *Exporter {
	e := &Exporter{reg: prometheus.NewRegistry(), last: map[int]float64{}}
	counter := func(name, help string) *prometheus.CounterVec { return newCounterVec(e.reg, "", name, help, "rank") }
	gauge := func(name, help string) *prometheus.GaugeVec { return newGaugeVec(e.reg, "", name, help, "rank") }
	e.rounds = counter("rounds_total", "Rounds the rank has finished.")
	e.samples = counter("samples_total", "Samples the rank has trained on.")
	e.computeS = counter("compute_seconds_total", "Seconds the rank spent computing (batches, forward/backward, local updates, injected sleep).")
	e.commS = counter("comm_seconds_total", "Seconds the rank spent moving data (collectives, push/pull).")
	e.waitS = counter("wait_seconds_total", "Seconds the rank spent blocked on other ranks.")
	e.sent = counter("bytes_sent_total", "Payload bytes the rank sent.")
	e.recv = counter("bytes_received_total", "Payload bytes the rank received.")
	e.round = gauge("round", "Index of the rank's latest finished round.")
	e.rate = gauge("samples_per_second", "The rank's samples per second over its latest round.")
	e.loss = gauge("train_loss", "Mean training loss of the rank's latest round.")
	e.accuracy = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "hetsync", Name: "test_accuracy", Help: "Test accuracy of rank 0's latest evaluation."})
	e.testLoss = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "hetsync", Name: "test_loss", Help: "Test loss of rank 0's latest evaluation."})
	e.reg.MustRegister(e.accuracy, e.testLoss)
	return e
}

// newCounterVec registers the counter family hetsync_[subsystem_]name on reg.
func newCounterVec(reg *prometheus.Registry, subsystem, name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "hetsync", Subsystem: subsystem, Name: name, Help: help}, labels)
	reg.MustRegister(c)
	return c
}

// newGaugeVec registers the gauge family hetsync_[subsystem_]name on reg.
func newGaugeVec(reg *prometheus.Registry, subsystem, name, help string, labels ...string) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "hetsync", Subsystem: subsystem, Name: name, Help: help}, labels)
	reg.MustRegister(g)
	return g
}

// Registry is the exporter's registry, for callers that add collectors of their own.
func (e *Exporter) Registry() *prometheus.Registry { return e.reg }

// Observe adds one round of a rank. It is safe for concurrent use by the ranks of one process.
func (e *Exporter) Observe(r *metrics.RoundRecord) {
	l := strconv.Itoa(r.Rank)
	e.rounds.WithLabelValues(l).Inc()
	e.samples.WithLabelValues(l).Add(float64(r.Samples))
	e.computeS.WithLabelValues(l).Add(nonNegative(r.ComputeS))
	e.commS.WithLabelValues(l).Add(nonNegative(r.CommS))
	e.waitS.WithLabelValues(l).Add(nonNegative(r.WaitS))
	e.sent.WithLabelValues(l).Add(float64(max(0, r.BytesSent)))
	e.recv.WithLabelValues(l).Add(float64(max(0, r.BytesRecv)))
	e.round.WithLabelValues(l).Set(float64(r.Round))
	e.loss.WithLabelValues(l).Set(r.Loss)
	e.mu.Lock()
	prev := e.last[r.Rank] // 0, the start of training, before the first round
	e.last[r.Rank] = r.TimeS
	e.mu.Unlock()
	if dt := r.TimeS - prev; dt > 0 {
		e.rate.WithLabelValues(l).Set(float64(r.Samples) / dt)
	}
}

// ObserveEval sets rank 0's latest test accuracy and loss.
func (e *Exporter) ObserveEval(accuracy, loss float64) {
	e.accuracy.Set(accuracy)
	e.testLoss.Set(loss)
}

// nonNegative keeps a counter monotonic whatever a record holds.
func nonNegative(v float64) float64 {
	if !(v > 0) {
		return 0
	}
	return v
}

// Serve listens on addr (HOST:PORT; port 0 picks a free one) and serves /metrics until ctx
// ends. It returns the address it listens on once it does, so that the caller can print it;
// a port that cannot be had is an error naming addr.
func (e *Exporter) Serve(ctx context.Context, addr string) (net.Addr, error) {
	return serve(ctx, addr, e.reg)
}

// serve serves reg's metrics at addr's /metrics until ctx ends (Serve).
func serve(ctx context.Context, addr string, reg *prometheus.Registry) (net.Addr, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	// Serve returns when Shutdown closes it; a scrape that fails is the scraper's to see.
	go func() { _ = srv.Serve(ln) }()
	return ln.Addr(), nil
}

// RankAddr is the address rank serves on when every rank of a host is given addr: port P
// becomes P+rank, so that the ranks of one host do not collide; port 0 stays 0 (each rank
// picks a free port). A port beyond 65535 is an error naming the rank and the flag.
func RankAddr(addr string, rank int) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("--metrics-addr %q: want HOST:PORT: %w", addr, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return "", fmt.Errorf("--metrics-addr %q: port %q is not a number in 0…65535", addr, port)
	}
	if p == 0 {
		return addr, nil
	}
	if p+rank > 65535 {
		return "", fmt.Errorf("--metrics-addr %q: rank %d would serve on port %d, beyond 65535", addr, rank, p+rank)
	}
	return net.JoinHostPort(host, strconv.Itoa(p+rank)), nil
}
