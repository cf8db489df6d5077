// Package metrics records what a training run did and reduces it to the numbers the papers
// compare (docs/algorithms.md#metrics): per-round records, evaluations, and a summary.
//
// It must never: talk to the network or to other ranks (rank 0's trainer gathers the other
// ranks' lines over the runtime and hands them to a Writer), read a clock itself (times are
// given by the caller, in seconds since training start), or overwrite an existing run.
//
// # Run directory
//
//	runs/NAME-YYYYMMDD-HHMMSS/
//	  config.json    the run configuration (whatever the trainer passed, indented JSON)
//	  metrics.jsonl  one round record per line, every rank, in arrival order
//	  eval.jsonl     one evaluation record per line
//	  summary.json   written by RunDir.Finish from the three files above, or by EndEarly
//	                 with "ended_early": {"reason", "round"} for a run stopped before its end
//	  logs/rank-N.log
//	  ranks/rank-N.jsonl  each rank's own records, one line written per round as it ends
//	  run.lock       the pid of the job that owns the directory: hetsync train holds an
//	                 flock(2) on it for the job's life, so a second job is refused
//
// config.json, eval.jsonl and ranks/ are written as the job runs, so a job that is
// interrupted, times out or loses a rank leaves what it measured; metrics.jsonl is written at
// the end from the records rank 0 gathered over the runtime (ranks on other hosts keep their
// ranks/ file on their own host). LoadRun reads ranks/ when metrics.jsonl is empty, and
// refuses a file that records one rank's round twice.
//
// # metrics.jsonl (RoundRecord)
//
// One JSON object per line per rank per round. Keys, in this order:
//
//	rank         int     the rank that ran the round
//	round        int     round index (0-based); for asynchronous strategies the rank's own
//	                     iteration count
//	time_s       float   wall seconds since training start at the end of the round
//	samples      int     samples trained this round (Σ batch sizes over local steps)
//	compute_s    float   seconds computing: batch loading, forward/backward, local updates,
//	                     injected heterogeneity sleep
//	comm_s       float   seconds moving data (collectives, push/pull)
//	wait_s       float   seconds blocked on other ranks (barriers, READY checks, SSP bounds)
//	bytes_sent   int     payload bytes this rank sent during the round
//	bytes_recv   int     payload bytes this rank received during the round
//	loss         float   mean training loss over the round's batches (null if not finite)
//	local_steps  int     local SGD steps taken this round
//	late_rank    int     the rank this rank waited for longest in the round's collectives,
//	                     -1 when it waited for none (absent in older files: read as -1)
//	late_wait_s  float   seconds this rank waited for late_rank (absent: read as 0)
//	accuracy     float   test accuracy, present only when this round was evaluated
//	sent_host    int     bytes_sent's share sent to ranks of this rank's host (shared memory,
//	                     Unix sockets, loopback; for the shared-memory arena, what the rank
//	                     wrote into it once), as the trainer's communicator and services send
//	sent_hosts   int     the share sent to other hosts of this rank's group of hosts (every
//	                     other host when the job has no link matrix)
//	sent_groups  int     the share sent to other groups of hosts (racks) of the link matrix;
//	                     the three are written only when one is not 0 (absent: read as 0)
//	…            float   strategy-specific extras ([a-z0-9_]+ keys), e.g. staleness,
//	                     version, clock, switched
//
// Example:
//
//	{"rank":1,"round":7,"time_s":3.52,"samples":256,"compute_s":0.31,"comm_s":0.02,"wait_s":0.11,"bytes_sent":1017640,"bytes_recv":1017640,"loss":0.61,"local_steps":4,"late_rank":3,"late_wait_s":0.09,"staleness":2}
//
// # eval.jsonl (EvalRecord)
//
// One line per evaluation of a global-model snapshot on the full test set, done on rank 0
// beside training so it does not perturb worker timing:
//
//	time_s    float  wall seconds since training start when the snapshot was taken
//	round     int    global round (or server version) of the snapshot
//	accuracy  float  test accuracy in [0, 1] (correct ÷ test samples)
//	loss      float  mean test loss
//
// # summary.json (Summary)
//
//	config                    the content of config.json
//	ranks, rounds             ranks seen; distinct round numbers seen
//	wall_s                    latest time_s of any round record
//	time_to_accuracy          {"0.70": s, "0.75": s, "0.80": s, "0.85": s, "0.90": s}: time_s of
//	                          the first evaluation (in time order) with accuracy ≥ target;
//	                          targets never reached are absent
//	evaluations               number of evaluations
//	final_accuracy, final_loss  of the latest evaluation (final_loss null if it diverged)
//	best_accuracy             the highest evaluated accuracy
//	samples                   Σ samples over all ranks and rounds
//	throughput_samples_per_s  samples ÷ wall_s
//	bytes_sent, bytes_recv    Σ over all ranks
//	sent_by_link              {"host": B, "hosts": B, "groups": B}: sent_host, sent_hosts and
//	                          sent_groups Σ over all ranks; absent when no rank counted them
//	traffic_mb_per_s          (bytes_sent + bytes_recv) ÷ 10⁶ ÷ wall_s (MB = 10⁶ bytes);
//	                          sent_mb_per_s and recv_mb_per_s separately
//	per_rank[]                rank, rounds, samples, elapsed_s (the rank's latest time_s),
//	                          compute_s, comm_s, wait_s, bytes_sent, bytes_recv,
//	                          sent_by_link (absent for a rank that counted none),
//	                          computation_ratio = compute_s ÷ elapsed_s,
//	                          esync_computing_ratio = 1 − (comm_s + wait_s) ÷ elapsed_s
//	                          (ESync's figure 5: only the global aggregate, i.e. communication
//	                          and barrier waiting, counts as non-computing)
//	mean_computation_ratio    mean of per_rank computation_ratio
package metrics
