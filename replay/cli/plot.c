/* plot.c: `agentreplay plot RESULT... -o DIR`: charts (PNG, SVG) and
 * report.md from run and sweep folders (the work is plots/plot.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "plots/plot.h"
#include "replay/cli/cli.h"
#include "traces/base/err.h"
#include "traces/base/mem.h"
#include "traces/base/parse.h"

struct plot_cmd_opts {
    struct plot_opts o;
    const char *out;
};

static void plot_init(void *opts) { plot_opts_init(&((struct plot_cmd_opts *)opts)->o); }

static int parse_size(const char *name, const char *v, void *group, char *err)
{
    struct plot_cmd_opts *p = group;
    int64_t w, h;
    if (parse_i64_pair(v, &w, &h, NULL) || w < 200 || h < 150 || w > 10000 || h > 10000)
        return err_set(err, "%s '%s': use WxH in pixels, e.g. 1200x750 (200x150 to 10000x10000)",
                       name, v);
    p->o.width_px = (int)w;
    p->o.height_px = (int)h;
    return 0;
}

static int parse_formats(const char *name, const char *v, void *group, char *err)
{
    struct plot_cmd_opts *p = group;
    bool png = false, svg = false;
    char buf[64];
    if (strlen(v) >= sizeof buf)
        return err_set(err, "%s '%s': use png, svg or png,svg", name, v);
    snprintf(buf, sizeof buf, "%s", v);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (!strcmp(t, "png"))
            png = true;
        else if (!strcmp(t, "svg"))
            svg = true;
        else
            return err_set(err, "%s '%s': use png, svg or png,svg", name, v);
    }
    if (!png && !svg)
        return err_set(err, "%s '%s': use png, svg or png,svg", name, v);
    p->o.png = png;
    p->o.svg = svg;
    return 0;
}

static const struct flag_choice percentile_names[] = {
    {"50", 50, false}, {"75", 75, false}, {"90", 90, false},
    {"95", 95, false}, {"99", 99, false}, {NULL, 0, false}};

#define O struct plot_cmd_opts
static const struct flag plot_flags[] = {
    {"--out", 'o', FLAG_STR, FLAG_AT(O, out), "DIR", "output folder (created; required)", .def = NULL},
    {"--percentile", 0, FLAG_CHOICE, FLAG_AT(O, o.percentile), NULL,
     "x statistic of the Pareto chart", .choices = percentile_names},
    {"--allow-mixed-gpus", 0, FLAG_BOOL, FLAG_AT(O, o.allow_mixed_gpus), NULL,
     "allow per-user distributions across different GPU\ncounts (the charts then carry a warning)",
     .value = true},
    {"--size", 0, FLAG_CUSTOM, FLAG_AT(O, o.width_px), "WxH", "image size in pixels",
     .def = "1200x750", .parse = parse_size, .example = "640x400"},
    {"--format", 0, FLAG_CUSTOM, FLAG_AT(O, o.png), "LIST", "png, svg or png,svg",
     .def = "png,svg", .parse = parse_formats, .example = "png"},
    {"--batch", 0, FLAG_INT, FLAG_AT(O, o.batch), "N",
     "batch size of the decode-time breakdown", .def = "the one nearest 8", .min = 1,
     .max = 1 << 20},
    {"--concurrency", 0, FLAG_INT, FLAG_AT(O, o.concurrency), "N",
     "run shown in the distributions and timeline",
     .def = "the middle of those common to all", .min = 1, .max = 1 << 24},
    FLAG_END,
};

const struct flag_spec plot_spec = {
    .usage = "agentreplay plot RESULT... -o DIR [flags]",
    .about = "Charts (PNG and SVG, via gnuplot) and DIR/report.md from results.\n"
             "RESULT is a run folder (run.json) or a sweep folder (sweep.csv).",
    .operands = "RESULT...",
    .min_operands = 1,
    .max_operands = -1,
    .size = sizeof(O),
    .init = plot_init,
    .groups = {{"plot", plot_flags, 0}},
    .notes = "Without gnuplot (or with AGENTREPLAY_GNUPLOT naming a missing program) the\n"
             "CSV data, scripts, DIR/render.sh and report.md are still written; exit 0.\n"
             "Exit: 0 written, 1 failed, 2 bad input (including distributions refused\n"
             "across different GPU counts).",
};
#undef O

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

/* Plots and reports the exit code. */
static int render(const char **dirs, int n, const struct plot_cmd_opts *po, int argc, char **argv)
{
    struct plot_opts o = po->o;
    char *cmd = join_command(argc, argv);
    o.command = cmd;
    char err[ERR_LEN] = "";
    int rc;
    switch (plot_results(dirs, n, po->out, &o, err)) {
    case PLOT_OK:
        printf("wrote %s/report.md\n", po->out);
        rc = EXIT_OK;
        break;
    case PLOT_UNRENDERED:
        fprintf(stderr, "agentreplay plot: %s\n", err);
        rc = EXIT_OK;
        break;
    case PLOT_WARNED:
        fprintf(stderr, "agentreplay plot: %s\n", err);
        printf("wrote %s/report.md\n", po->out);
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
    free(cmd);
    return rc;
}

/* A folder with no results yet (results/demo on a fresh clone holds only
 * the README's chart): says what makes them, instead of the plotter's
 * "neither a run folder nor a sweep folder". 0, or EXIT_BADINPUT. */
static int check_dir(const char *dir)
{
    char a[4200], b[4200];
    struct stat st;
    snprintf(a, sizeof a, "%s/run.json", dir);
    snprintf(b, sizeof b, "%s/sweep.csv", dir);
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || access(a, F_OK) == 0 ||
        access(b, F_OK) == 0)
        return 0; /* the plotter's own message */
    size_t k = strlen(dir);
    while (k > 1 && dir[k - 1] == '/')
        k--;
    bool demo = k >= 4 && !strncmp(dir + k - 4, "demo", 4);
    fprintf(stderr, "agentreplay plot: %s: no results yet (no run.json or sweep.csv)%s\n", dir,
            demo ? "; the main job writes them: run `make run` (or ./agentreplay) first"
                 : "; a run (agentreplay sim -o DIR) or a sweep (agentreplay sweep -o DIR) "
                   "writes them");
    return EXIT_BADINPUT;
}

int plot_cmd(int argc, char **argv)
{
    struct plot_cmd_opts po;
    const char **dirs = xcalloc((size_t)argc + 1, sizeof *dirs);
    int n = 0;
    int rc = cli_parse("plot", &plot_spec, &po, argc, argv, dirs, &n);
    if (rc < 0 && !po.out)
        rc = cli_bad("plot", "no output folder given (-o DIR)");
    for (int i = 0; rc < 0 && i < n; i++)
        if (check_dir(dirs[i]))
            rc = EXIT_BADINPUT;
    if (rc < 0)
        rc = render(dirs, n, &po, argc, argv);
    free(dirs);
    return rc;
}
