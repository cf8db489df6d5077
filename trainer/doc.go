// Package trainer is a worker's life in a data-parallel training job: a rank's model, data
// shard and optimizer (Worker), the synchronization strategies that turn local steps into one
// model (Strategy, one file each, registered by name like database/sql drivers in a Registry
// value, each owning its Options: defaults, validation, flags), the common
// round loop (Run) that owns stopping, evaluation and metrics, heterogeneity injection, and
// the gathering of every rank's metrics into one run directory on rank 0 (RunRank).
//
// # Rounds and strategies
//
// Run calls Strategy.Round until all ranks agree to stop. A round is what a strategy calls one
// unit of progress: one allreduced step for ssgd, one push/pull for the parameter-server
// strategies, one local step for local, n_i local steps plus a global update for esync.
// Worker.LocalStep is the shared building block: fetch a batch, forward/backward, scale the
// gradient to Config.GradReduction, sleep as the Injector says; the sleep counts as compute.
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
//   - wbsp: every step uploads its delta; the global model is published when the slowest
//     worker uploads (buffered, the paper; or immediate, the code); slowest detected online.
//   - wbsp-opt: WBSP with uploads overlapping the next step; new global models are applied
//     only at step boundaries and deltas not yet uploaded are re-based, so none is lost.
//   - sync-switch: BSP (ssgd) then ASP (asgd) at --switch-at of the work, carrying the
//     optimizer state; online greedy/elastic policies react to detected stragglers.
//
// # Stopping
//
// Rank 0 alone decides (StopRule: target accuracy from its evaluator, epochs, training time,
// rounds) and the decision travels in band with each strategy's own traffic, so every rank
// leaves after the same agreed round and none is left in a collective; stop.go has the rules.
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
// Every rank records one trainer/metrics.RoundRecord per round (compute, communication and
// wait time, bytes, samples, loss; extras train_acc, global_loss, global_samples, staleness).
// After training, the records go to rank 0 over the control channel (GatherRecords) and rank 0
// writes config.json, metrics.jsonl, eval.jsonl and summary.json. The ranks' clocks start
// together at a barrier, so time_s is comparable across ranks.
//
// This package must never import the launcher or a concrete transport (it works on any
// transport.Endpoint), never let a rank stop on its own view of progress (only rank 0's vote
// stops a job), and never run evaluation on the workers' models or devices.
package trainer
