package trainer

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestEvaluatorKeepsNewestSnapshot blocks the first evaluation, offers three more snapshots
// meanwhile, and checks that Offer never blocked and only the newest waiting one ran.
func TestEvaluatorKeepsNewestSnapshot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	started := make(chan struct{})
	release := make(chan struct{})
	var mu sync.Mutex
	var seen []float32
	eval := func(ctx context.Context, p []float32) (float64, float64, error) {
		mu.Lock()
		seen = append(seen, p[0])
		first := len(seen) == 1
		mu.Unlock()
		if first {
			close(started)
			<-release
		}
		return float64(p[0]) / 10, 0, nil
	}
	ev := newEvaluator(ctx, eval, 2)
	ev.Offer([]float32{1, 0}, EvalResult{Round: 1})
	<-started
	for r := 2; r <= 4; r++ {
		ev.Offer([]float32{float32(r), 0}, EvalResult{Round: r}) // must not block
	}
	close(release)
	ev.Drain(ctx)
	res := ev.Take()
	if len(res) != 2 || res[0].Round != 1 || res[1].Round != 4 {
		t.Fatalf("evaluated rounds %v, want [1 4]", res)
	}
	if best, at := ev.Best(); res[1].Acc != 0.4 || best != 0.4 || at != 4 {
		t.Fatalf("result %+v best %v of round %d: the round-4 snapshot was not the one evaluated", res[1], best, at)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || seen[1] != 4 {
		t.Fatalf("evaluated snapshots %v, want [1 4]", seen)
	}
	if got := ev.Take(); len(got) != 0 {
		t.Fatalf("second Take returned %v", got)
	}
}
