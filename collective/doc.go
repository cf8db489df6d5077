// Package collective is what the ranks of a job compute together: AllReduce, ReduceScatter,
// AllGather, Broadcast, Reduce, Barrier, AllToAll and point-to-point Send/Recv over a
// transport.Endpoint, with interchangeable algorithms chosen by name ("ring", "butterfly",
// "binary-blocks", "ps", "auto"), like database/sql drivers; their non-blocking forms
// (IAllReduce, ... returning a Request); sub-communicators (Split); and a time limit on every
// call.
//
// What it must never do: open connections or know how bytes travel (that is transport's job),
// interpret a model or an optimizer (trainer's), keep global state, let two ranks that
// disagree about a call hang or silently compute garbage, or let a call wait without limit
// unless asked to (NoTimeout).
//
// # Schedules
//
// An algorithm is a pure function from (p, rank, n elements, segment size) to one rank's
// schedule: an ordered list of sends and an ordered list of receives ("receive into the buffer"
// or "receive into a pooled temp and reduce"), each over an element range, split into segments
// of at most Options.SegmentBytes (1 MiB by default; calls of LargeCallBytes or more take the
// endpoint's transport.LargeSegment when it has one: 4 MiB over plain TCP; with the default
// segment size and without a link matrix, an allreduce of 2 MiB or more runs as consecutive
// allreduces of 1 MiB chunks, see chunk.go). The builder derives
// the dependencies from the ranges: a send waits for the last earlier receive that wrote what it reads; a receive waits
// for the last earlier send that reads what it overwrites. One executor runs any schedule: sends
// go out on a goroutine of their own, receives are taken on the caller's goroutine, and each
// starts as soon as its dependency is met, so segments pipeline (segment s is forwarded while
// segment s+1 is still arriving). Schedules are cached per (collective, n, root, element size)
// and the temp buffer is pooled. A call whose messages are at most 1 MiB each (every call with
// 1 MiB segments) runs on the caller's goroutine and allocates nothing; one with larger
// messages allocates its sender goroutine and, unless its context is the Comm's own (see
// Timeouts), a context.WithCancel: a handful of small objects, independent of n and p.
//
// The same schedules feed a checker (every send has a receive of the same size and tag, no
// deadlock, no contribution reduced twice, every rank ends with what the collective promises;
// the tests run it for p = 1..16 and many n, and Registry.Register on every algorithm it is
// given) and an α-β simulator (Predict), which "auto" uses.
//
// # Algorithms of your own
//
// The names are a Registry's, like the trainer's strategies: Builtin holds this package's
// algorithms, and a program adds its own with Register: an Algorithm builds one rank's
// schedule of AllReduce, ReduceScatter and AllGather on a Builder. Options.Registry hands the
// registry to New; auto then considers the new algorithm beside the built-in ones, priced by
// replaying its schedules (extend/ has a complete example).
//
// # Algorithms and their α-β costs
//
// n is the vector size in bytes, α the per-message latency, β the time per byte, γ the
// reduction time per byte, p the ranks, ⌊lg p⌋ = lg p for powers of two.
//
//	algorithm          latency           bandwidth (per rank)        notes
//	ring               2(p-1)α           2(p-1)/p·nβ                 segmented and pipelined, ≥2 segments per block (Gloo)
//	butterfly, p=2^k   2 lg p·α          2(p-1)/p·nβ                 recursive halving RS + recursive doubling AG
//	butterfly, other p (2⌊lg p⌋+2)α      (2(p-1)/p + 2)·nβ           extra ranks fold into partners (MPICH)
//	binary-blocks      ≈2⌊lg p⌋α + chain ≈2nβ for two blocks (8+4, 8+1) Rabenseifner/Gloo; more blocks serialise the chain
//	ps, k servers      2(p-1)α           max(n, (p-1)n/k)·β each way push shards, server reduces, pull; k=p: ring volume in 2 rounds
//	recursive doubling lg p·α            lg p·nβ                     auto only, small messages
//	all reductions     -                 (p-1)/p·nγ (rec. doubling lg p·nγ)
//
// Predict replays the schedules (one message at a time per rank in each direction; α per
// message). With α = 30 µs and 10 Gb/s (β = 0.8 ns/B), allreduce in ms:
//
//	p, size        ring    butterfly  binary-blocks  ps      auto
//	4, 4 KiB       0.185   0.125      0.125          0.185   0.067 (recursive doubling)
//	8, 4 KiB       0.426   0.186      0.186          0.426   0.100 (recursive doubling)
//	12, 4 KiB      0.666   0.403      0.247          0.666   0.166 (recursive doubling)
//	4, 64 MiB      83.4    83.4       83.4           83.4    83.4  (butterfly)
//	9, 64 MiB      99.3    222        105            99.3    99.3  (ring)
//	12, 64 MiB     102     231        105            102     102   (ring)
//
// auto: for each call shape (collective, n, element size) it prices every candidate with
// AutoAlpha and AutoBeta (by replaying its schedules on small jobs, from closed forms on large
// ones: see Planning at scale) and takes the fastest, or of the candidates predicted within
// 3 % of it the one with the fewest messages (then the earlier of recursive doubling
// [allreduce only], butterfly, binary-blocks, ring). In effect: recursive doubling for
// small messages, butterfly for powers of two, ring (or binary-blocks when its blocks are
// balanced) for other p. ps is never chosen automatically. When every peer is reached over a
// shared-memory pipe, auto replays on ShmAlpha and ShmBeta instead and also prices each
// reduction (ShmReduceBeta per byte): on one host a reduction is a pass over memory, so
// recursive doubling, which reduces the whole vector at every step, loses sooner (auto_shm.go).
// On a job whose endpoint offers a transport.Arena (every rank on one host), auto runs
// allreduces and barriers through it instead, from 3 ranks, or from 2 MiB with 2 (arena.go,
// arena_allreduce.go): each rank copies its vector in once, reduces its share of each chunk
// straight from the others' slots, copies the result out, and sleeps once per chunk at a
// barrier, not once per message.
//
// # Planning from the network
//
// With Options.Links (a topology.Matrix: which ranks share a host, α and β of every rank
// pair) the communicator plans from the network instead of from one α-β pair:
//   - the layout groups hosts into well-connected groups (the links below the largest jump, of
//     more than 2×, between consecutive link speeds) and orders ranks grouped (a host's ranks
//     adjacent, a group's hosts adjacent: a ring crosses each thin link between groups once
//     each way) or interleaved (dealt round-robin over the groups: a butterfly's last,
//     smallest exchanges cross them);
//   - "ring" runs in the grouped order for any placement; "ps" puts its servers on the best
//     connected hosts (one per host before a second) with shards in proportion to their
//     bandwidth; NAME/ORDER runs any algorithm's allreduce in the rank, grouped or interleaved
//     order;
//   - "hier-NAME[/ORDER]" is the host-aware hierarchy: a reduce-scatter inside each host into
//     lanes (as many as the largest host has ranks), NAME across hosts for every lane at once,
//     each carried by its own local rank, and an allgather inside each host. Hosts may hold
//     different numbers of ranks;
//   - the simulator replays schedules with every pair's own (α, β), and messages between hosts
//     queue for the host NICs (shared by the host's ranks) and the groups' uplinks (shared by
//     the group's hosts);
//   - auto prices every configuration (Configurations, plus recursive doubling) and runs the
//     fastest, or the simplest of those within 3 % of it; AllReduceChoice tells which it
//     picked and the time it predicted;
//   - when auto's calls run far off their predicted time for a few calls in a row, the ranks
//     agree at a call boundary to measure the links again and re-plan (ReplanOptions;
//     Replans lists what happened). Checking costs one allreduce of two numbers every few
//     calls; measuring happens only when the calls are off plan.
//
// # Planning at scale
//
// Replaying every candidate's schedules for every rank costs seconds at 256 ranks and
// minutes at 1,024, so auto replays in full only small jobs (up to 8 ranks) and irregular
// placements up to 64 ranks (hosts of different rank counts, or host pairs whose rank pairs
// differ). Otherwise it prices each candidate from closed forms (plan.go, plan_cost.go,
// plan_hosts.go) on the matrix read host by host (topology.HostMatrix: P + H² entries, not
// P², so 8,192 ranks on 1,024 hosts take 16 MiB, not 1 GiB):
//   - a schedule is a sequence of phases, each a set of messages that start together; a phase
//     lasts as long as its busiest message, rank (its sends in turn, its receives in turn) or
//     shared NIC or uplink. A ring is one phase repeated 2(p-1) times; a butterfly or
//     recursive doubling lg p phases of p messages; binary-blocks its blocks' halvings and
//     doublings, each block's chain hop beside the larger blocks' steps. Phases in a row
//     overlap in the replay (segments are forwarded as they arrive), so a run of phases is
//     bounded below by the lesser of their sum and the busiest resource over the run plus one
//     segment per phase, and above by their sum;
//   - a hierarchy is priced in parts: its local reduce-scatter and allgather host by host, its
//     inter-host part with hosts as nodes, each carrying ⌈m/k⌉ lanes in turn and its NIC all m;
//     the parameter server's p·k flows from per-host (on a two-tier network, per-group) sums;
//   - candidates that run the same schedule in the same order are priced once;
//   - up to 64 ranks the candidates whose lower bound is within 25 % of the least upper bound
//     are replayed and the replay decides; above, the midpoint of the bounds decides;
//   - sizes of one power-of-two bucket share the decision when both ends of the bucket choose
//     the same candidate.
//
// Everything is a pure function of the matrix, the call and the candidate order, evaluated
// in a fixed order, so every rank reaches the same decision. A decision takes milliseconds at
// 1,024 ranks and tens of milliseconds at 8,192 (docs/results/planner.md); Plan and `hetsync
// plan` give the same predictions for a cluster described by its shape.
//
// Shared by every algorithm:
//   - Broadcast: segmented binomial tree up to 256 KiB (⌈lg p⌉(α+nβ)), pipelined chain above
//     (≈(p-2+S)(α+nβ/S) with S ≥ 8 segments).
//   - Reduce: segmented binomial tree (⌈lg p⌉(α+nβ+nγ)); non-root buffers hold partials after.
//   - Barrier: dissemination, ⌈lg p⌉ rounds of empty messages.
//   - AllToAll: pairwise exchange, p-1 rounds, (p-1)(α + n/p·β).
//   - Send/Recv: one message, sequence numbers per peer, on a channel of its own (apart
//     from the collectives', so a pending Recv never takes a collective's message).
//
// # Semantics
//
// Every call carries a sequence number and an op signature (FNV-1a of the collective, the
// algorithm name, dtype, reduction, count and root) in transport.Header; a rank that receives a
// message of another call fails with a *transport.MismatchError wrapped as
// "rank r: allreduce #seq (ring): ...", then sends an abort frame to every peer, so that peers
// blocked on it fail too, with a *PeerAbortedError naming the rank that gave up, instead of
// hanging. The error names both calls as the program wrote them ("rank 1 called
// AllReduce(float, 1024, sum) where rank 0 called Broadcast(float, 1024, root 0)"): the peer's
// is found by hashing the calls this Comm could make that are close to this rank's (every
// collective, dtype, reduction and root with its count, or its call with any count up to
// 2^20); one of another algorithm or communicator is given as its signature. Calls that wait
// on each other before either receives a message of the other (two different roots of a
// broadcast) are not found out: they end at the time limit. A rank whose part of a call is
// only sends (a broadcast root) may return before a peer notices a mismatch; it gets the abort
// at its next call. After any failure the Comm is unusable (every later call says so): the ranks no longer
// agree on which messages are in flight. Every call honours its context: one cancelled while
// the call runs fails it with an error that wraps context.Canceled, and that too is a failure
// that leaves the Comm unusable on every rank. A context cancelled after its call returned does
// nothing, so a program may create and cancel a context per call. On error the contents of the
// buffers are undefined.
//
// Avg is Sum followed by a division by p on the rank that holds the result: multiplication by
// 1/p for floats, Go's truncating integer division for integers. Every element is reduced on
// exactly one rank and then copied, so all ranks get bit-identical allreduce results (recursive
// doubling computes the same commutative pairs on both partners, which is also bit-identical).
// Integer results are identical across algorithms; float results differ across algorithms
// only by summation order (tests allow 1e-5 relative for float32, 1e-12 for float64).
//
// Point-to-point messages share the collective channel and are matched in order per peer:
// Send, Recv and their non-blocking forms ISend and IRecv take a sequence number per peer and
// direction when issued and reach the transport in that order.
//
// # Compressed allreduce
//
// Options.Compression (or one call's AllReduceCompressed) sends the messages of a float32 sum
// or average encoded by a lossy codec of package compress (bf16, fp16, int8 with a scale per
// 256 values), for every algorithm: the executor encodes where it sends a step and decodes
// where it receives one, adding in float32 for a reducing step. Every result lies within
// CompressedBound of the exact sum; the replicas stay identical under fp16 and bf16, and under
// int8 over ring, ps and auto (which runs int8 calls as the ring). BetweenHosts ("auto")
// encodes only the messages between hosts of Options.Links; the replicas then stay identical
// over hier-ring, hier-ps and auto (which runs such calls as hier-ring). Error feedback (Compressed.Feedback) carries what a
// rank's encodings lost into its next call (compressed.go says how and when it is exact).
// IAllReduceCompressed is its non-blocking form, for every algorithm.
//
// # Order and non-blocking calls
//
// A call takes the Comm's next sequence number when it is issued and runs when every call
// issued before it has finished; every rank must issue the same calls in the same order.
// IAllReduce, IReduceScatter, IAllGather, IBroadcast, IReduce, IBarrier and IAllToAll return at
// once with a *Request (Wait, Test, Done; WaitAll) and run on a goroutine of their own at their
// turn, so computation overlaps communication and several calls can be outstanding. A
// blocking call issued after them waits its turn; if its context ends while it waits, it
// returns, and the communicator breaks when the turn reaches it (its peers expect it). A call
// issued when nothing else is running runs on the caller's goroutine at once: programs that
// only make blocking calls pay nothing for the ordering.
//
// # Sub-communicators
//
// Split(ctx, color, key) is MPI_Comm_split: a collective call on the parent after which the
// ranks that passed the same color form a Comm ranked by key, then parent rank; a negative
// color (Undefined) gets nil. Each sub-communicator maps its ranks to the job endpoint's ranks
// and carries its messages on two transport channels of its own (collectives and
// point-to-point), from service.EndChannel on,
// so it has its own sequence numbers and never exchanges a message with its parent or any other
// communicator: communicators may run at once from different goroutines. The members agree on
// the channel during Split: every rank proposes the lowest channel it has not used, the
// largest proposal wins, and the split is retried with fresh proposals if any member had used
// that channel meanwhile (a concurrent Split of another communicator of that rank). A rank
// thus never uses one channel for two communicators, so two communicators that share a pair of
// ranks never share a channel. The channels are counted per family (the Comms that descend
// from one New); communicators of two families over one endpoint must not run Splits.
//
// # Timeouts
//
// Every call is bounded: by its context's deadline when it has one (longer or shorter than the
// default), else by Options.Timeout, counted from when the call starts running. The default,
// DefaultTimeout (30 minutes), sits far above any legitimate wait for a slow rank's computation
// and exists so that a rank that died or took another branch stops the job with an error
// instead of holding it; NoTimeout lifts it. A call that runs out of time fails with a
// *TimeoutError naming the rank, the collective, its sequence number and the peers it was
// waiting for, sends the abort frame, and leaves the communicator unusable: later calls fail at
// once with that cause. A call whose context has no deadline runs under the Comm's reusable
// context, re-armed per call, which watches the caller's context once per burst of calls: the
// limit costs no allocation.
//
// # Aborts, stalls and the timeline
//
// A rank that gives up on a call sends every peer its reason before the abort frame: the job
// rank that gave up first and that rank's own error, passed on unchanged by ranks that give up
// because of an abort (abort.go). Every rank's *PeerAbortedError therefore names the rank that
// failed first and why (a frozen peer it detected, its context, a mismatch), not the neighbour
// that told it.
//
// Options.Watch: a call that has waited longer than StallAfter (default 5 s) is logged, with
// the peers it waits for and what each last did as its heartbeats said (transport.Liveness),
// and logged again every StallAfter. Every call also writes the endpoint's activity record,
// which the heartbeats carry. With a Timeline, each call, message and wait is written as a
// Chrome trace event (trace.go); without one a call pays a nil check per message.
//
// # Who is slow
//
// SetAttribution(true), called on every rank at the same point, makes each call end with a
// small exchange (attrib.go): the senders' start times of the call's messages go to their
// receivers, and an allgather of one row per rank gives every rank the same table, from which
// it names the rank that arrived last and the link whose messages took longest once both ends
// were ready, and says which of the two the waiting is due to (LastCall, Waits). The stamps
// are the timeline's clock reads, kept in buffers that grow once; off, a call pays a boolean
// test per message. docs/attribution.md has the method and its limits.
package collective
