package main

/*
#include <stdint.h>
*/
import "C"

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/hetsync/hetsync/trainer"
)

// session is a trainer.Session driven through the C ABI, with the answers of its last calls
// for the caller to read once they complete (hs_session_state).
type session struct {
	mu   sync.Mutex // the calls of one session run one at a time
	s    *trainer.RunSession
	sync bool // the last ShouldSync's answer
	last trainer.RoundStats
}

var sessions handles[*session]

func sessionOf(id C.int64_t, call string) (*session, error) {
	s, ok := sessions.get(int64(id))
	if !ok {
		return nil, fmt.Errorf("hetsync %s: session %d is not open (closed, or never returned by hs_session_new)", call, int64(id))
	}
	return s, nil
}

// floats views n float32 values at p (the caller's memory) as a slice.
func floats(p unsafe.Pointer, n C.int64_t, what, call string) ([]float32, error) {
	switch {
	case n < 0:
		return nil, fmt.Errorf("hetsync %s: negative length %d", call, int64(n))
	case p == nil:
		return nil, fmt.Errorf("hetsync %s: NULL %s vector", call, what)
	}
	return unsafe.Slice((*float32)(p), int(n)), nil
}

// parseFlags reads "name=value" lines (names as `hetsync train` spells its flags).
func parseFlags(text string) ([][2]string, error) {
	var flags [][2]string
	for _, line := range strings.Split(text, "\n") {
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("hetsync hs_session_new: setting %q is not name=value", line)
		}
		flags = append(flags, [2]string{strings.TrimSpace(name), value})
	}
	return flags, nil
}

// run runs one call of s as a pending call (see issue): the session's calls block on the
// other ranks, so the caller waits for them in slices.
func (s *session) run(waitMS C.int64_t, req *C.int64_t, fn func() error) *C.char {
	call := func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		return fn()
	}
	return issue(waitMS, req, call, func() pending { return goTask(call) })
}

//export hs_session_new
func hs_session_new(commID C.int64_t, flags *C.char, params, grads unsafe.Pointer, n C.int64_t, out *C.int64_t) *C.char {
	const call = "hs_session_new"
	c, err := comm(commID, call)
	if err != nil {
		return cerr(err)
	}
	if out == nil {
		return cerr(errors.New("hetsync hs_session_new: NULL result pointer"))
	}
	p, err := floats(params, n, "parameter", call)
	if err != nil {
		return cerr(err)
	}
	g, err := floats(grads, n, "gradient", call)
	if err != nil {
		return cerr(err)
	}
	pairs, err := parseFlags(C.GoString(flags))
	if err != nil {
		return cerr(err)
	}
	runDir, pairs := takeOut(pairs)
	// train-size is the session's, not the configuration's: the samples of the whole training
	// set, which --epochs counts in.
	trainSize := 0
	kept := pairs[:0]
	for _, kv := range pairs {
		if strings.TrimLeft(kv[0], "-") != "train-size" {
			kept = append(kept, kv)
			continue
		}
		if trainSize, err = strconv.Atoi(kv[1]); err != nil || trainSize < 1 {
			return cerr(fmt.Errorf("hetsync %s: rank %d: train-size %q: want the number of training samples of all ranks", call, c.Rank(), kv[1]))
		}
	}
	pairs = kept
	reg := trainer.Builtin()
	cfg, err := trainer.ConfigFromFlags(reg, pairs)
	if err != nil {
		return cerr(fmt.Errorf("hetsync %s: rank %d: %w", call, c.Rank(), err))
	}
	if err := reg.Validate(&cfg, c.Size()); err != nil {
		return cerr(fmt.Errorf("hetsync %s: rank %d: %w", call, c.Rank(), trainer.InFlags(err)))
	}
	opts := trainer.TrainOptions{Comm: c.Comm, Strategies: reg, TrainSize: trainSize}
	if cfg.Collective != c.Algorithm() {
		// The rounds run over the collective asked for: the trainer forms a communicator of
		// its own for them, as it does for a program that gives none.
		opts.Comm = nil
	}
	sess, err := newSession(c, cfg, p, g, opts, runDir, pairs)
	if err != nil {
		return cerr(trainer.InFlags(err))
	}
	*out = C.int64_t(sessions.put(&session{s: sess}))
	return nil
}

//export hs_session_exchange
func hs_session_exchange(id C.int64_t, kind, paramsAtSteps *C.int) *C.char {
	s, err := sessionOf(id, "hs_session_exchange")
	if err != nil {
		return cerr(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if kind != nil {
		*kind = C.int(s.s.Exchange())
	}
	if paramsAtSteps != nil {
		*paramsAtSteps = 0
		if s.s.ParamsAtSteps() {
			*paramsAtSteps = 1
		}
	}
	return nil
}

// stepReport is a local step as the C ABI reports it.
func stepReport(loss C.double, samples, correct C.int64_t, seconds C.double) trainer.StepReport {
	return trainer.StepReport{Loss: float64(loss), Samples: int(samples), Correct: int(correct),
		Duration: time.Duration(float64(seconds) * float64(time.Second))}
}

// shouldSync asks the strategy and keeps the answer for hs_session_state.
func (s *session) shouldSync() error {
	ok, err := s.s.ShouldSync(ctx())
	s.sync = ok
	return err
}

//export hs_session_step
func hs_session_step(id C.int64_t, loss C.double, samples, correct C.int64_t, seconds C.double, waitMS C.int64_t, req *C.int64_t) *C.char {
	s, err := sessionOf(id, "hs_session_step")
	if err != nil {
		return cerr(err)
	}
	r := stepReport(loss, samples, correct, seconds)
	return s.run(waitMS, req, func() error { return s.s.Step(ctx(), r) })
}

//export hs_session_step_sync
func hs_session_step_sync(id C.int64_t, loss C.double, samples, correct C.int64_t, seconds C.double, waitMS C.int64_t, req *C.int64_t) *C.char {
	s, err := sessionOf(id, "hs_session_step_sync")
	if err != nil {
		return cerr(err)
	}
	r := stepReport(loss, samples, correct, seconds)
	return s.run(waitMS, req, func() error {
		if err := s.s.Step(ctx(), r); err != nil {
			return err
		}
		return s.shouldSync()
	})
}

//export hs_session_should_sync
func hs_session_should_sync(id C.int64_t, waitMS C.int64_t, req *C.int64_t) *C.char {
	s, err := sessionOf(id, "hs_session_should_sync")
	if err != nil {
		return cerr(err)
	}
	return s.run(waitMS, req, s.shouldSync)
}

//export hs_session_sync
func hs_session_sync(id C.int64_t, waitMS C.int64_t, req *C.int64_t) *C.char {
	s, err := sessionOf(id, "hs_session_sync")
	if err != nil {
		return cerr(err)
	}
	return s.run(waitMS, req, func() error {
		st, err := s.s.Sync(ctx())
		s.last = st
		return err
	})
}

//export hs_session_state
func hs_session_state(id C.int64_t, syncNow, stop *C.int, round *C.int64_t, globalLoss *C.double) *C.char {
	s, err := sessionOf(id, "hs_session_state")
	if err != nil {
		return cerr(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b := func(v bool) C.int {
		if v {
			return 1
		}
		return 0
	}
	if syncNow != nil {
		*syncNow = b(s.sync)
	}
	if stop != nil {
		*stop = b(s.last.Stop)
	}
	if round != nil {
		*round = C.int64_t(s.last.GlobalRounds)
	}
	if globalLoss != nil {
		*globalLoss = C.double(s.last.GlobalLoss)
	}
	return nil
}

//export hs_session_stop
func hs_session_stop(id C.int64_t) *C.char {
	s, err := sessionOf(id, "hs_session_stop")
	if err != nil {
		return cerr(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.s.Stop()
	return nil
}

//export hs_session_close
func hs_session_close(id C.int64_t, waitMS C.int64_t, req *C.int64_t) *C.char {
	s, err := sessionOf(id, "hs_session_close")
	if err != nil {
		return cerr(err)
	}
	return s.run(waitMS, req, func() error {
		_, err := s.s.Close(ctx())
		sessions.drop(int64(id))
		return err
	})
}
