package main

import "context"

// pending is a call in flight that hs_wait finishes: a collective's request, or a task (a
// session's call) that runs on a goroutine of its own.
type pending interface {
	Test() (done bool, err error)
	Done() <-chan struct{}
	Wait(ctx context.Context) error
}

// task runs fn on a goroutine and reports like a collective's request, so that the caller
// waits for a session's calls (which may block on other ranks for long) in slices, as for a
// collective.
type task struct {
	done chan struct{}
	err  error
}

func goTask(fn func() error) *task {
	t := &task{done: make(chan struct{})}
	go func() {
		t.err = fn()
		close(t.done)
	}()
	return t
}

func (t *task) Done() <-chan struct{} { return t.done }

func (t *task) Test() (bool, error) {
	select {
	case <-t.done:
		return true, t.err
	default:
		return false, nil
	}
}

func (t *task) Wait(ctx context.Context) error {
	select {
	case <-t.done:
		return t.err
	case <-ctx.Done():
		return ctx.Err()
	}
}
