/* metrics.c: accumulation and summary of metrics.h. */
#include "replay/metrics.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "traces/base/err.h"
#include "traces/base/mem.h"
#include "traces/base/hash.h"
#include "traces/base/parse.h"
#include "traces/base/stats.h"

void dvec_push(struct dvec *d, double x)
{
    if (d->n == d->cap) {
        d->cap = d->cap ? d->cap * 2 : 256;
        d->v = xrealloc(d->v, d->cap * sizeof *d->v);
    }
    d->v[d->n++] = x;
}

void dvec_free(struct dvec *d)
{
    free(d->v);
    memset(d, 0, sizeof *d);
}

/* One term "NAME=VALUE" (NUL-terminated, NAME at t, VALUE at v). */
static int slo_term(char *t, const char *v, struct metrics_slo *slo, char *err)
{
    double x;
    if (parse_double(v, &x, NULL) || !(x > 0))
        return err_set(err, "%s: '%s' is not a number > 0", t, v);
    if (!strcmp(t, "ttft")) {
        slo->ttft_ms = x;
        return 0;
    }
    if (!strcmp(t, "tpot")) {
        slo->tpot_ms = x;
        return 0;
    }
    if (!strcmp(t, "e2el")) {
        slo->e2el_ms = x;
        return 0;
    }
    int pct;
    char metric[32], tail[16] = "";
    if (sscanf(t, "%31[a-z2]_p%d%15s", metric, &pct, tail) < 2 ||
        (pct != 50 && pct != 75 && pct != 90 && pct != 95 && pct != 99))
        return err_set(err, "unknown term '%s' (ttft, tpot, e2el in ms per request; "
                            "interactivity_pXX, ttft_pXX_ms, tpot_pXX_ms, e2el_pXX_ms with "
                            "XX in 50, 75, 90, 95, 99)", t);
    if (slo->n_objectives == METRICS_SLO_OBJECTIVES)
        return err_set(err, "more than %d percentile objectives", METRICS_SLO_OBJECTIVES);
    struct metrics_objective *o = &slo->objectives[slo->n_objectives];
    if (!strcmp(metric, "interactivity") && !tail[0]) {
        snprintf(o->path, sizeof o->path, "metrics.interactivity_tok_s.p%d", pct);
        o->at_least = true;
    } else if ((!strcmp(metric, "ttft") || !strcmp(metric, "tpot") || !strcmp(metric, "e2el")) &&
               !strcmp(tail, "_ms")) {
        snprintf(o->path, sizeof o->path, "metrics.%s_ms.p%d", metric, pct);
        o->at_least = false;
    } else {
        return err_set(err, "unknown term '%s' (interactivity_pXX, ttft_pXX_ms, tpot_pXX_ms, "
                            "e2el_pXX_ms)", t);
    }
    snprintf(o->name, sizeof o->name, "%s", t);
    o->limit = x;
    slo->n_objectives++;
    return 0;
}

int metrics_slo_parse(const char *s, struct metrics_slo *slo, char *err)
{
    memset(slo, 0, sizeof *slo);
    char buf[512];
    if (!s || !*s)
        return err_set(err, "empty (want e.g. ttft=500,tpot=50 or interactivity_p90=100)");
    if (strlen(s) >= sizeof buf)
        return err_set(err, "longer than %zu characters", sizeof buf - 1);
    strcpy(buf, s);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq)
            return err_set(err, "'%s': want NAME=VALUE", tok);
        *eq = 0;
        if (slo_term(tok, eq + 1, slo, err))
            return -1;
    }
    if (!metrics_slo_set(slo) && !slo->n_objectives)
        return err_set(err, "no term (want e.g. ttft=500,tpot=50 or interactivity_p90=100)");
    return 0;
}

void metrics_init(struct metrics *m)
{
    memset(m, 0, sizeof *m);
    hdr_init(&m->itl_ns);
    m->min_start_ns = INT64_MAX;
    m->max_end_ns = INT64_MIN;
}

void metrics_free(struct metrics *m)
{
    dvec_free(&m->ttft_ms);
    dvec_free(&m->e2el_ms);
    dvec_free(&m->sched_ms);
    dvec_free(&m->tpot_ms);
    hdr_free(&m->itl_ns);
    free(m->sessions);
    memset(m, 0, sizeof *m);
}

static struct metrics_session *session_slot(struct metrics *m, uint64_t uid)
{
    if (!uid)
        uid = 1;
    if ((m->sess_n + 1) * 2 > m->sess_cap) {
        struct metrics_session *old = m->sessions;
        size_t oc = m->sess_cap;
        m->sess_cap = oc ? oc * 2 : 256;
        m->sessions = xcalloc(m->sess_cap, sizeof *m->sessions);
        m->sess_n = 0;
        for (size_t i = 0; i < oc; i++)
            if (old[i].uid) {
                struct metrics_session *s = session_slot(m, old[i].uid);
                *s = old[i];
            }
        free(old);
    }
    size_t mask = m->sess_cap - 1;
    for (size_t i = (size_t)hash_mix(uid, 0) & mask;; i = (i + 1) & mask) {
        if (m->sessions[i].uid == uid)
            return &m->sessions[i];
        if (!m->sessions[i].uid) {
            m->sessions[i].uid = uid;
            m->sess_n++;
            return &m->sessions[i];
        }
    }
}

void metrics_add(struct metrics *m, const struct replay_record *r)
{
    m->records++;
    if (r->warmup) {
        m->warmup++;
        return;
    }
    m->preemptions += r->preemptions;
    if (r->overflow)
        m->overflow++;
    if (r->cancelled) {
        m->cancelled++;
        return;
    }
    if (r->error) {
        m->errors++;
        return;
    }
    m->completed++;
    int64_t first = r->first_token_ns >= 0 ? r->first_token_ns : r->end_ns;
    dvec_push(&m->ttft_ms, (double)(first - r->start_ns) / 1e6);
    dvec_push(&m->e2el_ms, (double)(r->end_ns - r->start_ns) / 1e6);
    dvec_push(&m->sched_ms, (double)(r->end_ns - r->intended_start_ns) / 1e6);
    if (r->output_tokens > 1)
        dvec_push(&m->tpot_ms, (double)(r->end_ns - first) / (double)(r->output_tokens - 1) / 1e6);
    else
        dvec_push(&m->tpot_ms, NAN);
    if (r->chunk_times_ns)
        for (int64_t i = 1; i < r->chunks; i++)
            hdr_record(&m->itl_ns, r->chunk_times_ns[i] - r->chunk_times_ns[i - 1]);
    if (r->output_tokens > 1) {
        struct metrics_session *s = session_slot(m, r->session_uid);
        s->decode_tokens += r->output_tokens - 1;
        s->decode_ns += r->end_ns - first;
    }
    m->input_tokens += r->prompt_tokens;
    m->output_tokens += r->output_tokens;
    if (r->cached_tokens >= 0) {
        m->cached_tokens += r->cached_tokens;
        m->cached_prompt_tokens += r->prompt_tokens;
    }
    if (r->has_blocks && r->total_blocks > 0) {
        int64_t hit = r->hit_blocks < 0 ? 0 : r->hit_blocks;
        m->theo_hit_blocks += hit < r->total_blocks ? hit : r->total_blocks;
        m->theo_blocks += r->total_blocks;
    }
    if (r->start_ns < m->min_start_ns)
        m->min_start_ns = r->start_ns;
    if (r->end_ns > m->max_end_ns)
        m->max_end_ns = r->end_ns;
}

void metrics_stat_compute(double *v, size_t n, struct metrics_stat *s)
{
    memset(s, 0, sizeof *s);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!isnan(v[i]))
            v[k++] = v[i];
    n = k;
    if (!n)
        return;
    stats_sort(v, n);
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += v[i];
    s->n = n;
    s->mean = sum / (double)n;
    s->p50 = stats_percentile_sorted(v, n, 0.50);
    s->p75 = stats_percentile_sorted(v, n, 0.75);
    s->p90 = stats_percentile_sorted(v, n, 0.90);
    s->p95 = stats_percentile_sorted(v, n, 0.95);
    s->p99 = stats_percentile_sorted(v, n, 0.99);
}

static void stat_of(const struct dvec *d, struct metrics_stat *s)
{
    double *tmp = xmalloc((d->n ? d->n : 1) * sizeof *tmp);
    if (d->n)
        memcpy(tmp, d->v, d->n * sizeof *tmp);
    metrics_stat_compute(tmp, d->n, s);
    free(tmp);
}

static double inv(double ms) { return ms > 0 ? 1000.0 / ms : 0; }

static void invert(const struct metrics_stat *t, struct metrics_stat *o)
{
    o->n = t->n;
    o->mean = inv(t->mean);
    o->p50 = inv(t->p50);
    o->p75 = inv(t->p75);
    o->p90 = inv(t->p90);
    o->p95 = inv(t->p95);
    o->p99 = inv(t->p99);
}

void metrics_summarize(const struct metrics *m, int gpus, const struct metrics_slo *slo,
                       struct metrics_summary *s)
{
    memset(s, 0, sizeof *s);
    s->gpus = gpus > 0 ? gpus : 1;
    stat_of(&m->ttft_ms, &s->ttft_ms);
    stat_of(&m->tpot_ms, &s->tpot_ms);
    stat_of(&m->e2el_ms, &s->e2el_ms);
    stat_of(&m->sched_ms, &s->sched_ms);
    invert(&s->tpot_ms, &s->interactivity);
    /* Pooled ITL from the histogram. */
    const struct hdr *h = &m->itl_ns;
    s->itl_ms.n = h->n;
    if (h->n) {
        s->itl_ms.mean = hdr_mean(h) / 1e6;
        s->itl_ms.p50 = hdr_percentile(h, 0.50) / 1e6;
        s->itl_ms.p75 = hdr_percentile(h, 0.75) / 1e6;
        s->itl_ms.p90 = hdr_percentile(h, 0.90) / 1e6;
        s->itl_ms.p95 = hdr_percentile(h, 0.95) / 1e6;
        s->itl_ms.p99 = hdr_percentile(h, 0.99) / 1e6;
    }
    /* Per-session TPOT, then interactivity = 1 / stat. */
    struct dvec st = {0};
    for (size_t i = 0; i < m->sess_cap; i++) {
        const struct metrics_session *x = &m->sessions[i];
        if (x->uid && x->decode_tokens > 0)
            dvec_push(&st, (double)x->decode_ns / (double)x->decode_tokens / 1e6);
    }
    struct metrics_stat sess_tpot;
    metrics_stat_compute(st.v, st.n, &sess_tpot);
    invert(&sess_tpot, &s->session_interactivity);
    dvec_free(&st);

    s->records = m->records;
    s->completed = m->completed;
    s->errors = m->errors;
    s->warmup = m->warmup;
    s->cancelled = m->cancelled;
    s->overflow = m->overflow;
    s->preemptions = m->preemptions;
    s->input_tokens = m->input_tokens;
    s->output_tokens = m->output_tokens;
    s->cached_tokens = m->cached_tokens;
    s->prefix_hit_rate = m->cached_prompt_tokens > 0
                             ? (double)m->cached_tokens / (double)m->cached_prompt_tokens
                             : NAN;
    s->prefix_hit_rate_theoretical = NAN;
    s->theoretical = m->theoretical;
    s->prefix_hit_rate_theoretical_measured =
        m->theo_blocks > 0 ? (double)m->theo_hit_blocks / (double)m->theo_blocks : NAN;
    double dur = m->completed ? (double)(m->max_end_ns - m->min_start_ns) / 1e9 : 0;
    s->measured_duration_s = dur;
    if (dur > 0) {
        s->total_tok_s_per_gpu = (double)(m->input_tokens + m->output_tokens) / dur / s->gpus;
        s->output_tok_s_per_gpu = (double)m->output_tokens / dur / s->gpus;
    }
    if (metrics_slo_set(slo)) {
        s->has_slo = true;
        s->slo = *slo;
        for (size_t i = 0; i < m->ttft_ms.n; i++) {
            if (slo->ttft_ms > 0 && !(m->ttft_ms.v[i] <= slo->ttft_ms))
                continue;
            if (slo->e2el_ms > 0 && !(m->e2el_ms.v[i] <= slo->e2el_ms))
                continue;
            if (slo->tpot_ms > 0 && !isnan(m->tpot_ms.v[i]) && !(m->tpot_ms.v[i] <= slo->tpot_ms))
                continue;
            s->slo_met++;
        }
        s->goodput_req_s = dur > 0 ? (double)s->slo_met / dur : 0;
    }
}

static json_t *num(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static json_t *stat_json(const struct metrics_stat *st)
{
    json_t *o = json_object();
    json_object_set_new(o, "mean", num(st->mean));
    json_object_set_new(o, "p50", num(st->p50));
    json_object_set_new(o, "p75", num(st->p75));
    json_object_set_new(o, "p90", num(st->p90));
    json_object_set_new(o, "p95", num(st->p95));
    json_object_set_new(o, "p99", num(st->p99));
    json_object_set_new(o, "n", json_integer((json_int_t)st->n));
    return o;
}

void *metrics_summary_json(const struct metrics_summary *s)
{
    json_t *o = json_object();
    json_object_set_new(o, "ttft_ms", stat_json(&s->ttft_ms));
    json_object_set_new(o, "tpot_ms", stat_json(&s->tpot_ms));
    json_object_set_new(o, "itl_ms", stat_json(&s->itl_ms));
    json_object_set_new(o, "e2el_ms", stat_json(&s->e2el_ms));
    json_object_set_new(o, "scheduled_latency_ms", stat_json(&s->sched_ms));
    json_object_set_new(o, "interactivity_tok_s", stat_json(&s->interactivity));
    json_object_set_new(o, "session_interactivity_tok_s", stat_json(&s->session_interactivity));
    json_object_set_new(o, "throughput_tok_s_per_gpu",
                        json_pack("{s:o, s:o}", "total", num(s->total_tok_s_per_gpu),
                                  "output", num(s->output_tok_s_per_gpu)));
    json_object_set_new(o, "goodput_req_s", s->has_slo ? num(s->goodput_req_s) : json_null());
    if (s->has_slo) {
        json_t *slo = json_object();
        json_object_set_new(slo, "ttft_ms", s->slo.ttft_ms > 0 ? json_real(s->slo.ttft_ms) : json_null());
        json_object_set_new(slo, "tpot_ms", s->slo.tpot_ms > 0 ? json_real(s->slo.tpot_ms) : json_null());
        json_object_set_new(slo, "e2el_ms", s->slo.e2el_ms > 0 ? json_real(s->slo.e2el_ms) : json_null());
        json_object_set_new(slo, "met", json_integer((json_int_t)s->slo_met));
        json_object_set_new(o, "slo", slo);
    } else {
        json_object_set_new(o, "slo", json_null());
    }
    json_object_set_new(o, "prefix_hit_rate", num(s->prefix_hit_rate));
    json_object_set_new(o, "prefix_hit_rate_theoretical", num(s->prefix_hit_rate_theoretical));
    if (s->theoretical)
        json_object_set_new(o, "prefix_hit_rate_theoretical_measured",
                            num(s->prefix_hit_rate_theoretical_measured));
    json_object_set_new(o, "requests",
                        json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}",
                                  "completed", (json_int_t)s->completed,
                                  "errors", (json_int_t)s->errors,
                                  "warmup", (json_int_t)s->warmup,
                                  "cancelled", (json_int_t)s->cancelled,
                                  "overflow", (json_int_t)s->overflow,
                                  "total", (json_int_t)s->records));
    json_object_set_new(o, "preemptions", json_integer((json_int_t)s->preemptions));
    json_object_set_new(o, "fallback_steps", json_integer((json_int_t)s->fallback_steps));
    json_object_set_new(o, "measured_duration_s", num(s->measured_duration_s));
    json_object_set_new(o, "input_tokens", json_integer((json_int_t)s->input_tokens));
    json_object_set_new(o, "output_tokens", json_integer((json_int_t)s->output_tokens));
    json_object_set_new(o, "cached_tokens", json_integer((json_int_t)s->cached_tokens));
    return o;
}
