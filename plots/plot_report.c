/* plot_report.c: report.md: the command, the key table, the confounded
 * pair and every chart that exists (plot_data.h). */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plots/plot_data.h"
#include "traces/base/err.h"
#include "traces/base/mem.h"
#include "traces/base/csv.h"

static void md_num(struct sbuf *b, double v, const char *fmt)
{
    if (isfinite(v))
        sb_printf(b, fmt, v);
    else
        sb_printf(b, "n/a");
}

static void key_table(struct sbuf *b, const struct set *s, int pi)
{
    int p = pct_list[pi];
    sb_printf(b, "| Configuration | GPUs | Layout | Backend | Concurrency | "
                 "P90 interactivity (tok/s/user) |");
    if (p != 90)
        sb_printf(b, " P%d interactivity (tok/s/user) |", p);
    sb_printf(b, " P90 TTFT (ms) | P90 TPOT (ms) | Total tok/s/GPU | Output tok/s/GPU | "
                 "Prefix hit rate | Errors |\n|---|---:|---|---|---:|---:|");
    if (p != 90)
        sb_printf(b, "---:|");
    sb_printf(b, "---:|---:|---:|---:|---:|---:|\n");
    bool notes = false;
    for (int g = 0; g < s->ncfg; g++)
        for (int j = 0; j < s->npts; j++) {
            const struct point *q = &s->pts[j];
            if (q->cfg != g)
                continue;
            sb_printf(b, "| %s%s | %d | TP%d x %d | %s | %d | ", q->label, *q->note ? " *" : "",
                      q->gpus, q->tp, q->replicas, *q->backend ? q->backend : "n/a",
                      q->concurrency);
            notes |= *q->note != 0;
            md_num(b, q->inter[2], "%.1f");
            if (p != 90) {
                sb_printf(b, " | ");
                md_num(b, q->inter[pi], "%.1f");
            }
            sb_printf(b, " | ");
            md_num(b, q->ttft_p90_ms, "%.0f");
            sb_printf(b, " | ");
            md_num(b, q->tpot_p90_ms, "%.2f");
            sb_printf(b, " | ");
            md_num(b, q->total_tps_gpu, "%.0f");
            sb_printf(b, " | ");
            md_num(b, q->output_tps_gpu, "%.1f");
            sb_printf(b, " | ");
            md_num(b, q->prefix_hit * 100, "%.1f %%");
            sb_printf(b, " | ");
            md_num(b, q->errors, "%.0f");
            sb_printf(b, " |\n");
        }
    if (notes) {
        int nn = 0, first = -1;
        for (int j = 0; j < s->npts; j++)
            if (*s->pts[j].note) {
                nn++;
                first = first < 0 ? j : first;
            }
        sb_printf(b, "\n");
        if (nn > 5) /* many: one line, with the first as an example */
            sb_printf(b, "\\* %d of %d runs are flagged (run.json: interrupted, partial, "
                         "agentx_valid, invalid_reasons), for example %s at concurrency %d: "
                         "%s.\n",
                      nn, s->npts, s->pts[first].label, s->pts[first].concurrency,
                      s->pts[first].note);
        else
            for (int j = 0; j < s->npts; j++)
                if (*s->pts[j].note)
                    sb_printf(b, "\\* %s at concurrency %d: %s.  \n", s->pts[j].label,
                              s->pts[j].concurrency, s->pts[j].note);
    }
}

static void confounded_table(struct sbuf *b, const char *path)
{
    struct csv c;
    char err[ERR_LEN];
    if (csv_read(path, &c, err)) {
        sb_printf(b, "(confounded.csv could not be read: %s)\n", err);
        return;
    }
    sb_printf(b, "| Configuration | GPUs | Layout | Backend | Concurrency | P90 interactivity "
                 "(tok/s/user) | P90 TTFT (ms) | Total tok/s/GPU |\n"
                 "|---|---:|---|---|---:|---:|---:|---:|\n");
    for (int r = 0; r < c.nrows; r++) {
        char lab[160];
        clean_text(lab, sizeof lab, csv_str_at(&c, r, "label"));
        char be[64];
        clean_text(be, sizeof be, csv_str_at(&c, r, "backend"));
        double v[7];
        static const char *cols[7] = {"gpus", "tp", "replicas", "concurrency",
                                      "interactivity_p90", "ttft_p90_ms", "total_tok_s_per_gpu"};
        for (int k = 0; k < 7; k++)
            if (csv_num_at(&c, r, cols[k], false, &v[k], err))
                v[k] = NAN;
        sb_printf(b, "| %s | ", lab);
        md_num(b, v[0], "%.0f");
        sb_printf(b, " | TP");
        md_num(b, v[1], "%.0f");
        sb_printf(b, " x ");
        md_num(b, v[2], "%.0f");
        sb_printf(b, " | %s | ", be);
        md_num(b, v[3], "%.0f");
        sb_printf(b, " | ");
        md_num(b, v[4], "%.1f");
        sb_printf(b, " | ");
        md_num(b, v[5], "%.0f");
        sb_printf(b, " | ");
        md_num(b, v[6], "%.0f");
        sb_printf(b, " |\n");
    }
    csv_free(&c);
}

int plot_write_report(const struct set *s, const struct chart *charts, int nch,
                        const char *outdir, const struct plot_opts *o, int pi,
                        const char *unrendered, char *err)
{
    struct sbuf b = {0};
    char path[PATH_MAX + 64];
    sb_printf(&b, "# agentreplay report\n\n");
    if (o->command)
        sb_printf(&b, "Made by:\n\n```\n%s\n```\n\n", o->command);
    sb_printf(&b, "Inputs: %s.\n\n", s->inputs);
    /* what the results were measured on */
    char models[256] = "";
    for (int j = 0; j < s->npts; j++) {
        char one[100];
        snprintf(one, sizeof one, "%s on %s", *s->pts[j].model ? s->pts[j].model : "?",
                 *s->pts[j].gpu_kind ? s->pts[j].gpu_kind : "?");
        if (strcmp(one, "? on ?") && !strstr(models, one)) {
            size_t l = strlen(models);
            snprintf(models + l, sizeof models - l, "%s%s", l ? ", " : "", one);
        }
    }
    if (*models)
        sb_printf(&b, "Model and GPU: %s.\n\n", models);
    int gmin = INT32_MAX, gmax = 0;
    for (int g = 0; g < s->ncfg; g++) {
        gmin = s->cfgs[g].gpus < gmin ? s->cfgs[g].gpus : gmin;
        gmax = s->cfgs[g].gpus > gmax ? s->cfgs[g].gpus : gmax;
    }
    if (gmin == gmax)
        sb_printf(&b, "Every configuration uses the same %d GPUs.\n\n", gmin);
    else
        sb_printf(&b, "**The configurations use different GPU counts (%d to %d GPUs).** "
                      "Throughput is per GPU; per-user figures are comparable only at equal "
                      "GPU count.\n\n",
                  gmin, gmax);
    if (unrendered)
        sb_printf(&b, "**Charts not rendered: %s.** Their data (CSV) and gnuplot scripts "
                      "are in this folder; run `sh render.sh` here where gnuplot is "
                      "installed.\n\n",
                  unrendered);

    sb_printf(&b, "## Key figures\n\n");
    key_table(&b, s, pi);
    sb_printf(&b, "\nInteractivity at a percentile is 1 / that percentile of per-request TPOT "
                  "(tok/s per user). Total tok/s/GPU = (input tokens, cached included, + "
                  "output tokens) / measured duration / GPUs of the whole deployment; output "
                  "tok/s/GPU counts output tokens only.\n\n");

    for (int i = 0; i < nch; i++) {
        const struct chart *ch = &charts[i];
        sb_printf(&b, "## %s\n\n%s\n\n", ch->title, ch->about);
        snprintf(path, sizeof path, "%s/%s.png", outdir, ch->name);
        bool png = ch->rendered[0] && file_exists(path);
        snprintf(path, sizeof path, "%s/%s.svg", outdir, ch->name);
        bool svg = ch->rendered[1] && file_exists(path);
        if (png)
            sb_printf(&b, "![%s](%s.png)\n\n", ch->title, ch->name);
        else if (svg)
            sb_printf(&b, "![%s](%s.svg)\n\n", ch->title, ch->name);
        sb_printf(&b, "Files:");
        if (png && svg)
            sb_printf(&b, " [SVG](%s.svg),", ch->name);
        snprintf(path, sizeof path, "%s/%s", outdir, ch->data);
        if (file_exists(path))
            sb_printf(&b, " data [%s](%s),", ch->data, ch->data);
        snprintf(path, sizeof path, "%s/%s", outdir, ch->script);
        if (file_exists(path))
            sb_printf(&b, " script [%s](%s)", ch->script, ch->script);
        sb_printf(&b, ".\n\n");
    }
    if (*s->confounded) {
        sb_printf(&b, "## The published-style comparison (confounded)\n\n"
                      "**These rows change the GPU count together with the decode path**, as "
                      "the published comparison did, so their per-user differences do not "
                      "isolate the decode path. Shown for reference only (from %s).\n\n",
                  s->confounded);
        confounded_table(&b, s->confounded);
        sb_printf(&b, "\n");
    }
    snprintf(path, sizeof path, "%s/render.sh", outdir);
    if (file_exists(path))
        sb_printf(&b, "To render the charts again: `sh render.sh` in this folder "
                      "([render.sh](render.sh)).\n");

    FILE *f = open_out(outdir, "report.md", err);
    if (!f) {
        sb_free(&b);
        return -1;
    }
    fwrite(b.p, 1, b.len, f);
    sb_free(&b);
    return close_out(f, outdir, "report.md", err);
}
