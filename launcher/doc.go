// Package launcher starts the ranks of a hetsync job and supervises them.
//
// The launching side (Job) starts N rank processes through a Spawner, gives each one the rank
// environment (HETSYNC_RANK, HETSYNC_WORLD_SIZE, HETSYNC_LOCAL_RANK, HETSYNC_LOCAL_SIZE,
// HETSYNC_RENDEZVOUS, HETSYNC_JOB_SECRET, and RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE for
// tools that read torchrun's names), tags every output line with "[rank] ", and supervises:
// the first rank that fails (non-zero exit or signal) makes the launcher stop all the others
// (SIGTERM to their process groups, SIGKILL after a grace period) and report which rank failed
// and how. Cancelling the context (Ctrl-C, SIGTERM to the launcher) stops every rank the same
// way. Spawning is behind the Spawner interface: LocalSpawner starts processes on this
// machine; an SSH spawner plugs in beside it.
//
// The rank side (RankEnvFromEnviron) reads that environment back with clear errors.
//
// This package never imports the collective or transport layers, never talks to the ranks
// other than through their environment, signals and output, and never leaves a rank running
// after Run returns.
package launcher
