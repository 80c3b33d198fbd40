/* plot_timeline.c: the timeline chart (live sessions, running and
 * waiting calls, KV use, prefix hit rate, tokens/s) from each chosen run's
 * timeline.csv (plot_data.h). */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plots/plot_data.h"
#include "traces/base/err.h"
#include "traces/base/mem.h"
#include "traces/base/csv.h"

/* Timelines longer than this many rows (seconds) are averaged into bins of
 * whole seconds, at most this many: about two points per pixel column of
 * a panel at the default size. */
#define TIMELINE_MAX_ROWS 400
/* Tokens/s in the timeline: trailing means over this many seconds. */
#define TOKENS_WINDOW_S 10.0

/* timeline_data.csv: one block per configuration; columns t_s,
 * live_sessions, running, waiting, kv_used_pct, prefix_hit_pct,
 * tokens_per_s, output_tokens_per_s; long runs averaged into bins. */
int plot_write_timeline(const struct set *s, int conc, const char *warn, const char *outdir,
                          struct chart *ch, char *err)
{
    static const char *cols[] = {"t_s", "live_sessions", "running", "waiting",
                                 "kv_used_frac", "prefix_hit_rate", "tokens_per_s",
                                 "output_tokens_per_s"};
    enum { NC = 8 };
    static const double scale[NC] = {1, 1, 1, 1, 100, 100, 1, 1};
    FILE *f = open_out(outdir, "timeline_data.csv", err);
    if (!f)
        return -1;
    int blocks = 0, rc = 0;
    double tmax = 0, cmax[NC] = {0}, cmin_pos[NC];
    int hit_over = 0; /* seconds whose hit rate exceeds 100 % (off scale) */
    int maxbin = 1;   /* rows (seconds) per point */
    for (int k = 0; k < NC; k++)
        cmin_pos[k] = INFINITY;
    struct sbuf has[NC]; /* per column: the blocks with values in it */
    memset(has, 0, sizeof has);
    for (int k = 0; k < NC; k++)
        sb_printf(&has[k], "%s", "");
    for (int g = 0; g < s->ncfg && !rc; g++) {
        int r = s->cfgs[g].run;
        char path[PATH_MAX + 32];
        if (r < 0 || (snprintf(path, sizeof path, "%s/timeline.csv", s->pts[r].dir),
                      !file_exists(path)))
            continue;
        struct csv c;
        if (csv_read(path, &c, err)) {
            rc = -1;
            break;
        }
        if (csv_col(&c, "t_s") < 0) {
            rc = err_set(err, "%s:1: no column 't_s'", path);
            csv_free(&c);
            break;
        }
        if (c.nrows) {
            if (conc)
                fprintf(f, "%s\"%s\"", blocks ? "\n\n" : "", s->cfgs[g].name);
            else
                fprintf(f, "%s\"%s, c=%d\"", blocks ? "\n\n" : "", s->cfgs[g].name,
                        s->pts[r].concurrency);
            fprintf(f, ",live_sessions,running,waiting,kv_used_pct,prefix_hit_pct,"
                       "tokens_per_s_mean%.0fs,output_tokens_per_s_mean%.0fs\n",
                    TOKENS_WINDOW_S, TOKENS_WINDOW_S);
            /* rows averaged into bins when long, NaN where absent */
            int bin = (c.nrows + TIMELINE_MAX_ROWS - 1) / TIMELINE_MAX_ROWS;
            maxbin = bin > maxbin ? bin : maxbin;
            int nb = 0;
            double(*v)[NC] = xmalloc(sizeof *v * (size_t)(c.nrows / bin + 1));
            for (int a = 0; a < c.nrows && !rc; a += bin) {
                double sum[NC] = {0};
                int cnt[NC] = {0};
                for (int b = a; b < a + bin && b < c.nrows && !rc; b++)
                    for (int k = 0; k < NC; k++) {
                        double x;
                        if ((rc = csv_num_at(&c, b, cols[k], false, &x, err)))
                            break;
                        if (isfinite(x)) {
                            sum[k] += x * scale[k];
                            cnt[k]++;
                        }
                    }
                if (rc || !cnt[0])
                    continue;
                for (int k = 0; k < NC; k++)
                    v[nb][k] = cnt[k] ? sum[k] / cnt[k] : NAN;
                nb++;
            }
            /* tokens/s: trailing means over TOKENS_WINDOW_S (prefill makes
             * single seconds spike far above the sustained rate) */
            double (*tok)[2] = xmalloc(sizeof *tok * (size_t)(nb + 1));
            for (int k = 0; k < 2; k++) {
                double acc = 0;
                int n_acc = 0, lo = 0;
                for (int i = 0; i < nb; i++) {
                    double x = v[i][6 + k];
                    if (isfinite(x)) {
                        acc += x;
                        n_acc++;
                    }
                    while (v[lo][0] <= v[i][0] - TOKENS_WINDOW_S) {
                        if (isfinite(v[lo][6 + k])) {
                            acc -= v[lo][6 + k];
                            n_acc--;
                        }
                        lo++;
                    }
                    tok[i][k] = n_acc ? acc / n_acc : NAN;
                }
            }
            bool seen[NC] = {false};
            for (int i = 0; i < nb; i++) {
                v[i][6] = tok[i][0];
                v[i][7] = tok[i][1];
                for (int k = 0; k < NC; k++) {
                    if (k)
                        fputc(',', f);
                    plot_csv_num(f, v[i][k]);
                    if (k == 5 && v[i][k] > 100.5)
                        hit_over++;
                    if (isfinite(v[i][k])) {
                        cmax[k] = fmax(cmax[k], v[i][k]);
                        if (v[i][k] > 0)
                            cmin_pos[k] = fmin(cmin_pos[k], v[i][k]);
                        seen[k] = true;
                    }
                }
                fputc('\n', f);
                tmax = fmax(tmax, v[i][0]);
            }
            free(tok);
            free(v);
            for (int k = 0; k < NC; k++)
                if (seen[k])
                    sb_printf(&has[k], "%s%d", has[k].len ? " " : "", blocks);
            blocks++;
        }
        csv_free(&c);
    }
    bool bad = close_out(f, outdir, "timeline_data.csv", err) || rc;
    if (bad || !blocks) {
        for (int k = 0; k < NC; k++)
            sb_free(&has[k]);
        return bad ? -1 : 0;
    }
    char cl[64] = "each configuration's highest concurrency";
    if (conc)
        snprintf(cl, sizeof cl, "concurrency %d", conc);
    /* y axis tops (gnuplot warns on an all-zero autoscaled range) */
    double top[NC];
    for (int k = 0; k < NC; k++)
        top[k] = cmax[k] > 0 ? cmax[k] * 1.08 : 1;
    snprintf(ch->vars, sizeof ch->vars,
             "n=%d; tunit=%d; tmax=%.6g; ylive=%.6g; yrun=%.6g; ywait=%.6g; ytok=%.6g; "
             "binsec=%d; hitover=%d; logtok=%d; l2='%s'; l3='%s'; l4='%s'; l5='%s'; l6='%s'; "
             "l7='%s'; l8='%s'; sub='%s'; warn='%s'",
             blocks, tmax > 7200 ? 60 : 1, tmax, top[1], top[2], top[3], fmax(top[6], top[7]),
             maxbin, hit_over,
             want_log(fmin(cmin_pos[6], cmin_pos[7]), fmax(cmax[6], cmax[7]), 1000), has[1].p,
             has[2].p, has[3].p, has[4].p, has[5].p, has[6].p, has[7].p, cl, warn);
    for (int k = 0; k < NC; k++)
        sb_free(&has[k]);
    snprintf(ch->data, sizeof ch->data, "timeline_data.csv");
    snprintf(ch->about, sizeof ch->about,
             "The run at %s over its own clock (simulated time for sim runs, real time for "
             "load runs), %s: live sessions and running calls, calls "
             "waiting for admission, KV cache in use (%% of blocks), prefix-cache hit rate "
             "(%% of the prompt tokens of that second served from cache; seconds without "
             "prompts have no point), and tokens/s of the whole deployment (total = input "
             "incl. cached + output, and output only; trailing %.0f s means, since a "
             "prefill makes single seconds spike).%s%s%s",
             cl, maxbin > 1 ? "means over bins of whole seconds" : "one value per second",
             TOKENS_WINDOW_S,
             *warn ? " **" : "", warn, *warn ? "**" : "");
    return 1;
}
