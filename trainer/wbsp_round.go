package trainer

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"time"

	"github.com/hetsync/hetsync/collective"
)

// What the allreduce forms of wbsp and wbsp-opt share (wbsp_allreduce.go,
// wbsp_opt_allreduce.go): the round's vector layout, the trigger (who is the slowest rank, and
// how the others learn that it finished a step) and the global update. The parameter-server
// forms (wbsp.go, wbsp_opt.go) use none of it.
//
// A round's trigger is a non-blocking barrier: every rank but the trigger rank posts it as soon
// as the previous round is issued, and the trigger rank posts it once it has completed a step.
// It completes on every rank when the trigger rank's step is done; the others Test it between
// their own steps, so they never wait for the trigger and never ask the slow rank anything.

// nonBlockingComm is the part of collective.Comm the allreduce forms of WBSP need beyond
// Collective: the non-blocking barrier that carries the trigger and the non-blocking allreduce
// that wbsp-opt overlaps with the next steps.
type nonBlockingComm interface {
	Collective
	IAllReduce(ctx context.Context, buf collective.Buffer, op collective.ReduceOp) *collective.Request
	IBarrier(ctx context.Context) *collective.Request
}

// The allreduced vector is Δ (n elements) followed by these extras and then one slot per rank
// holding that rank's mean step time of the round (seconds; the other ranks' slots are zero,
// so the sum is each rank's value exactly and every rank reads the same times).
const (
	wbspExtraStop = iota
	wbspExtraLoss
	wbspExtraCorrect
	wbspExtraSamples
	wbspExtraSteps
	wbspExtra // number of fixed extras; the step-time slots follow
)

// wbspSwitchRatio is how much slower than the current trigger rank another rank's step time
// must be for the trigger to move to it: without a margin two ranks of nearly equal speed
// would take turns, and every change costs the fast ranks a round in which the new slowest
// rank holds the allreduce up.
const wbspSwitchRatio = 1.25

// wbspStepTimes keeps each rank's step time as an exponential average of its rounds' mean
// step times (weight 1/2 for the newest round): one step preempted on a busy host must not
// move the trigger, a rank that stays slower moves it within a few rounds. Every rank feeds
// it the same allreduced times, so every rank holds the same averages.
type wbspStepTimes []float64

// add folds one round's mean step times (seconds, 0 for a rank without steps) in.
func (e wbspStepTimes) add(round []float32) {
	for r, t := range round {
		switch {
		case t <= 0:
		case e[r] == 0:
			e[r] = float64(t)
		default:
			e[r] = (e[r] + float64(t)) / 2
		}
	}
}

// wbspNextTrigger is the trigger rank of the next round from the ranks' step times (agreed:
// every rank holds the same). cur is the current trigger rank (-1: none yet); the slowest rank
// replaces it only when it is wbspSwitchRatio times slower. A pinned rank (pin ≥ 0) is always
// the trigger.
func wbspNextTrigger(cur, pin int, times []float64) int {
	if pin >= 0 {
		return pin
	}
	slow := 0
	for r, t := range times {
		if t > times[slow] {
			slow = r
		}
	}
	if cur < 0 || cur >= len(times) || slow == cur {
		return slow
	}
	if times[slow] > wbspSwitchRatio*times[cur] {
		return slow
	}
	return cur
}

// wbspRounds is the state both allreduce forms keep: the global model w_t (identical on every
// rank), the round's vector, the trigger and the round's step statistics.
type wbspRounds struct {
	comm    nonBlockingComm
	base    []float32 // w_t
	buf     []float32 // Δ, extras, step-time slots
	pin     int       // --wbsp-slow-rank, or -1
	trigger int       // rank whose step triggers the coming round; -1: none (the first round)
	period  int       // --wbsp-period: every round is this many steps of each rank; 0: the trigger
	times   wbspStepTimes
	started time.Time // when this rank's current round began (its barrier was posted)
	barrier *collective.Request
	rounds  int
	samples int64
	outer   Optimizer // Config.Outer, nil without one (outer.go)

	// this round's steps on this rank
	st      RoundStats
	lossSum float64
}

// start checks the communicator and prepares the state for a model of n parameters; name
// names the strategy in errors.
func (s *wbspRounds) start(w *Worker, name string) error {
	nb, ok := w.Comm.(nonBlockingComm)
	if !ok {
		return fmt.Errorf("trainer: rank %d: %s over --collective %s needs a communicator with non-blocking calls (IAllReduce, IBarrier), got %T",
			w.Rank, name, w.Cfg.Collective, w.Comm)
	}
	o, err := optionsOf[*WBSPOptions](w.Cfg, name)
	if err != nil {
		return err
	}
	s.comm = nb
	s.pin = -1
	if o.SlowRank != nil {
		s.pin = *o.SlowRank
	}
	s.trigger = s.pin
	s.period = o.Period
	n := len(w.Params)
	s.base = append(make([]float32, 0, n), w.Params...)
	s.buf = make([]float32, n+wbspExtra+w.Size)
	s.times = make(wbspStepTimes, w.Size)
	if s.outer, err = w.newOuter(); err != nil {
		return fmt.Errorf("trainer: rank %d: %s: %w", w.Rank, name, err)
	}
	return nil
}

// outerRounds: WBSP's rounds over an allreduce average the ranks' local steps.
func (s *wbspRounds) outerRounds() error { return nil }

// post issues the coming round's trigger barrier unless this rank is its trigger (which posts
// it after its next step) or the rounds have a fixed period (which needs no trigger).
func (s *wbspRounds) post(ctx context.Context, w *Worker) {
	s.started = w.Now()
	if s.period == 0 && w.Rank != s.trigger {
		s.barrier = s.comm.IBarrier(ctx)
	}
}

// wbspSlowFraction is the step time, as a fraction of the trigger rank's, from which a rank
// counts as slow itself (see waitsForTrigger).
const wbspSlowFraction = 0.5

// waitsForTrigger reports whether this rank, its step done and the trigger not yet fired,
// should wait for the trigger rather than start another step: only a slow rank (a step at
// least wbspSlowFraction of the trigger rank's) whose next step would end after the trigger's
// is expected to. Two ranks equally slow start their steps together after every round; if
// the one that is not the trigger started another step when the trigger's barrier is a moment
// late, every rank would wait a whole slow step for it in the round's allreduce. A fast rank
// never waits: its next step ends at most one fast step after the trigger.
func (s *wbspRounds) waitsForTrigger(w *Worker) bool {
	if s.trigger < 0 || s.times[s.trigger] <= 0 {
		return false
	}
	mine, theirs := s.times[w.Rank], s.times[s.trigger]
	elapsed := w.Now().Sub(s.started).Seconds()
	return mine >= wbspSlowFraction*theirs && elapsed+mine > theirs
}

// record counts one local step of the round.
func (s *wbspRounds) record(r StepReport) {
	s.st.LocalSteps++
	s.st.Samples += r.Samples
	s.st.Correct += r.Correct
	s.st.Compute += r.Duration
	s.lossSum += r.Loss
}

// triggered reports, after a local step, whether the round's trigger has fired (this rank is
// the trigger and has now completed a step, or the barrier completed).
func (s *wbspRounds) triggered(ctx context.Context, w *Worker, name string) (bool, error) {
	if s.period > 0 {
		// Local SGD: the round ends after the period's steps on every rank, and the
		// allreduce that follows is where the ranks meet.
		return s.st.LocalSteps >= s.period, nil
	}
	if s.barrier == nil {
		// The trigger rank: its completed step is the trigger. The others posted their part
		// of the barrier when the previous round was issued, so this wait is short.
		t0 := w.Now()
		s.barrier = s.comm.IBarrier(ctx)
		err := s.barrier.Wait(ctx)
		s.st.Wait += w.Now().Sub(t0)
		if err != nil {
			return false, fmt.Errorf("trainer: rank %d: %s round %d: trigger barrier: %w", w.Rank, name, s.rounds, err)
		}
		s.barrier = nil
		return true, nil
	}
	done, err := s.barrier.Test()
	if err != nil {
		return false, fmt.Errorf("trainer: rank %d: %s round %d: trigger barrier: %w", w.Rank, name, s.rounds, err)
	}
	if !done && s.waitsForTrigger(w) {
		t0 := w.Now()
		err := s.barrier.Wait(ctx)
		s.st.Wait += w.Now().Sub(t0)
		if err != nil {
			return false, fmt.Errorf("trainer: rank %d: %s round %d: trigger barrier: %w", w.Rank, name, s.rounds, err)
		}
		done = true
	}
	if done {
		s.barrier = nil
	} else {
		// The barrier's messages move on this process's other goroutines. A step of a small
		// model takes microseconds, far less than the scheduler's time slice, and this loop
		// never blocks: yield, so that they are not starved where goroutines outnumber cores.
		runtime.Gosched()
	}
	return done, nil
}

// fill writes the round's extras after the n deltas already in buf: rank 0's stop vote, this
// rank's step statistics and its mean step time in its own slot. It resets the round's
// statistics into the returned RoundStats.
func (s *wbspRounds) fill(w *Worker, stopVote bool) RoundStats {
	st := s.st
	st.GlobalLoss = -1
	if st.LocalSteps > 0 {
		st.Loss = s.lossSum / float64(st.LocalSteps)
	}
	s.st, s.lossSum = RoundStats{}, 0
	n := len(w.Params)
	x := s.buf[n:]
	clear(x)
	if stopVote {
		x[wbspExtraStop] = 1
	}
	x[wbspExtraLoss] = float32(st.Loss)
	x[wbspExtraCorrect] = float32(st.Correct)
	x[wbspExtraSamples] = float32(st.Samples)
	x[wbspExtraSteps] = float32(st.LocalSteps)
	if st.LocalSteps > 0 {
		x[wbspExtra+w.Rank] = float32((st.Compute / time.Duration(st.LocalSteps)).Seconds())
	}
	return st
}

// apply takes an allreduced vector: w_t ← w_t + ΣΔ/N, the agreed progress and stop, and the
// next trigger rank. It reports the stop and the global training loss.
func (s *wbspRounds) apply(w *Worker, sum []float32) (stop bool, globalLoss float64) {
	n := len(w.Params)
	roundUpdate(s.outer, s.base, sum[:n], 1, w.Size)
	x := sum[n:]
	s.rounds++
	s.samples += int64(x[wbspExtraSamples] + 0.5)
	s.times.add(x[wbspExtra : wbspExtra+w.Size])
	s.trigger = wbspNextTrigger(s.trigger, s.pin, s.times)
	return x[wbspExtraStop] > 0.5, float64(x[wbspExtraLoss]) / float64(w.Size)
}

// checkpointState encodes the rounds and samples counted, the trigger and the step times.
func (s *wbspRounds) checkpointState() []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(s.rounds))
	b = binary.LittleEndian.AppendUint64(b, uint64(s.samples))
	b = binary.LittleEndian.AppendUint64(b, uint64(int64(s.trigger)))
	for _, t := range s.times {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(t))
	}
	return appendOuterState(b, s.outer)
}

// restoreState loads what checkpointState encoded, after start, and takes w_t from the
// restored model.
func (s *wbspRounds) restoreState(w *Worker, state []byte) error {
	const head = 24
	if len(state) < head+8*w.Size {
		return fmt.Errorf("wbsp state of %d bytes, want %d for %d ranks", len(state), head+8*w.Size, w.Size)
	}
	rounds, samples := int64(binary.LittleEndian.Uint64(state)), int64(binary.LittleEndian.Uint64(state[8:]))
	trigger := int64(binary.LittleEndian.Uint64(state[16:]))
	switch {
	case rounds < 0 || samples < 0:
		return fmt.Errorf("wbsp state holds %d rounds and %d samples", rounds, samples)
	case trigger < -1 || trigger >= int64(w.Size) || (s.pin >= 0 && trigger != int64(s.pin)):
		return fmt.Errorf("wbsp state names rank %d the trigger of %d ranks (--wbsp-slow-rank %d)", trigger, w.Size, s.pin)
	}
	for r := range s.times {
		t := math.Float64frombits(binary.LittleEndian.Uint64(state[head+8*r:]))
		if !(t >= 0) || math.IsInf(t, 0) {
			return fmt.Errorf("wbsp state holds a step time of %v for rank %d", t, r)
		}
		s.times[r] = t
	}
	if err := loadOuterState(s.outer, state[head+8*w.Size:], len(w.Params)); err != nil {
		return fmt.Errorf("wbsp state: %w", err)
	}
	s.rounds, s.samples, s.trigger = int(rounds), samples, int(trigger)
	copy(s.base, w.Params)
	return nil
}
