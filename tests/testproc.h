/* testproc.h: helpers of the end-to-end tests that run the agentreplay
 * binary as child processes (test_interrupt, test_reliability). */
#ifndef TESTPROC_H
#define TESTPROC_H

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) && errno == EINTR) {
    }
}

/* Starts argv (NULL-terminated) with stdout and stderr to `log` (appended),
 * with SIGINT and SIGTERM as a shell's foreground job has them. */
static pid_t spawn(char *const argv[], const char *log)
{
    pid_t p = fork();
    if (p == 0) {
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        execv(argv[0], argv);
        _exit(127);
    }
    return p;
}

#endif
