package trainer

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/transport"
)

// A tiny synthetic problem for the strategy tests: softmax regression on Gaussian blobs.

const (
	synthDim     = 6
	synthClasses = 3
)

type synthSet struct {
	x []float32 // n×synthDim
	y []uint8
}

// newSynthSet draws n points around fixed class centres.
func newSynthSet(n int, seed uint64) *synthSet {
	rng := rand.New(rand.NewPCG(seed, 7))
	s := &synthSet{x: make([]float32, n*synthDim), y: make([]uint8, n)}
	for i := 0; i < n; i++ {
		c := i % synthClasses
		s.y[i] = uint8(c)
		for d := 0; d < synthDim; d++ {
			centre := 0.0
			if d%synthClasses == c {
				centre = 1.5
			}
			s.x[i*synthDim+d] = float32(centre + rng.NormFloat64())
		}
	}
	return s
}

// shard is rank's contiguous part of the set.
func (s *synthSet) shard(rank, size int) *synthSet {
	n := len(s.y)
	lo, hi := rank*n/size, (rank+1)*n/size
	return &synthSet{x: s.x[lo*synthDim : hi*synthDim], y: s.y[lo:hi]}
}

// synthBatches cycles through a shard in order.
type synthBatches struct {
	set   *synthSet
	batch int
	pos   int
}

func (b *synthBatches) Next() ([]float32, []uint8, error) {
	n := len(b.set.y)
	if b.pos+b.batch > n {
		b.pos = 0
	}
	lo := b.pos
	b.pos += b.batch
	return b.set.x[lo*synthDim : b.pos*synthDim], b.set.y[lo:b.pos], nil
}

// synthModel is softmax regression: params are W (classes×dim) then b (classes).
type synthModel struct {
	p, g []float32
}

func newSynthModel(seed uint64) *synthModel {
	n := synthClasses*synthDim + synthClasses
	m := &synthModel{p: make([]float32, n), g: make([]float32, n)}
	rng := rand.New(rand.NewPCG(seed, 1))
	for i := range m.p[:synthClasses*synthDim] {
		m.p[i] = float32(rng.NormFloat64() * 0.1)
	}
	return m
}

func (m *synthModel) NumParams() int { return len(m.p) }

func (m *synthModel) run(x []float32, labels []uint8, grad bool) (float64, int, error) {
	if len(x) != len(labels)*synthDim {
		return 0, 0, fmt.Errorf("synth: %d inputs for %d labels", len(x), len(labels))
	}
	if grad {
		clear(m.g)
	}
	var loss float64
	correct := 0
	var logits [synthClasses]float64
	inv := 1 / float64(len(labels))
	for i, y := range labels {
		xi := x[i*synthDim : (i+1)*synthDim]
		best, arg := math.Inf(-1), 0
		for c := range logits {
			v := float64(m.p[synthClasses*synthDim+c])
			for d, xv := range xi {
				v += float64(m.p[c*synthDim+d]) * float64(xv)
			}
			logits[c] = v
			if v > best {
				best, arg = v, c
			}
		}
		if arg == int(y) {
			correct++
		}
		var z float64
		for c := range logits {
			z += math.Exp(logits[c] - best)
		}
		loss += (math.Log(z) - (logits[y] - best)) * inv
		if !grad {
			continue
		}
		for c := range logits {
			d := math.Exp(logits[c]-best) / z
			if c == int(y) {
				d--
			}
			d *= inv
			for k, xv := range xi {
				m.g[c*synthDim+k] += float32(d * float64(xv))
			}
			m.g[synthClasses*synthDim+c] += float32(d)
		}
	}
	return loss, correct, nil
}

func (m *synthModel) ForwardBackward(x []float32, labels []uint8) (float64, int, error) {
	return m.run(x, labels, true)
}
func (m *synthModel) ReadParams(dst []float32) error  { copy(dst, m.p); return nil }
func (m *synthModel) WriteParams(src []float32) error { copy(m.p, src); return nil }
func (m *synthModel) ReadGrads(dst []float32) error   { copy(dst, m.g); return nil }

// synthEval evaluates params on a test set with a private model.
func synthEval(test *synthSet) EvalFunc {
	m := newSynthModel(0)
	return func(ctx context.Context, params []float32) (float64, float64, error) {
		copy(m.p, params)
		loss, correct, err := m.run(test.x, test.y, false)
		return float64(correct) / float64(len(test.y)), loss, err
	}
}

// newSynthWorker builds rank r of a size-rank synthetic job on ep: a communicator running
// cfg.Collective, the synthetic model and the rank's shard of train.
func newSynthWorker(cfg *Config, ep transport.Endpoint, train *synthSet, r, size int) (*Worker, error) {
	comm, err := collective.New(ep, collective.Options{Algorithm: cfg.Collective})
	if err != nil {
		return nil, err
	}
	return newBatchWorker(cfg, ep, comm, newSynthModel(cfg.Seed), &synthBatches{set: train.shard(r, size), batch: cfg.Batch})
}

// newMemEndpoint is rank 0 of a one-rank in-process job.
func newMemEndpoint(t interface{ Cleanup(func()) }) transport.Endpoint {
	ep := transport.NewMemJob(1)[0]
	t.Cleanup(func() { ep.Close() })
	return ep
}

// newBatchWorker is NewWorker on a network and its batches.
func newBatchWorker(cfg *Config, ep transport.Endpoint, comm Collective, net Network, data Batches) (*Worker, error) {
	m, err := NewBatchModel(net, data)
	if err != nil {
		return nil, err
	}
	return NewWorker(cfg, ep, comm, m)
}

// runRanks runs rank(r, ep) for every endpoint on a goroutine of its own, closes each
// endpoint after, and fails t with the first rank's error; a failing rank calls cancel, so
// that the others stop waiting for it.
func runRanks(t *testing.T, eps []transport.Endpoint, cancel func(), rank func(r int, ep transport.Endpoint) error) {
	t.Helper()
	errs := make([]error, len(eps))
	var wg sync.WaitGroup
	for r, ep := range eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer ep.Close()
			if errs[r] = rank(r, ep); errs[r] != nil {
				cancel()
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}
