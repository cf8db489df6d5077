// Package trainer is a worker's life in a data-parallel training job: the synchronization
// strategies that turn the ranks' local steps into one model, driving a model the user
// supplies; the common round loop (Run) that owns stopping, evaluation and metrics;
// heterogeneity injection; and RunRank, a whole rank whose metrics are gathered into one run
// directory on rank 0. `hetsync train`'s default workload (Fashion-MNIST, the built-in
// networks, the compute device) is package workload, which runs through RunRank: this package
// links no data set, network or CUDA backend.
//
// # Training your own model
//
// A Model is a flat []float32 parameter vector (Params) and a Step that computes the gradient
// of the model's own next batch into a given slice: any data, any loss, labels of any type or
// none, on any device. Train runs one rank of a job on it with the strategy Config.Strategy
// names; TrainOptions.Eval optionally evaluates snapshots on rank 0. NewBatchModel adapts a
// classifier network with a batch iterator to a Model: package workload does that for
// `hetsync train` (workload/nn's networks over workload/data's shards), and RunRank adds the
// run directory. examples/esync-model is a complete program.
//
// Every rank passes the same Config, which names its strategy, batch, learning rate and a
// bound (Epochs, MaxTime or MaxRounds): Train refuses a zero one rather than take
// `hetsync train`'s defaults (Config.Defaults, which the command line applies), and its errors
// name Config fields (InFlags names them as flags for the command line). Run starts with a
// barrier that compares every rank's Config (all of it but the heterogeneity a rank injects,
// the fields tagged agree:"per-rank"), the strategy's options, the parameter count and the
// checkpoint resumed from, and fails on every rank naming each field that differs, its values
// and the ranks (agree.go); then every rank takes rank 0's parameters (start.go), as DDP and
// Horovod start, so a model initialised per rank still trains one model. A communicator given
// in TrainOptions.Comm runs its own algorithm: a Config.Collective it does not run is refused.
//
// # Your own loop
//
// A program that keeps its own training loop and optimizer (the Python package's, a
// PyTorch model's) drives a strategy step by step through a Session over two flat float32
// vectors, the parameters and the gradient: after each local step it reports the step
// (Session.Step), asks whether to synchronize now (ShouldSync: ESync's state service
// answers; WBSP's trigger barrier, which the slowest rank's step completes; ssgd and the
// parameter-server strategies say yes every step) and, when told to, runs the round's
// exchange (Sync). Session.Exchange, asked before each step, says where the caller's
// optimizer steps: after Sync on the averaged gradient (ssgd); on each step's own gradient,
// Sync then setting or re-basing onto the global model (esync, wbsp, wbsp-opt, ssp lazy,
// local); or never, Sync leaving the strategy's update of the step's gradient in the
// parameters (asgd, dcasgd, ssp, sync-switch: ExchangeServer). Train runs the same strategy
// methods (step.go: Stepped, StepRound) with the model's steps and the strategy's optimizer,
// so the two give the same parameters. Every built-in strategy has this form; ESync's
// non-blocking queries, whose query overlaps the caller's next step, refuse a session, saying
// why, as does a program's strategy without one (NotStepped).
//
// # Strategies and their options
//
// Strategies are registered by name in a Registry, like database/sql drivers (but in a value,
// not a package-level table: Builtin returns one holding this package's strategies, and
// Register adds a program's own). Each strategy owns its Options (defaults, validation, help
// text, declared on a flag.FlagSet that `hetsync train` turns into its flags); Config holds
// only what every strategy shares, and config.json records the options under "options". A
// strategy's flags are its own: Registry.CheckOptionFlags refuses an option given for a
// strategy that does not take it. Each strategy lives in its own file and refers to no other
// strategy's; what several share is
// plumbing of its own (ps.go: the parameter-server client and placement; wbsp_common.go: what
// wbsp and wbsp-opt share; wbsp_round.go: what their allreduce forms share). A strategy's
// Factory lists the collectives it can run over, and a strategy refuses any other.
//
// # Optimizers
//
// The workers' optimizer is Config.Optimizer (package optim: sgd, the default, adam, adamw),
// looked up in the Registry's optimizers (Registry.Optimizers), to which a program adds its
// own. Worker.Opt is it: the Stepped strategies' built-in loop steps it (Stepped.Optimizer),
// and so does Worker.Apply for the others. Its settings (Config.Momentum, Dampening,
// Nesterov, Beta1, Beta2, Eps, WeightDecay) are checked against the optimizer by name: a
// setting it does not take is an error, not ignored. Strategies whose updates are their
// parameter server's rule (asgd, dcasgd, ssp with every-step pulls, sync-switch) refuse an
// optimizer other than sgd (UpdateRule); ESync's local steps build the run's optimizer at
// their own rate (LocalOptimizer, Worker.NewOptimizer). Checkpoints carry the optimizer's
// state, so a resumed run continues bitwise.
//
// # Rounds
//
// Run calls Strategy.Round until all ranks agree to stop. A round is what a strategy calls one
// unit of progress: one allreduced step for ssgd, one push/pull for the parameter-server
// strategies, one local step for local, n_i local steps plus a global update for esync.
// Worker.LocalStep is the shared building block: the model's step, the gradient scaled to
// Config.GradReduction, then the Injector's sleep, which counts as compute.
//
// # Heterogeneity
//
// Injection is the worker's, never a strategy's: the Injector (hetero.go: --slowdown,
// --step-sleep, --slowdown-base, the WBSP profiles) runs after every local step, and transient
// stragglers (straggler.go) slow the endpoint (network mode, installed by Train) or the
// model's step (compute mode, installed by Run), whatever the strategy.
//
// Registered strategies (one file each; docs/algorithms.md is the specification, and
// each file's type comment records where it departs from the original):
//
//   - local: no communication; each rank trains alone (the baseline).
//   - ssgd: gradients allreduced (sum, then divided by the number of ranks) with the chosen
//     --collective every step; every rank applies the identical SGD update, so replicas stay
//     bitwise identical.
//   - asgd: textbook asynchronous SGD through the parameter server of collective/kv (the
//     server applies w ← w − lr·g on arrival and returns w; staleness is recorded).
//   - dcasgd: delay-compensated ASGD on the server, w ← w − η(g + λ g⊙g⊙(w − w_bak)), with
//     per-worker backups (the paper) or one shared backup (--dcasgd-variant mxnet).
//   - ssp: stale synchronous parallel; a worker's pull is held while it is more than s steps
//     ahead of the slowest (--staleness), or the ADSP-style lazy pull.
//   - esync: local SGD steps until rank 0's state service (esync_state.go, the original's exact
//     predicates as a pure state machine) answers READY, then the model deltas are summed over
//     any --collective and every rank sets w ← w_t + γ·ΣΔ/N (bitwise identical replicas).
//   - wbsp: with --collective ps every step uploads its delta; the global model is published
//     when the slowest worker uploads (buffered, the paper; or immediate, the code). Over any
//     other collective the slowest rank's completed step completes a non-blocking barrier the
//     others test between steps, and every rank allreduces its steps' changes since the last
//     round (bitwise identical replicas). The slowest is detected online either way.
//   - wbsp-opt: WBSP with uploads (or the round's allreduce) overlapping the next steps; new
//     global models are applied only at step boundaries and the deltas not yet sent are
//     re-based, so none is lost.
//   - sync-switch: BSP (ssgd) then ASP (asgd) at --switch-at of the work, carrying the
//     optimizer state; online greedy/elastic policies react to detected stragglers.
//
// # Stopping
//
// Rank 0 alone decides (StopRule: target accuracy from its evaluator, epochs, training time,
// rounds) and the decision travels in band with each strategy's own traffic, so every rank
// leaves after the same agreed round and none is left in a collective; stop.go has the rules.
//
// # Checkpoints
//
// With TrainOptions.Checkpoint, a checkpoint (checkpoint.go: atomic, checksummed files) is
// written every N rounds or every duration, and Run continues one with the same round
// numbers, clock, data position and state. Strategies whose ranks share one state after each
// round implement Checkpointer (ssgd): rank 0's one file is the whole job. Strategies whose
// ranks differ but end every round together implement PerRankCheckpointer (esync): each rank
// writes its own part of the same round, and rank 0's manifest, written once every part is
// durable, makes them a checkpoint (checkpoint_rank.go). Every other strategy says why it
// cannot (NoCheckpoint), and Run refuses to checkpoint it before any round.
//
// # Evaluation
//
// Rank 0 evaluates snapshots of its model on the full test set on a goroutine with its own
// model and device, every Config.Eval rounds or seconds. Offering a snapshot never blocks: if
// an evaluation is running, the newest snapshot waits and replaces older waiting ones. The
// snapshot's training time is what time-to-accuracy uses.
//
// # Metrics
//
// Every rank records one metrics.RoundRecord per round (compute, communication and
// wait time, bytes, samples, loss, the rank it waited for longest; extras train_acc,
// global_loss, global_samples, staleness). Run switches the communicator's attribution on
// (collective.Comm.SetAttribution) so that late_rank names the rank that arrived late or
// whose link was slow, not the neighbour that passed the wait on.
// After training, the records go to rank 0 over the control channel (GatherRecords) and rank 0
// writes config.json, metrics.jsonl, eval.jsonl and summary.json. The ranks' clocks start
// together at a barrier, so time_s is comparable across ranks.
//
// This package must never import the launcher or a concrete transport (it works on any
// transport.Endpoint), never let a rank stop on its own view of progress (only rank 0's vote
// stops a job), and never run evaluation on the workers' models or devices.
package trainer
