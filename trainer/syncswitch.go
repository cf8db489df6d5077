package trainer

import (
	"context"
	"flag"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/collective/kv"
	"github.com/hetsync/hetsync/metrics"
)

// SyncSwitchConfig holds Sync-Switch's settings (docs/algorithms.md#sync-switch).
type SyncSwitchConfig struct {
	// PSPlacement is where the ASP phase's parameter server lives.
	PSPlacement
	// SwitchAt is the fraction of the total work trained with BSP before the one planned
	// switch to ASP (the paper's offline policy picked 5% for ResNet32/CIFAR-10). 0 means 0.05.
	SwitchAt float64 `json:"switch_at,omitempty"`
	// TrainSamples is the size of the training set, used to turn --epochs into BSP rounds
	// when --max-rounds is not given. 0 means 60000 (Fashion-MNIST).
	TrainSamples int `json:"train_samples,omitempty"`
	// ASPLR is the ASP phase's learning rate. 0 means the treatment's own (aspOptimizer):
	// LR/N (the inverse of linear scaling) for keep, ramp and zero, LR for scale and off.
	ASPLR float64 `json:"asp_lr,omitempty"`
	// Momentum is the optimizer state's treatment at BSP→ASP (docs/algorithms.md#the-switch; the choice of default is
	// argued on the syncSwitch type): "scale" (default: the velocity carries over, the
	// coefficient is m/N, the learning rate stays LR), "keep" (velocity and coefficient carry
	// over, LR/N), "ramp" (velocity kept, coefficient m/N rising linearly back to m over
	// RampRounds, LR/N: the paper's best-scoring treatment), "implicit" (velocity kept, the
	// coefficient and LR that keep BSP's total momentum and step per sample once asynchrony's
	// implicit momentum 1 − 1/N is counted), "zero" (velocity restarts at zero, m, LR/N) or
	// "off" (plain SGD at LR, as asgd). "" means scale.
	Momentum string `json:"momentum,omitempty"`
	// Policy reacts to transient stragglers during the BSP phase: "none", "greedy" (switch
	// to ASP at once and stay) or "elastic" (ASP for ElasticRounds, then back to BSP for the
	// rest of the planned BSP work). "" means none.
	Policy string `json:"policy,omitempty"`
	// Threshold (θ) and Window (K) configure the straggler detector; 0 means 1.5 and 5.
	Threshold float64 `json:"threshold,omitempty"`
	Window    int     `json:"window,omitempty"`
	// ElasticRounds is how long an elastic ASP excursion lasts, in global rounds (N pushes
	// each). 0 means 100.
	ElasticRounds int `json:"elastic_rounds,omitempty"`
	// RampRounds is the length of --switch-momentum ramp's ramp, in global rounds (N pushes
	// each). 0 means 100.
	RampRounds int `json:"ramp_rounds,omitempty"`
	// Decay is the learning-rate schedule over the whole run, both phases: "cosine" (each
	// phase's learning rate × ½(1 + cos(π·r/R)) at global round r of the run's R; the paper's
	// T2T schedule runs on the global step, which goes on across its switches;
	// needs --epochs or --max-rounds, constant when only --max-time bounds the run) or "none"
	// (constant, as the other strategies). "" means none.
	Decay string `json:"decay,omitempty"`
}

// SwitchMomentumTreatments are the values of --switch-momentum (SyncSwitchConfig.Momentum).
func SwitchMomentumTreatments() []string {
	return []string{"keep", "scale", "ramp", "implicit", "zero", "off"}
}

// defaults returns s with its zero fields filled.
func (s SyncSwitchConfig) defaults() SyncSwitchConfig {
	if s.SwitchAt == 0 {
		s.SwitchAt = 0.05
	}
	if s.TrainSamples == 0 {
		s.TrainSamples = 60000
	}
	if s.Policy == "" {
		s.Policy = "none"
	}
	if s.Momentum == "" {
		s.Momentum = "scale"
	}
	if s.Threshold == 0 {
		s.Threshold = 1.5
	}
	if s.Window == 0 {
		s.Window = 5
	}
	if s.ElasticRounds == 0 {
		s.ElasticRounds = 100
	}
	if s.RampRounds == 0 {
		s.RampRounds = 100
	}
	if s.Decay == "" {
		s.Decay = "none"
	}
	return s
}

// Flags declares Sync-Switch's flags.
func (s *SyncSwitchConfig) Flags(fs *flag.FlagSet) {
	*s = s.defaults()
	s.PSPlacement.Flags(fs)
	fs.Float64Var(&s.SwitchAt, "switch-at", s.SwitchAt, "fraction of the total work (--max-rounds, --epochs or --max-time) trained with BSP before switching to ASP")
	fs.Float64Var(&s.ASPLR, "switch-asp-lr", s.ASPLR, "learning rate of the ASP phase (default: --lr for scale and off, --lr / ranks for keep, ramp and zero)")
	fs.StringVar(&s.Momentum, "switch-momentum", s.Momentum, "optimizer state at BSP→ASP: scale (velocity carried, momentum ÷ ranks, --lr), keep (velocity and momentum carried, --lr / ranks), ramp (as scale at --lr / ranks, momentum back to --momentum over --switch-ramp-rounds), implicit (velocity carried, momentum and lr that count asynchrony's own momentum), zero (velocity reset) or off (plain SGD at --lr, as asgd)")
	fs.IntVar(&s.RampRounds, "switch-ramp-rounds", s.RampRounds, "--switch-momentum ramp: global rounds over which the momentum returns from momentum ÷ ranks to momentum")
	fs.StringVar(&s.Decay, "switch-lr-decay", s.Decay, "learning-rate schedule over the whole run, both phases: none or cosine (to 0 at the run's last round; needs --epochs or --max-rounds)")
	fs.IntVar(&s.TrainSamples, "switch-train-samples", s.TrainSamples, "training-set size that turns --epochs into BSP rounds")
	fs.StringVar(&s.Policy, "straggler-policy", s.Policy, "reaction to detected stragglers during BSP: none, greedy or elastic")
	fs.Float64Var(&s.Threshold, "straggler-threshold", s.Threshold, "a straggler is detected when --straggler-window rounds in a row each take more than this multiple of the baseline (median) round time")
	fs.IntVar(&s.Window, "straggler-window", s.Window, "consecutive straggling rounds that detect a straggler")
	fs.IntVar(&s.ElasticRounds, "elastic-rounds", s.ElasticRounds, "global rounds of an elastic ASP excursion")
}

// Defaults fills s's zero fields.
func (s *SyncSwitchConfig) Defaults(*Config) { *s = s.defaults() }

// Validate checks the Sync-Switch settings (zero fields are defaults).
func (s *SyncSwitchConfig) Validate(_ *Config, size int) error {
	if err := s.validate(); err != nil {
		return err
	}
	return s.PSPlacement.Validate(size)
}

func (s SyncSwitchConfig) validate() error {
	switch {
	case s.SwitchAt < 0 || s.SwitchAt > 1 || math.IsNaN(s.SwitchAt):
		return fmt.Errorf("trainer: --switch-at must be a fraction in [0, 1], got %v", s.SwitchAt)
	case s.TrainSamples < 0:
		return fmt.Errorf("trainer: --switch-train-samples must be ≥ 0, got %d", s.TrainSamples)
	case s.ASPLR < 0 || math.IsNaN(s.ASPLR) || math.IsInf(s.ASPLR, 0):
		return fmt.Errorf("trainer: --switch-asp-lr must be a positive number, got %v", s.ASPLR)
	case s.Momentum != "" && !slices.Contains(SwitchMomentumTreatments(), s.Momentum):
		return fmt.Errorf("trainer: --switch-momentum %q: want one of %s", s.Momentum, strings.Join(SwitchMomentumTreatments(), ", "))
	case s.Decay != "" && s.Decay != "none" && s.Decay != "cosine":
		return fmt.Errorf("trainer: --switch-lr-decay %q: want none or cosine", s.Decay)
	case s.RampRounds < 0:
		return fmt.Errorf("trainer: --switch-ramp-rounds must be ≥ 1, got %d", s.RampRounds)
	case s.Policy != "" && s.Policy != "none" && s.Policy != "greedy" && s.Policy != "elastic":
		return fmt.Errorf("trainer: --straggler-policy %q: want none, greedy or elastic", s.Policy)
	case s.Threshold < 0 || (s.Threshold > 0 && s.Threshold <= 1) || math.IsNaN(s.Threshold) || math.IsInf(s.Threshold, 0):
		return fmt.Errorf("trainer: --straggler-threshold must be a number > 1, got %v", s.Threshold)
	case s.Window < 0:
		return fmt.Errorf("trainer: --straggler-window must be ≥ 1, got %d", s.Window)
	case s.ElasticRounds < 0:
		return fmt.Errorf("trainer: --elastic-rounds must be ≥ 1, got %d", s.ElasticRounds)
	}
	return nil
}

// aspSettings are the ASP phase's optimizer settings (SyncSwitchConfig.aspOptimizer).
type aspSettings struct {
	lr                    float64
	momentum, momentumEnd float64 // the coefficient goes from momentum to momentumEnd over rampPushes
	rampPushes            uint64  // 0: momentum throughout
	carry                 bool    // the BSP velocity carries over (else it restarts at zero)
}

// aspOptimizer turns --switch-momentum, --switch-asp-lr and --switch-ramp-rounds into the ASP
// phase's settings, for BSP's learning rate lr and momentum m on n ranks (package comment of
// syncswitch.go: "The switch").
func (s SyncSwitchConfig) aspOptimizer(lr, m float64, n int) aspSettings {
	s = s.defaults()
	N := float64(max(1, n))
	out := aspSettings{lr: lr / N, momentum: m, momentumEnd: m, carry: true}
	switch s.Momentum {
	case "scale":
		out.lr, out.momentum, out.momentumEnd = lr, m/N, m/N
	case "ramp":
		out.momentum = m / N
		out.rampPushes = uint64(s.RampRounds) * uint64(max(1, n))
	case "zero":
		out.carry = false
	case "off":
		out = aspSettings{lr: lr}
	case "implicit":
		// Asynchrony on n workers acts as momentum 1 − 1/n of its own (Mitliagkas et al.,
		// "Asynchrony begets momentum"): the explicit coefficient is what keeps the total at m,
		// 1 − n·(1 − m) (0 when asynchrony alone exceeds m), and the learning rate keeps the
		// long-run step per sample at BSP's, lr/(1 − m) per N·b samples.
		ma := max(0, 1-N*(1-m))
		out.momentum, out.momentumEnd = ma, ma
		out.lr = lr * (1 - ma) / (N * (1 - m))
	}
	if s.ASPLR > 0 {
		out.lr = s.ASPLR
	}
	return out
}

// momentumRule is the parameter server's rule for Sync-Switch's ASP phase: the workers' SGD
// with momentum (PyTorch semantics, like SGD.Step) applied to each push, its velocity carried
// over from the BSP phase and back. With ramp > 0 the coefficient goes linearly from momentum
// to momentumEnd over the shard's first ramp updates (--switch-momentum ramp).
//
// With decayOver > 0 the learning rate is base × cosineFactor((decayFrom + version) /
// decayOver): the run's cosine schedule, decayFrom being the run's progress at the phase's
// start and decayOver the run's length, in pushes (N per global round).
type momentumRule struct {
	lr, momentum, wd float32
	momentumEnd      float32 // the coefficient once the ramp is over; equal to momentum without one
	ramp             uint64
	base             float64
	decayFrom        uint64
	decayOver        uint64
	v                []float32
	offset           int
}

// rate is the learning rate of the update after version updates of this phase.
func (r *momentumRule) rate(version uint64) float32 {
	if r.decayOver == 0 {
		return r.lr
	}
	return float32(r.base * cosineFactor(float64(r.decayFrom+version)/float64(r.decayOver)))
}

// cosineFactor is the cosine schedule's factor at fraction f of the run: ½(1 + cos(πf)),
// 1 at the start and 0 from the end on.
func cosineFactor(f float64) float64 {
	return 0.5 * (1 + math.Cos(math.Pi*min(1, max(0, f))))
}

// coefficient is the momentum coefficient of the update after version updates.
func (r *momentumRule) coefficient(version uint64) float32 {
	if version >= r.ramp {
		return r.momentumEnd
	}
	f := float32(version) / float32(r.ramp)
	return r.momentum + f*(r.momentumEnd-r.momentum)
}

func (r *momentumRule) Push(s *kv.Shard, p kv.Push) (bool, error) {
	if len(p.G) != len(s.W) {
		return false, fmt.Errorf("sync-switch: shard %d has %d values, push from rank %d has %d", s.Index, len(s.W), p.Worker, len(p.G))
	}
	w, g, v := s.W, p.G[:len(s.W)], r.v[:len(s.W)]
	m, lr := r.coefficient(s.Version), r.rate(s.Version)
	if m == 0 && r.ramp == 0 {
		for i, x := range w {
			w[i] = x - lr*(g[i]+r.wd*x)
		}
		return true, nil
	}
	for i, x := range w {
		v[i] = m*v[i] + g[i] + r.wd*x
		w[i] = x - lr*v[i]
	}
	return true, nil
}

func (r *momentumRule) Pulled(*kv.Shard, int) {}

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
// evidence, on this runtime's reference job (Fashion-MNIST MLP, 4 ranks, slowdown 1,1,2,4,
// batch 64, LR 0.05, m 0.9, BSP for 5% of 3 epochs, seed 1 unless said; t = time at which a
// run first evaluates at ≥ SSGD's final accuracy − 0.01, ÷ SSGD's 2-epoch wall time; the
// target is t ≤ 0.5):
//
//   - keep (m, LR/N: the inverse of linear scaling) moves as far per sample as BSP, LR/(1 − m) per
//     N·b samples, but with the momentum that asynchrony adds by itself (about 1 − 1/N,
//     "asynchrony begets momentum") and the slow ranks' stale gradients it oscillated by ±5
//     points and stalled at 0.82–0.84: never reached in 2 runs. ramp (to m over 100 rounds)
//     never in 2; implicit (the total momentum and per-sample step of BSP) 0.49 and 0.50.
//   - scale at LR/N (the previous default) steps 8× less per sample than BSP: never in 2
//     runs. off (plain SGD at LR, velocity dropped, as asgd): 0.28, 0.42 and never twice.
//   - scale at LR (0.065 per push, against asgd's 0.05, with the velocity carried): 0.32,
//     0.39, 0.42 and 0.60 (BSP for 5% of 4 epochs); over seeds 1–3 in two runs of
//     experiments/sync-switch.yaml 0.30, 0.15, 0.50 and 0.47, 0.20, 0.34, where asgd took
//     0.52, 0.15, 0.76 and 0.30, 0.19, 0.41.
//
// So the optimizer state carries over and the ASP phase learns at least as fast as asgd.
// --switch-lr-decay cosine (default none, so that runs compare with the other strategies'
// constant rate) puts both phases on one cosine schedule over the run's global rounds, as
// the paper's T2T schedule runs on the global step across its switches; it steadies the
// final accuracy of runs that end in ASP (±1.5 points between seeds at a constant rate).
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

// NotStepped says why a caller's loop cannot drive it (Session).
func (s *syncSwitch) NotStepped() string {
	return "it switches within the job from BSP to the parameter server's ASP, whose update is the server's, not the caller's optimizer's"
}

// extra is the length of the scalars after the gradient in a BSP round's allreduce: stop vote,
// loss, correct, samples, time-based switch vote, each rank's previous round time, and the
// ranks' switch costs.
func (s *syncSwitch) extra(size int) int { return 6 + size }

func (s *syncSwitch) Start(ctx context.Context, w *Worker) error {
	if w.Comm == nil {
		return fmt.Errorf("trainer: rank %d: sync-switch needs a communicator", w.Rank)
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
	if len(w.Opt.Velocity) != n && w.Opt.Momentum != 0 {
		w.Opt.Velocity = make([]float32, n)
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

func (s *syncSwitch) Round(ctx context.Context, w *Worker, stopVote bool) (RoundStats, error) {
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

func (s *syncSwitch) bspRound(ctx context.Context, w *Worker, stopVote bool) (RoundStats, error) {
	st, err := w.LocalStep(ctx)
	if err != nil {
		return RoundStats{}, err
	}
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
		w.Opt.LR = float32(w.Cfg.LR * cosineFactor(float64(s.bspDone+s.aspRounds)/float64(s.total)))
	}
	w.Apply(s.buf[:n], 1/float32(p))
	s.bspDone++
	s.samples += int64(x[3] + 0.5)
	out := RoundStats{
		LocalSteps: 1, Samples: st.Samples, Loss: st.Loss, Correct: st.Correct,
		GlobalLoss:    float64(x[1]) / float64(p),
		GlobalSamples: s.samples + s.aspSampl,
		GlobalRounds:  s.bspDone + s.aspRounds,
		Compute:       st.Compute,
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

// toASP starts the parameter server from this rank's (identical) model and velocity. target
// is the shard version that ends an elastic excursion (0: none).
func (s *syncSwitch) toASP(ctx context.Context, w *Worker, target uint64) error {
	t0 := w.Now()
	// One server (rank 0) by default, as for asgd: on a few ranks sharing a host, colocated
	// shards on every rank (Sync-Switch's cluster setup) cost each push a message per rank and
	// made the ASP phase ~1.6x slower here; --ps-servers k shards over ranks 0..k-1, or
	// --ps-ranks names the ranks.
	servers := placement(w.Cfg)
	opt := s.cfg.aspOptimizer(w.Cfg.LR, float64(w.Opt.Momentum), w.Size)
	s.rules = s.rules[:0]
	vel := w.Opt.Velocity
	if !opt.carry {
		vel = nil
	}
	var decayFrom, decayOver uint64
	if s.decays() {
		decayFrom = uint64(s.bspDone+s.aspRounds) * uint64(w.Size)
		decayOver = uint64(s.total) * uint64(w.Size)
	}
	svc, err := kv.Start(ctx, w.Endpoint, kv.Config{
		Len: len(w.Params), Servers: servers, Init: w.Params,
		Rule: func(sh *kv.Shard) (kv.Rule, error) {
			r := &momentumRule{lr: float32(opt.lr), momentum: float32(opt.momentum), momentumEnd: float32(opt.momentumEnd),
				ramp: opt.rampPushes, base: opt.lr, decayFrom: decayFrom, decayOver: decayOver,
				wd: w.Opt.WeightDecay, v: make([]float32, len(sh.W)), offset: sh.Offset}
			if len(vel) == len(w.Params) {
				copy(r.v, vel[sh.Offset:sh.Offset+len(sh.W)])
			}
			s.rules = append(s.rules, r)
			return r, nil
		},
	})
	if err != nil {
		return fmt.Errorf("trainer: rank %d: sync-switch: starting the parameter server: %w", w.Rank, err)
	}
	s.svc, s.phase, s.target, s.clock = svc, phaseASP, target, 0
	s.switches++
	s.SwitchTime += w.Now().Sub(t0)
	return nil
}

func (s *syncSwitch) aspRound(ctx context.Context, w *Worker, stopVote bool) (RoundStats, error) {
	st, rep, comm, err := s.pushPullStep(ctx, w, stopVote, "sync-switch ASP")
	if err != nil {
		return RoundStats{}, err
	}
	out := RoundStats{
		LocalSteps: 1, Samples: st.Samples, Loss: st.Loss, Correct: st.Correct, GlobalLoss: -1,
		GlobalSamples: s.samples + s.aspSampl + int64(rep.Version)*int64(w.Cfg.Batch),
		GlobalRounds:  s.bspDone + s.aspRounds + int(rep.Version)/w.Size,
		Compute:       st.Compute,
		Comm:          comm,
		Staleness:     rep.Staleness,
	}
	if !rep.Stop && (s.target == 0 || rep.Version < s.target) {
		return out, nil
	}
	// Leave ASP: every rank gets here (each reply after the stop vote or the target version
	// shows it), so the closing and the allreduce below pair up.
	t2 := w.Now()
	stop, err := s.leaveASP(ctx, w, rep.Stop)
	if err != nil {
		return RoundStats{}, err
	}
	out.Wait = w.Now().Sub(t2)
	if !stop {
		s.SwitchTime += out.Wait
	}
	out.Stop = stop
	out.GlobalSamples = s.samples + s.aspSampl
	out.GlobalRounds = s.bspDone + s.aspRounds
	return out, nil
}

// leaveASP closes the parameter server and makes the shards' model and velocity every
// rank's, with the agreed stop.
func (s *syncSwitch) leaveASP(ctx context.Context, w *Worker, sawStop bool) (bool, error) {
	n := len(w.Params)
	if err := s.svc.Close(ctx); err != nil {
		return false, fmt.Errorf("trainer: rank %d: sync-switch: closing the parameter server: %w", w.Rank, err)
	}
	clear(s.leaveBuf)
	for i, srv := range s.svc.Servers() {
		if srv != w.Rank {
			continue
		}
		lo, hi := s.svc.ShardRange(i)
		version, _ := s.svc.Snapshot(s.leaveBuf[lo:hi])
		if i == 0 {
			// Every push updates every shard: shard 0's version is the phase's push count.
			s.leaveBuf[2*n+1] = float32(version)
		}
		for _, r := range s.rules {
			if r.offset == lo {
				copy(s.leaveBuf[n+lo:n+hi], r.v)
			}
		}
	}
	if sawStop {
		s.leaveBuf[2*n] = 1
	}
	if err := w.Comm.AllReduce(ctx, collective.F32(s.leaveBuf), collective.Sum); err != nil {
		return false, fmt.Errorf("trainer: rank %d: sync-switch: gathering the ASP model: %w", w.Rank, err)
	}
	copy(w.Params, s.leaveBuf[:n])
	if w.Opt.Momentum != 0 {
		copy(w.Opt.Velocity, s.leaveBuf[n:2*n])
	}
	pushes := int64(s.leaveBuf[2*n+1] + 0.5)
	s.aspRounds += int(pushes) / w.Size
	s.aspSampl += pushes * int64(w.Cfg.Batch)
	s.svc, s.phase, s.skipSample = nil, phaseBSP, true
	s.policy.Returned()
	// The next BSP round's time starts now, not at the last BSP round before the excursion.
	s.roundT0 = w.Now()
	return s.leaveBuf[2*n] > 0.5, nil
}

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
