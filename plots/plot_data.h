/* plot_data.h: what the plot files share (internal to plots/): the
 * results read into points and configurations, the charts to render, the
 * text and file helpers, and each file's entry points. */
#ifndef PLOT_DATA_H
#define PLOT_DATA_H

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>

#include "plots/plot.h"

#define NPCT 5
extern const int pct_list[NPCT]; /* 50, 75, 90, 95, 99 */

/* ---- text and files (plot_data.c) ---- */

/* A growable string. */
struct sbuf {
    char *p;
    size_t len, cap;
};
void sb_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sb_free(struct sbuf *b);
/* Copies src into dst (size n), truncating. */
void scopy(char *dst, size_t n, const char *src);
bool file_exists(const char *path);
bool dir_exists(const char *path);
/* Copies s into dst (size n), replacing characters that CSV, gnuplot
 * strings, shell double quotes or Markdown tables would misread. */
void clean_text(char *dst, size_t n, const char *s);
/* A CSV number: "%.6g", or an empty field for NaN (gnuplot: missing). */
void plot_csv_num(FILE *f, double v);
/* OUTDIR/NAME for writing, or NULL with err; close_out checks the writes. */
FILE *open_out(const char *outdir, const char *name, char *err);
int close_out(FILE *f, const char *outdir, const char *name, char *err);

/* ---- results (plot_data.c) ---- */

/* One measured point: a run folder, or one row of a sweep.csv. */
struct point {
    int cfg;              /* index into set.cfgs */
    char label[160];      /* configuration label as recorded */
    char backend[64];
    char model[64];
    char gpu_kind[32];
    int gpus, tp, replicas;
    int concurrency;      /* live session trees */
    double inter[NPCT];   /* interactivity at P50..P99, tok/s/user */
    double ttft_p90_ms;
    double tpot_p90_ms;
    double total_tps_gpu;  /* (input incl. cached + output) tok/s/GPU */
    double output_tps_gpu; /* output tok/s/GPU */
    double prefix_hit;     /* achieved prefix-cache hit rate, 0..1 */
    double errors;         /* errored calls */
    char note[160];        /* interrupted / partial / invalid, or "" */
    char dir[PATH_MAX];    /* run folder, or "" when absent */
};

/* A configuration: the points that form one line of the Pareto chart. */
struct config {
    char label[160];
    char backend[64];
    int gpus, tp, replicas;
    char name[256]; /* what charts show: label with GPU count and layout */
    int run;        /* point chosen for distributions/timeline, or -1 */
};

struct set {
    struct point *pts;
    int npts, ptscap;
    struct config *cfgs;
    int ncfg;
    char breakdown[PATH_MAX]; /* breakdown.csv found in an input, or "" */
    char fidelity[PATH_MAX];
    char confounded[PATH_MAX];
    char inputs[2048];        /* description of the inputs, for the report */
};

/* Reads a run or sweep folder into s (its points and the extra tables
 * beside it). 0, or -1 with err. */
int plot_load_input(struct set *s, const char *dir, char *err);
/* Groups points into configurations, in order of first appearance. */
void plot_group_configs(struct set *s);
/* Chooses each configuration's run for the per-user charts; returns the
 * concurrency chosen (0: each configuration's highest). */
int plot_choose_runs(struct set *s, int want);
void plot_set_free(struct set *s);

/* ---- charts ---- */

/* A chart to render: its script and the gnuplot variables it needs. */
struct chart {
    const char *name;   /* base name of the images: NAME.png, NAME.svg */
    const char *script; /* plots/NAME.gp */
    char vars[2048];    /* gnuplot -e assignments (no quotes of type ") */
    const char *title;  /* heading in report.md */
    char about[2048];   /* what the chart shows, for report.md */
    char data[64];      /* its CSV */
    bool rendered[2];   /* png, svg */
};

/* Each writes its data file into outdir and fills ch; returns 1 when the
 * chart has data, 0 when not, -1 with err. */
/* plot_latency.c: throughput against interactivity, per-request CDFs */
int plot_write_pareto(const struct set *s, int pi, const char *outdir, struct chart *ch,
                      char *err);
int plot_write_cdf(const struct set *s, int conc, const char *warn, int pct, const char *outdir,
                   struct chart *ch, char *err);
/* plot_timeline.c */
int plot_write_timeline(const struct set *s, int conc, const char *warn, const char *outdir,
                        struct chart *ch, char *err);
/* plot_engine.c: the decode-step breakdown and the fidelity table */
int plot_write_breakdown(const struct set *s, int want_batch, const char *outdir,
                         struct chart *ch, char *err);
int plot_write_fidelity(const struct set *s, const char *outdir, struct chart *ch, char *err);
/* Whether a log axis reads better: positive values spanning decades. */
bool want_log(double lo, double hi, double ratio);

/* ---- rendering (plot_render.c) ---- */

/* Copies each chart's gnuplot script (and common.gp) into outdir and
 * writes render.sh. 0, or -1 with err. */
int plot_write_scripts(const struct chart *charts, int nch, const char *outdir,
                       const struct plot_opts *o, char *err);
/* Runs gnuplot on every chart; marks what rendered. Returns PLOT_OK,
 * PLOT_UNRENDERED (no gnuplot: why in why), PLOT_WARNED or PLOT_EFAIL
 * (err). */
int plot_render(struct chart *charts, int nch, const char *outdir, const struct plot_opts *o,
                char *why, char *err);
extern const char *const plot_fmt_name[2]; /* "png", "svg" */

/* ---- report (plot_report.c) ---- */

/* OUTDIR/report.md: the command, the key table and every chart that
 * exists. unrendered: why images are missing, or NULL. */
int plot_write_report(const struct set *s, const struct chart *charts, int nch,
                      const char *outdir, const struct plot_opts *o, int pi,
                      const char *unrendered, char *err);

#endif
