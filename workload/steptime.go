package workload

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/hetsync/hetsync/kernels"
	"github.com/hetsync/hetsync/workload/nn"
)

// MeasureStepTime is t_fast for the WBSP heterogeneity profiles: the median time of steps
// forward/backward steps of model at the given per-rank batch on a CPU device with threads
// threads, on random inputs (after two warm-up steps). It is what one unslowed local step
// costs on this machine, without batch fetching.
func MeasureStepTime(model string, batch int, seed uint64, threads, steps int) (time.Duration, error) {
	if batch < 1 || threads < 1 || steps < 1 {
		return 0, fmt.Errorf("workload: measuring the step time needs batch, threads and steps ≥ 1, got %d, %d, %d", batch, threads, steps)
	}
	dev, err := kernels.NewCPU(threads)
	if err != nil {
		return 0, fmt.Errorf("workload: measuring the step time: %w", err)
	}
	m, err := nn.NewModel(model, dev, batch, seed)
	if err != nil {
		return 0, fmt.Errorf("workload: measuring the step time: %w", err)
	}
	rng := rand.New(rand.NewPCG(seed, 17))
	x := make([]float32, batch*m.InputLen())
	for i := range x {
		x[i] = rng.Float32()
	}
	labels := make([]uint8, batch)
	for i := range labels {
		labels[i] = uint8(rng.IntN(10))
	}
	times := make([]time.Duration, 0, steps)
	for i := 0; i < steps+2; i++ {
		t0 := time.Now()
		if _, _, err := m.ForwardBackward(x, labels); err != nil {
			return 0, fmt.Errorf("workload: measuring the step time: %w", err)
		}
		if i >= 2 {
			times = append(times, time.Since(t0))
		}
	}
	slices.Sort(times)
	return times[len(times)/2], nil
}
