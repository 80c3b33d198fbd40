/* plot_latency.c: the throughput-interactivity (Pareto) chart and the
 * per-request distributions (CDFs of TTFT, TPOT, interactivity) from
 * requests.jsonl (plot_data.h). */
#include <sys/types.h>

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plots/plot_data.h"
#include "traces/base/err.h"
#include "traces/base/mem.h"
#include "traces/base/stats.h"
#include "traces/base/time_ns.h"

/* CDF resolution: quantiles at fractions 0, 1/CDF_STEPS, ..., 1. */
#define CDF_STEPS 500

static double point_x(const struct point *p, int pi)
{
    return p->inter[pi];
}

/* pareto_data.csv: one block per configuration ("name" header line), rows
 * x = interactivity at the chosen percentile, y = total tok/s/GPU,
 * concurrency, output tok/s/GPU; sorted by concurrency. */
int plot_write_pareto(const struct set *s, int pi, const char *outdir, struct chart *ch,
                        char *err)
{
    FILE *f = open_out(outdir, "pareto_data.csv", err);
    if (!f)
        return -1;
    double xmin = INFINITY, xmax = 0, ymin = INFINITY, ymax = 0;
    int blocks = 0;
    int *idx = xmalloc(sizeof *idx * (size_t)(s->npts + 1));
    for (int g = 0; g < s->ncfg; g++) {
        int k = 0;
        for (int j = 0; j < s->npts; j++) {
            const struct point *p = &s->pts[j];
            if (p->cfg == g && point_x(p, pi) > 0 && p->total_tps_gpu > 0)
                idx[k++] = j;
        }
        if (!k)
            continue;
        /* insertion sort by concurrency (few points) */
        for (int a = 1; a < k; a++)
            for (int b = a; b > 0 && s->pts[idx[b - 1]].concurrency > s->pts[idx[b]].concurrency;
                 b--) {
                int t = idx[b];
                idx[b] = idx[b - 1];
                idx[b - 1] = t;
            }
        fprintf(f, "%s\"%s\",total_tok_s_per_gpu,concurrency,output_tok_s_per_gpu\n",
                blocks ? "\n\n" : "", s->cfgs[g].name);
        for (int a = 0; a < k; a++) {
            const struct point *p = &s->pts[idx[a]];
            double x = point_x(p, pi);
            fprintf(f, "%.6g,%.6g,%d,", x, p->total_tps_gpu, p->concurrency);
            plot_csv_num(f, p->output_tps_gpu);
            fputc('\n', f);
            xmin = fmin(xmin, x);
            xmax = fmax(xmax, x);
            ymin = fmin(ymin, p->total_tps_gpu);
            ymax = fmax(ymax, p->total_tps_gpu);
        }
        blocks++;
    }
    free(idx);
    if (close_out(f, outdir, "pareto_data.csv", err))
        return -1;
    if (!blocks)
        return 0;
    int mixed = 0;
    for (int g = 1; g < s->ncfg; g++)
        mixed |= s->cfgs[g].gpus != s->cfgs[0].gpus;
    snprintf(ch->vars, sizeof ch->vars, "n=%d; pct=%d; logx=%d; logy=%d; mixed=%d", blocks,
             pct_list[pi], xmax > 20 * xmin, ymax > 50 * ymin, mixed);
    snprintf(ch->data, sizeof ch->data, "pareto_data.csv");
    snprintf(ch->about, sizeof ch->about,
             "Total throughput per GPU against P%d interactivity (1 / P%d TPOT, tok/s per "
             "user), one line per configuration, each point labelled with its concurrency "
             "(live sessions). Total throughput = (input tokens, cached included, + output "
             "tokens) / measured duration / GPUs of the whole deployment.%s",
             pct_list[pi], pct_list[pi],
             mixed ? " The configurations use different GPU counts; each label states its "
                     "count and layout." : "");
    return 1;
}

/* Per-request values of one run (measured calls only). */
struct reqvals {
    double *ttft_ms, *tpot_ms, *inter;
    size_t n_ttft, n_tpot;
    size_t skipped; /* warmup, errored or cancelled */
};

static void reqvals_free(struct reqvals *v)
{
    free(v->ttft_ms);
    free(v->tpot_ms);
    free(v->inter);
    memset(v, 0, sizeof *v);
}

static bool jint64(json_t *o, const char *k, long long *v)
{
    json_t *x = json_object_get(o, k);
    if (json_is_integer(x)) {
        *v = json_integer_value(x);
        return true;
    }
    if (json_is_real(x) && isfinite(json_real_value(x))) {
        *v = (long long)json_real_value(x);
        return true;
    }
    return false;
}

static int read_requests(const char *dir, struct reqvals *v, char *err)
{
    memset(v, 0, sizeof *v);
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/requests.jsonl", dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return err_set(err, "%s: %s", path, strerror(errno));
    size_t cap = 0;
    char *line = NULL;
    size_t lcap = 0;
    ssize_t got;
    int lineno = 0, rc = 0;
    while ((got = getline(&line, &lcap, f)) > 0) {
        lineno++;
        if (got == 1 && line[0] == '\n')
            continue;
        json_error_t je;
        json_t *o = json_loads(line, 0, &je);
        if (!o || !json_is_object(o)) {
            rc = o ? err_set(err, "%s:%d: not a JSON object", path, lineno)
                   : err_set(err, "%s:%d:%d: %s", path, lineno, je.column, je.text);
            json_decref(o);
            break;
        }
        json_t *e = json_object_get(o, "error");
        if (json_is_true(json_object_get(o, "warmup")) ||
            json_is_true(json_object_get(o, "cancelled")) || (e && !json_is_null(e))) {
            v->skipped++;
            json_decref(o);
            continue;
        }
        long long start, first, end, out;
        if (!jint64(o, "start_ns", &start) || !jint64(o, "end_ns", &end) ||
            !jint64(o, "output_tokens", &out)) {
            rc = err_set(err, "%s:%d: start_ns, end_ns or output_tokens missing", path, lineno);
            json_decref(o);
            break;
        }
        /* no first token: the end stands in for it (as replay/metrics.c) */
        if (!jint64(o, "first_token_ns", &first))
            first = end;
        bool has_first = first >= start;
        json_decref(o);
        if (v->n_ttft == cap) {
            cap = cap ? cap * 2 : 1024;
            v->ttft_ms = xrealloc(v->ttft_ms, sizeof(double) * cap);
            v->tpot_ms = xrealloc(v->tpot_ms, sizeof(double) * cap);
            v->inter = xrealloc(v->inter, sizeof(double) * cap);
        }
        if (!has_first)
            continue;
        v->ttft_ms[v->n_ttft++] = (double)(first - start) / (double)NS_PER_MS;
        if (out > 1 && end > first) {
            double tpot_s = (double)(end - first) / (double)(out - 1) / (double)NS_PER_S;
            v->tpot_ms[v->n_tpot] = tpot_s * 1e3;
            v->inter[v->n_tpot++] = 1.0 / tpot_s;
        }
    }
    free(line);
    fclose(f);
    if (rc) {
        reqvals_free(v);
        return -1;
    }
    /* No records with a first token (a run interrupted at once): the
     * arrays are NULL, which qsort must not be given. */
    if (v->n_ttft)
        stats_sort(v->ttft_ms, v->n_ttft);
    if (v->n_tpot) {
        stats_sort(v->tpot_ms, v->n_tpot);
        stats_sort(v->inter, v->n_tpot);
    }
    return 0;
}

/* Whether a log axis reads better: positive values spanning decades. */
bool want_log(double lo, double hi, double ratio)
{
    return lo > 0 && isfinite(hi) && hi > ratio * lo;
}

/* cdf_data.csv: one block per configuration; rows: fraction, TTFT (ms),
 * TPOT (ms), per-request interactivity (tok/s/user) at that quantile. */
int plot_write_cdf(const struct set *s, int conc, const char *warn, int pct,
                     const char *outdir, struct chart *ch, char *err)
{
    FILE *f = open_out(outdir, "cdf_data.csv", err);
    if (!f)
        return -1;
    int blocks = 0;
    double lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {0, 0, 0};
    struct sbuf with_tpot = {0}; /* blocks that have TPOT values */
    sb_printf(&with_tpot, "%s", "");
    for (int g = 0; g < s->ncfg; g++) {
        int r = s->cfgs[g].run;
        if (r < 0)
            continue;
        struct reqvals v;
        if (read_requests(s->pts[r].dir, &v, err)) {
            fclose(f);
            sb_free(&with_tpot);
            return -1;
        }
        if (v.n_ttft) {
            char name[320];
            if (conc)
                snprintf(name, sizeof name, "%s, %zu calls", s->cfgs[g].name, v.n_ttft);
            else
                snprintf(name, sizeof name, "%s, c=%d, %zu calls", s->cfgs[g].name,
                         s->pts[r].concurrency, v.n_ttft);
            fprintf(f, "%s\"%s\",ttft_ms,tpot_ms,interactivity_tok_s\n", blocks ? "\n\n" : "",
                    name);
            for (int i = 0; i <= CDF_STEPS; i++) {
                double q = (double)i / CDF_STEPS;
                fprintf(f, "%.4f,", q);
                plot_csv_num(f, stats_percentile_sorted(v.ttft_ms, v.n_ttft, q));
                fputc(',', f);
                plot_csv_num(f, stats_percentile_sorted(v.tpot_ms, v.n_tpot, q));
                fputc(',', f);
                plot_csv_num(f, stats_percentile_sorted(v.inter, v.n_tpot, q));
                fputc('\n', f);
            }
            /* axis spans from the 1st to the 100th percentile */
            const double *arr[3] = {v.ttft_ms, v.tpot_ms, v.inter};
            size_t cnt[3] = {v.n_ttft, v.n_tpot, v.n_tpot};
            for (int m = 0; m < 3; m++)
                if (cnt[m]) {
                    lo[m] = fmin(lo[m], stats_percentile_sorted(arr[m], cnt[m], 0.01));
                    hi[m] = fmax(hi[m], arr[m][cnt[m] - 1]);
                }
            if (v.n_tpot)
                sb_printf(&with_tpot, "%s%d", with_tpot.len ? " " : "", blocks);
            blocks++;
        }
        reqvals_free(&v);
    }
    bool bad = close_out(f, outdir, "cdf_data.csv", err);
    if (bad || !blocks) {
        sb_free(&with_tpot);
        return bad ? -1 : 0;
    }
    char cl[64] = "each configuration's highest concurrency";
    if (conc)
        snprintf(cl, sizeof cl, "concurrency %d", conc);
    snprintf(ch->vars, sizeof ch->vars,
             "n=%d; pct=%d; logx1=%d; logx2=%d; logx3=%d; xmax1=%.6g; xmax2=%.6g; "
             "xmax3=%.6g; ltpot='%s'; sub='%s'; warn='%s'",
             blocks, pct, want_log(lo[0], hi[0], 30), want_log(lo[1], hi[1], 30),
             want_log(lo[2], hi[2], 30), hi[0], hi[1], hi[2], with_tpot.p, cl, warn);
    sb_free(&with_tpot);
    snprintf(ch->data, sizeof ch->data, "cdf_data.csv");
    snprintf(ch->about, sizeof ch->about,
             "Cumulative distributions over measured calls (warmup, errored and cancelled "
             "calls excluded) at %s: TTFT (first token - send time), TPOT ((last token - first "
             "token) / (output tokens - 1), calls with more than one output token) and "
             "per-request interactivity (1 / TPOT). Curves join the percentiles at every "
             "0.2 %% (linear interpolation between closest ranks, as the reported "
             "percentiles), so each curve crosses P%d at the reported value; P%d "
             "interactivity (1 / P%d TPOT) lies at fraction %.2f of the interactivity "
             "curve.%s%s",
             cl, pct, pct, pct, 1.0 - pct / 100.0, *warn ? " **" : "", *warn ? warn : "");
    if (*warn) {
        size_t l = strlen(ch->about);
        snprintf(ch->about + l, sizeof ch->about - l, "**");
    }
    return 1;
}
