/* plot.h: charts and a report from result folders.
 *
 * plot_results() reads run folders (run.json, requests.jsonl, timeline.csv)
 * and sweep folders (sweep.csv plus one run folder per point; optionally
 * breakdown.csv, fidelity.csv, confounded.csv at the top), writes the data
 * of each chart as CSV and the gnuplot scripts (plots/NAME.gp) into the output
 * folder with a render.sh that renders them, runs gnuplot (PNG with
 * pngcairo, SVG) and writes report.md: the command, the key table and every
 * chart that exists. The result files are documented in replay/SCHEMA.md.
 *
 * Charts: pareto (total tok/s/GPU against Pxx interactivity, one line per
 * configuration, GPU count and layout in each label), distributions (CDFs
 * of TTFT, TPOT and per-request interactivity; refused across different
 * GPU counts unless allow_mixed_gpus), timeline (live sessions, running and
 * waiting calls, KV use, prefix hit rate, tokens/s over time), breakdown
 * (per-layer kernel time of both decode paths at one batch size) and
 * fidelity (engine predictions beside the published calibration point).
 *
 * gnuplot is found through AGENTREPLAY_GNUPLOT (a path) or on PATH. Without
 * it everything except the images is still written and plot_results
 * returns PLOT_UNRENDERED with the reason in err.
 */
#ifndef PLOT_H
#define PLOT_H

#include <stdbool.h>

struct plot_opts {
    int percentile;        /* 50, 75, 90, 95 or 99: the Pareto x statistic */
    bool allow_mixed_gpus; /* distributions across different GPU counts */
    int width_px;          /* image size, pixels */
    int height_px;
    bool png, svg;         /* formats to render */
    int batch;             /* breakdown batch size; 0: the one nearest 8 */
    int concurrency;       /* run shown in distributions and timeline;
                              0: the middle of the concurrencies common
                              to all configurations */
    const char *command;   /* the exact command line, shown at the top of
                              report.md; NULL: none shown. Borrowed. */
};

/* Return values of plot_results (non-negative: report.md was written). */
enum {
    PLOT_OK = 0,
    PLOT_UNRENDERED = 1, /* no gnuplot: data, scripts, render.sh and
                            report.md written, images not; err says why */
    PLOT_WARNED = 2,     /* rendered, but gnuplot printed warnings (first in
                            err; all in OUTDIR/gnuplot.log) */
    PLOT_EFAIL = -1,     /* I/O error or gnuplot failed */
    PLOT_EBADINPUT = -2, /* unreadable or inconsistent results, bad options,
                            or distributions refused across GPU counts */
};

/* Defaults: P90, 1200x750, PNG and SVG, automatic batch and concurrency. */
void plot_opts_init(struct plot_opts *o);

/* Plots the n result folders `dirs` (run or sweep folders) into outdir
 * (created if needed). Returns a PLOT_* value; err (ERR_LEN bytes) holds
 * the message for every non-zero return. */
int plot_results(const char **dirs, int n, const char *outdir,
                 const struct plot_opts *o, char *err);

#endif
