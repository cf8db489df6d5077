// Package bench is hetsync's collective micro-benchmark: the logic behind `hetsync bench`,
// independent of the command line and of the transport.
//
// It follows nccl-tests' conventions so numbers can be put next to NCCL's, Gloo's or MPI's: a
// size sweep (-b, -e, -f), warm-up iterations, timed iterations, and checked iterations whose
// data are small integers stored as floats, so that sums are exact and every wrong element is
// counted. Each rank times its own calls; the times are gathered to every rank over the
// communicator under test and reported as avg/min/max across ranks. algbw = S/t (GB = 1e9
// bytes) and busbw = algbw × factor, with nccl-tests' factors: allreduce 2(p-1)/p;
// reducescatter, allgather and alltoall (p-1)/p with S the whole array; broadcast 1.
//
// Output formats: the nccl-tests text table, a TSV with the columns of the harness that runs
// Open MPI and Gloo for the comparison in docs/performance.md (a "# ... P=N" line, then #bytes count iters
// avg_us min_us max_us algbw_GBps busbw_GBps check), and JSON.
//
// The package never creates endpoints or communicators and never prints on its own: the
// caller hands it a Communicator and a writer.
package bench
