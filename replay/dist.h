/* dist.h: the MPI layer: whether this process is one rank of an MPI job
 * (started by Open MPI's mpirun or Slurm's srun), its rank and the job's
 * size, and the few messages the distributed commands exchange (byte
 * buffers between two ranks, a broadcast, a clock comparison).
 *
 * Only dist.c includes mpi.h, and only when the build found mpicc
 * (AGENTREPLAY_MPI); without it every function here is a stub in which a
 * process is a job of one, and dist_init() refuses a job of more.
 *
 * MPI is initialised lazily, by dist_init(), and only where the launcher's
 * environment says the process is one of several ranks: a plain
 * `./agentreplay ...` (or a job of one rank) never touches MPI and behaves
 * exactly as a build without it. MPI_Finalize runs at exit, in the process
 * that called dist_init() only (never in a forked worker).
 *
 * Every rank runs the same command with the same arguments; rank 0 writes
 * the results. Ranks share no file system: what rank 0 needs travels as
 * messages. Messages between two ranks arrive in the order sent. Ranks
 * are assumed to share byte order and type sizes (dist_clock_sync checks).
 */
#ifndef DIST_H
#define DIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The job's size and this process's rank as the launcher's environment
 * gives them, without any MPI call: Open MPI (OMPI_COMM_WORLD_SIZE and
 * _RANK), PMI launchers (PMI_SIZE, PMI_RANK) and srun's job steps
 * (SLURM_STEP_NUM_TASKS, SLURM_PROCID; a batch script has neither pair).
 * 1 and 0 when not launched so. */
int dist_env_size(void);
int dist_env_rank(void);

/* Built against MPI. */
bool dist_compiled(void);

/* Joins the MPI job (once; later calls return 0). 0, or -1 with err set:
 * built without MPI, MPI_Init failed, or MPI sees another size than the
 * launcher's environment (srun without --mpi=pmix starts N jobs of one).
 * Errors of later MPI calls are returned, not fatal. */
int dist_init(char *err);
/* dist_init() succeeded and the job has more than one rank. */
bool dist_on(void);
/* After dist_init(): this rank and the job's size; else 0 and 1. */
int dist_rank(void);
int dist_size(void);
/* Ends the job with code now (MPI_Abort): every rank is stopped. */
void dist_abort(int code);

/* ---- messages ------------------------------------------------------------
 * Tags are the caller's (0..32767); len is at most INT32_MAX bytes. */

/* Sends len bytes to rank `to` and returns once buf may be reused. 0 or -1
 * with err set. */
int dist_send(int to, int tag, const void *buf, size_t len, char *err);
/* Sends buf (malloc'ed; the layer frees it once sent) without waiting.
 * 0 or -1 with err set (buf freed). */
int dist_post(int to, int tag, void *buf, size_t len, char *err);
/* Completes the posted sends that can be; returns how many are pending. */
int dist_progress(void);
/* Waits for every posted send, polling every 100 us, for up to timeout_ns
 * (< 0: no limit); returns how many are still pending. */
int dist_drain(int64_t timeout_ns);
/* Whether a message is waiting (from any rank, any tag); its source, tag
 * and length. Never blocks. */
bool dist_peek(int *from, int *tag, size_t *len);
/* Receives the message dist_peek() reported (the next one from `from` with
 * `tag`, blocking until it is there) into buf of cap bytes; its length in
 * *len. 0 or -1 with err set (larger than cap: err, message dropped). */
int dist_recv(int from, int tag, void *buf, size_t cap, size_t *len, char *err);

/* ---- collectives (every rank calls them, in the same order) ------------- */

/* buf (len bytes) of rank 0 on every rank. 0 or -1 with err set. */
int dist_bcast(void *buf, size_t len, char *err);
/* Each rank's CLOCK_MONOTONIC (wall_ns()) minus rank 0's, in ns, measured
 * by rounds of ping-pong with rank 0 (the round with the shortest round
 * trip wins; the offset is then within half that trip). Rank 0 gets every
 * rank's offset and round trip in offsets[] and rtts[] (dist_size()
 * entries each; may be NULL elsewhere); every rank gets its own in *self.
 * Also checks that the ranks share byte order. 0 or -1 with err set. */
int dist_clock_sync(int64_t *offsets, int64_t *rtts, int64_t *self, char *err);

#endif
