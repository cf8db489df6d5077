package trainer

import (
	"context"
	"fmt"
	"math"

	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/collective/kv"
)

// Sync-Switch's ASP phase: the parameter server's optimizer rule, and the switches into the
// phase and out of it.

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

// toASP starts the parameter server from this rank's (identical) model and velocity. target
// is the shard version that ends an elastic excursion (0: none).
func (s *syncSwitch) toASP(ctx context.Context, w *Worker, target uint64) error {
	t0 := w.Now()
	// One server (rank 0) by default, as for asgd: on a few ranks sharing a host, colocated
	// shards on every rank (Sync-Switch's cluster setup) cost each push a message per rank
	// (docs/results/tuning.md#sync-switch-the-asp-phases-server); --ps-servers k shards over
	// ranks 0..k-1, or --ps-ranks names the ranks.
	servers := placement(w.Cfg)
	opt := s.cfg.aspOptimizer(w.Cfg.LR, float64(w.SGD().Momentum), w.Size)
	s.rules = s.rules[:0]
	vel := w.SGD().Velocity
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
				wd: w.SGD().WeightDecay, v: make([]float32, len(sh.W)), offset: sh.Offset}
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

// aspRound pushes the step's gradient and pulls the server's model; it leaves the phase when
// the reply shows the stop or the excursion's end.
func (s *syncSwitch) aspRound(ctx context.Context, w *Worker, stopVote bool) (RoundStats, error) {
	rep, comm, err := s.pushPull(ctx, w, stopVote, "sync-switch ASP")
	if err != nil {
		return RoundStats{}, err
	}
	out := s.roundOf(rep, comm)
	out.GlobalSamples = s.samples + s.aspSampl + int64(rep.Version)*int64(w.Cfg.Batch)
	out.GlobalRounds = s.bspDone + s.aspRounds + int(rep.Version)/w.Size
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
	if w.SGD().Momentum != 0 {
		copy(w.SGD().Velocity, s.leaveBuf[n:2*n])
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
