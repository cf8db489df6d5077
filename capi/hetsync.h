/* hetsync.h: the C ABI of libhetsync.so, hetsync's collectives for programs in other languages.
 * Build: `make python` (go build -buildmode=c-shared ./capi). Guide: docs/python.md.
 *
 * Conventions
 *  - Every call that can fail returns NULL on success, else an error message (hetsync's own: it
 *    names the rank, the peer and the call) that the caller releases with hs_free.
 *  - Communicators and requests are int64 ids; 0 is never a valid one.
 *  - Buffers are the caller's memory, read and written in place; count is in elements of dtype.
 *    The library keeps no pointer past the call's completion (for a request: until hs_wait
 *    reports it done), and the caller must not touch the buffer before then.
 *  - wait_ms and req: every collective starts, then waits up to wait_ms milliseconds. When it
 *    completes in that time, *req is 0 and the result is its error; otherwise *req is a request
 *    to finish with hs_wait. wait_ms < 0 (or req NULL) runs the call to completion on the
 *    calling thread; wait_ms == 0 returns at once (a non-blocking call). A caller that must
 *    stay responsive to signals (Python) waits in slices.
 *  - Collectives are issued in the same order on every rank of a communicator; a mismatch is an
 *    error that names both calls, never a hang.
 *  - Threads: any thread may call; the library takes no lock across a wait.
 *  - fork: a child forked after hs_init must not call the library (the Go runtime's threads do
 *    not survive fork); it may use its own memory and exit. A process that needs ranks starts
 *    them with a launcher, never by fork or spawn.
 *  - Signals: the library installs no handler of its own; the Go runtime installs handlers for
 *    SIGSEGV, SIGBUS, SIGFPE, SIGPIPE and SIGURG and forwards the ones it did not cause.
 */
#ifndef HETSYNC_H
#define HETSYNC_H
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element types: the ones hetsync reduces. Other types travel through the non-reducing
 * collectives viewed as one of these (bytes as HS_INT32 words, say). */
enum { HS_FLOAT32 = 1, HS_FLOAT64 = 2, HS_INT32 = 3, HS_INT64 = 4 };
/* Reductions. HS_AVG is the sum times 1/p for floats, truncating integer division for integers. */
enum { HS_SUM = 1, HS_AVG = 2, HS_MIN = 3, HS_MAX = 4, HS_PROD = 5 };

void hs_free(char *err);

/* Forms the job exactly as hetsync.Init does: under `hetsync launch`, mpirun, srun, torchrun's
 * variables, or alone as a job of one rank. */
char *hs_init(int64_t *comm);
/* Any pointer may be NULL. */
char *hs_info(int64_t comm, int *rank, int *size, int *local_rank, int *local_size);
/* The communicator's algorithm and transport, as text (hs_free it); NULL for an unknown id. */
char *hs_settings(int64_t comm);
/* MPI_Comm_split: ranks passing the same color >= 0 form a communicator ranked by key; *out is
 * 0 for a negative color. Collective over comm. */
char *hs_split(int64_t comm, int color, int key, int64_t *out);
/* Closing the job's communicator leaves the job; a split one owns no connection. */
char *hs_close(int64_t comm);

/* Waits up to wait_ms (forever when < 0) for req; *done is 1 when it completed (the id is then
 * released and the result is the call's error), 0 when the time ran out. */
char *hs_wait(int64_t req, int64_t wait_ms, int *done);

char *hs_allreduce(int64_t comm, void *buf, int64_t count, int dtype, int op, int64_t wait_ms, int64_t *req);
/* Afterwards block i (hetsync's Partition: the first count%p ranks own one element more) of
 * rank i's buf holds the reduced values. */
char *hs_reduce_scatter(int64_t comm, void *buf, int64_t count, int dtype, int op, int64_t wait_ms, int64_t *req);
char *hs_reduce(int64_t comm, void *buf, int64_t count, int dtype, int op, int root, int64_t wait_ms, int64_t *req);
/* Fills buf with every rank's block (the blocks as in hs_reduce_scatter). */
char *hs_allgather(int64_t comm, void *buf, int64_t count, int dtype, int64_t wait_ms, int64_t *req);
char *hs_broadcast(int64_t comm, void *buf, int64_t count, int dtype, int root, int64_t wait_ms, int64_t *req);
/* send and recv both hold count elements, count divisible by the communicator's size. */
char *hs_alltoall(int64_t comm, void *send, void *recv, int64_t count, int dtype, int64_t wait_ms, int64_t *req);
char *hs_barrier(int64_t comm, int64_t wait_ms, int64_t *req);
char *hs_send(int64_t comm, void *buf, int64_t count, int dtype, int peer, int64_t wait_ms, int64_t *req);
char *hs_recv(int64_t comm, void *buf, int64_t count, int dtype, int peer, int64_t wait_ms, int64_t *req);

/* Sessions: a synchronization strategy (every built-in one) driven by the caller's own training
 * loop over two flat float32 vectors of n values, the parameters and the gradient, which stay
 * the caller's memory for the session's life. flags are "name=value" lines in `hetsync train`'s
 * words ("sync=esync", "lr=0.05", "batch=64", "slowdown=1,1,2,4", a strategy's options):
 * every rank passes the same, as for `hetsync train`, and the session checks that they agree.
 * hs_session_new is collective: params become rank 0's on every rank. */
char *hs_session_new(int64_t comm, const char *flags, float *params, float *grads, int64_t n, int64_t *sess);
/* What the coming round exchanges, and so where the caller's optimizer steps; it may change
 * between rounds, so a loop asks before each local step. *kind is
 *   1  gradients: a round leaves the ranks' average in grads, for the caller's optimizer
 *      (ssgd);
 *   2  parameters: the caller's optimizer steps after every local step, and a round may
 *      replace params with the global model (esync, wbsp, wbsp-opt, ssp lazy, local);
 *   3  server: a round takes grads and leaves the strategy's update in params; the caller's
 *      optimizer does not step (asgd, dcasgd, ssp, sync-switch).
 * *params_at_steps is 1 when hs_session_should_sync (and so hs_session_step_sync) reads and
 * may rewrite params between rounds (wbsp-opt over an allreduce): the caller then keeps params
 * current before each step and reads them back after. Either pointer may be NULL. */
char *hs_session_exchange(int64_t sess, int *kind, int *params_at_steps);
/* After each local step: its mean loss, batch size, correct predictions and duration in
 * seconds. A rank given a slowdown sleeps here. wait_ms and req as for the collectives. */
char *hs_session_step(int64_t sess, double loss, int64_t samples, int64_t correct, double seconds, int64_t wait_ms, int64_t *req);
/* hs_session_step, then hs_session_should_sync, in one call (one wait instead of two). */
char *hs_session_step_sync(int64_t sess, double loss, int64_t samples, int64_t correct, double seconds, int64_t wait_ms, int64_t *req);
/* Asks whether this rank's round ends now; the answer is hs_session_state's sync_now. */
char *hs_session_should_sync(int64_t sess, int64_t wait_ms, int64_t *req);
/* The round's exchange; afterwards hs_session_state says whether the job agreed to stop. */
char *hs_session_sync(int64_t sess, int64_t wait_ms, int64_t *req);
/* The answers of the last completed calls; any pointer may be NULL. */
char *hs_session_state(int64_t sess, int *sync_now, int *stop, int64_t *round, double *global_loss);
/* Rank 0's vote to stop after the next round (ignored on other ranks). */
char *hs_session_stop(int64_t sess);
/* Ends the session (returns when no other rank needs this one) and releases its id. */
char *hs_session_close(int64_t sess, int64_t wait_ms, int64_t *req);
/* Run directory: the flag "out=DIR" (else $HETSYNC_RUN_DIR, which `hetsync launch --out` sets)
 * makes rank 0 write DIR as `hetsync train --out` does: config.json, every rank's rounds and,
 * at hs_session_close, metrics.jsonl and summary.json. hs_session_eval records, on rank 0, the
 * caller's evaluation of the model after the latest round (accuracy in [0, 1], loss; NaN for
 * none) in eval.jsonl at that round's training time; other ranks' are refused. */
char *hs_session_eval(int64_t sess, double accuracy, double loss);

/* The job's key-value store (the store torch.distributed's rendezvous uses under the Python
 * package): held by rank 0 of comm and reached over the job's own connections, so only the
 * job's ranks reach it. Every rank of comm creates it (one per communicator) and closes it
 * before leaving the job; rank 0's close returns once every other rank's has, or its timeout
 * passed (the ranks still open then find the store gone). Keys and values
 * are bytes (key, klen); what one call carries is bounded (1 MiB). Semantics are torch's
 * Store's: add keeps a decimal counter; compare_set sets key to desired when it holds expected
 * (or is absent and elen is 0) and returns the value afterwards (expected when absent); get
 * and wait block until their keys exist and fail at their timeout with an error naming the
 * missing keys. Every call takes wait_ms and req as the
 * collectives do; the result pointers are written when the call completes and must stay
 * valid until then. A value returned in *val (NULL when empty) is released with hs_free. */
char *hs_store_new(int64_t comm, int64_t *store);
/* timeout_ms (the store's timeout; no limit when <= 0) bounds each call: get and wait wait at
 * most that long for their keys, the other calls for the holder's answer. */
char *hs_store_set(int64_t store, const void *key, int64_t klen, const void *val, int64_t vlen, int64_t timeout_ms,
                   int64_t wait_ms, int64_t *req);
char *hs_store_get(int64_t store, const void *key, int64_t klen, int64_t timeout_ms, void **val, int64_t *vlen,
                   int64_t wait_ms, int64_t *req);
char *hs_store_add(int64_t store, const void *key, int64_t klen, int64_t delta, int64_t *sum, int64_t timeout_ms,
                   int64_t wait_ms, int64_t *req);
char *hs_store_compare_set(int64_t store, const void *key, int64_t klen, const void *expected, int64_t elen,
                           const void *desired, int64_t dlen, void **val, int64_t *vlen, int64_t timeout_ms,
                           int64_t wait_ms, int64_t *req);
/* keys[i] is klens[i] bytes long. */
char *hs_store_wait(int64_t store, void **keys, int64_t *klens, int64_t nkeys, int64_t timeout_ms, int64_t wait_ms,
                    int64_t *req);
char *hs_store_check(int64_t store, void **keys, int64_t *klens, int64_t nkeys, int *ok, int64_t timeout_ms,
                     int64_t wait_ms, int64_t *req);
char *hs_store_delete_key(int64_t store, const void *key, int64_t klen, int *deleted, int64_t timeout_ms,
                          int64_t wait_ms, int64_t *req);
char *hs_store_num_keys(int64_t store, int64_t *n, int64_t timeout_ms, int64_t wait_ms, int64_t *req);
/* Releases the id at once; the close itself waits at most timeout_ms (no limit when <= 0). */
char *hs_store_close(int64_t store, int64_t timeout_ms, int64_t wait_ms, int64_t *req);

#ifdef __cplusplus
}
#endif
#endif
