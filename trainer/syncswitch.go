package trainer

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/metrics"
)

// Sync-Switch phases.
const (
	phaseBSP = iota
	phaseASP
)

// syncSwitch is Sync-Switch (docs/algorithms.md#sync-switch): BSP (as ssgd) for the first SwitchAt of the
// work, then ASP (through collective/kv) for the rest, switched in-process. Work is counted as
// Sync-Switch does: one BSP round equals N ASP pushes.
//
// # The switch
//
// The paper's system switches by checkpoint and restart: the optimizer state on the parameter
// servers (the momentum accumulators) survives the switch, and the global step goes on
// (docs/algorithms.md#the-switch). Here the parameter-server shards start from the BSP model and the BSP velocity, and
// the velocity comes back at ASP→BSP (an elastic excursion's end), so the optimizer state
// carries over both ways. What the paper's code does to the learning rate and momentum at the
// switch cannot be read (its modified Tensor2Tensor is not public); it is reconstructed from
// the data: the exploratory notes scale the learning rate linearly with the global batch, and
// the momentum experiments try keeping it, zeroing the velocity, dividing the coefficient by
// N, and ramping it back, with "keep" and "ramp" best on ResNet32/CIFAR-10 at 8 ranks. All of
// them are offered (--switch-momentum, SyncSwitchConfig.aspOptimizer), and --switch-asp-lr
// overrides the learning rate.
//
// The default is "scale": velocity carried, coefficient m/N, learning rate kept at LR. The
// other treatments either move less per sample than BSP (LR/N) or add momentum on top of the
// momentum that asynchrony adds by itself (about 1 − 1/N) and the slow ranks' stale
// gradients, and stalled below SSGD's accuracy; docs/results/tuning.md#sync-switch-momentum-at-the-switch
// holds the comparison.
//
// So the optimizer state carries over and the ASP phase learns at least as fast as asgd.
// --switch-lr-decay cosine (default none, so that runs compare with the other strategies'
// constant rate) puts both phases on one cosine schedule over the run's global rounds, as
// the paper's T2T schedule runs on the global step across its switches; it steadies the
// final accuracy of runs that end in ASP.
//
// # Agreement
//
// All ranks agree on every switch. BSP→ASP is decided from the round's allreduce, which
// carries, besides the gradient, rank 0's stop vote and time-based switch vote, every rank's
// previous round time (the straggler detector's input) and its mean switch cost: every rank
// computes the same decision (stragglerPolicy). ASP→BSP (an elastic excursion ending, or the
// stop) is left by each worker after the reply that shows the target version or the stop
// flag; then every rank closes the service (which returns when all workers are done) and one
// allreduce of the shards' model and velocity (each rank contributes the shards it hosts)
// gives every rank the identical model and optimizer state, and the agreed stop.
//
// Switch cost: the time from the decision to the first step of the next phase, per rank; it
// is counted as Wait in the round that switches and totalled in SwitchTime.
type syncSwitch struct {
	cfg      SyncSwitchConfig
	detector stragglerDetector
	policy   stragglerPolicy
	phase    int
	switchAt int // BSP rounds planned before the switch; -1: decided by time (rank 0's vote)
	total    int // global rounds of the whole run; -1: bounded by time

	// BSP
	buf        []float32
	bspDone    int
	hist       []time.Duration
	skipSample bool
	lastRound  time.Duration
	roundT0    time.Time
	start      time.Time

	// ASP
	psClient
	rules     []*momentumRule
	target    uint64 // excursion end in shard versions; 0: none
	leaveBuf  []float32
	aspRounds int   // global rounds of finished ASP phases
	aspSampl  int64 // samples of finished ASP phases

	samples    int64
	switches   int
	excursions int // elastic excursions started
	SwitchTime time.Duration
}

func syncSwitchFactory() Factory {
	return Factory{
		Options: func() Options { return &SyncSwitchConfig{} },
		New:     newSyncSwitch,
	}
}

func newSyncSwitch(cfg *Config) (Strategy, error) {
	o, err := optionsOf[*SyncSwitchConfig](cfg, "sync-switch")
	if err != nil {
		return nil, err
	}
	c := o.defaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &syncSwitch{cfg: c, detector: stragglerDetector{Threshold: c.Threshold, Window: c.Window},
		policy: newStragglerPolicy(c.Policy, c.ElasticRounds, c.Window)}, nil
}

func (s *syncSwitch) Name() string { return "sync-switch" }

// extra is the length of the scalars after the gradient in a BSP round's allreduce: stop vote,
// loss, correct, samples, time-based switch vote, each rank's previous round time, and the
// ranks' switch costs.
func (s *syncSwitch) extra(size int) int { return 6 + size }

func (s *syncSwitch) Start(ctx context.Context, w *Worker) error {
	if w.Comm == nil {
		return fmt.Errorf("trainer: rank %d: sync-switch needs a communicator", w.Rank)
	}
	if w.SGD() == nil {
		return fmt.Errorf("trainer: rank %d: sync-switch needs Config.Optimizer sgd, got %s", w.Rank, w.Opt.Name())
	}
	cfg := w.Cfg
	s.total = -1
	switch {
	case cfg.MaxRounds > 0:
		s.total = cfg.MaxRounds
		s.switchAt = int(math.Ceil(s.cfg.SwitchAt * float64(cfg.MaxRounds)))
	case cfg.Epochs > 0:
		total := cfg.Epochs * float64(s.cfg.TrainSamples) / float64(w.Size*cfg.Batch)
		s.total = int(total)
		s.switchAt = int(math.Ceil(s.cfg.SwitchAt * total))
	default:
		s.switchAt = -1
	}
	n := len(w.Params)
	s.buf = make([]float32, n+s.extra(w.Size))
	s.leaveBuf = make([]float32, 2*n+2) // model, velocity, stop, pushes
	if len(w.SGD().Velocity) != n && w.SGD().Momentum != 0 {
		w.SGD().Velocity = make([]float32, n)
	}
	s.start = w.Now()
	s.roundT0 = s.start
	s.skipSample = true
	if s.switchAt == 0 {
		return s.toASP(ctx, w, 0)
	}
	return nil
}

// Asynchronous is true in the ASP phase, where a round is one push of this rank.
func (s *syncSwitch) Asynchronous() bool { return s.phase == phaseASP }

// RanOver is the BSP phase's allreduce, then the parameter server once the run switched.
func (s *syncSwitch) RanOver(w *Worker) string {
	if s.phase == phaseASP {
		return allReduceUsed(w) + " then " + ParameterServer
	}
	return allReduceUsed(w)
}

// Round is one local step and the phase's exchange (StepRound).
func (s *syncSwitch) Round(ctx context.Context, w *Worker, stopVote bool) (RoundStats, error) {
	return StepRound(ctx, w, s, stopVote)
}

// Exchange: in both phases the update is the strategy's (BSP's optimizer on the averaged
// gradient, then the server's rule), so that the optimizer state and the learning-rate
// schedule carry over the switches; a caller's loop hands it each step's gradient and never
// steps its own optimizer.
func (s *syncSwitch) Exchange() Exchange { return ExchangeServer }

// Sync runs the phase's exchange of the step's gradient and leaves the updated model in
// w.Params.
func (s *syncSwitch) Sync(ctx context.Context, w *Worker, stopVote bool) (RoundStats, error) {
	asp := s.phase == phaseASP
	var st RoundStats
	var err error
	if asp {
		st, err = s.aspRound(ctx, w, stopVote)
	} else {
		st, err = s.bspRound(ctx, w, stopVote)
	}
	// The metrics carry the phase this round ran in and the switching time so far, so a report
	// can give the training time both with and without the cost of switching.
	phase := 0.0
	if asp {
		phase = 1
	}
	st.Extra = append(st.Extra, metrics.Field{Key: "asp", Value: phase},
		metrics.Field{Key: "switch_s", Value: s.SwitchTime.Seconds()},
		metrics.Field{Key: "switches", Value: float64(s.switches)})
	return st, err
}

// bspRound allreduces the step's gradient with the round's scalars and applies the average.
func (s *syncSwitch) bspRound(ctx context.Context, w *Worker, stopVote bool) (RoundStats, error) {
	st := s.step
	n, p := len(w.Grads), w.Size
	copy(s.buf, w.Grads)
	x := s.buf[n:]
	clear(x)
	if stopVote {
		x[0] = 1
	}
	x[1] = float32(st.Loss)
	x[2] = float32(st.Correct)
	x[3] = float32(st.Samples)
	if w.Rank == 0 && s.switchAt < 0 && w.Cfg.MaxTime > 0 &&
		w.Now().Sub(s.start) >= time.Duration(s.cfg.SwitchAt*float64(w.Cfg.MaxTime)) {
		x[4] = 1
	}
	x[5+w.Rank] = float32(s.lastRound.Seconds())
	if s.switches > 0 {
		// This rank's mean switch cost so far; the policy uses the ranks' mean.
		x[5+p] = float32(s.SwitchTime.Seconds() / float64(s.switches))
	}

	t0 := w.Now()
	if err := w.Comm.Barrier(ctx); err != nil {
		return RoundStats{}, fmt.Errorf("trainer: rank %d: sync-switch BSP round %d: barrier: %w", w.Rank, s.bspDone, err)
	}
	t1 := w.Now()
	if err := w.Comm.AllReduce(ctx, collective.F32(s.buf), collective.Sum); err != nil {
		return RoundStats{}, fmt.Errorf("trainer: rank %d: sync-switch BSP round %d: allreduce: %w", w.Rank, s.bspDone, err)
	}
	t2 := w.Now()
	if s.decays() {
		w.SGD().LR = float32(w.Cfg.LR * cosineFactor(float64(s.bspDone+s.aspRounds)/float64(s.total)))
	}
	w.Apply(s.buf[:n], 1/float32(p))
	s.bspDone++
	s.samples += int64(x[3] + 0.5)
	out := RoundStats{
		LocalSteps: 1, Samples: st.Samples, Loss: st.Loss, Correct: st.Correct,
		GlobalLoss:    float64(x[1]) / float64(p),
		GlobalSamples: s.samples + s.aspSampl,
		GlobalRounds:  s.bspDone + s.aspRounds,
		Compute:       st.Duration,
		Wait:          t1.Sub(t0),
		Comm:          t2.Sub(t1),
		Stop:          x[0] > 0.5,
	}
	// The detector's sample: the slowest rank's previous round time.
	var sample time.Duration
	for r := 0; r < p; r++ {
		sample = max(sample, time.Duration(float64(x[5+r])*float64(time.Second)))
	}
	if s.skipSample {
		// The first BSP round, and the first after an ASP excursion, has no BSP round time.
		s.skipSample = false
	} else {
		if len(s.hist) >= 9*s.cfg.Window { // all the detector looks at
			s.hist = append(s.hist[:0], s.hist[1:]...)
		}
		s.hist = append(s.hist, sample)
	}
	if !out.Stop {
		in := policyInput{
			Planned:    (s.switchAt > 0 && s.bspDone >= s.switchAt) || x[4] > 0.5,
			Detected:   s.cfg.Policy != "none" && s.detector.Detect(s.hist),
			Remaining:  -1,
			SwitchCost: time.Duration(float64(x[5+p]) / float64(p) * float64(time.Second)),
			Spare:      -1,
		}
		in.Slow, in.Base = s.detector.Medians(s.hist)
		if s.switchAt > 0 {
			in.Remaining = s.switchAt - s.bspDone
			if s.total > 0 {
				in.Spare = s.total - s.bspDone - s.aspRounds - in.Remaining
			}
		}
		act := s.policy.Decide(in)
		switch act.Kind {
		case actSwitch:
			t := w.Now()
			if err := s.toASP(ctx, w, 0); err != nil {
				return RoundStats{}, err
			}
			out.Wait += w.Now().Sub(t)
		case actExcursion:
			t := w.Now()
			if err := s.toASP(ctx, w, uint64(act.Rounds)*uint64(p)); err != nil {
				return RoundStats{}, err
			}
			out.Wait += w.Now().Sub(t)
			s.excursions++
			// Probe afresh after the excursion: keep the baseline, drop the straggling tail.
			s.hist = s.hist[:max(0, len(s.hist)-s.cfg.Window)]
		}
	}
	now := w.Now()
	s.lastRound = now.Sub(s.roundT0)
	s.roundT0 = now
	return out, nil
}

// decays reports whether the run follows the cosine schedule (SyncSwitchConfig.Decay).
func (s *syncSwitch) decays() bool { return s.cfg.Decay == "cosine" && s.total > 0 }

func (s *syncSwitch) Finish(ctx context.Context, w *Worker) error {
	if s.svc == nil {
		return nil
	}
	svc := s.svc
	s.svc = nil
	return svc.Close(ctx)
}

// NoCheckpoint says why neither one file by rank 0 nor one part per rank of a round can hold
// this strategy's state.
func (s *syncSwitch) NoCheckpoint() string {
	return "its asynchronous phase keeps the model on the parameter-server ranks, with a copy and step count per worker"
}
