/* dist_load.c: a live run split across MPI ranks: the common start, the
 * records streamed to rank 0, the merged result there (dist_load.h). */
#define _GNU_SOURCE
#include "replay/dist_load.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "replay/dist.h"
#include "replay/metrics.h"
#include "replay/run.h"
#include "traces/base/err.h"
#include "traces/base/mem.h"
#include "traces/base/time_ns.h"

enum { TAG_RECORDS = 101, TAG_END = 102 };

/* A batch goes when it holds this much, or at the next exchange. */
#define BATCH_BYTES (64 * 1024)
/* The exchange period: ranks > 0 send, rank 0 takes and spools. A rank
 * killed outright loses at most this much of its records. */
#define EXCHANGE_NS (10 * NS_PER_MS)
/* How far ahead of the clock comparison the common start is. */
#define START_AHEAD_NS (100 * NS_PER_MS)

/* One record on the wire: these numbers (what the statistics and the
 * caller's observer read), then n_chunk_times int64 chunk times, then the
 * record's JSON line (line_len bytes, no newline). */
struct wire {
    int64_t intended, start, first, end, chunks, prompt, cached, output, max_tokens,
        preemptions, server_prompt, server_output;
    uint64_t session_uid;
    int32_t http_status;
    uint32_t flags, line_len, n_chunk_times;
};
enum { W_WARMUP = 1, W_CANCELLED = 2, W_OVERFLOW = 4, W_ERROR = 8, W_LIVE = 16 };

/* A rank's end of run; then timeline_len bytes of its timeline.csv, then
 * extra_len bytes of the caller's. */
struct end_head {
    uint64_t calls_sent, lanes_recycled, trees_started;
    int64_t end_ns, start_late_ns;
    uint32_t interrupted, partial, timeline_len, extra_len;
};

/* A spooled line at rank 0. */
struct spooled {
    int64_t intended;
    uint64_t seq;                /* arrival order at rank 0 */
    uint64_t off;                /* in the spool */
    uint32_t len;                /* without the newline */
    int32_t rank;
};

/* What rank 0 knows of each rank. */
struct rank_state {
    uint64_t calls, errors;
    struct dvec lag_ms;
    double lag_max_ms;
    int64_t offset_ns, rtt_ns;
    bool ended;
    struct end_head end;
    char *timeline, *extra;      /* as sent */
};

struct dist_load {
    int rank, size;
    char dir[1024];
    struct replay *rp;
    struct loop *loop;
    struct loop_timer timer;
    records_observer merged;
    void *merged_arg;
    /* the records stream: each line lands in `line` */
    FILE *rec_stream;
    char *line;
    size_t line_n, line_cap;
    /* the timeline stream */
    FILE *tl_stream;
    char *tl_buf;
    size_t tl_len;
    int64_t start_late_ns;
    /* ranks > 0: the batch being filled */
    char *batch;
    size_t batch_n, batch_cap;
    /* rank 0 */
    struct rank_state *rs;
    FILE *spool;
    uint64_t spool_off, seq;
    bool spool_dirty;
    struct spooled *idx;
    size_t n_idx, cap_idx;
    char *rbuf;
    size_t rbuf_cap;
    int64_t *ct;                 /* chunk times of a received record */
    size_t ct_cap;
    char err[ERR_LEN];           /* the first I/O or message error */
};

static void grow(char **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return;
    size_t c = *cap ? *cap : 4096;
    while (c < need)
        c *= 2;
    *buf = xrealloc(*buf, c);
    *cap = c;
}

static ssize_t line_write(void *cookie, const char *buf, size_t n)
{
    struct dist_load *dl = cookie;
    grow(&dl->line, &dl->line_cap, dl->line_n + n);
    memcpy(dl->line + dl->line_n, buf, n);
    dl->line_n += n;
    return (ssize_t)n;
}

static void spool_path(const struct dist_load *dl, char *out, size_t n)
{
    snprintf(out, n, "%s/requests.jsonl.spool", dl->dir);
}

struct dist_load *dist_load_create(const char *dir, char *err)
{
    struct dist_load *dl = xcalloc(1, sizeof *dl);
    dl->rank = dist_rank();
    dl->size = dist_size();
    snprintf(dl->dir, sizeof dl->dir, "%s", dir ? dir : "");
    dl->rec_stream = fopencookie(dl, "w", (cookie_io_functions_t){.write = line_write});
    dl->tl_stream = open_memstream(&dl->tl_buf, &dl->tl_len);
    if (!dl->rec_stream || !dl->tl_stream) {
        err_set(err, "cannot open the record streams: %s", strerror(errno));
        dist_load_destroy(dl);
        return NULL;
    }
    if (dl->rank == 0) {
        dl->rs = xcalloc((size_t)dl->size, sizeof *dl->rs);
        char path[1200];
        spool_path(dl, path, sizeof path);
        dl->spool = fopen(path, "w+");
        if (!dl->spool) {
            err_set(err, "%s: %s", path, strerror(errno));
            dist_load_destroy(dl);
            return NULL;
        }
    }
    return dl;
}

int dist_load_start(struct dist_load *dl, char *err)
{
    int64_t *off = xcalloc((size_t)dl->size, sizeof *off);
    int64_t *rtt = xcalloc((size_t)dl->size, sizeof *rtt);
    int64_t self = 0;
    int rc = dist_clock_sync(off, rtt, &self, err);
    for (int r = 0; dl->rs && r < dl->size; r++) {
        dl->rs[r].offset_ns = off[r];
        dl->rs[r].rtt_ns = rtt[r];
    }
    free(off);
    free(rtt);
    if (rc)
        return -1;
    int64_t t0 = dl->rank == 0 ? wall_ns() + START_AHEAD_NS : 0;
    if (dist_bcast(&t0, sizeof t0, err))
        return -1;
    int64_t local = t0 + self;
    struct timespec ts = {(time_t)(local / NS_PER_S), (long)(local % NS_PER_S)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR && !run_interrupted()) {
    }
    dl->start_late_ns = wall_ns() - local;
    return 0;
}

FILE *dist_load_records_stream(struct dist_load *dl) { return dl->rec_stream; }
FILE *dist_load_timeline_stream(struct dist_load *dl) { return dl->tl_stream; }

/* ---- rank 0: spooling and statistics ------------------------------------ */

static void spool_add(struct dist_load *dl, int rank, int64_t intended, const char *line, size_t n)
{
    if (dl->n_idx == dl->cap_idx) {
        dl->cap_idx = dl->cap_idx ? 2 * dl->cap_idx : 1024;
        dl->idx = xrealloc(dl->idx, dl->cap_idx * sizeof *dl->idx);
    }
    dl->idx[dl->n_idx++] = (struct spooled){
        .intended = intended, .seq = dl->seq++, .off = dl->spool_off, .len = (uint32_t)n, .rank = rank};
    if ((fwrite(line, 1, n, dl->spool) != n || fputc('\n', dl->spool) == EOF) && !dl->err[0])
        snprintf(dl->err, sizeof dl->err, "writing the record spool: %s", strerror(errno));
    dl->spool_off += n + 1;
    dl->spool_dirty = true;
}

static void rank_count(struct rank_state *s, const struct replay_record *r)
{
    s->calls++;
    if (!r->warmup && !r->cancelled && r->error)
        s->errors++;
    double lag = (double)(r->start_ns - r->intended_start_ns) / 1e6;
    dvec_push(&s->lag_ms, lag);
    if (lag > s->lag_max_ms)
        s->lag_max_ms = lag;
}

/* A batch of records from rank `from`. */
static void take_records(struct dist_load *dl, int from, const char *p, size_t len)
{
    const char *end = p + len;
    while (p < end) {
        struct wire w;
        if ((size_t)(end - p) < sizeof w)
            goto bad;
        memcpy(&w, p, sizeof w);
        p += sizeof w;
        size_t ct_bytes = (size_t)w.n_chunk_times * sizeof(int64_t);
        if ((size_t)(end - p) < ct_bytes || (size_t)(end - p) - ct_bytes < w.line_len)
            goto bad;
        if (w.n_chunk_times > dl->ct_cap) {
            dl->ct_cap = w.n_chunk_times;
            dl->ct = xrealloc(dl->ct, dl->ct_cap * sizeof *dl->ct);
        }
        memcpy(dl->ct, p, ct_bytes);
        p += ct_bytes;
        struct replay_record r = {
            .session = "",
            .session_uid = w.session_uid,
            .lane = -1,
            .intended_start_ns = w.intended,
            .start_ns = w.start,
            .first_token_ns = w.first,
            .end_ns = w.end,
            .chunks = w.chunks,
            .prompt_tokens = w.prompt,
            .cached_tokens = w.cached,
            .output_tokens = w.output,
            .max_tokens = w.max_tokens,
            .replica = -1,
            .preemptions = w.preemptions,
            .warmup = w.flags & W_WARMUP,
            .cancelled = w.flags & W_CANCELLED,
            .overflow = w.flags & W_OVERFLOW,
            .error = (w.flags & W_ERROR) ? "error" : NULL,
            .chunk_times_ns = w.n_chunk_times ? dl->ct : NULL,
            .live = w.flags & W_LIVE,
            .http_status = w.http_status,
            .server_prompt_tokens = w.server_prompt,
            .server_output_tokens = w.server_output,
        };
        if (r.chunk_times_ns && (int64_t)w.n_chunk_times < r.chunks)
            r.chunks = w.n_chunk_times;
        replay_add_record(dl->rp, &r);
        if (dl->merged)
            dl->merged(dl->merged_arg, &r);
        rank_count(&dl->rs[from], &r);
        spool_add(dl, from, w.intended, p, w.line_len);
        p += w.line_len;
    }
    return;
bad:
    if (!dl->err[0])
        snprintf(dl->err, sizeof dl->err, "rank %d sent a malformed batch of records", from);
}

static void take_end(struct dist_load *dl, int from, const char *p, size_t len)
{
    struct rank_state *s = &dl->rs[from];
    struct end_head h;
    if (len < sizeof h) {
        if (!dl->err[0])
            snprintf(dl->err, sizeof dl->err, "rank %d sent a malformed end of run", from);
        return;
    }
    memcpy(&h, p, sizeof h);
    if (len - sizeof h < (size_t)h.timeline_len + h.extra_len) {
        if (!dl->err[0])
            snprintf(dl->err, sizeof dl->err, "rank %d sent a malformed end of run", from);
        return;
    }
    p += sizeof h;
    s->end = h;
    s->timeline = xmalloc((size_t)h.timeline_len + 1);
    memcpy(s->timeline, p, h.timeline_len);
    s->timeline[h.timeline_len] = 0;
    s->extra = xmalloc((size_t)h.extra_len + 1);
    memcpy(s->extra, p + h.timeline_len, h.extra_len);
    s->ended = true;
}

/* Everything that has arrived, then the spool to disk. */
static void take_messages(struct dist_load *dl)
{
    int from, tag;
    size_t len;
    while (dist_peek(&from, &tag, &len)) {
        grow(&dl->rbuf, &dl->rbuf_cap, len + 1);
        size_t got = 0;
        char e2[ERR_LEN];
        if (dist_recv(from, tag, dl->rbuf, dl->rbuf_cap, &got, e2)) {
            if (!dl->err[0])
                snprintf(dl->err, sizeof dl->err, "%s", e2);
            break;
        }
        if (from <= 0 || from >= dl->size)
            continue;
        if (tag == TAG_RECORDS)
            take_records(dl, from, dl->rbuf, got);
        else if (tag == TAG_END)
            take_end(dl, from, dl->rbuf, got);
    }
    if (dl->spool_dirty) {
        if (fflush(dl->spool) && !dl->err[0])
            snprintf(dl->err, sizeof dl->err, "writing the record spool: %s", strerror(errno));
        dl->spool_dirty = false;
    }
}

/* ---- ranks > 0: batches ------------------------------------------------- */

static void send_batch(struct dist_load *dl)
{
    char e2[ERR_LEN];
    if (dist_post(0, TAG_RECORDS, dl->batch, dl->batch_n, e2) && !dl->err[0])
        snprintf(dl->err, sizeof dl->err, "%s", e2);
    dl->batch = NULL;
    dl->batch_n = dl->batch_cap = 0;
}

static void pack(struct dist_load *dl, const struct replay_record *r, const char *line, size_t n)
{
    struct wire w = {
        .intended = r->intended_start_ns,
        .start = r->start_ns,
        .first = r->first_token_ns,
        .end = r->end_ns,
        .chunks = r->chunks,
        .prompt = r->prompt_tokens,
        .cached = r->cached_tokens,
        .output = r->output_tokens,
        .max_tokens = r->max_tokens,
        .preemptions = r->preemptions,
        .server_prompt = r->server_prompt_tokens,
        .server_output = r->server_output_tokens,
        .session_uid = r->session_uid,
        .http_status = r->http_status,
        .flags = (r->warmup ? W_WARMUP : 0) | (r->cancelled ? W_CANCELLED : 0) |
                 (r->overflow ? W_OVERFLOW : 0) | (r->error ? W_ERROR : 0) | (r->live ? W_LIVE : 0),
        .line_len = (uint32_t)n,
        .n_chunk_times = r->chunk_times_ns && r->chunks > 0 ? (uint32_t)r->chunks : 0,
    };
    size_t ct_bytes = (size_t)w.n_chunk_times * sizeof(int64_t);
    grow(&dl->batch, &dl->batch_cap, dl->batch_n + sizeof w + ct_bytes + n);
    memcpy(dl->batch + dl->batch_n, &w, sizeof w);
    dl->batch_n += sizeof w;
    if (ct_bytes)
        memcpy(dl->batch + dl->batch_n, r->chunk_times_ns, ct_bytes);
    dl->batch_n += ct_bytes;
    memcpy(dl->batch + dl->batch_n, line, n);
    dl->batch_n += n;
    if (dl->batch_n >= BATCH_BYTES)
        send_batch(dl);
}

/* ---- the run ------------------------------------------------------------ */

static void exchange_cb(struct loop *l, struct loop_timer *t)
{
    struct dist_load *dl = t->arg;
    if (dl->rank == 0) {
        take_messages(dl);
    } else {
        if (dl->batch_n)
            send_batch(dl);
        dist_progress();
    }
    if (!replay_finished(dl->rp))
        loop_at(l, t, loop_now(l) + EXCHANGE_NS, exchange_cb, dl);
}

void dist_load_attach(struct dist_load *dl, struct replay *rp, struct loop *l,
                      records_observer merged, void *arg)
{
    dl->rp = rp;
    dl->loop = l;
    dl->merged = merged;
    dl->merged_arg = arg;
    replay_set_share(rp, dl->rank, dl->size);
    loop_at(l, &dl->timer, loop_now(l) + EXCHANGE_NS, exchange_cb, dl);
}

void dist_load_record(struct dist_load *dl, const struct replay_record *r)
{
    size_t n = dl->line_n;
    if (n && dl->line[n - 1] == '\n')
        n--;
    if (dl->rank == 0) {
        rank_count(&dl->rs[0], r);
        spool_add(dl, 0, r->intended_start_ns, dl->line, n);
    } else {
        pack(dl, r, dl->line, n);
    }
    dl->line_n = 0;
}

/* ---- rank 0: the files -------------------------------------------------- */

struct tl_row {
    int64_t t;
    int rank;
    long long live, running, waiting;
    double kv, hit, tok, out;
};

static int tl_row_cmp(const void *a, const void *b)
{
    const struct tl_row *x = a, *y = b;
    if (x->t != y->t)
        return x->t < y->t ? -1 : 1;
    return x->rank - y->rank;
}

/* Sums the ranks' timeline rows per tick: counts and rates add up; the
 * KV fraction is the mean of the ranks' known ones; the prefix-hit rate is
 * weighted by each rank's prompt tokens of the tick (its tokens_per_s
 * less output_tokens_per_s). */
static int write_timeline(struct dist_load *dl, char *err)
{
    struct tl_row *rows = NULL;
    size_t n = 0, cap = 0;
    const char *header = NULL;
    size_t header_len = 0;
    for (int r = 0; r < dl->size; r++) {
        const char *p = dl->rs[r].ended ? dl->rs[r].timeline : NULL;
        if (!p)
            continue;
        const char *nl = strchr(p, '\n');
        if (!nl)
            continue;
        if (!header) {
            header = p;
            header_len = (size_t)(nl - p) + 1;
        }
        for (p = nl + 1; *p; p = nl + 1) {
            nl = strchr(p, '\n');
            if (!nl)
                break;
            struct tl_row x = {.rank = r};
            char kv[64], hit[64];
            double t;
            if (sscanf(p, "%lf,%lld,%lld,%lld,%63[^,],%63[^,],%lf,%lf", &t, &x.live, &x.running,
                       &x.waiting, kv, hit, &x.tok, &x.out) != 8)
                continue;
            x.t = llround(t);
            x.kv = strtod(kv, NULL);
            x.hit = strtod(hit, NULL);
            if (n == cap) {
                cap = cap ? 2 * cap : 256;
                rows = xrealloc(rows, cap * sizeof *rows);
            }
            rows[n++] = x;
        }
    }
    if (n)
        qsort(rows, n, sizeof *rows, tl_row_cmp);
    char path[1200];
    snprintf(path, sizeof path, "%s/timeline.csv", dl->dir);
    FILE *f = fopen(path, "w");
    if (!f) {
        free(rows);
        return err_set(err, "%s: %s", path, strerror(errno));
    }
    if (header)
        fwrite(header, 1, header_len, f);
    for (size_t i = 0; i < n;) {
        size_t j = i;
        long long live = 0, running = -1, waiting = -1;
        double kv = 0, hit_w = 0, w_sum = 0, tok = 0, out = 0;
        int kv_n = 0;
        for (; j < n && rows[j].t == rows[i].t; j++) {
            const struct tl_row *x = &rows[j];
            live += x->live;
            if (x->running >= 0)
                running = (running < 0 ? 0 : running) + x->running;
            if (x->waiting >= 0)
                waiting = (waiting < 0 ? 0 : waiting) + x->waiting;
            if (isfinite(x->kv)) {
                kv += x->kv;
                kv_n++;
            }
            double w = x->tok - x->out;
            if (isfinite(x->hit) && w > 0) {
                hit_w += x->hit * w;
                w_sum += w;
            }
            tok += x->tok;
            out += x->out;
        }
        char kvs[32], hits[32];
        if (kv_n)
            snprintf(kvs, sizeof kvs, "%.6f", kv / kv_n);
        else
            snprintf(kvs, sizeof kvs, "nan");
        if (w_sum > 0)
            snprintf(hits, sizeof hits, "%.6f", hit_w / w_sum);
        else
            snprintf(hits, sizeof hits, "nan");
        fprintf(f, "%lld,%lld,%lld,%lld,%s,%s,%.3f,%.3f\n", (long long)rows[i].t, live, running,
                waiting, kvs, hits, tok, out);
        i = j;
    }
    free(rows);
    if (fclose(f))
        return err_set(err, "%s: %s", path, strerror(errno));
    return 0;
}

static int spooled_cmp(const void *a, const void *b)
{
    const struct spooled *x = a, *y = b;
    if (x->intended != y->intended)
        return x->intended < y->intended ? -1 : 1;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* requests.jsonl from the spool, ordered by intended start; the spool
 * goes once it is written. */
static int write_requests(struct dist_load *dl, char *err)
{
    char path[1200], tmp[1300], sp[1200];
    snprintf(path, sizeof path, "%s/requests.jsonl", dl->dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    spool_path(dl, sp, sizeof sp);
    if (fflush(dl->spool))
        return err_set(err, "%s: %s", sp, strerror(errno));
    char *map = NULL;
    if (dl->spool_off) {
        map = mmap(NULL, dl->spool_off, PROT_READ, MAP_PRIVATE, fileno(dl->spool), 0);
        if (map == MAP_FAILED)
            return err_set(err, "%s: %s", sp, strerror(errno));
    }
    if (dl->n_idx)
        qsort(dl->idx, dl->n_idx, sizeof *dl->idx, spooled_cmp);
    int rc = 0;
    FILE *f = fopen(tmp, "w");
    if (!f) {
        rc = err_set(err, "%s: %s", tmp, strerror(errno));
    } else {
        for (size_t i = 0; i < dl->n_idx; i++)
            fwrite(map + dl->idx[i].off, 1, (size_t)dl->idx[i].len + 1, f);
        if (ferror(f) | fclose(f))
            rc = err_set(err, "%s: %s", tmp, strerror(errno));
        else if (rename(tmp, path))
            rc = err_set(err, "%s: %s", path, strerror(errno));
    }
    if (map)
        munmap(map, dl->spool_off);
    if (!rc)
        unlink(sp);
    return rc;
}

/* ---- the end ------------------------------------------------------------ */

static bool all_ended(const struct dist_load *dl)
{
    for (int r = 1; r < dl->size; r++)
        if (!dl->rs[r].ended)
            return false;
    return true;
}

int dist_load_end(struct dist_load *dl, const void *extra, size_t extra_len, char *err)
{
    if (dl->loop)
        loop_cancel(dl->loop, &dl->timer);
    fflush(dl->tl_stream);
    struct end_head h = {
        .start_late_ns = dl->start_late_ns,
        .timeline_len = (uint32_t)dl->tl_len,
        .extra_len = (uint32_t)extra_len,
    };
    if (dl->rank > 0) {
        struct metrics_summary sum;
        struct replay_outcome o;
        replay_summarize(dl->rp, NULL, &sum, &o);
        h.calls_sent = o.calls_sent;
        h.lanes_recycled = o.lanes_recycled;
        h.trees_started = o.trees_started;
        h.end_ns = o.end_ns;
        h.interrupted = o.interrupted;
        h.partial = o.partial;
        if (dl->batch_n)
            send_batch(dl);
        size_t len = sizeof h + dl->tl_len + extra_len;
        char *m = xmalloc(len);
        memcpy(m, &h, sizeof h);
        memcpy(m + sizeof h, dl->tl_buf, dl->tl_len);
        if (extra_len)
            memcpy(m + sizeof h + dl->tl_len, extra, extra_len);
        char e2[ERR_LEN];
        if (dist_post(0, TAG_END, m, len, e2) && !dl->err[0])
            snprintf(dl->err, sizeof dl->err, "%s", e2);
        /* Rank 0 takes everything while it runs; after a signal (the job
         * is ending) what cannot go within half a second is lost. */
        int64_t t0 = wall_ns();
        int left;
        while ((left = dist_progress()) &&
               !(run_interrupted() && wall_ns() - t0 > 500 * NS_PER_MS)) {
            struct timespec ts = {0, 100 * NS_PER_US};
            nanosleep(&ts, NULL);
        }
        if (left && !dl->err[0])
            snprintf(dl->err, sizeof dl->err, "%d message(s) to rank 0 not delivered", left);
        return dl->err[0] ? err_set(err, "%s", dl->err) : 0;
    }
    /* Rank 0: its own end, then everyone's until all ended or a signal. */
    struct rank_state *s0 = &dl->rs[0];
    s0->end = h;
    s0->timeline = xmalloc(dl->tl_len + 1);
    memcpy(s0->timeline, dl->tl_buf, dl->tl_len);
    s0->timeline[dl->tl_len] = 0;
    s0->ended = true;
    for (;;) {
        take_messages(dl);
        if (all_ended(dl) || run_interrupted())
            break;
        struct timespec ts = {0, NS_PER_MS};
        nanosleep(&ts, NULL);
    }
    take_messages(dl);
    char e2[ERR_LEN] = "";
    if ((write_timeline(dl, e2) || write_requests(dl, e2)) && !dl->err[0])
        snprintf(dl->err, sizeof dl->err, "%s", e2);
    return dl->err[0] ? err_set(err, "%s", dl->err) : 0;
}

static void add_reason(struct replay_outcome *o, const char *what, int rank)
{
    if (o->n_reasons < (int)ARRAY_LEN(o->reasons))
        snprintf(o->reasons[o->n_reasons++], sizeof o->reasons[0], "rank %d: %s", rank, what);
}

void dist_load_outcome(const struct dist_load *dl, struct replay_outcome *o)
{
    if (dl->rank != 0)
        return;
    for (int r = 1; r < dl->size; r++) {
        const struct rank_state *s = &dl->rs[r];
        if (!s->ended) {
            o->interrupted = true;
            add_reason(o, "did not end: its calls after the last received are missing", r);
            continue;
        }
        o->calls_sent += s->end.calls_sent;
        o->lanes_recycled += s->end.lanes_recycled;
        o->trees_started += s->end.trees_started;
        if (s->end.end_ns > o->end_ns)
            o->end_ns = s->end.end_ns;
        if (s->end.interrupted) {
            o->interrupted = true;
            add_reason(o, "interrupted", r);
        }
        if (s->end.partial)
            o->partial = true;
    }
    if (dl->err[0]) {
        if (!o->io_error[0])
            snprintf(o->io_error, sizeof o->io_error, "%s", dl->err);
        add_reason(o, "records incomplete (merging)", 0);
        o->partial = true;
    }
    o->partial |= o->interrupted;
    o->agentx_valid = o->n_reasons == 0;
}

void *dist_load_ranks_json(const struct dist_load *dl)
{
    json_t *a = json_array();
    for (int r = 0; dl->rs && r < dl->size; r++) {
        struct rank_state *s = &dl->rs[r];
        struct metrics_stat lag;
        metrics_stat_compute(s->lag_ms.v, s->lag_ms.n, &lag);
        json_array_append_new(
            a, json_pack("{s:i,s:I,s:I,s:{s:f,s:f,s:f},s:I,s:I,s:o,s:b}", "rank", r, "calls",
                         (json_int_t)s->calls, "errors", (json_int_t)s->errors, "schedule_lag_ms",
                         "p50", lag.p50, "p99", lag.p99, "max", s->lag_max_ms, "clock_offset_ns",
                         (json_int_t)s->offset_ns, "clock_rtt_ns", (json_int_t)s->rtt_ns,
                         "start_late_ns",
                         s->ended ? json_integer((json_int_t)s->end.start_late_ns) : json_null(),
                         "ended", s->ended));
    }
    return a;
}

const void *dist_load_extra(const struct dist_load *dl, int r, size_t *len)
{
    *len = 0;
    if (dl->rank != 0 || r < 0 || r >= dl->size || !dl->rs[r].ended)
        return NULL;
    *len = dl->rs[r].end.extra_len;
    return dl->rs[r].extra;
}

void dist_load_destroy(struct dist_load *dl)
{
    if (!dl)
        return;
    if (dl->rec_stream)
        fclose(dl->rec_stream);
    if (dl->tl_stream)
        fclose(dl->tl_stream);
    free(dl->tl_buf);
    free(dl->line);
    free(dl->batch);
    if (dl->spool)
        fclose(dl->spool);
    for (int r = 0; dl->rs && r < dl->size; r++) {
        dvec_free(&dl->rs[r].lag_ms);
        free(dl->rs[r].timeline);
        free(dl->rs[r].extra);
    }
    free(dl->rs);
    free(dl->idx);
    free(dl->rbuf);
    free(dl->ct);
    free(dl);
}
