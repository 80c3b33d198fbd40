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

static inline double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static inline void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) && errno == EINTR) {
    }
}

/* Starts argv (NULL-terminated) with stdout and stderr to `log` (appended),
 * with SIGINT and SIGTERM as a shell's foreground job has them. */
static inline pid_t spawn(char *const argv[], const char *log)
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

/* ---- capped children (the hostile-input tests) ------------------------
 *
 * A child that may spin, write or allocate without bound runs under caps:
 * RLIMIT_FSIZE (what it may write to any file), RLIMIT_AS (its address
 * space; not under AddressSanitizer, whose shadow memory needs terabytes
 * of it) and a wall-clock limit after which the parent kills it. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>

#if defined(__SANITIZE_ADDRESS__)
#define TP_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TP_ASAN 1
#endif
#endif
#ifndef TP_ASAN
#define TP_ASAN 0
#endif

#define TP_MB (1024.0 * 1024.0)

struct tp_caps {
    double fsize_mb;        /* RLIMIT_FSIZE; 0: 100 MB */
    double as_mb;           /* RLIMIT_AS; 0: 1024 MB (not under ASan) */
    double timeout_s;       /* then SIGKILL; 0: 30 s */
    bool ignore_xfsz;       /* a write past fsize fails (EFBIG) instead of
                               killing the child with SIGXFSZ */
    const char *out, *err;  /* stdout and stderr files (NULL: /dev/null) */
    int err_fd;             /* >= 0: stderr is this descriptor instead */
    const char *env;        /* "NAME=VALUE" set in the child, or NULL */
};

struct tp_result {
    int status;             /* exit code; -signal when killed; -999 on the
                               time cap */
    double secs;            /* wall time */
};

static inline void tp_limit(int what, double mb)
{
    struct rlimit r = {(rlim_t)(mb * TP_MB), (rlim_t)(mb * TP_MB)};
    setrlimit(what, &r);
}

static inline pid_t tp_spawn(char *const argv[], const struct tp_caps *c)
{
    pid_t p = fork();
    if (p == 0) {
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGXFSZ, c->ignore_xfsz ? SIG_IGN : SIG_DFL);
        tp_limit(RLIMIT_FSIZE, c->fsize_mb > 0 ? c->fsize_mb : 100);
        if (!TP_ASAN)
            tp_limit(RLIMIT_AS, c->as_mb > 0 ? c->as_mb : 1024);
        int o = open(c->out ? c->out : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int e = c->err_fd >= 0 ? c->err_fd
                               : open(c->err ? c->err : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (o >= 0)
            dup2(o, 1);
        if (e >= 0)
            dup2(e, 2);
        if (c->env)
            putenv((char *)c->env);
        execv(argv[0], argv);
        _exit(127);
    }
    return p;
}

/* Waits for p up to timeout_s (from start), then kills it. */
static inline struct tp_result tp_wait(pid_t p, double start, double timeout_s)
{
    struct tp_result r = {.status = -998};
    for (;;) {
        int st;
        pid_t w = waitpid(p, &st, WNOHANG);
        if (w == p) {
            r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
            break;
        }
        if (w < 0)
            break;
        if (mono_s() - start > timeout_s) {
            kill(p, SIGKILL);
            waitpid(p, &st, 0);
            r.status = -999;
            break;
        }
        sleep_s(0.005);
    }
    r.secs = mono_s() - start;
    return r;
}

/* The first 64 KiB of a small file, NUL-terminated ("" when absent);
 * static storage, valid until the next call. */
static inline char *tp_slurp(const char *path)
{
    static char buf[1 << 16];
    buf[0] = 0;
    FILE *f = fopen(path, "r");
    if (f) {
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        buf[n] = 0;
        fclose(f);
    }
    return buf;
}

/* dir/name in a ring of 256 buffers (each valid for the next 255 calls). */
static inline char *tp_path(const char *dir, const char *name)
{
    static char buf[256][512];
    static int k;
    k = (k + 1) % 256;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

/* Hostile-input tests whose fix is another part's: each test file lists
 * them (by the start of their description) until that part is merged; a
 * failure of a listed test is shown as PENDING and not counted, a pass is
 * counted and says to take it off the list. With the list empty,
 * CHECK_TRIGGER is CHECKF. */
static inline bool tp_pending(const char *const *list, const char *what)
{
    for (int i = 0; list[i]; i++)
        if (!strncmp(what, list[i], strlen(list[i])))
            return true;
    return false;
}

#define CHECK_TRIGGER(list, cond, what, ...)                                   \
    do {                                                                       \
        bool ct_ok_ = (cond), ct_p_ = tp_pending(list, what);                  \
        if (!ct_ok_ && ct_p_) {                                                \
            printf("NOTE PENDING (another part's fix): %s\n", what);           \
        } else {                                                               \
            if (ct_p_)                                                         \
                printf("NOTE %s passes: take it off the pending list\n", what); \
            CHECKF(ct_ok_, __VA_ARGS__);                                       \
        }                                                                      \
    } while (0)

/* Runs argv under the caps to its end (or the time cap). */
static inline struct tp_result tp_run(char *const argv[], const struct tp_caps *c)
{
    double t0 = mono_s();
    return tp_wait(tp_spawn(argv, c), t0, c->timeout_s > 0 ? c->timeout_s : 30);
}

#endif
