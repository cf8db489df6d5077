// Package hetsync is the entry point of a program that runs collectives: Init forms the job
// from whatever started this process and returns a communicator, as MPI_Init and torch's
// init_process_group do.
//
//	comm, err := hetsync.Init(ctx)
//	if err != nil { ... }
//	defer comm.Close()
//	err = comm.AllReduce(ctx, hetsync.F32(grad), hetsync.Avg)
//
// Init recognises, in this order: `hetsync launch`, `bench` and `train` (HETSYNC_RANK and the
// other HETSYNC_* variables), Open MPI's mpirun (OMPI_COMM_WORLD_*), torchrun (RANK,
// WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), Slurm's srun (SLURM_PROCID, SLURM_NTASKS,
// SLURM_LOCALID) and a Kubernetes indexed Job (JOB_COMPLETION_INDEX with HETSYNC_WORLD_SIZE).
// Under the other launchers every rank also needs the same HETSYNC_JOB_SECRET (or
// HETSYNC_JOB_SECRET_FILE) and rank 0's rendezvous address, HETSYNC_RENDEZVOUS or
// MASTER_ADDR and MASTER_PORT. A process that no launcher started is a job of one rank, as
// with MPI; one that another launcher started as one of several ranks without a secret is an
// error, never a job of one. InitLocal runs n ranks as goroutines of this process, for tests
// and notebooks.
//
// The algorithm and the transport come from the options, else from the variables the launcher
// exported (HETSYNC_COLLECTIVE, HETSYNC_SECURITY, HETSYNC_DATA_PATH, HETSYNC_JOIN_TIMEOUT,
// HETSYNC_POLL, HETSYNC_CHECKSUM, HETSYNC_SCHED), else from the transport's defaults. docs/using.md is the
// user's guide.
//
// This package only forms jobs: it never starts processes (the launcher does), never moves
// bytes itself (the transport does) and never implements a collective (Comm is
// collective.Comm's, with its methods). It keeps no global state: everything a job needs is in
// the Comm that Init returns.
package hetsync
