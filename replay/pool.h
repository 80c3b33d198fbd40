/* pool.h: running many independent jobs in worker processes (sweep and
 * the main job: one simulated point each).
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

/* Runs fn(arg, i) for i in [0, n) on up to `jobs` processes; fn returns
 * 0 on success. Returns how many workers (in-process: how many jobs)
 * reported a failure. */
int pool_run(int n, int jobs, int (*fn)(void *arg, int i), void *arg);

#endif
