/* pool.h: running many independent jobs in worker processes (sweep and
 * the main job: one simulated point each), on one machine or across the
 * ranks of an MPI job (sweep, plan, sim --repeats).
 *
 * Worker w of `jobs` runs jobs w, w + jobs, w + 2 jobs, ... in order, so a
 * caller that sorts its jobs longest first gets the workers to finish
 * together. With one worker (or when fork fails for the first) the jobs
 * run in this process. Workers share the caller's memory copy-on-write
 * (the trace is read once) and report only through their exit status:
 * results go to files. A worker stops after its current job once
 * run_interrupted() (replay/run.h); a signal sent to the parent alone
 * (not to its process group, as Ctrl-C does) is passed on to the workers.
 */
#ifndef POOL_H
#define POOL_H

#include <stdbool.h>
#include <stdio.h>

/* Runs fn(arg, i) for i in [0, n) on up to `jobs` processes; fn returns
 * 0 on success. Returns how many workers (in-process: how many jobs)
 * reported a failure. */
int pool_run(int n, int jobs, int (*fn)(void *arg, int i), void *arg);

/* ---- across the ranks of an MPI job (replay/dist.h) ---------------------
 * Rank 0 holds the queue and hands job indices out, in `order`, to worker
 * processes: `jobs` on each rank (its own included: rank 0's first
 * workers take the first jobs), each asking for the next when it is done,
 * so faster ranks take more. Job i writes its files under `root`, at the
 * paths it would have under the command's result folder: on rank 0 that
 * folder itself; on any other rank a fresh private folder (under TMPDIR)
 * whose every file and folder then goes to rank 0 as messages, written
 * there at the same relative path (no shared file system is needed),
 * before the job counts as done. What a job prints to `out` is printed on
 * rank 0's stdout, job by job in index order, as soon as the jobs before
 * it are done. A signal stops the handing out; the workers finish their
 * job (partial, as run_interrupted() makes it). */
struct pool_ranks {
    int n;                       /* jobs */
    int jobs;                    /* worker processes per rank */
    const int *order;            /* the handing-out order (n indices); NULL: 0, 1, ... */
    const char *root;            /* rank 0's result folder; NULL: the jobs write no files */
    /* job i: 0 ok, else failed (an exit code) */
    int (*fn)(void *arg, int i, const char *root, FILE *out);
    void *arg;
    /* on return: the job cannot end cleanly (rank 0 stopped waiting for
     * ranks after a signal, or this rank could not start its workers or
     * reach rank 0): the caller ends it (dist_abort) once its results are
     * written */
    bool end_job;
    int first_failure;           /* rank 0: the exit code of the first failed job, by index */
};
/* Every rank calls it, after dist_init(). Rank 0 returns how many jobs
 * failed or never ran; other ranks 0, or 1 if they could not deliver. */
int pool_run_ranks(struct pool_ranks *p);

#endif
