/* pool.c: jobs in worker processes, on one machine or across the ranks
 * of an MPI job (pool.h). */
#define _GNU_SOURCE
#include "replay/pool.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "replay/dist.h"
#include "replay/run.h"
#include "traces/base/err.h"
#include "traces/base/file.h"
#include "traces/base/mem.h"
#include "traces/base/time_ns.h"

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

/* ---- across MPI ranks --------------------------------------------------- */

enum {
    TAG_REQ = 201,               /* r -> 0: a worker is free */
    TAG_JOB,                     /* 0 -> r: int32 job, -1: none left */
    TAG_FILE,                    /* r -> 0: a file chunk or a folder */
    TAG_DONE,                    /* r -> 0: int32 job, int32 rc, its text */
    TAG_BYE,                     /* r -> 0: its workers are done */
};

#define FILE_CHUNK (1 << 20)
/* After a signal, how long rank 0 still takes the other ranks' files once
 * its own workers are done: mpirun, which sends SIGTERM when a rank dies,
 * sends SIGKILL a second later, and the sweep's own files come first. */
#define ABANDON_NS (300 * NS_PER_MS)

/* A local worker process and the pipes to it. */
struct worker {
    pid_t pid;
    int cmd, res;                /* job indices in; results out */
    int job;                     /* running, or -1 */
    bool told_end;
};

/* One finished job at rank 0. */
struct job_done {
    bool done;
    int rc;
    char *text;
    size_t len;
};

/* All n bytes through a pipe (out: written, else read); 0 or -1. */
static int pipe_all(int fd, void *buf, size_t n, bool out)
{
    char *p = buf;
    while (n) {
        ssize_t k = out ? write(fd, p, n) : read(fd, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static int write_all(int fd, const void *buf, size_t n) { return pipe_all(fd, (void *)buf, n, true); }
static int read_all(int fd, void *buf, size_t n) { return pipe_all(fd, buf, n, false); }

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    remove(path);
    return 0;
}

static void rm_tree(const char *path) { nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* The folder job i writes under on this rank. */
static void job_root(const struct pool_ranks *p, const char *staging, int i, char *out, size_t n)
{
    if (staging)
        snprintf(out, n, "%s/job-%d", staging, i);
    else
        snprintf(out, n, "%s", p->root ? p->root : "");
}

/* A worker process: jobs from its pipe until -1; each job's exit code and
 * text back. */
static void worker_main(const struct pool_ranks *p, const char *staging, int cmd, int res)
{
    int32_t i;
    while (read_all(cmd, &i, sizeof i) == 0 && i >= 0) {
        char root[1200], err[ERR_LEN];
        job_root(p, staging, i, root, sizeof root);
        char *text = NULL;
        size_t len = 0;
        FILE *out = open_memstream(&text, &len);
        int32_t rc = 1;
        if (staging && file_mkdir_p(root, err))
            fprintf(out ? out : stderr, "%s\n", err);
        else if (out)
            rc = p->fn(p->arg, i, p->root ? root : NULL, out);
        if (out)
            fclose(out);
        int32_t head[3] = {i, rc, (int32_t)len};
        if (write_all(res, head, sizeof head) || write_all(res, text, len))
            _exit(1);
        free(text);
    }
    _exit(0);
}

/* Starts up to k workers; returns how many started. */
static int workers_start(const struct pool_ranks *p, const char *staging, struct worker *w, int k)
{
    fflush(NULL);
    for (int j = 0; j < k; j++) {
        int c[2], r[2];
        if (pipe(c))
            return j;
        if (pipe(r)) {
            close(c[0]);
            close(c[1]);
            return j;
        }
        pid_t pid = fork();
        if (pid < 0) {
            close(c[0]);
            close(c[1]);
            close(r[0]);
            close(r[1]);
            return j;
        }
        if (pid == 0) {
            /* A worker ends with its rank (killed, or its job ended by
             * mpirun): a signal, and it writes its partial job and goes. */
            pid_t parent = getppid();
            prctl(PR_SET_PDEATHSIG, SIGTERM);
            if (getppid() != parent)
                _exit(1);
            close(c[1]);
            close(r[0]);
            for (int x = 0; x < j; x++) {
                close(w[x].cmd);
                close(w[x].res);
            }
            worker_main(p, staging, c[0], r[1]);
        }
        close(c[0]);
        close(r[1]);
        w[j] = (struct worker){.pid = pid, .cmd = c[1], .res = r[0], .job = -1};
    }
    return k;
}

/* Gives worker w job i (-1: the end). */
static void worker_give(struct worker *w, int32_t i)
{
    if (w->told_end)
        return;
    if (write_all(w->cmd, &i, sizeof i))
        i = -1;
    w->job = i;
    if (i < 0) {
        w->told_end = true;
        close(w->cmd);
    }
}

/* A finished worker's result: its job, exit code and text (malloc'ed).
 * A worker that broke off (it died) failed its job and is told to end. */
static void worker_take(struct worker *w, int32_t *job, int32_t *rc, char **text, size_t *len)
{
    int32_t head[3];
    *job = w->job;
    *len = 0;
    *text = NULL;
    if (read_all(w->res, head, sizeof head) == 0 && head[2] >= 0 && head[0] == w->job) {
        *text = xmalloc((size_t)head[2] + 1);
        if (read_all(w->res, *text, (size_t)head[2]) == 0) {
            *rc = head[1];
            *len = (size_t)head[2];
            (*text)[*len] = 0;
            w->job = -1;
            return;
        }
        free(*text);
    }
    *rc = EXIT_FAIL;
    *text = xstrdup("");
    worker_give(w, -1);
}

static void workers_wait(struct worker *w, int k)
{
    for (int j = 0; j < k; j++) {
        worker_give(&w[j], -1);
        close(w[j].res);
        while (waitpid(w[j].pid, NULL, 0) < 0 && errno == EINTR) {
        }
    }
}

/* Polls the workers' result pipes for up to 1 ms; a ready mask. */
/* How long the dispatchers wait for their workers between looks at the
 * messages: while messages come (a run folder arriving in 1 MiB chunks,
 * whose sender waits for each to be taken), not at all; when none came for
 * STREAM_NS, IDLE_MS. A rank > 0 with no question out to rank 0 expects no
 * message and waits for its workers (or a signal) up to WAIT_MS. Idle
 * polling costs a dispatcher well under 1 % of a core. */
#define STREAM_NS (2 * NS_PER_MS)
#define IDLE_MS 5
#define WAIT_MS 200

/* The workers whose result is ready, within timeout_ms (a signal ends the
 * wait); a mask. */
static uint64_t workers_ready(const struct worker *w, int k, int timeout_ms)
{
    struct pollfd fds[64];
    int n = 0, map[64];
    for (int j = 0; j < k && n < 64; j++)
        if (w[j].job >= 0) {
            fds[n] = (struct pollfd){.fd = w[j].res, .events = POLLIN};
            map[n++] = j;
        }
    uint64_t ready = 0;
    if (poll(fds, (nfds_t)n, timeout_ms) > 0)
        for (int x = 0; x < n; x++)
            if (fds[x].revents)
                ready |= UINT64_C(1) << map[x];
    return ready;
}

static void forward_signal(struct worker *w, int k, bool *forwarded)
{
    if (*forwarded || !run_interrupted())
        return;
    for (int j = 0; j < k; j++)
        if (w[j].job >= 0)
            kill(w[j].pid, SIGINT);
    *forwarded = true;
}

/* ---- rank 0 ---- */

struct pool_lead {
    struct pool_ranks *p;
    struct job_done *done;
    int next;                    /* place in the order of the next job */
    int printed;                 /* jobs printed */
    int ranks_left;              /* other ranks still working */
    char *buf;
    size_t cap;
    char err[ERR_LEN];
};

static int lead_next(struct pool_lead *l)
{
    if (run_interrupted() || l->next >= l->p->n)
        return -1;
    int k = l->next++;
    return l->p->order ? l->p->order[k] : k;
}

static void lead_record(struct pool_lead *l, int i, int rc, char *text, size_t len)
{
    if (i < 0 || i >= l->p->n || l->done[i].done) {
        free(text);
        return;
    }
    l->done[i] = (struct job_done){true, rc, text, len};
    while (l->printed < l->p->n && l->done[l->printed].done) {
        struct job_done *d = &l->done[l->printed++];
        if (d->len) {
            fwrite(d->text, 1, d->len, stdout);
            fflush(stdout);
        }
    }
}

/* A file chunk or folder from another rank: type (0 file, 1 folder),
 * path length, path, offset, data. */
static void lead_file(struct pool_lead *l, int from, const char *m, size_t len)
{
    uint8_t type;
    uint32_t plen;
    uint64_t off;
    char path[1400], rel[1024];
    if (len < 13)
        goto bad;
    memcpy(&type, m, 1);
    memcpy(&plen, m + 1, 4);
    if (plen == 0 || plen >= sizeof rel || len < 13 + (size_t)plen)
        goto bad;
    memcpy(rel, m + 5, plen);
    rel[plen] = 0;
    memcpy(&off, m + 5 + plen, 8);
    if (rel[0] == '/' || strstr(rel, "..") || memchr(rel, 0, plen) || !l->p->root)
        goto bad;
    snprintf(path, sizeof path, "%s/%s", l->p->root, rel);
    char e2[ERR_LEN];
    if (type == 1) {
        if (file_mkdir_p(path, e2) && !l->err[0])
            snprintf(l->err, sizeof l->err, "%s", e2);
        return;
    }
    char *slash = strrchr(path, '/');
    *slash = 0;
    int rc = file_mkdir_p(path, e2);
    *slash = '/';
    int fd = rc ? -1 : open(path, O_WRONLY | O_CREAT | (off == 0 ? O_TRUNC : 0), 0644);
    size_t n = len - 13 - plen;
    if (fd < 0 || (n && pwrite(fd, m + 13 + plen, n, (off_t)off) != (ssize_t)n)) {
        if (!l->err[0])
            err_set(l->err, "%s: %s", path, strerror(errno));
    }
    if (fd >= 0)
        close(fd);
    return;
bad:
    if (!l->err[0])
        snprintf(l->err, sizeof l->err, "rank %d sent a malformed file message", from);
}

/* Everything the other ranks sent; whether there was any. */
static bool lead_messages(struct pool_lead *l)
{
    int from, tag;
    size_t len;
    bool any = false;
    while (dist_peek(&from, &tag, &len)) {
        any = true;
        if (len + 1 > l->cap) {
            l->cap = len + 1;
            l->buf = xrealloc(l->buf, l->cap);
        }
        char e2[ERR_LEN];
        if (dist_recv(from, tag, l->buf, l->cap, &len, e2)) {
            if (!l->err[0])
                snprintf(l->err, sizeof l->err, "%s", e2);
            return any;
        }
        if (tag == TAG_REQ) {
            int32_t i = lead_next(l);
            if (dist_send(from, TAG_JOB, &i, sizeof i, e2) && !l->err[0])
                snprintf(l->err, sizeof l->err, "%s", e2);
        } else if (tag == TAG_BYE) {
            l->ranks_left--;
        } else if (tag == TAG_FILE) {
            lead_file(l, from, l->buf, len);
        } else if (tag == TAG_DONE && len >= 8) {
            int32_t head[2];
            memcpy(head, l->buf, sizeof head);
            char *text = xmalloc(len - 8 + 1);
            memcpy(text, l->buf + 8, len - 8);
            text[len - 8] = 0;
            lead_record(l, head[0], head[1], text, len - 8);
        }
    }
    return any;
}

static int lead_main(struct pool_ranks *p, int jobs)
{
    struct pool_lead l = {.p = p, .done = xcalloc((size_t)(p->n ? p->n : 1), sizeof *l.done)};
    l.ranks_left = dist_size() - 1;
    struct worker w[64];
    int k = workers_start(p, NULL, w, jobs);
    if (!k) {
        fprintf(stderr, "agentreplay: starting workers: %s\n", strerror(errno));
        p->end_job = true;
        free(l.done);
        return p->n;
    }
    for (int j = 0; j < k; j++)
        worker_give(&w[j], lead_next(&l));
    bool forwarded = false;
    int64_t stop_at = INT64_MAX, last_msg = 0;
    for (;;) {
        uint64_t ready = workers_ready(w, k, wall_ns() - last_msg < STREAM_NS ? 0 : IDLE_MS);
        for (int j = 0; j < k; j++) {
            if (!(ready >> j & 1))
                continue;
            int32_t i, rc;
            char *text;
            size_t len;
            worker_take(&w[j], &i, &rc, &text, &len);
            lead_record(&l, i, rc, text, len);
            if (!w[j].told_end)
                worker_give(&w[j], lead_next(&l));
        }
        if (lead_messages(&l))
            last_msg = wall_ns();
        forward_signal(w, k, &forwarded);
        bool local_busy = false;
        for (int j = 0; j < k; j++)
            local_busy |= w[j].job >= 0;
        if (!local_busy && l.ranks_left <= 0)
            break;
        if (run_interrupted() && stop_at == INT64_MAX)
            stop_at = wall_ns() + ABANDON_NS;
        if (!local_busy && wall_ns() > stop_at)
            break;
    }
    workers_wait(w, k);
    p->end_job = l.ranks_left > 0;
    if (l.err[0])
        fprintf(stderr, "agentreplay: %s\n", l.err);
    int failed = 0;
    p->first_failure = 0;
    for (int i = 0; i < p->n; i++) {
        if (!l.done[i].done || l.done[i].rc) {
            failed++;
            if (!p->first_failure)
                p->first_failure = l.done[i].done ? l.done[i].rc : EXIT_FAIL;
        }
        free(l.done[i].text);
    }
    free(l.done);
    free(l.buf);
    return failed + (l.err[0] != 0);
}

/* ---- ranks > 0 ---- */

/* Sends every file and folder under root to rank 0 (paths relative to
 * root). */
static int ship_tree(const char *root, const char *rel, char *err)
{
    char path[1400];
    snprintf(path, sizeof path, "%s%s%s", root, rel[0] ? "/" : "", rel);
    DIR *d = opendir(path);
    if (!d)
        return err_set(err, "%s: %s", path, strerror(errno));
    int rc = 0;
    char *m = xmalloc(13 + 1024 + FILE_CHUNK);
    struct dirent *e;
    while (!rc && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char sub[1024], full[1400];
        int sl = snprintf(sub, sizeof sub, "%s%s%s", rel, rel[0] ? "/" : "", e->d_name);
        if (sl <= 0 || sl >= (int)sizeof sub) {
            rc = err_set(err, "%s/%s: path too long", path, e->d_name);
            break;
        }
        snprintf(full, sizeof full, "%s/%s", root, sub);
        struct stat st;
        if (lstat(full, &st))
            continue;
        uint32_t plen = (uint32_t)sl;
        memcpy(m + 1, &plen, 4);
        memcpy(m + 5, sub, plen);
        if (S_ISDIR(st.st_mode)) {
            uint64_t off = 0;
            m[0] = 1;
            memcpy(m + 5 + plen, &off, 8);
            rc = dist_send(0, TAG_FILE, m, 13 + plen, err);
            if (!rc)
                rc = ship_tree(root, sub, err);
            continue;
        }
        if (!S_ISREG(st.st_mode))
            continue;
        int fd = open(full, O_RDONLY);
        if (fd < 0) {
            rc = err_set(err, "%s: %s", full, strerror(errno));
            break;
        }
        m[0] = 0;
        uint64_t off = 0;
        for (;;) {
            ssize_t n = read(fd, m + 13 + plen, FILE_CHUNK);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0) {
                rc = err_set(err, "%s: %s", full, strerror(errno));
                break;
            }
            if (n == 0 && off > 0)
                break;
            memcpy(m + 5 + plen, &off, 8);
            if ((rc = dist_send(0, TAG_FILE, m, 13 + plen + (size_t)n, err)))
                break;
            off += (uint64_t)n;
            if (n == 0)
                break;
        }
        close(fd);
    }
    free(m);
    closedir(d);
    return rc;
}

static int rank_main(struct pool_ranks *p, int jobs)
{
    char staging[512];
    const char *tmp = getenv("TMPDIR");
    snprintf(staging, sizeof staging, "%s/agentreplay-rank%d-XXXXXX", tmp && *tmp ? tmp : "/tmp",
             dist_rank());
    struct worker w[64];
    int k = 0;
    if (!mkdtemp(staging) || !(k = workers_start(p, staging, w, jobs))) {
        fprintf(stderr, "agentreplay: rank %d: %s: %s\n", dist_rank(), staging, strerror(errno));
        rm_tree(staging);
        p->end_job = true;
        return 1;
    }
    int asked = 0, failed = 0;
    bool forwarded = false, no_more = false;
    char err[ERR_LEN];
    for (;;) {
        /* One request out per idle worker, until rank 0 has no more (or a
         * signal came); then the idle workers end. */
        int idle = 0;
        for (int j = 0; j < k; j++)
            idle += w[j].job < 0 && !w[j].told_end;
        no_more |= run_interrupted();
        for (; !no_more && asked < idle; asked++)
            if (dist_send(0, TAG_REQ, NULL, 0, err)) {
                fprintf(stderr, "agentreplay: rank %d: %s\n", dist_rank(), err);
                p->end_job = no_more = true;
                failed = 1;
                break;
            }
        if (no_more && asked == 0)
            for (int j = 0; j < k; j++)
                if (w[j].job < 0)
                    worker_give(&w[j], -1);
        bool busy = false;
        for (int j = 0; j < k; j++)
            busy |= w[j].job >= 0;
        uint64_t ready = workers_ready(w, k, asked ? IDLE_MS : busy ? WAIT_MS : 0);
        for (int j = 0; j < k; j++) {
            if (!(ready >> j & 1))
                continue;
            int32_t i, rc;
            char *text;
            size_t len;
            worker_take(&w[j], &i, &rc, &text, &len);
            char root[1200];
            job_root(p, staging, i, root, sizeof root);
            if (p->root && ship_tree(root, "", err)) {
                fprintf(stderr, "agentreplay: rank %d: %s\n", dist_rank(), err);
                rc = EXIT_FAIL;
                failed = 1;
            }
            rm_tree(root);
            char *m = xmalloc(8 + len);
            int32_t head[2] = {i, rc};
            memcpy(m, head, 8);
            memcpy(m + 8, text, len);
            if (dist_send(0, TAG_DONE, m, 8 + len, err))
                failed = 1;
            free(m);
            free(text);
        }
        int from, tag;
        size_t len;
        while (dist_peek(&from, &tag, &len)) {
            int32_t i = -1;
            if (tag != TAG_JOB || dist_recv(from, tag, &i, sizeof i, &len, err) || len != sizeof i)
                i = -1;
            asked--;
            for (int j = 0; j < k; j++)
                if (w[j].job < 0 && !w[j].told_end) {
                    worker_give(&w[j], i);
                    break;
                }
            no_more |= i < 0;
        }
        forward_signal(w, k, &forwarded);
        busy = false;
        for (int j = 0; j < k; j++)
            busy |= w[j].job >= 0;
        if (!busy && asked == 0 && no_more)
            break;
    }
    workers_wait(w, k);
    rm_tree(staging);
    if (dist_send(0, TAG_BYE, NULL, 0, err))
        failed = 1;
    return failed;
}

int pool_run_ranks(struct pool_ranks *p)
{
    int jobs = p->jobs < 1 ? 1 : p->jobs > 64 ? 64 : p->jobs;
    p->end_job = false;
    p->first_failure = 0;
    return dist_rank() == 0 ? lead_main(p, jobs) : rank_main(p, jobs);
}
