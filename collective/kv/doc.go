// Package kv is the asynchronous parameter-server service: one flat float32 model vector,
// sharded over server ranks, that workers push to and pull from without any barrier.
//
// It serves ASGD, DC-ASGD, SSP and WBSP:
//
//   - Sharding: the vector of Config.Len values is split like collective.Partition over
//     Config.Servers (default: rank 0 alone). Listing every rank colocates one shard with each
//     worker (the Sync-Switch layout); servers run as goroutines inside their ranks.
//   - Versions: every shard counts the updates it has published. A push reports its staleness:
//     how many updates the shard published between this worker's last pull and this push.
//   - Update rules: what a push does to a shard is a Rule, one per file: SGD (rule.go), DCASGD
//     with per-worker backups or MXNet's shared previous weight (rule_dcasgd.go), Delta
//     (w += Δ/N, rule_delta.go), WBSP with its accumulator, trigger and slowest-worker detector
//     (rule_wbsp.go). Rule.Pulled sees every pull; Rule.Push decides whether the shard publishes
//     a new version.
//   - Pull if newer: PushPullIfNewer returns a shard's values only when it published since the
//     worker's last pull (WBSP's "many uploads, one pull-down").
//   - Clocks: each request carries the worker's clock (its completed steps); servers keep the
//     clock of every worker and return the minimum and the sum.
//   - SSP gate (Config.SSP): a pulling request from a worker more than s clocks ahead of the
//     slowest is held. The reader that received it does not wait: the reply is parked in the
//     shard and sent, with the model as it is then, by whichever reader serves the request that
//     releases it (the slowest worker's push, a stop vote, a bye: a worker that said bye
//     leaves the minimum).
//   - Own shard in place: a rank's request to the shard it hosts is served by the calling
//     goroutine under the shard's lock (the push reads the caller's vector, a pull copies into
//     it), with no message, copy or goroutine switch; only a bye, and behind an SSP gate the
//     pulling requests the gate may hold, go through the rank's own reader.
//   - Stop flag: a request may carry a stop vote (the trainer's rank 0 sets it). A server that
//     received one sets the stop flag in every later reply and releases every held request,
//     so all workers learn that training ends from their own next request, without a separate
//     collective, and none stays blocked.
//
// Messages: the parameter server is a service of the service layer (package service, named
// Config.Name, "kv" by default), whose readers (one per peer) serve the requests addressed to
// this rank's shard and hand replies to the waiting client call, so a rank may be server and
// worker at once. A request is an operation (push, pull, push-pull, push-pull-if-newer) whose
// Arg is the worker clock, Aux the shard index, flags the stop vote, and body the raw pushed
// vector. A reply's Arg is the shard version, its flags the stop flag and whether it carries
// the shard's values, its body a 24-byte preamble (minimum clock, staleness, clock sum)
// followed by those values. A worker has at most one request in flight per server.
//
// Shutdown is the layer's: Close says bye to every server and waits until every worker has
// said bye to this rank's shard, so no rank leaves while another still needs its server; a
// worker's bye takes it out of the SSP gate's minimum.
//
// This package must never interpret the model (it only adds and scales vectors through its
// rules), never block a reader goroutine on another rank's progress (a deferred reply must be
// queued, not waited for: readers also carry this rank's own replies), and never allocate per
// message in steady state.
package kv
