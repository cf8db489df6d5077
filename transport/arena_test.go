package transport

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestMemArenaWaitWake(t *testing.T) {
	eps := NewMemJobArena(3, 4096)
	a, b := HostArena(eps[0]), HostArena(eps[2])
	if a == nil || b == nil || &a.Bytes()[0] != &b.Bytes()[0] {
		t.Fatal("the ranks of a mem job with an arena do not share one")
	}
	if HostArena(NewMemJob(2)[0]) != nil {
		t.Fatal("a mem job made without an arena offers one")
	}
	done := make(chan error, 1)
	go func() { done <- b.Wait(context.Background(), 64, 0) }()
	select {
	case err := <-done:
		t.Fatalf("Wait returned %v before the word changed", err)
	case <-time.After(20 * time.Millisecond):
	}
	ArenaWord(a.Bytes(), 64).Store(1)
	a.Wake(64)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// A word that already differs returns at once.
	if err := b.Wait(context.Background(), 64, 0); err != nil {
		t.Fatal(err)
	}
}

func TestMemArenaWaitFails(t *testing.T) {
	eps := NewMemJobArena(3, 4096)
	a := HostArena(eps[0])
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := a.Wait(ctx, 0, 0); err != context.DeadlineExceeded {
		t.Fatalf("Wait with an ending context: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Wait(context.Background(), 0, 0) }()
	eps[1].Close()
	if err := <-done; err == nil || !strings.Contains(err.Error(), "rank 1") {
		t.Fatalf("Wait while rank 1 closes: %v", err)
	}
}
