/* openai_metrics.c: GET /metrics: Prometheus text (version 0.0.4) with
 * vLLM 0.33's metric names, types, labels and histogram buckets, so that
 * dashboards and clients made for vLLM read this server unchanged, and
 * agentreplay's own agentreplay_* families beside them.
 *
 * vLLM's families (vllm/v1/metrics/loggers.py:473-1110, buckets
 * vllm/v1/metrics/buckets.py:30-240) carry the labels engine="0" and
 * model_name (the first served name); counters are written as name_total
 * in HELP, TYPE and samples, labels sorted by name, as prometheus_client's
 * generate_latest writes them (prometheus_client/exposition.py:283-330).
 * Exported here, with what each is made of:
 *   vllm:num_requests_running, _waiting      gauges: the backend's state
 *   vllm:kv_cache_usage_perc                 gauge: KV blocks used, 0..1
 *                                            (also as the V0 name
 *                                            vllm:gpu_cache_usage_perc)
 *   vllm:prefix_cache_queries_total, _hits_total, vllm:prompt_tokens_total,
 *   vllm:prompt_tokens_cached_total          counters in tokens: prompts
 *                                            admitted, and their cached part
 *   vllm:generation_tokens_total, vllm:num_preemptions_total
 *   vllm:request_success_total{finished_reason}  per choice: length (every
 *                                            completed one: the server
 *                                            ignores end-of-sequence), abort
 *                                            (cancelled), error
 *   vllm:time_to_first_token_seconds, vllm:inter_token_latency_seconds,
 *   vllm:request_time_per_output_token_seconds, vllm:e2e_request_latency_
 *   seconds, vllm:request_decode_time_seconds   histograms of each choice,
 *                                            in real (wall-clock) seconds
 *                                            from the request's arrival
 *   vllm:request_prompt_tokens, _generation_tokens, vllm:request_params_n,
 *   vllm:request_params_max_tokens           histograms
 *   vllm:spec_decode_num_drafts_total, _num_draft_tokens_total,
 *   _num_accepted_tokens_total, _num_accepted_tokens_per_pos_total
 *                                            with speculative decoding:
 *                                            each decode chunk is one draft
 *                                            of `draft` tokens whose first
 *                                            tokens - 1 were accepted
 *   vllm:cache_config_info                   gauge 1 with block_size,
 *                                            enable_prefix_caching,
 *                                            num_gpu_blocks
 * Not exported (the target protocol does not tell when a call was first
 * scheduled): queue, prefill and inference times, iteration tokens. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/server/openai_internal.h"
#include "traces/base/mem.h"
#include "traces/base/time_ns.h"

static const double le_ttft[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25, 0.5, 0.75,
                                 1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
static const double le_itl[] = {0.01, 0.025, 0.05, 0.075, 0.1,  0.15, 0.2,  0.3,  0.4, 0.5,
                                0.75, 1.0,   2.5,  5.0,   7.5,  10.0, 20.0, 40.0, 80.0};
static const double le_lat[] = {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,    10.0,  15.0, 20.0,
                                30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
static const double le_n[] = {1, 2, 5, 10, 20};

static const char *const reasons[5] = {"stop", "length", "abort", "error", "repetition"};
enum { R_STOP, R_LENGTH, R_ABORT, R_ERROR };

static void hist_init(struct openai_hist *h, const double *le, int n)
{
    memset(h, 0, sizeof *h);
    ASSERT(n < (int)ARRAY_LEN(h->count));
    h->le = le;
    h->n = n;
}

static void hist_add(struct openai_hist *h, double v)
{
    int i = 0;
    while (i < h->n && v > h->le[i])
        i++;
    h->count[i]++;
    h->total++;
    h->sum += v;
}

void openai_metrics_init(struct openai_server *s)
{
    struct openai_metrics *m = &s->m;
    int spec = m->spec_draft;
    memset(m, 0, sizeof *m);
    m->spec_draft = spec;
    /* build_1_2_5_buckets(max_model_len), buckets.py:170-203 */
    static const int mant[3] = {1, 2, 5};
    for (double p = 1; m->n_tok_le < (int)ARRAY_LEN(m->tok_le) - 1; p *= 10) {
        int stop = 0;
        for (int k = 0; k < 3; k++) {
            double v = mant[k] * p;
            if (v > (double)s->max_model_len) {
                stop = 1;
                break;
            }
            m->tok_le[m->n_tok_le++] = v;
        }
        if (stop)
            break;
    }
    hist_init(&m->ttft, le_ttft, (int)ARRAY_LEN(le_ttft));
    hist_init(&m->itl, le_itl, (int)ARRAY_LEN(le_itl));
    hist_init(&m->tpot, le_itl, (int)ARRAY_LEN(le_itl));
    hist_init(&m->e2e, le_lat, (int)ARRAY_LEN(le_lat));
    hist_init(&m->decode, le_lat, (int)ARRAY_LEN(le_lat));
    hist_init(&m->prompt_tok, m->tok_le, m->n_tok_le);
    hist_init(&m->gen_tok, m->tok_le, m->n_tok_le);
    hist_init(&m->params_max_tokens, m->tok_le, m->n_tok_le);
    hist_init(&m->params_n, le_n, (int)ARRAY_LEN(le_n));
}

void openai_metrics_admit(struct openai_server *s, int n, int64_t asked_max_tokens)
{
    hist_add(&s->m.params_n, n);
    if (asked_max_tokens > 0)
        hist_add(&s->m.params_max_tokens, (double)asked_max_tokens);
}

void openai_metrics_chunk(struct openai_server *s, struct openai_choice *ch, int64_t now,
                          int64_t tokens)
{
    struct openai_metrics *m = &s->m;
    if (ch->t_first < 0) {
        ch->t_first = now;
        hist_add(&m->ttft, (double)(now - ch->q->arrival_ns) / NS_PER_S);
    } else {
        hist_add(&m->itl, (double)(now - ch->t_last) / NS_PER_S);
        if (m->spec_draft > 0) {
            m->spec_drafts++;
            m->spec_draft_tokens += (uint64_t)m->spec_draft;
            int64_t acc = tokens - 1;
            m->spec_accepted += (uint64_t)acc;
            for (int64_t k = 0; k < acc && k < m->spec_draft && k < (int64_t)ARRAY_LEN(m->spec_accepted_pos); k++)
                m->spec_accepted_pos[k]++;
        }
    }
    ch->t_last = now;
}

void openai_metrics_done(struct openai_server *s, struct openai_choice *ch, int64_t now,
                         enum target_status st)
{
    struct openai_metrics *m = &s->m;
    int r = st == TARGET_OK ? R_LENGTH : st == TARGET_ERR_CANCELLED ? R_ABORT : R_ERROR;
    m->finished[r]++;
    if (st != TARGET_OK)
        return;
    hist_add(&m->e2e, (double)(now - ch->q->arrival_ns) / NS_PER_S);
    hist_add(&m->prompt_tok, (double)ch->call.prompt_tokens);
    hist_add(&m->gen_tok, (double)ch->emitted);
    if (ch->t_first >= 0) {
        double dec = (double)(ch->t_last - ch->t_first) / NS_PER_S;
        hist_add(&m->decode, dec);
        if (ch->emitted > 1)
            hist_add(&m->tpot, dec / (double)(ch->emitted - 1));
    }
}

/* ---- the text ---- */

struct txt {
    char *p;
    size_t len, cap;
    char lab[OPENAI_NAME_MAX * 2 + 32]; /* engine="0",model_name="..." */
};

static void tprintf(struct txt *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tprintf(struct txt *t, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->p + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (n >= 0 && (size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        t->cap = t->cap * 2 + (n > 0 ? (size_t)n : 0) + 256;
        t->p = xrealloc(t->p, t->cap);
    }
}

static void family(struct txt *t, const char *name, const char *type, const char *help)
{
    tprintf(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void gauge(struct txt *t, const char *name, const char *help, double v)
{
    family(t, name, "gauge", help);
    tprintf(t, "%s{%s} %.17g\n", name, t->lab, v);
}

static void counter(struct txt *t, const char *name, const char *help, double v)
{
    family(t, name, "counter", help);
    tprintf(t, "%s{%s} %.17g\n", name, t->lab, v);
}

/* engine="0",le="X",model_name="M": labels in name order. */
static void hist(struct txt *t, const char *name, const char *help, const struct openai_hist *h)
{
    family(t, name, "histogram", help);
    const char *mn = strstr(t->lab, "model_name=");
    uint64_t cum = 0;
    for (int i = 0; i <= h->n; i++) {
        cum += h->count[i];
        if (i < h->n)
            tprintf(t, "%s_bucket{engine=\"0\",le=\"%.17g\",%s} %llu\n", name, h->le[i], mn,
                    (unsigned long long)cum);
        else
            tprintf(t, "%s_bucket{engine=\"0\",le=\"+Inf\",%s} %llu\n", name, mn, (unsigned long long)cum);
    }
    tprintf(t, "%s_count{%s} %llu\n%s_sum{%s} %.17g\n", name, t->lab, (unsigned long long)h->total,
            name, t->lab, h->sum);
}

static void vllm_families(struct openai_server *s, struct txt *t, const struct target_stats *ts)
{
    const struct openai_metrics *m = &s->m;
    double kv = ts->kv_used_frac > 0 ? ts->kv_used_frac : 0;
    gauge(t, "vllm:num_requests_running", "Requests in the engine's running batches.",
          (double)(ts->running >= 0 ? ts->running : s->running));
    gauge(t, "vllm:num_requests_waiting", "Requests waiting for the engine.",
          (double)(ts->waiting > 0 ? ts->waiting : 0));
    gauge(t, "vllm:kv_cache_usage_perc", "KV-cache blocks in use, as a fraction (1 = all).", kv);
    gauge(t, "vllm:gpu_cache_usage_perc", "The same as vllm:kv_cache_usage_perc (vLLM V0's name).", kv);
    counter(t, "vllm:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
            (double)ts->prompt_tokens);
    counter(t, "vllm:prefix_cache_hits_total", "Prompt tokens found in the prefix cache.",
            (double)ts->cached_tokens);
    counter(t, "vllm:num_preemptions_total", "Preemptions of running requests.", (double)ts->preemptions);
    counter(t, "vllm:prompt_tokens_total", "Prompt tokens admitted, cached ones included.",
            (double)ts->prompt_tokens);
    counter(t, "vllm:prompt_tokens_cached_total", "Prompt tokens served from the prefix cache.",
            (double)ts->cached_tokens);
    counter(t, "vllm:generation_tokens_total", "Tokens generated.", (double)ts->output_tokens);
    family(t, "vllm:request_success_total", "counter", "Finished requests by reason.");
    const char *mn = strstr(t->lab, "model_name=");
    for (int r = 0; r < 5; r++)
        tprintf(t, "vllm:request_success_total{engine=\"0\",finished_reason=\"%s\",%s} %llu\n", reasons[r],
                mn, (unsigned long long)m->finished[r]);
    hist(t, "vllm:request_prompt_tokens", "Prompt tokens per request.", &m->prompt_tok);
    hist(t, "vllm:request_generation_tokens", "Generated tokens per request.", &m->gen_tok);
    hist(t, "vllm:request_params_n", "The n of each request.", &m->params_n);
    hist(t, "vllm:request_params_max_tokens", "The max_tokens each request asked.", &m->params_max_tokens);
    hist(t, "vllm:time_to_first_token_seconds", "Time to the first token (s).", &m->ttft);
    hist(t, "vllm:inter_token_latency_seconds", "Time between a request's chunks (s).", &m->itl);
    hist(t, "vllm:request_time_per_output_token_seconds", "Decode time per output token after the first (s).",
         &m->tpot);
    hist(t, "vllm:e2e_request_latency_seconds", "Arrival to the last token (s).", &m->e2e);
    hist(t, "vllm:request_decode_time_seconds", "First token to the last (s).", &m->decode);
    if (m->spec_draft > 0) {
        counter(t, "vllm:spec_decode_num_drafts_total", "Speculative drafts verified.", (double)m->spec_drafts);
        counter(t, "vllm:spec_decode_num_draft_tokens_total", "Draft tokens proposed.",
                (double)m->spec_draft_tokens);
        counter(t, "vllm:spec_decode_num_accepted_tokens_total", "Draft tokens accepted.",
                (double)m->spec_accepted);
        family(t, "vllm:spec_decode_num_accepted_tokens_per_pos_total", "counter",
               "Draft tokens accepted at each position.");
        for (int k = 0; k < m->spec_draft && k < (int)ARRAY_LEN(m->spec_accepted_pos); k++)
            tprintf(t, "vllm:spec_decode_num_accepted_tokens_per_pos_total{engine=\"0\",%s,position=\"%d\"} %llu\n",
                    mn, k, (unsigned long long)m->spec_accepted_pos[k]);
    }
    family(t, "vllm:cache_config_info", "gauge", "The KV cache's configuration.");
    tprintf(t, "vllm:cache_config_info{block_size=\"%d\",enable_prefix_caching=\"%s\",engine=\"0\",%s,"
               "num_gpu_blocks=\"%lld\"} 1\n",
            s->engine_block_size, s->prefix_caching ? "True" : "False", mn, (long long)s->kv_blocks);
}

static void own_families(struct openai_server *s, struct txt *t, const struct target_stats *ts)
{
    double hit = ts->prompt_tokens > 0 ? (double)ts->cached_tokens / (double)ts->prompt_tokens : 0;
    tprintf(t,
            "# HELP agentreplay_requests_running Requests being served.\n"
            "# TYPE agentreplay_requests_running gauge\nagentreplay_requests_running %lld\n"
            "# HELP agentreplay_requests_waiting Requests queued in the engine.\n"
            "# TYPE agentreplay_requests_waiting gauge\nagentreplay_requests_waiting %lld\n"
            "# HELP agentreplay_kv_cache_usage_ratio KV blocks in use over all blocks.\n"
            "# TYPE agentreplay_kv_cache_usage_ratio gauge\nagentreplay_kv_cache_usage_ratio %.6f\n"
            "# HELP agentreplay_prefix_cache_hit_rate Prompt tokens served from the prefix cache over prompt tokens.\n"
            "# TYPE agentreplay_prefix_cache_hit_rate gauge\nagentreplay_prefix_cache_hit_rate %.6f\n"
            "# TYPE agentreplay_prompt_tokens_total counter\nagentreplay_prompt_tokens_total %lld\n"
            "# TYPE agentreplay_cached_prompt_tokens_total counter\nagentreplay_cached_prompt_tokens_total %lld\n"
            "# TYPE agentreplay_generation_tokens_total counter\nagentreplay_generation_tokens_total %lld\n"
            "# TYPE agentreplay_http_requests_total counter\nagentreplay_http_requests_total %lld\n"
            "# TYPE agentreplay_completions_total counter\nagentreplay_completions_total{status=\"ok\"} %lld\n"
            "agentreplay_completions_total{status=\"failed\"} %lld\n"
            "# TYPE agentreplay_faults_injected_total counter\n"
            "agentreplay_faults_injected_total{kind=\"error\"} %lld\n"
            "agentreplay_faults_injected_total{kind=\"disconnect\"} %lld\n"
            "agentreplay_faults_injected_total{kind=\"stall\"} %lld\n"
            "# TYPE agentreplay_client_disconnects_total counter\nagentreplay_client_disconnects_total %lld\n"
            "# TYPE agentreplay_preemptions_total counter\nagentreplay_preemptions_total %lld\n",
            (long long)(ts->running >= 0 ? ts->running : s->running), (long long)(ts->waiting > 0 ? ts->waiting : 0),
            ts->kv_used_frac > 0 ? ts->kv_used_frac : 0.0, hit, (long long)ts->prompt_tokens,
            (long long)ts->cached_tokens, (long long)ts->output_tokens, (long long)s->http_requests,
            (long long)s->completions_ok, (long long)s->completions_failed, (long long)s->faults_error,
            (long long)s->faults_disconnect, (long long)s->faults_stall, (long long)s->client_gone,
            (long long)ts->preemptions);
}

void openai_handle_metrics(struct openai_server *s, struct httpd_conn *c)
{
    struct target_stats ts;
    memset(&ts, 0, sizeof ts);
    target_stats(s->tg, &ts);
    struct txt t = {.cap = 16384};
    t.p = xmalloc(t.cap);
    /* The label value escaped as the text format wants (\\, \", \n). */
    size_t k = (size_t)snprintf(t.lab, sizeof t.lab, "engine=\"0\",model_name=\"");
    for (const char *p = s->names[0]; *p && k + 4 < sizeof t.lab; p++) {
        if (*p == '\\' || *p == '"')
            t.lab[k++] = '\\', t.lab[k++] = *p;
        else if (*p == '\n')
            t.lab[k++] = '\\', t.lab[k++] = 'n';
        else
            t.lab[k++] = *p;
    }
    snprintf(t.lab + k, sizeof t.lab - k, "\"");
    vllm_families(s, &t, &ts);
    own_families(s, &t, &ts);
    httpd_respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", t.p, t.len);
    free(t.p);
}
