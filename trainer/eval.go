package trainer

import (
	"context"
	"sync"
	"time"
)

// EvalFunc tests a parameter vector on the test set and returns accuracy and mean loss. It
// runs on the evaluator's own goroutine with its own model, never the workers'.
type EvalFunc func(ctx context.Context, params []float32) (acc, loss float64, err error)

// EvalResult is one evaluation of a snapshot.
type EvalResult struct {
	Round         int           // this rank's round after which the snapshot was taken
	GlobalRound   int           // the job's round (asynchronous strategies: server updates / ranks)
	SnapshotTime  time.Duration // training time at the snapshot (the time-to-accuracy clock)
	GlobalSamples int64
	Epochs        float64
	Acc, Loss     float64
	EvalSeconds   float64 // how long the evaluation itself took
	Err           error
}

// evaluator runs evaluations off the training path. Offer never blocks: while an evaluation
// runs, the newest offered snapshot waits in a second buffer (older pending ones are
// replaced), so at most one evaluation runs and one waits.
type evaluator struct {
	eval    EvalFunc
	mu      sync.Mutex
	pending []float32 // the next snapshot, valid when hasNext
	next    EvalResult
	hasNext bool
	running []float32
	wake    chan struct{}
	results []EvalResult
	best    float64
	bestAt  int // the round of best
	done    chan struct{}
	idle    *sync.Cond
	busy    bool
}

func newEvaluator(ctx context.Context, eval EvalFunc, n int) *evaluator {
	e := &evaluator{
		eval: eval, pending: make([]float32, n), running: make([]float32, n),
		wake: make(chan struct{}, 1), best: -1, done: make(chan struct{}),
	}
	e.idle = sync.NewCond(&e.mu)
	go e.loop(ctx)
	return e
}

// Offer queues a copy of params taken after round, replacing any snapshot still waiting.
func (e *evaluator) Offer(params []float32, meta EvalResult) {
	e.mu.Lock()
	copy(e.pending, params)
	e.next = meta
	e.hasNext = true
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

func (e *evaluator) loop(ctx context.Context) {
	defer close(e.done)
	for {
		select {
		case <-ctx.Done():
			e.mu.Lock()
			e.hasNext = false
			e.idle.Broadcast()
			e.mu.Unlock()
			return
		case <-e.wake:
		}
		e.mu.Lock()
		if !e.hasNext {
			e.mu.Unlock()
			continue
		}
		e.pending, e.running = e.running, e.pending
		meta := e.next
		e.hasNext = false
		e.busy = true
		e.mu.Unlock()

		t0 := time.Now()
		meta.Acc, meta.Loss, meta.Err = e.eval(ctx, e.running)
		meta.EvalSeconds = time.Since(t0).Seconds()

		e.mu.Lock()
		e.results = append(e.results, meta)
		e.countBest(meta)
		e.busy = false
		if !e.hasNext {
			e.idle.Broadcast()
		}
		e.mu.Unlock()
	}
}

// Counted counts r, an evaluation taken outside the evaluator (a resumed run's evaluation of
// its checkpoint), toward Best.
func (e *evaluator) Counted(r EvalResult) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.countBest(r)
}

// countBest keeps the best accuracy; e.mu is held.
func (e *evaluator) countBest(r EvalResult) {
	if r.Err == nil && r.Acc > e.best {
		e.best, e.bestAt = r.Acc, r.Round
	}
}

// Best is the best accuracy evaluated so far, negative before the first result, and the
// round of the snapshot that scored it.
func (e *evaluator) Best() (float64, int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.best, e.bestAt
}

// Take returns the results finished since the last Take.
func (e *evaluator) Take() []EvalResult {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.results
	e.results = nil
	return r
}

// Drain waits until nothing is running or waiting (or ctx ends).
func (e *evaluator) Drain(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() {
		e.mu.Lock()
		e.idle.Broadcast()
		e.mu.Unlock()
	})
	defer stop()
	e.mu.Lock()
	for (e.busy || e.hasNext) && ctx.Err() == nil {
		e.idle.Wait()
	}
	e.mu.Unlock()
}
