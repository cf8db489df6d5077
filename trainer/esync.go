package trainer

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/hetsync/hetsync/metrics"
	"github.com/hetsync/hetsync/service"
)

// ESyncConfig holds ESync's settings (docs/algorithms.md#esync).
type ESyncConfig struct {
	// LocalLR is η, the learning rate of the local SGD steps (weight decay as
	// Config.WeightDecay). 0 means Config.LR.
	LocalLR float64 `json:"local_lr,omitempty"`
	// LocalMomentum is the momentum of the local steps; nil means Config.Momentum, the
	// optimizer every other strategy uses (hetsync train: 0.9). 0 is the paper's plain SGD;
	// with momentum each rank keeps its own velocity across rounds (only the parameters are
	// synchronized), the variant the paper mentions.
	LocalMomentum *float64 `json:"local_momentum,omitempty"`
	// GlobalLR is γ in w_{t+1} = w_t + γ·ΣΔ/N. 0 means 1.
	GlobalLR float64 `json:"global_lr,omitempty"`
	// Epsilon is the state service's fixed ε (the original hard-codes 0.5 s). 0 selects
	// EpsilonFactor × the median of the ranks' last step times.
	Epsilon time.Duration `json:"epsilon,omitempty"`
	// EpsilonFactor scales the median step time when Epsilon is 0. 0 means 0.1.
	EpsilonFactor float64 `json:"epsilon_factor,omitempty"`
	// Queries is how a rank waits for the state service: ESyncBlocking (the original's code,
	// the default) or ESyncNonBlocking (the paper's §4.2 mode).
	Queries string `json:"queries,omitempty"`
	// Overlap keeps a rank taking local steps while its round's exchange is in flight and
	// folds them into the next round (esync_overlap.go). Off: the paper's ESync, each
	// round's allreduce blocking.
	Overlap bool `json:"overlap,omitempty"`
	// Paced, with Overlap, ends a rank's round when its exchange in flight has landed rather
	// than when the state service says READY (esync_paced.go), so that the exchange, not the
	// slowest rank's step, sets the rounds' length. The state service is not started.
	Paced bool `json:"paced,omitempty"`
}

// The values of ESyncConfig.Queries (--esync-queries).
const (
	ESyncBlocking    = "blocking"
	ESyncNonBlocking = "nonblocking"
)

// DefaultESyncEpsilonFactor is ε / median step time when no fixed ε is given
// (docs/algorithms.md#the-ready-predicate: a fixed 0.5 s would stop every millisecond-scale fast rank early).
const DefaultESyncEpsilonFactor = 0.1

// Flags declares ESync's flags.
func (e *ESyncConfig) Flags(fs *flag.FlagSet) {
	fs.Float64Var(&e.LocalLR, "local-lr", e.LocalLR, "learning rate η of the local SGD steps (default: --lr)")
	fs.Var(optionalFloat{&e.LocalMomentum}, "local-momentum", "momentum of the local steps (default: --momentum; 0 is the paper's plain SGD; each rank keeps its own velocity)")
	if e.GlobalLR == 0 {
		e.GlobalLR = 1
	}
	fs.Float64Var(&e.GlobalLR, "global-lr", e.GlobalLR, "global learning rate γ in w ← w + γ·ΣΔ/N")
	fs.Var(epsilonValue{e}, "esync-epsilon", "the state service's ε: auto (0.1× the median step time), a factor (0.25x) or a duration (0.5s, the original's)")
	if e.Queries == "" {
		e.Queries = ESyncBlocking
	}
	fs.BoolVar(&e.Overlap, "esync-overlap", e.Overlap, "keep taking local steps while a round's exchange is in flight and fold them into the next round (the one-round-delayed update of Streaming DiLoCo); off: the paper's blocking rounds")
	fs.BoolVar(&e.Paced, "esync-paced", e.Paced, "with --esync-overlap: a rank keeps taking local steps until its round's exchange in flight has completed, then hands over (rounds paced by the network, not by the state service's READY)")
	fs.StringVar(&e.Queries, "esync-queries", e.Queries, "blocking (the original's code: wait for every answer) or nonblocking (the paper's §4.2: a rank computes its next step while its query to the state service is in flight, and drops that step on READY)")
}

// epsilonValue is --esync-epsilon, which sets Epsilon or EpsilonFactor.
type epsilonValue struct{ e *ESyncConfig }

func (v epsilonValue) String() string {
	switch {
	case v.e == nil || (v.e.Epsilon == 0 && (v.e.EpsilonFactor == 0 || v.e.EpsilonFactor == DefaultESyncEpsilonFactor)):
		return "auto"
	case v.e.Epsilon > 0:
		return v.e.Epsilon.String()
	}
	return strconv.FormatFloat(v.e.EpsilonFactor, 'g', -1, 64) + "x"
}

func (v epsilonValue) Set(s string) error {
	fixed, factor, err := ParseESyncEpsilon(s)
	if err != nil {
		return err
	}
	v.e.Epsilon, v.e.EpsilonFactor = fixed, factor
	return nil
}

func (v epsilonValue) Get() any { return v.String() }

// Defaults fills e's zero fields from the common configuration (local rate and momentum).
func (e *ESyncConfig) Defaults(c *Config) {
	if e.LocalLR == 0 {
		e.LocalLR = c.LR
	}
	if e.GlobalLR == 0 {
		e.GlobalLR = 1
	}
	if e.Epsilon == 0 && e.EpsilonFactor == 0 {
		e.EpsilonFactor = DefaultESyncEpsilonFactor
	}
	if e.LocalMomentum == nil {
		m := c.Momentum
		e.LocalMomentum = &m
	}
	if e.Queries == "" {
		e.Queries = ESyncBlocking
	}
}

// Validate checks the ESync settings (zero fields are defaults still to be filled).
func (e *ESyncConfig) Validate(*Config, int) error {
	switch {
	case e.LocalLR < 0 || math.IsNaN(e.LocalLR) || math.IsInf(e.LocalLR, 0):
		return fmt.Errorf("trainer: --local-lr must be a positive number, got %v", e.LocalLR)
	case e.LocalMomentum != nil && (*e.LocalMomentum < 0 || *e.LocalMomentum >= 1 || math.IsNaN(*e.LocalMomentum)):
		return fmt.Errorf("trainer: --local-momentum must be in [0, 1), got %v", *e.LocalMomentum)
	case e.GlobalLR < 0 || math.IsNaN(e.GlobalLR) || math.IsInf(e.GlobalLR, 0):
		return fmt.Errorf("trainer: --global-lr must be a positive number, got %v", e.GlobalLR)
	case e.Epsilon < 0:
		return fmt.Errorf("trainer: --esync-epsilon must be ≥ 0, got %v", e.Epsilon)
	case e.EpsilonFactor < 0 || math.IsNaN(e.EpsilonFactor) || math.IsInf(e.EpsilonFactor, 0):
		return fmt.Errorf("trainer: --esync-epsilon factor must be a finite number ≥ 0, got %v", e.EpsilonFactor)
	case e.Queries != "" && e.Queries != ESyncBlocking && e.Queries != ESyncNonBlocking:
		return fmt.Errorf("trainer: --esync-queries %q: want %s or %s", e.Queries, ESyncNonBlocking, ESyncBlocking)
	case e.Paced && !e.Overlap:
		return fmt.Errorf("trainer: --esync-paced needs --esync-overlap: it paces a round by the exchange in flight, which only overlapping rounds have")
	case e.Paced && e.Queries == ESyncNonBlocking:
		return fmt.Errorf("trainer: --esync-paced asks the state service nothing, so --esync-queries %s has no queries to overlap; drop one of them", ESyncNonBlocking)
	}
	return nil
}

// ParseESyncEpsilon reads --esync-epsilon: "auto" (0.1× the median step time), "0.25x" (that
// multiple of the median step time) or a duration ("0.5s", the original's value).
func ParseESyncEpsilon(s string) (fixed time.Duration, factor float64, err error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "" || s == "auto":
		return 0, DefaultESyncEpsilonFactor, nil
	case strings.HasSuffix(s, "x"):
		f, err := strconv.ParseFloat(strings.TrimSuffix(s, "x"), 64)
		if err != nil || !(f > 0) || math.IsInf(f, 0) {
			return 0, 0, fmt.Errorf("trainer: --esync-epsilon %q: a factor of the median step time must be a positive number followed by x (0.1x)", s)
		}
		return 0, f, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, 0, fmt.Errorf("trainer: --esync-epsilon %q is neither auto, a factor (0.1x) nor a positive duration (0.5s)", s)
	}
	return d, 0, nil
}

// esync is ESync (docs/algorithms.md#one-round-on-rank-i): each round every rank takes local SGD steps (rate η)
// from the global model w_t until the state service answers READY, then the model deltas
// Δ_i = w_local − w_t are summed with the chosen --collective and every rank sets
// w_{t+1} = w_t + γ·ΣΔ/N. Every rank weighs 1/N whatever its number of steps. No batch is
// discarded on the READY query (the original's code artefact): n_i steps use n_i
// batches.
//
// The allreduced vector is Δ followed by five extras: rank 0's stop vote, the rank's mean
// training loss, its correct count, its sample count and its local steps, so one collective
// carries the update, the agreed stop and the global progress. Since w_t and ΣΔ are identical
// on every rank, so is w_{t+1}, bitwise.
//
// --esync-queries nonblocking is the paper's §4.2 mode (overlappedSteps): a rank computes its
// next step while its query is in flight. The original's code blocks, and so does the
// default: where the ranks share a host's cores, the speculative steps' CPU slows the other
// ranks as much as the overlap saves (docs/results/tuning.md#esync). It pays where a query's
// round trip is long against a step, as across hosts.
//
// The state service's protocol is the original's but for one message: a round's first query
// (k = 0, always NOT-READY) travels inside the reset that ends the previous global update, so
// no rank waits a round trip before its first local step (esyncService). The predicates, and
// so n_i, are unchanged.
//
// The local optimizer defaults to the one every other strategy uses (--momentum 0.9), which
// reaches a target sooner on iid shards; on class-sorted shards (--shard by-class) give
// --local-momentum 0, the paper's plain SGD: a velocity kept across rounds integrates the one
// class a rank's unshuffled shard is on for many steps, and the average follows it
// (docs/results/tuning.md#esync). experiments/esync.yaml gives every strategy plain SGD.
//
// Metrics: RoundRecord.LocalSteps is n_i; Compute is the local steps (with injected
// slowdown), Wait the barrier before the allreduce (the fast ranks' idle time), Comm the
// allreduce plus the state-service queries. The local optimizer is SGD at rate η with
// LocalMomentum (default: Config.Momentum; 0 is the paper's plain SGD), each rank keeping its
// own velocity: only the parameters are synchronized.
type esync struct {
	cfg     ESyncConfig
	svc     *esyncService
	opt     Optimizer // the local steps' (Config.Optimizer at LocalLR and LocalMomentum)
	outer   Optimizer // Config.Outer, nil without one (outer.go)
	pre     []float32 // w_t
	buf     []float32
	reduce  *roundReducer // the allreduce of buf: the deltas compressed as Config.Compress says
	round   int           // t, from 1 as in the original
	lastC   time.Duration // duration of this rank's last local step
	overlap bool          // non-blocking queries (ESyncConfig.Queries)
	flight  *esyncFlight  // the exchange in flight under ESyncConfig.Overlap; nil without it
	dropped int           // speculative steps dropped this round (0 or 1)
	// The round in progress: its local steps so far (n_i), their summed loss, its stats and
	// the time its state-service queries took.
	k       int
	lossSum float64
	st      RoundStats
	query   time.Duration
	rounds  int
	samples int64
	clean   bool
}

const esyncExtra = 5 // stop vote, loss, correct, samples, local steps

func esyncFactory() Factory {
	return Factory{
		Options: func() Options { return &ESyncConfig{} },
		New: func(cfg *Config) (Strategy, error) {
			o, err := optionsOf[*ESyncConfig](cfg, "esync")
			if err != nil {
				return nil, err
			}
			if err := o.Validate(cfg, 0); err != nil {
				return nil, err
			}
			return &esync{cfg: *o}, nil
		},
		Compresses: true,
	}
}

func (s *esync) Name() string { return "esync" }

// outerRounds: an outer optimizer takes the place of the global learning rate γ.
func (s *esync) outerRounds() error {
	if s.cfg.GlobalLR != 0 && s.cfg.GlobalLR != 1 {
		return fmt.Errorf("--global-lr %v is the update an outer optimizer replaces: give its rate as --outer-lr", s.cfg.GlobalLR)
	}
	return nil
}

func (s *esync) Start(ctx context.Context, w *Worker) error {
	if w.Comm == nil {
		return fmt.Errorf("trainer: rank %d: esync needs a communicator", w.Rank)
	}
	n := len(w.Params)
	s.pre = append(make([]float32, 0, n), w.Params...)
	s.buf = make([]float32, n+esyncExtra)
	reduce, err := newRoundReducer(w.Cfg, n, esyncExtra)
	if err != nil {
		return err
	}
	s.reduce = reduce
	opt, err := w.NewOptimizer(s.LocalOptimizer())
	if err != nil {
		return fmt.Errorf("trainer: rank %d: esync's local steps: %w", w.Rank, err)
	}
	s.opt = opt
	if s.outer, err = w.newOuter(); err != nil {
		return fmt.Errorf("trainer: rank %d: esync: %w", w.Rank, err)
	}
	s.round = 1
	s.overlap = s.cfg.Queries == ESyncNonBlocking
	if s.cfg.Overlap {
		if s.flight, err = newESyncFlight(w); err != nil {
			return err
		}
	}
	if s.cfg.Paced {
		// The exchange in flight ends each round (esync_paced.go): no READY to ask for.
		return nil
	}
	svc, err := startESyncService(ctx, w.Endpoint, s.cfg.Epsilon, s.cfg.EpsilonFactor)
	s.svc = svc
	return err
}

// Round is the built-in loop's round (StepRound), or, with non-blocking queries on a rank
// other than 0, the paper's overlapped steps (overlappedSteps) followed by the same Sync.
func (s *esync) Round(ctx context.Context, w *Worker, stopVote bool) (RoundStats, error) {
	if !s.overlap || w.Rank == 0 {
		return StepRound(ctx, w, s, stopVote)
	}
	if err := s.Begin(ctx, w); err != nil {
		return RoundStats{}, err
	}
	if err := s.overlappedSteps(ctx, w); err != nil {
		return RoundStats{}, err
	}
	return s.Sync(ctx, w, stopVote)
}

// Exchange: esync's local steps apply their own gradients, and the round averages the
// models' deltas.
func (s *esync) Exchange() Exchange { return ExchangeParams }

// Optimizer is the local steps' optimizer (Config.Optimizer at rate η and LocalMomentum, this
// rank's own state).
func (s *esync) Optimizer(*Worker) Optimizer { return s.opt }

// LocalOptimizer is the learning rate and momentum of the local steps' optimizer, and the
// flags that set them.
func (s *esync) LocalOptimizer() (lr, momentum float64, flags string) {
	return s.cfg.LocalLR, *s.cfg.LocalMomentum, "--local-lr, --local-momentum"
}

// Steppable refuses a caller's loop under non-blocking queries: their query overlaps the next
// local step and a READY answer drops that step after it was computed, which a loop whose
// optimizer has already applied it cannot take back.
func (s *esync) Steppable() error {
	if s.cfg.Queries == ESyncNonBlocking {
		return fmt.Errorf("trainer: esync with --esync-queries %s cannot be driven by a caller's loop: its query overlaps the next local step, "+
			"and a READY answer drops that step after the caller's optimizer applied it; use --esync-queries %s", ESyncNonBlocking, ESyncBlocking)
	}
	return nil
}

// Begin starts a round's count. Round 1's first query (k = 0, answered NOT-READY) goes out
// here, before the first step; every later round's rode on the reset that ended the previous
// one.
func (s *esync) Begin(ctx context.Context, w *Worker) error {
	s.k, s.lossSum, s.st, s.query, s.dropped = 0, 0, RoundStats{}, 0, 0
	if s.round != 1 || s.svc == nil {
		return nil
	}
	q0 := w.Now()
	if _, err := s.svc.Query(ctx, s.round, 0, s.lastC); err != nil {
		return err
	}
	s.query += w.Now().Sub(q0)
	return nil
}

// AfterStep counts a local step; its duration is the step time the next query reports.
func (s *esync) AfterStep(_ *Worker, r StepReport) {
	s.lastC = r.Duration
	s.lossSum += r.Loss
	s.st.Correct += r.Correct
	s.st.Samples += r.Samples
	s.st.Compute += r.Duration
	s.k++
}

// ShouldSync asks the state service, as the original does before each step after the first,
// and waits for the answer: READY ends the round with n_i = k steps.
func (s *esync) ShouldSync(ctx context.Context, w *Worker) (bool, error) {
	if s.cfg.Paced {
		return s.flightLanded(), nil
	}
	q0 := w.Now()
	ready, err := s.svc.Query(ctx, s.round, s.k, s.lastC)
	s.query += w.Now().Sub(q0)
	return ready, err
}

// Sync sums the ranks' deltas with the extras, sets every rank's model to the global update
// and resets into the next round at the state service.
func (s *esync) Sync(ctx context.Context, w *Worker, stopVote bool) (RoundStats, error) {
	if s.flight != nil {
		return s.handover(ctx, w, stopVote)
	}
	st := s.roundStats()
	n := len(w.Params)
	for i, p := range w.Params {
		s.buf[i] = p - s.pre[i]
	}
	s.fillExtras(n, st, stopVote)

	t0 := w.Now()
	if err := w.Comm.Barrier(ctx); err != nil {
		return RoundStats{}, fmt.Errorf("trainer: rank %d: esync round %d: barrier: %w", w.Rank, s.rounds+1, err)
	}
	t1 := w.Now()
	if err := s.reduce.allReduce(ctx, w.Comm, s.buf); err != nil {
		return RoundStats{}, fmt.Errorf("trainer: rank %d: esync round %d: allreduce: %w", w.Rank, s.rounds+1, err)
	}
	st.GlobalLoss, st.Stop = s.update(w)
	copy(w.Params, s.pre)
	s.round++
	if err := s.svc.Reset(ctx, s.round, s.lastC); err != nil {
		return RoundStats{}, err
	}
	t2 := w.Now()
	st.GlobalSamples = s.samples
	st.GlobalRounds = s.rounds
	st.Wait = t1.Sub(t0)
	st.Comm = t2.Sub(t1) + s.query
	s.roundExtras(&st)
	s.clean = st.Stop
	return st, nil
}

// roundStats is the round's statistics so far: its n_i local steps and their mean loss.
func (s *esync) roundStats() RoundStats {
	st := s.st
	st.LocalSteps = s.k
	st.Loss = s.lossSum / float64(s.k)
	return st
}

// fillExtras writes the round's extras after the n values of the vector in s.buf.
func (s *esync) fillExtras(n int, st RoundStats, stopVote bool) {
	putRoundExtras(s.buf[n:], stopVote, st)
	s.buf[n+4] = float32(st.LocalSteps)
}

// update applies the summed vector in s.buf to the global model w_t (s.pre): the outer
// optimizer's step, or w ← w + γ·ΣΔ/N, and counts the round. It returns the round's mean
// training loss over the ranks and the agreed stop.
func (s *esync) update(w *Worker) (globalLoss float64, stop bool) {
	n := len(w.Params)
	roundUpdate(s.outer, s.pre, s.buf[:n], s.cfg.GlobalLR, w.Size)
	s.rounds++
	s.samples += int64(s.buf[n+3] + 0.5)
	return float64(s.buf[n+1]) / float64(w.Size), s.buf[n] > 0.5
}

// roundExtras adds the round's ESync-specific metrics to st.
func (s *esync) roundExtras(st *RoundStats) {
	if s.overlap {
		// the batch of a dropped step was consumed: a replay of the round skips it
		st.Extra = []metrics.Field{{Key: "dropped_steps", Value: float64(s.dropped)}}
	}
}

// certainStep takes a local step that the state service has allowed.
func (s *esync) certainStep(ctx context.Context, w *Worker) error {
	t0 := w.Now()
	ls, err := w.LocalStep(ctx)
	if err != nil {
		return err
	}
	s.apply(w, ls, w.Now().Sub(t0))
	return nil
}

// overlappedSteps takes a round's local steps in the paper's non-blocking mode (§4.2): a
// rank sends its query and starts the next step without waiting; a NOT-READY answer lets
// that step count, and a READY one aborts it (its injected sleep is cut short and its
// gradient dropped; the computation already done is lost, and so is its batch). An answer
// that arrives only after the step has finished keeps the step. The state service and its
// predicates are the blocking mode's; only the asking rank's waiting changes, which takes
// the query's round trip off every local step. A rank that the service last named the
// slowest waits for its answer instead, since it will be READY after its first step. Rank 0
// asks its own state machine and never waits, so it always blocks. n_i, the steps kept, is
// s.k.
func (s *esync) overlappedSteps(ctx context.Context, w *Worker) error {
	// k = 0 was answered NOT-READY: the first step is certain.
	if err := s.certainStep(ctx, w); err != nil {
		return err
	}
	for {
		if err := s.svc.Ask(ctx, s.round, s.k, s.lastC); err != nil {
			return err
		}
		if s.svc.slowest {
			q0 := w.Now()
			a, err := s.svc.Answer(ctx)
			s.query += w.Now().Sub(q0)
			if err != nil {
				return err
			}
			if a.ready {
				return nil
			}
			if err := s.certainStep(ctx, w); err != nil {
				return err
			}
			continue
		}
		ready, err := s.speculate(ctx, w)
		if err != nil || ready {
			return err
		}
	}
}

// speculate takes a local step while the query is in flight, and gets the query's answer.
// The step counts (apply) when the answer was NOT-READY, or came after the step.
func (s *esync) speculate(ctx context.Context, w *Worker) (ready bool, err error) {
	t0 := w.Now()
	ls, err := w.Compute(ctx)
	if err != nil {
		return false, err
	}
	var a esyncAnswer
	answered := false
	take := func(got service.Reply) error {
		var err error
		a, err = s.svc.Check(got)
		answered = true
		return err
	}
	select {
	case got := <-s.svc.Answers():
		if err := take(got); err != nil {
			return false, err
		}
	default:
	}
	if !answered || !a.ready {
		// the injected sleep, cut short by a READY answer
		end := time.Now().Add(ls.Injected)
		for d := ls.Injected; d > 0; d = time.Until(end) {
			answers := s.svc.Answers()
			if answered {
				answers = nil
			}
			got, woke, err := sleepOr(ctx, &w.Inject.timer, d, answers)
			if err != nil {
				return false, err
			}
			if !woke {
				break
			}
			if err := take(got); err != nil {
				return false, err
			}
			if a.ready {
				break
			}
		}
	}
	if answered && a.ready {
		s.st.Compute += w.Now().Sub(t0) // computed, then dropped
		s.dropped++
		return true, nil
	}
	if !answered {
		q0 := w.Now()
		if a, err = s.svc.Answer(ctx); err != nil {
			return false, err
		}
		s.query += w.Now().Sub(q0)
		s.apply(w, ls, q0.Sub(t0))
		return a.ready, nil
	}
	s.apply(w, ls, w.Now().Sub(t0))
	return a.ready, nil
}

// apply takes the SGD step of a local step that took d so far and counts the whole step
// (batch fetch, forward/backward, injected slowdown and update), as StepRound does.
func (s *esync) apply(w *Worker, ls StepStats, d time.Duration) {
	t0 := w.Now()
	s.opt.Step(w.Params, w.Grads, 1)
	u := w.Now().Sub(t0)
	w.Inject.After = u // the next step's injected sleep leaves room for its update
	s.AfterStep(w, StepReport{Loss: ls.Loss, Samples: ls.Samples, Correct: ls.Correct, Duration: d + u})
}

// esyncUpdate is the global update w ← w + γ·S/N in place, with S the summed deltas.
func esyncUpdate(w, sum []float32, gamma float64, size int) {
	a := float32(gamma / float64(size))
	sum = sum[:len(w)]
	for i := range w {
		w[i] += a * sum[i]
	}
}

func (s *esync) Finish(ctx context.Context, w *Worker) error {
	if s.svc == nil {
		return nil
	}
	if !s.clean && w.Rank == 0 {
		// A failed run: the peers may never say bye; do not wait for them.
		s.svc.Abort()
		return nil
	}
	return s.svc.Close(ctx)
}

// CheckpointState is this rank's own part after a round: its local optimizer's state (its
// velocity under SGD), its last step time, the rounds and samples counted, the outer
// optimizer's state and under Config.Compress its error feedback's residual. The model, identical on every rank after the
// global update, and the data position are the checkpoint's own. The state service's records
// are not saved: their instants are on rank 0's clock of the killed job, and each rank's first
// query of the resumed job (k = 0, always NOT-READY) carries its saved step time, which is
// all a record needs to be whole again.
//
// Under overlap the exchange in flight is applied first (landForCheckpoint): the model saved
// is the global one, and a stop that exchange agreed is kept in the rounds' top bits
// (esyncStopPending), for the resumed run's next round to end the run as this one would.
func (s *esync) CheckpointState(w *Worker) ([]byte, error) {
	if s.flight != nil {
		if err := s.landForCheckpoint(w); err != nil {
			return nil, err
		}
	}
	rounds := uint64(s.rounds)
	if s.flight != nil && s.flight.stop {
		rounds |= esyncStopPending
	}
	b := binary.LittleEndian.AppendUint64(nil, rounds)
	b = binary.LittleEndian.AppendUint64(b, uint64(s.samples))
	b = binary.LittleEndian.AppendUint64(b, uint64(s.lastC))
	opt := s.opt.AppendState(nil)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(opt)))
	return s.reduce.appendState(appendOuterState(append(b, opt...), s.outer)), nil
}

// RestoreState loads CheckpointState's bytes after Start. The service's protocol rounds
// (s.round) count from 1 again, as the service itself is new: round 1's first query goes out
// alone. Errors name the job's round, s.rounds+1, which goes on from the checkpoint.
func (s *esync) RestoreState(w *Worker, state []byte, from *CheckpointHeader) error {
	if len(state) < 32 {
		return fmt.Errorf("esync state of %d bytes, want at least 32", len(state))
	}
	rounds, samples := binary.LittleEndian.Uint64(state), int64(binary.LittleEndian.Uint64(state[8:]))
	stop := rounds&esyncStopPending != 0
	if stop && s.flight == nil {
		return fmt.Errorf("esync state of a run with --esync-overlap whose stop was agreed, resumed without --esync-overlap")
	}
	rounds &^= esyncStopPending
	lastC, nb := int64(binary.LittleEndian.Uint64(state[16:])), binary.LittleEndian.Uint64(state[24:])
	if from.version == 1 {
		nb *= 4 // version 1 counted the SGD velocity's values, whose bytes are SGD's state
	}
	switch {
	case int64(rounds) < 0 || samples < 0 || lastC < 0:
		return fmt.Errorf("esync state holds %d rounds, %d samples and a step of %v", rounds, samples, time.Duration(lastC))
	case uint64(len(state)-32) < nb:
		return fmt.Errorf("esync state of %d bytes for %d bytes of the local optimizer's state", len(state), nb)
	}
	if err := s.opt.LoadState(state[32:32+nb], len(w.Params)); err != nil {
		return fmt.Errorf("esync's local optimizer: %w", err)
	}
	outer, feedback := s.reduce.splitTrailers(state[32+nb:], s.outer != nil)
	if err := loadOuterState(s.outer, outer, len(w.Params)); err != nil {
		return fmt.Errorf("esync state: %w", err)
	}
	if err := s.reduce.restoreState(feedback); err != nil {
		return fmt.Errorf("esync state: %w", err)
	}
	s.rounds, s.samples, s.lastC = int(rounds), samples, time.Duration(lastC)
	copy(s.pre, w.Params)
	if s.flight != nil {
		copy(s.flight.sent, w.Params)
		s.flight.stop = stop
	}
	return nil
}

// esyncStopPending marks, in the rounds of an ESync checkpoint state, a stop agreed by the
// exchange a checkpoint under overlap applied (rounds never reach 2^62).
const esyncStopPending = 1 << 62

// Resizable is false: each rank's part holds its own velocity and its position in its own
// shard, which no rank of a job of another size has.
func (s *esync) Resizable() bool { return false }

// PerRankCheckpoint: the ranks differ in velocity, step time and data position, and end
// every round together at the global update.
func (s *esync) PerRankCheckpoint() {}
