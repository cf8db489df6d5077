// Package launcher starts the ranks of a hetsync job and supervises them.
//
// The launching side (Job) starts N rank processes through a Spawner, gives each one the rank
// environment (HETSYNC_RANK, HETSYNC_WORLD_SIZE, HETSYNC_LOCAL_RANK, HETSYNC_LOCAL_SIZE,
// HETSYNC_RENDEZVOUS, HETSYNC_JOB_SECRET, RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE and
// MASTER_ADDR/MASTER_PORT for tools that read torchrun's names, and the job's Settings:
// HETSYNC_SECURITY, HETSYNC_DATA_PATH, ...), tags every output line with "[rank] ", and supervises:
// the first rank that fails (non-zero exit or signal) makes the launcher stop all the others
// (SIGTERM to their process groups, SIGKILL after a grace period) and report which rank failed
// and how. Cancelling the context (Ctrl-C, SIGTERM to the launcher) stops every rank the same
// way. Spawning is behind the Spawner interface: LocalSpawner starts processes on this
// machine; SSHSpawner starts them on the hosts of a host list or hostfile (ParseHostList,
// ParseHostfile, Place), over golang.org/x/crypto/ssh with known_hosts checking, each host
// name resolved through the user's ssh config as ssh resolves it (Host aliases, HostName,
// User, Port, IdentityFile, ProxyJump), through one SSH session per host that runs the host's
// supervisor (Supervise, `hetsync _supervise`): it starts every rank of its host, frames their
// output and exits back to the launcher, and kills their process groups when the launcher or
// its connection goes away. Job.Timeout, Job.OutputDir and Job.Timestamps apply to either.
// Restarts is torchrun's restart policy around a Job: after a rank failed and the job was
// stopped, the whole job starts again, up to a limit, each rank told its attempt by
// HETSYNC_RESTART_COUNT.
//
// The rank side (RankEnvFromEnviron, called by hetsync.Init) reads that environment back with
// clear errors, and adopts the environment of Open MPI, torchrun, Slurm or a Kubernetes indexed
// Job when HETSYNC_RANK is unset (AdoptRankEnv). docs/multihost.md and docs/using.md have the
// user's guide, with srun, mpirun, torchrun and Kubernetes examples.
//
// This package never imports the collective or transport layers, never talks to the ranks
// other than through their environment, signals and output, never leaves a rank running
// after Run returns, and never opens more than one SSH session per host for its ranks.
package launcher
