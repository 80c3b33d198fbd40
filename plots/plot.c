/* plot.c: the plot and report driver (see plot.h).
 *
 * Flow: load every input (run folders and sweep folders) into points,
 * group points into configurations (label, GPU count, layout, backend),
 * choose one run per configuration for the per-user charts and refuse
 * mixed GPU counts there, then write each chart's data (CSV), copy its
 * gnuplot script, write render.sh, run gnuplot once per chart and format,
 * and write report.md linking only to files that exist.
 *
 * Output file names never collide with result files (an output folder may
 * be an input folder): *_data.csv, *.gp, render.sh, report.md.
 */
#include "plots/plot.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "plots/plot_data.h"
#include "traces/base/err.h"
#include "traces/base/file.h"

/* ---- the driver ------------------------------------------------------ */

void plot_opts_init(struct plot_opts *o)
{
    memset(o, 0, sizeof *o);
    o->percentile = 90;
    o->width_px = 1200;
    o->height_px = 750;
    o->png = o->svg = true;
}

static int pct_index(int p)
{
    for (int i = 0; i < NPCT; i++)
        if (pct_list[i] == p)
            return i;
    return -1;
}

/* The mixed-GPU warning for per-user charts, or "" (plain text without
 * quotes: it goes into a gnuplot string). */
static int mixed_gpus(const struct set *s, bool allow, char *warn, size_t n, char *err)
{
    warn[0] = 0;
    int first = -1;
    bool mixed = false;
    for (int g = 0; g < s->ncfg; g++) {
        if (s->cfgs[g].run < 0)
            continue;
        if (first < 0)
            first = g;
        else
            mixed |= s->cfgs[g].gpus != s->cfgs[first].gpus;
    }
    if (!mixed)
        return 0;
    struct sbuf b = {0}, counts = {0};
    for (int g = 0; g < s->ncfg; g++)
        if (s->cfgs[g].run >= 0) {
            sb_printf(&b, "%s%s: %d GPUs", b.len ? "; " : "", s->cfgs[g].label, s->cfgs[g].gpus);
            bool seen = false;
            for (int h = 0; h < g; h++)
                seen |= s->cfgs[h].run >= 0 && s->cfgs[h].gpus == s->cfgs[g].gpus;
            if (!seen)
                sb_printf(&counts, "%s%d", counts.len ? " vs " : "", s->cfgs[g].gpus);
        }
    int rc = 0;
    if (!allow)
        rc = err_set(err, "distributions refused: the configurations use different GPU counts "
                          "(%s); per-user views are comparable only at equal GPU count. Plot "
                          "them separately, or pass --allow-mixed-gpus (the chart then "
                          "carries a warning)",
                     b.p);
    else
        snprintf(warn, n, "WARNING: these configurations use different GPU counts (%s GPUs): "
                          "their per-user views are not comparable", counts.p);
    char tmp[512];
    clean_text(tmp, sizeof tmp, warn);
    snprintf(warn, n, "%s", tmp);
    sb_free(&b);
    sb_free(&counts);
    return rc;
}

int plot_results(const char **dirs, int n, const char *outdir, const struct plot_opts *o,
                 char *err)
{
    int pi = pct_index(o->percentile);
    if (pi < 0)
        return err_set(err, "percentile %d: use 50, 75, 90, 95 or 99", o->percentile),
               PLOT_EBADINPUT;
    if (o->width_px < 200 || o->height_px < 150 || o->width_px > 10000 || o->height_px > 10000)
        return err_set(err, "size %dx%d: use 200x150 to 10000x10000 pixels", o->width_px,
                       o->height_px),
               PLOT_EBADINPUT;
    if (!o->png && !o->svg)
        return err_set(err, "no image format chosen (png, svg)"), PLOT_EBADINPUT;
    if (n < 1)
        return err_set(err, "no result folders given"), PLOT_EBADINPUT;

    struct set s = {0};
    int rc = PLOT_OK;
    for (int i = 0; i < n; i++)
        if (plot_load_input(&s, dirs[i], err)) {
            plot_set_free(&s);
            return PLOT_EBADINPUT;
        }
    if (!s.npts) {
        plot_set_free(&s);
        return err_set(err, "%s: no results in it", dirs[0]), PLOT_EBADINPUT;
    }
    plot_group_configs(&s);
    int conc = plot_choose_runs(&s, o->concurrency);
    if (o->concurrency) {
        bool any = false;
        for (int g = 0; g < s.ncfg; g++)
            any |= s.cfgs[g].run >= 0;
        if (!any) {
            plot_set_free(&s);
            return err_set(err, "concurrency %d: no run folder at that concurrency",
                           o->concurrency),
                   PLOT_EBADINPUT;
        }
    }
    char warn[512];
    if (mixed_gpus(&s, o->allow_mixed_gpus, warn, sizeof warn, err)) {
        plot_set_free(&s);
        return PLOT_EBADINPUT;
    }
    if (file_mkdir_p(outdir, err)) {
        plot_set_free(&s);
        return PLOT_EFAIL;
    }

    /* chart data */
    struct chart charts[5];
    memset(charts, 0, sizeof charts);
    int nch = 0;
    struct chart *ch;
    int k;
#define NEXT(nm, ttl)                                                                        \
    (ch = &charts[nch], memset(ch, 0, sizeof *ch), ch->name = nm, ch->script = nm ".gp",     \
     ch->title = ttl)
    NEXT("pareto", "Throughput per GPU against interactivity");
    if ((k = plot_write_pareto(&s, pi, outdir, ch, err)) < 0)
        goto fail_io;
    nch += k;
    NEXT("distributions", "Per-request distributions: TTFT, TPOT, interactivity");
    if ((k = plot_write_cdf(&s, conc, warn, pct_list[pi], outdir, ch, err)) < 0)
        goto fail_input;
    nch += k;
    NEXT("timeline", "Timeline of the run");
    if ((k = plot_write_timeline(&s, conc, warn, outdir, ch, err)) < 0)
        goto fail_input;
    nch += k;
    if (*s.breakdown) {
        NEXT("breakdown", "Where a decode step's time goes");
        if ((k = plot_write_breakdown(&s, o->batch, outdir, ch, err)) < 0)
            goto fail_input;
        nch += k;
    } else if (o->batch) {
        err_set(err, "--batch %d: no breakdown.csv in the inputs", o->batch);
        goto fail_input;
    }
    if (*s.fidelity) {
        NEXT("fidelity", "Fidelity: predictions beside the calibration point");
        if ((k = plot_write_fidelity(&s, outdir, ch, err)) < 0)
            goto fail_input;
        nch += k;
    }
#undef NEXT

    if (plot_write_scripts(charts, nch, outdir, o, err))
        goto fail_io;
    char why[ERR_LEN] = "";
    rc = plot_render(charts, nch, outdir, o, why, err);
    const char *unrendered = rc == PLOT_UNRENDERED ? why : NULL;
    {
        char rerr[ERR_LEN];
        if (plot_write_report(&s, charts, nch, outdir, o, pi, unrendered, rerr)) {
            snprintf(err, ERR_LEN, "%s", rerr);
            rc = PLOT_EFAIL;
        } else if (rc == PLOT_UNRENDERED) {
            err_set(err, "%s; wrote the data, scripts and report.md without images (render "
                         "later with sh %s/render.sh)",
                    why, outdir);
        }
    }
    plot_set_free(&s);
    return rc;
fail_io:
    plot_set_free(&s);
    return PLOT_EFAIL;
fail_input:
    plot_set_free(&s);
    return PLOT_EBADINPUT;
}
