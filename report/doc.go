// Package report turns finished run directories (metrics: config.json, metrics.jsonl,
// eval.jsonl) into what a reader compares: a markdown table (report.md), a machine-readable
// summary (summary.json) and PNG figures — test accuracy against time, throughput, traffic and
// the per-rank computation ratios — the figures of ESync, WBSP and Sync-Switch
// (docs/algorithms.md#metrics).
//
// # Definitions
//
// Every number is recomputed from the records with metrics.Summarize, so a report never
// depends on which version of the trainer wrote summary.json.
//
//   - time to accuracy A: the training time of the first evaluated snapshot with test
//     accuracy ≥ A, for A in metrics.AccuracyTargets (0.70 … 0.90).
//   - speedup = time-to-accuracy of the baseline ÷ that of the run, at the highest target both
//     reached (the table says which, e.g. "2.10× @0.80"); summary.json has every target.
//   - baseline: --baseline NAME (a run name) for every run; by default, for each scenario the
//     first run whose strategy is ssgd. A scenario is what the strategies must not change to be
//     comparable: model, ranks, seed, shard and heterogeneity (slowdown, step sleep, stragglers).
//   - t@baseline tail−0.01: when a run first reached its baseline's tail accuracy (below)
//     minus one point, and that time ÷ the baseline's wall time (Sync-Switch's criterion:
//     converged to BSP's accuracy). The tail, not the last evaluation: at a constant rate the
//     last one swings by a point either way (an SSGD run's last evaluation 0.823 on a 0.843
//     tail), which decides the criterion by luck.
//   - tail accuracy: the mean test accuracy of the evaluations in the last tenth of a run
//     (TailFraction), beside the final one, which a swinging curve makes a lottery.
//   - across seeds: runs whose config.json differ only in the seed (and start time) form a
//     group, summarised as the ESync paper's Table 1 is: median time to each target (and how
//     many runs reached it), the median and range of the runs' speedups, each against its
//     own seed's baseline, and mean ± std of final and tail accuracy and throughput.
//   - computation ratio: ours is compute ÷ elapsed per rank (injected sleep is compute);
//     ESync's figure 5 is 1 − (communication + waiting) ÷ elapsed.
//   - bytes on each link class: what the ranks sent to ranks of their own host, to other
//     hosts of their group of hosts and to other groups (racks) of the job's link matrix
//     (metrics.jsonl's sent_host, sent_hosts, sent_groups), in all, per sample (÷ the
//     samples all ranks trained) and per round (÷ the rounds all ranks recorded), per run and
//     as the median per sample of each group of seeds; shown for the runs that counted them.
//
// # Figures
//
// Test accuracy against time is drawn per shard kind, and per shard kind and heterogeneity
// when a shard kind's runs differ in it (accuracy_iid_slowdown-1-1-2-4.png), so that a sweep
// over several seeds stays readable.
// Every figure is written twice, name.png and name.svg, drawn by gonum.org/v1/plot with its
// embedded Liberation fonts: no cgo, no system fonts. A configuration that was run with
// several seeds is drawn once, with error bars of ± one standard deviation: one bar (the
// mean) in the bar figures, one accuracy curve whose k-th point is the mean of the runs' k-th
// evaluations. timeline_RUN.png has a row per rank with its compute, communication and wait
// seconds per round stacked, on one scale, so the rank that computes longest and the ranks
// that wait for it stand out; made_others_wait.png, drawn when the rounds record late_rank
// and late_wait_s, has the seconds the other ranks waited for each rank.
//
// This package must never run training, talk to the network, or modify a run directory: it
// reads runs and writes only into the output directory it is given.
package report
