package trainer

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/collective/kv"
	"github.com/hetsync/hetsync/trainer/metrics"
)

// SyncSwitchConfig holds Sync-Switch's settings (algorithms.md §9).
type SyncSwitchConfig struct {
	// SwitchAt is the fraction of the total work trained with BSP before the one planned
	// switch to ASP (the paper's offline policy picked 5% for ResNet32/CIFAR-10). 0 means 0.05.
	SwitchAt float64 `json:"switch_at,omitempty"`
	// TrainSamples is the size of the training set, used to turn --epochs into BSP rounds
	// when --max-rounds is not given. 0 means 60000 (Fashion-MNIST).
	TrainSamples int `json:"train_samples,omitempty"`
	// ASPLR is the ASP phase's learning rate. 0 means LR/N, the inverse of linear scaling:
	// N pushes of one gradient then move the model as far as one BSP step on the mean.
	ASPLR float64 `json:"asp_lr,omitempty"`
	// Momentum is the optimizer state's treatment at BSP→ASP (§9.2): "keep" (the velocity and
	// coefficient carry over), "scale" (default: velocity kept, coefficient ÷ N: asynchrony
	// adds momentum of its own; with "keep" the ASP phase oscillated by ±5 points on
	// Fashion-MNIST at 4 ranks, with "scale" it climbed steadily), "zero" (the
	// velocity restarts at zero, coefficient kept) or "off" (plain SGD in ASP at the full LR,
	// as asgd: stale gradients and momentum compound, so this converges best on few ranks).
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
	return s
}

// Validate checks the Sync-Switch settings (zero fields are defaults).
func (s SyncSwitchConfig) Validate() error {
	switch {
	case s.SwitchAt < 0 || s.SwitchAt > 1 || math.IsNaN(s.SwitchAt):
		return fmt.Errorf("trainer: --switch-at must be a fraction in [0, 1], got %v", s.SwitchAt)
	case s.TrainSamples < 0:
		return fmt.Errorf("trainer: --switch-train-samples must be ≥ 0, got %d", s.TrainSamples)
	case s.ASPLR < 0 || math.IsNaN(s.ASPLR) || math.IsInf(s.ASPLR, 0):
		return fmt.Errorf("trainer: --switch-asp-lr must be a positive number, got %v", s.ASPLR)
	case s.Momentum != "" && s.Momentum != "keep" && s.Momentum != "scale" && s.Momentum != "zero" && s.Momentum != "off":
		return fmt.Errorf("trainer: --switch-momentum %q: want keep, scale, zero or off", s.Momentum)
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

// defaultsESyncSwitch fills the defaults of esync.go, syncswitch.go and straggler.go
// (Config.Defaults calls it last).
func (c *Config) defaultsESyncSwitch() {
	if c.Strategy == "esync" {
		c.ESyncDefaults()
	}
	if c.Strategy == "sync-switch" {
		c.SyncSwitch = c.SyncSwitch.defaults()
	}
	if c.Stragglers.Enabled() && c.Stragglers.Mode == "" {
		c.Stragglers.Mode = "network"
	}
}

// validateESyncSwitch validates the settings of esync.go, syncswitch.go and straggler.go.
func (c *Config) validateESyncSwitch(size int) error {
	if err := c.ESync.Validate(); err != nil {
		return err
	}
	if err := c.SyncSwitch.Validate(); err != nil {
		return err
	}
	if err := c.Stragglers.Validate(size); err != nil {
		return err
	}
	if c.Stragglers.Mode == "compute" && c.Strategy != "esync" && c.Strategy != "sync-switch" {
		return fmt.Errorf("trainer: --stragglers mode=compute is applied by esync and sync-switch only (--sync %s); use mode=network or --step-sleep", c.Strategy)
	}
	return nil
}

// momentumRule is the parameter server's rule for Sync-Switch's ASP phase: the workers' SGD
// with momentum (PyTorch semantics, like SGD.Step) applied to each push, its velocity carried
// over from the BSP phase and back.
type momentumRule struct {
	lr, momentum, wd float32
	v                []float32
	offset           int
}

func (r *momentumRule) Push(s *kv.Shard, p kv.Push) (bool, error) {
	if len(p.G) != len(s.W) {
		return false, fmt.Errorf("sync-switch: shard %d has %d values, push from rank %d has %d", s.Index, len(s.W), p.Worker, len(p.G))
	}
	w, g, v := s.W, p.G[:len(s.W)], r.v[:len(s.W)]
	if r.momentum == 0 {
		for i, x := range w {
			w[i] = x - r.lr*(g[i]+r.wd*x)
		}
		return true, nil
	}
	for i, x := range w {
		v[i] = r.momentum*v[i] + g[i] + r.wd*x
		w[i] = x - r.lr*v[i]
	}
	return true, nil
}

func (r *momentumRule) Pulled(*kv.Shard, int) {}

// Sync-Switch phases.
const (
	phaseBSP = iota
	phaseASP
)

// syncSwitch is Sync-Switch (algorithms.md §9): BSP (as ssgd) for the first SwitchAt of the
// work, then ASP (as asgd, through collective/kv) for the rest, switched in-process: the
// parameter-server shards start from the BSP model and velocity, and by default the ASP phase
// keeps the momentum (§9.2's data: no treatment beat keeping it; --switch-momentum offers
// scale and zero). The ASP phase's learning rate defaults to LR/N. Work is counted as Sync-Switch does:
// one BSP round equals N ASP pushes.
//
// All ranks agree on every switch. BSP→ASP is decided from the round's allreduce, which
// carries, besides the gradient, rank 0's stop vote and time-based switch vote, every rank's
// previous round time (the straggler detector's input): every rank computes
// the same decision. ASP→BSP (an elastic excursion ending, or the stop) is left by each
// worker after the reply that shows the target version or the stop flag; then every rank
// closes the service (which returns when all workers are done) and one allreduce of the
// shards' model and velocity (each rank contributes the shards it hosts) gives every rank the
// identical model and optimizer state, and the agreed stop.
//
// Switch cost: the time from the decision to the first step of the next phase, per rank; it
// is counted as Wait in the round that switches and totalled in SwitchTime.
type syncSwitch struct {
	cfg      SyncSwitchConfig
	detector stragglerDetector
	phase    int
	switchAt int // BSP rounds planned before the switch; -1: decided by time (rank 0's vote)

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
	SwitchTime time.Duration
}

func newSyncSwitch(cfg *Config) (Strategy, error) {
	c := cfg.SyncSwitch.defaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &syncSwitch{cfg: c, detector: stragglerDetector{Threshold: c.Threshold, Window: c.Window}}, nil
}

func (s *syncSwitch) Name() string { return "sync-switch" }

func (s *syncSwitch) extra(size int) int { return 5 + size }

func (s *syncSwitch) Start(ctx context.Context, w *Worker) error {
	if w.Comm == nil {
		return fmt.Errorf("trainer: rank %d: sync-switch needs a communicator", w.Rank)
	}
	applyComputeStragglers(w)
	cfg := w.Cfg
	switch {
	case cfg.MaxRounds > 0:
		s.switchAt = int(math.Ceil(s.cfg.SwitchAt * float64(cfg.MaxRounds)))
	case cfg.Epochs > 0:
		total := cfg.Epochs * float64(s.cfg.TrainSamples) / float64(w.Size*cfg.Batch)
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
		metrics.Field{Key: "switch_s", Value: s.SwitchTime.Seconds()})
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

	t0 := w.Now()
	if err := w.Comm.Barrier(ctx); err != nil {
		return RoundStats{}, fmt.Errorf("trainer: rank %d: sync-switch BSP round %d: barrier: %w", w.Rank, s.bspDone, err)
	}
	t1 := w.Now()
	if err := w.Comm.AllReduce(ctx, collective.F32(s.buf), collective.Sum); err != nil {
		return RoundStats{}, fmt.Errorf("trainer: rank %d: sync-switch BSP round %d: allreduce: %w", w.Rank, s.bspDone, err)
	}
	t2 := w.Now()
	if err := w.Apply(s.buf[:n], 1/float32(p)); err != nil {
		return RoundStats{}, err
	}
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
		planned := (s.switchAt > 0 && s.bspDone >= s.switchAt) || x[4] > 0.5
		detected := s.cfg.Policy != "none" && s.detector.Detect(s.hist)
		switch {
		case planned || (detected && s.cfg.Policy == "greedy"):
			t := w.Now()
			if err := s.toASP(ctx, w, 0); err != nil {
				return RoundStats{}, err
			}
			out.Wait += w.Now().Sub(t)
		case detected && s.cfg.Policy == "elastic":
			t := w.Now()
			if err := s.toASP(ctx, w, uint64(s.cfg.ElasticRounds)*uint64(p)); err != nil {
				return RoundStats{}, err
			}
			out.Wait += w.Now().Sub(t)
			// Probe afresh after the excursion: keep the baseline, drop the straggling tail.
			s.hist = s.hist[:max(0, len(s.hist)-s.cfg.Window)]
		}
	}
	now := w.Now()
	s.lastRound = now.Sub(s.roundT0)
	s.roundT0 = now
	return out, nil
}

// toASP starts the parameter server from this rank's (identical) model and velocity. target
// is the shard version that ends an elastic excursion (0: none).
func (s *syncSwitch) toASP(ctx context.Context, w *Worker, target uint64) error {
	t0 := w.Now()
	// One server (rank 0) by default, as for asgd: on a few ranks sharing a host, colocated
	// shards on every rank (Sync-Switch's cluster setup) cost each push a message per rank and
	// made the ASP phase ~1.6x slower here; --ps-servers k shards over ranks 0..k-1.
	servers := make([]int, max(1, w.Cfg.PSServers))
	for i := range servers {
		servers[i] = i
	}
	lr := s.cfg.ASPLR
	if lr == 0 {
		lr = w.Cfg.LR / float64(w.Size)
		if s.cfg.Momentum == "off" {
			lr = w.Cfg.LR
		}
	}
	s.rules = s.rules[:0]
	vel, mom := w.Opt.Velocity, w.Opt.Momentum
	switch s.cfg.Momentum {
	case "scale":
		mom /= float32(w.Size)
	case "zero":
		vel = nil
	case "off":
		vel, mom = nil, 0
	}
	svc, err := kv.Start(ctx, w.Endpoint, kv.Config{
		Len: len(w.Params), Servers: servers, Init: w.Params,
		Rule: func(sh *kv.Shard) (kv.Rule, error) {
			r := &momentumRule{lr: float32(lr), momentum: mom, wd: w.Opt.WeightDecay,
				v: make([]float32, len(sh.W)), offset: sh.Offset}
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
	if err := w.Load(); err != nil {
		return false, err
	}
	pushes := int64(s.leaveBuf[2*n+1] + 0.5)
	s.aspRounds += int(pushes) / w.Size
	s.aspSampl += pushes * int64(w.Cfg.Batch)
	s.svc, s.phase, s.skipSample = nil, phaseBSP, true
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
