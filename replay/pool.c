/* pool.c: jobs in worker processes (pool.h). */
#include "replay/pool.h"

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "replay/run.h"
#include "traces/base/mem.h"

/* The jobs of worker w; returns how many failed. */
static int work(int w, int stride, int n, int (*fn)(void *arg, int i), void *arg)
{
    int failed = 0;
    for (int i = w; i < n; i += stride) {
        if (fn(arg, i))
            failed++;
        if (run_interrupted())
            break;
    }
    return failed;
}

int pool_run(int n, int jobs, int (*fn)(void *arg, int i), void *arg)
{
    if (jobs > n)
        jobs = n;
    if (jobs < 1)
        jobs = 1;
    fflush(NULL);
    if (jobs == 1)
        return work(0, 1, n, fn, arg);
    pid_t *pid = xcalloc((size_t)jobs, sizeof *pid);
    int started = 0;
    for (int w = 0; w < jobs; w++) {
        pid[w] = fork();
        if (pid[w] < 0)
            break; /* go on with the workers that started */
        if (pid[w] == 0) {
            int failed = work(w, jobs, n, fn, arg);
            fflush(NULL);
            _exit(failed ? 1 : 0);
        }
        started++;
    }
    /* The shares of workers that did not start run here. */
    int failed = 0;
    for (int w = started; w < jobs; w++)
        failed += work(w, jobs, n, fn, arg) > 0;
    /* A signal sent to this process alone is passed on, so that the
     * workers write partial points and stop rather than run on unseen. */
    bool forwarded = false;
    for (int w = 0; w < started; w++) {
        int st = 0;
        pid_t r;
        for (;;) {
            if (run_interrupted() && !forwarded) {
                for (int x = 0; x < started; x++)
                    kill(pid[x], SIGINT);
                forwarded = true;
            }
            r = waitpid(pid[w], &st, 0);
            if (r >= 0 || errno != EINTR)
                break;
        }
        if (r < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
            failed++;
    }
    free(pid);
    return failed;
}
