/* plot_cmd.c: `agentreplay plot RESULT... -o DIR`: charts (PNG, SVG) and
 * report.md from run and sweep folders (the work is plots/plot.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plots/plot.h"
#include "replay/cli/cli.h"
#include "traces/base/err.h"
#include "traces/base/mem.h"

static void plot_usage(FILE *f)
{
    fprintf(f,
            "usage: agentreplay plot RESULT... -o DIR [options]\n\n"
            "Charts (PNG and SVG, via gnuplot) and DIR/report.md from results.\n"
            "RESULT is a run folder (run.json) or a sweep folder (sweep.csv).\n\n"
            "  -o, --out DIR          output folder (created)\n"
            "  --percentile P         x statistic of the Pareto chart: 50|75|90|95|99\n"
            "                         (default 90)\n"
            "  --allow-mixed-gpus     allow per-user distributions across different GPU\n"
            "                         counts (the charts then carry a warning)\n"
            "  --size WxH             image size in pixels (default 1200x750)\n"
            "  --format LIST          png,svg (default both)\n"
            "  --batch N              batch size of the decode-time breakdown\n"
            "                         (default: the one nearest 8)\n"
            "  --concurrency N        run shown in the distributions and timeline\n"
            "                         (default: the middle of those common to all)\n\n"
            "Without gnuplot (or with AGENTREPLAY_GNUPLOT naming a missing program) the\n"
            "CSV data, scripts, DIR/render.sh and report.md are still written; exit 0.\n"
            "Exit: 0 written, 1 failed, 2 bad input (including distributions refused\n"
            "across different GPU counts).\n");
}

/* argv joined, shell-quoted where needed, after "agentreplay". */
static char *join_command(int argc, char **argv)
{
    size_t cap = 32;
    for (int i = 0; i < argc; i++)
        cap += 4 * strlen(argv[i]) + 3;
    char *s = xmalloc(cap);
    size_t l = (size_t)snprintf(s, cap, "agentreplay");
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool plain = *a != 0;
        for (const char *c = a; *c; c++)
            if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                        "-_./=,:+@%",
                        *c))
                plain = false;
        s[l++] = ' ';
        if (plain) {
            l += (size_t)snprintf(s + l, cap - l, "%s", a);
            continue;
        }
        s[l++] = '\'';
        for (const char *c = a; *c; c++) {
            if (*c == '\'') {
                memcpy(s + l, "'\\''", 4);
                l += 4;
            } else {
                s[l++] = *c;
            }
        }
        s[l++] = '\'';
        s[l] = 0;
    }
    return s;
}

static int parse_int(const char *s, int lo, int hi, int *v)
{
    char *end;
    long x = strtol(s, &end, 10);
    if (!*s || *end || x < lo || x > hi)
        return -1;
    *v = (int)x;
    return 0;
}

int plot_cmd(int argc, char **argv)
{
    struct plot_opts o;
    plot_opts_init(&o);
    const char *outdir = NULL;
    const char **dirs = xcalloc((size_t)argc + 1, sizeof *dirs);
    int n = 0, rc = EXIT_BADINPUT;
    char *cmd = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool takes = !strcmp(a, "-o") || !strcmp(a, "--out") || !strcmp(a, "--percentile") ||
                     !strcmp(a, "--size") || !strcmp(a, "--format") || !strcmp(a, "--batch") ||
                     !strcmp(a, "--concurrency");
        if (takes && !v) {
            fprintf(stderr, "agentreplay plot: %s needs a value\n", a);
            goto out;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            plot_usage(stdout);
            rc = EXIT_OK;
            goto out;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--out")) {
            outdir = v;
        } else if (!strcmp(a, "--percentile")) {
            if (parse_int(v, 1, 100, &o.percentile) ||
                (o.percentile != 50 && o.percentile != 75 && o.percentile != 90 &&
                 o.percentile != 95 && o.percentile != 99)) {
                fprintf(stderr, "agentreplay plot: --percentile %s: use 50, 75, 90, 95 or 99\n",
                        v);
                goto out;
            }
        } else if (!strcmp(a, "--allow-mixed-gpus")) {
            o.allow_mixed_gpus = true;
        } else if (!strcmp(a, "--size")) {
            char *x;
            long w = strtol(v, &x, 10), h = 0;
            bool ok = (*x == 'x' || *x == 'X');
            if (ok) {
                char *end;
                h = strtol(x + 1, &end, 10);
                ok = x[1] && !*end;
            }
            if (!ok || w < 200 || h < 150 || w > 10000 || h > 10000) {
                fprintf(stderr, "agentreplay plot: --size %s: use WxH in pixels, e.g. 1200x750 "
                                "(200x150 to 10000x10000)\n", v);
                goto out;
            }
            o.width_px = (int)w;
            o.height_px = (int)h;
        } else if (!strcmp(a, "--format")) {
            o.png = o.svg = false;
            char buf[64];
            snprintf(buf, sizeof buf, "%s", v);
            char *save = NULL;
            for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                if (!strcmp(t, "png")) {
                    o.png = true;
                } else if (!strcmp(t, "svg")) {
                    o.svg = true;
                } else {
                    fprintf(stderr, "agentreplay plot: --format %s: use png, svg or png,svg\n",
                            v);
                    goto out;
                }
            }
            if (!o.png && !o.svg) {
                fprintf(stderr, "agentreplay plot: --format %s: use png, svg or png,svg\n", v);
                goto out;
            }
        } else if (!strcmp(a, "--batch")) {
            if (parse_int(v, 1, 1 << 20, &o.batch)) {
                fprintf(stderr, "agentreplay plot: --batch %s: a positive integer\n", v);
                goto out;
            }
        } else if (!strcmp(a, "--concurrency")) {
            if (parse_int(v, 1, 1 << 24, &o.concurrency)) {
                fprintf(stderr, "agentreplay plot: --concurrency %s: a positive integer\n", v);
                goto out;
            }
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "agentreplay plot: unknown option '%s'\n\n", a);
            plot_usage(stderr);
            goto out;
        } else {
            dirs[n++] = a;
            continue;
        }
        if (takes)
            i++;
    }
    if (!n || !outdir) {
        fprintf(stderr, "agentreplay plot: %s\n\n",
                !n ? "no RESULT folder given" : "no output folder given (-o DIR)");
        plot_usage(stderr);
        goto out;
    }
    cmd = join_command(argc, argv);
    o.command = cmd;
    char err[ERR_LEN] = "";
    int r = plot_results(dirs, n, outdir, &o, err);
    switch (r) {
    case PLOT_OK:
        printf("wrote %s/report.md\n", outdir);
        rc = EXIT_OK;
        break;
    case PLOT_UNRENDERED:
        fprintf(stderr, "agentreplay plot: %s\n", err);
        rc = EXIT_OK;
        break;
    case PLOT_WARNED:
        fprintf(stderr, "agentreplay plot: %s\n", err);
        printf("wrote %s/report.md\n", outdir);
        rc = EXIT_OK;
        break;
    case PLOT_EBADINPUT:
        fprintf(stderr, "agentreplay plot: %s\n", err);
        rc = EXIT_BADINPUT;
        break;
    default:
        fprintf(stderr, "agentreplay plot: %s\n", err);
        rc = EXIT_FAIL;
        break;
    }
out:
    free(cmd);
    free(dirs);
    return rc;
}
