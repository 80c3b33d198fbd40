/* compare.c: `agentreplay compare A B`: two run folders side by side with
 * ratios B/A, or two sweep folders as total throughput per GPU at equal P90
 * interactivity; refused (exit 3) across different GPU counts unless
 * --per-gpu. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "replay/cli/cli.h"
#include "replay/results.h"
#include "traces/base/csv.h"
#include "traces/base/err.h"
#include "traces/base/mem.h"

struct compare_opts {
    bool per_gpu;
};

static const struct flag compare_flags[] = {
    {"--per-gpu", 0, FLAG_BOOL, FLAG_AT(struct compare_opts, per_gpu), NULL,
     "compare only throughput per GPU against\ninteractivity (different GPU counts), and say so",
     .value = true},
    FLAG_END,
};

const struct flag_spec compare_spec = {
    .usage = "agentreplay compare A B [--per-gpu]",
    .about = "A and B: run folders (or run.json files). Side by side with ratios B/A.\n"
             "Two sweep folders: total throughput per GPU at equal P90 interactivity.\n"
             "Refuses (exit 3) when the GPU counts differ: per-user metrics are not\n"
             "comparable across deployment sizes.",
    .operands = "A B",
    .min_operands = 2,
    .max_operands = 2,
    .size = sizeof(struct compare_opts),
    .groups = {{NULL, compare_flags, 0}},
};

/* Sweep folders: per-GPU throughput against P90 interactivity curves. */
struct sweep_pt {
    char label[128];
    int gpus, conc;
    double inter90, total;
};

/* DIR/sweep.csv's points, read by column name. Returns their count, or -1
 * with err. */
static int read_sweep(const char *dir, struct sweep_pt **out, char *err)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/sweep.csv", dir);
    struct csv c;
    if (csv_read(path, &c, err))
        return -1;
    struct sweep_pt *v = xcalloc((size_t)c.nrows + 1, sizeof *v);
    for (int r = 0; r < c.nrows; r++) {
        double gpus, conc;
        if (csv_num_at(&c, r, "gpus", true, &gpus, err) ||
            csv_num_at(&c, r, "concurrency", true, &conc, err) ||
            csv_num_at(&c, r, "interactivity_p90", true, &v[r].inter90, err) ||
            csv_num_at(&c, r, "total_tok_s_per_gpu", true, &v[r].total, err)) {
            free(v);
            csv_free(&c);
            return -1;
        }
        snprintf(v[r].label, sizeof v[r].label, "%s", csv_str_at(&c, r, "label"));
        v[r].gpus = isfinite(gpus) ? (int)gpus : 0;
        v[r].conc = isfinite(conc) ? (int)conc : 0;
    }
    int n = c.nrows;
    csv_free(&c);
    *out = v;
    return n;
}

/* Throughput per GPU of curve (label lb in v, its points in order of
 * concurrency) at interactivity x, by linear interpolation on the segment
 * that spans x (the best one if several do); NAN outside the curve. */
static double curve_at(const struct sweep_pt *v, int n, const char *lb, double x)
{
    int idx[256], m = 0;
    for (int i = 0; i < n && m < 256; i++)
        if (!strcmp(v[i].label, lb) && isfinite(v[i].inter90) && isfinite(v[i].total))
            idx[m++] = i;
    for (int i = 1; i < m; i++) /* insertion sort by concurrency */
        for (int j = i; j > 0 && v[idx[j - 1]].conc > v[idx[j]].conc; j--) {
            int t = idx[j];
            idx[j] = idx[j - 1];
            idx[j - 1] = t;
        }
    double best = NAN;
    for (int k = 0; k < m; k++) {
        const struct sweep_pt *p = &v[idx[k]];
        double y = NAN;
        if (p->inter90 == x)
            y = p->total;
        else if (k + 1 < m) {
            const struct sweep_pt *q = &v[idx[k + 1]];
            double lo = fmin(p->inter90, q->inter90), hi = fmax(p->inter90, q->inter90);
            if (x >= lo && x <= hi && hi > lo)
                y = p->total + (q->total - p->total) * (x - p->inter90) / (q->inter90 - p->inter90);
        }
        if (isfinite(y) && (isnan(best) || y > best))
            best = y;
    }
    return best;
}

static int compare_sweeps(const char *a, const char *b, bool per_gpu)
{
    char err[ERR_LEN];
    struct sweep_pt *A = NULL, *B = NULL;
    int na = read_sweep(a, &A, err);
    if (na < 0)
        return cli_bad("compare", err);
    int nb = read_sweep(b, &B, err);
    if (nb < 0) {
        free(A);
        return cli_bad("compare", err);
    }
    bool same = true;
    for (int i = 0; i < na; i++)
        for (int j = 0; j < nb; j++)
            same &= A[i].gpus == B[j].gpus;
    if (!same && !per_gpu) {
        fprintf(stderr, "agentreplay compare: refused: the sweeps use different GPU counts (%d vs %d).\n"
                        "Compare at equal GPU count, or pass --per-gpu to compare throughput per GPU\n"
                        "against P90 interactivity.\n",
                na ? A[0].gpus : 0, nb ? B[0].gpus : 0);
        free(A);
        free(B);
        return EXIT_REFUSED;
    }
    if (!same)
        printf("!!! PER-GPU COMPARISON: the GPU counts differ. Only total throughput per GPU at\n"
               "!!! equal P90 interactivity is compared; nothing per-user is compared.\n\n");
    printf("total tok/s per GPU at A's P90 interactivity points (B interpolated on its curve):\n");
    printf("%-40s %-40s %5s %10s %12s %12s %7s\n", "A", "B", "A c", "P90 tok/s", "A tok/s/GPU",
           "B tok/s/GPU", "B/A");
    for (int i = 0; i < na; i++) {
        for (int j = 0; j < nb; j++) {
            if (j && !strcmp(B[j].label, B[j - 1].label))
                continue;
            double y = curve_at(B, nb, B[j].label, A[i].inter90);
            char yb[32] = "-", r[32] = "-";
            if (isfinite(y)) {
                snprintf(yb, sizeof yb, "%.0f", y);
                if (A[i].total > 0)
                    snprintf(r, sizeof r, "%.3f", y / A[i].total);
            }
            char la[160], lb[160];
            snprintf(la, sizeof la, "%s (%d GPUs)", A[i].label, A[i].gpus);
            snprintf(lb, sizeof lb, "%s (%d GPUs)", B[j].label, B[j].gpus);
            printf("%-40s %-40s %5d %10.1f %12.0f %12s %7s\n", la, lb, A[i].conc, A[i].inter90, A[i].total,
                   yb, r);
        }
    }
    free(A);
    free(B);
    return EXIT_OK;
}

static bool is_sweep(const char *dir)
{
    char p[1200];
    snprintf(p, sizeof p, "%s/sweep.csv", dir);
    return access(p, R_OK) == 0;
}

int replay_cmd_compare(int argc, char **argv)
{
    struct compare_opts o;
    const char *ops[2]; /* max_operands */
    int n_ops;
    int rc = cli_parse("compare", &compare_spec, &o, argc, argv, ops, &n_ops);
    if (rc >= 0)
        return rc;
    const char *a = ops[0], *b = ops[1];
    bool per_gpu = o.per_gpu;
    if (is_sweep(a) && is_sweep(b))
        return compare_sweeps(a, b, per_gpu);
    char err[ERR_LEN];
    json_t *A = results_read_run(a, err);
    if (!A)
        return cli_bad("compare", err);
    json_t *B = results_read_run(b, err);
    if (!B) {
        json_decref(A);
        return cli_bad("compare", err);
    }
    int ga = (int)results_num(A, "gpus"), gb = (int)results_num(B, "gpus");
    rc = EXIT_OK;
    if (ga != gb && !per_gpu) {
        fprintf(stderr,
                "agentreplay compare: refused: A runs on %d GPUs and B on %d.\n"
                "Per-user metrics (interactivity, TTFT) of deployments of different sizes are\n"
                "not comparable: the GPU count changes with whatever else differs, so the\n"
                "comparison cannot isolate it. Compare at equal GPU count (e.g. 2 x TP8 against\n"
                "1 x TP16 on the same 16 GPUs), or pass --per-gpu to compare throughput per GPU\n"
                "against interactivity.\n",
                ga, gb);
        json_decref(A);
        json_decref(B);
        return EXIT_REFUSED;
    }
    if (ga != gb)
        printf("!!! PER-GPU COMPARISON: the GPU counts differ (%d vs %d). Only throughput per GPU\n"
               "!!! against interactivity is compared; per-user latency differences below are\n"
               "!!! confounded with the deployment size and are not a fair comparison.\n\n",
               ga, gb);
    printf("A: %s  (%s)\nB: %s  (%s)\n\n", a, results_str(A, "label") ? results_str(A, "label") : "?", b,
           results_str(B, "label") ? results_str(B, "label") : "?");
    struct {
        const char *name, *path;
        bool per_user;
    } rows[] = {
        {"GPUs", "gpus", false},
        {"TP", "tp", false},
        {"replicas", "replicas", false},
        {"concurrency", "concurrency", false},
        {"P50 interactivity tok/s/user", "metrics.interactivity_tok_s.p50", true},
        {"P90 interactivity tok/s/user", "metrics.interactivity_tok_s.p90", true},
        {"P99 interactivity tok/s/user", "metrics.interactivity_tok_s.p99", true},
        {"P90 TTFT ms", "metrics.ttft_ms.p90", true},
        {"P90 TPOT ms", "metrics.tpot_ms.p90", true},
        {"P90 E2EL ms", "metrics.e2el_ms.p90", true},
        {"total tok/s per GPU", "metrics.throughput_tok_s_per_gpu.total", false},
        {"output tok/s per GPU", "metrics.throughput_tok_s_per_gpu.output", false},
        {"prefix hit rate", "metrics.prefix_hit_rate", false},
        {"completed", "metrics.requests.completed", false},
        {"errors", "metrics.requests.errors", false},
        {"fallback steps", "metrics.fallback_steps", false},
    };
    printf("%-32s %14s %14s %9s\n", "metric", "A", "B", "B/A");
    for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
        double x = results_num(A, rows[i].path), y = results_num(B, rows[i].path);
        char ratio[32] = "";
        if (isfinite(x) && isfinite(y) && x != 0)
            snprintf(ratio, sizeof ratio, "%.3f", y / x);
        printf("%-32s %14.3f %14.3f %9s%s\n", rows[i].name, x, y, ratio,
               rows[i].per_user && ga != gb ? "  (confounded: GPU counts differ)" : "");
    }
    /* Confounders other than the GPU count. */
    struct {
        const char *name, *path;
    } conf[] = {{"model", "model"},
                {"GPU kind", "gpu"},
                {"trace digest", "trace.digest"},
                {"spec acceptance", "spec.acceptance"},
                {"spec draft", "spec.draft"},
                {"kind (sim/load)", "kind"},
                {"backend", "backend"},
                {"layout TP", "tp"},
                {"seed", "seed"},
                {"duration_s", "duration_s"},
                {"concurrency", "concurrency"}};
    int nconf = 0;
    printf("\n");
    for (size_t i = 0; i < ARRAY_LEN(conf); i++) {
        const char *sa = results_str(A, conf[i].path), *sb = results_str(B, conf[i].path);
        double na = results_num(A, conf[i].path), nb = results_num(B, conf[i].path);
        bool differ;
        char va[96], vb[96];
        if (sa || sb) {
            differ = !sa || !sb || strcmp(sa, sb);
            snprintf(va, sizeof va, "%s", sa ? sa : "-");
            snprintf(vb, sizeof vb, "%s", sb ? sb : "-");
        } else {
            differ = !(na == nb || (isnan(na) && isnan(nb)));
            snprintf(va, sizeof va, "%g", na);
            snprintf(vb, sizeof vb, "%g", nb);
        }
        if (differ) {
            printf("differs: %-16s A=%s  B=%s\n", conf[i].name, va, vb);
            nconf++;
        }
    }
    if (!json_is_true(json_object_get(A, "agentx_valid")) || !json_is_true(json_object_get(B, "agentx_valid")))
        printf("note: %s not AgentX-valid (see invalid_reasons in run.json)\n",
               !json_is_true(json_object_get(A, "agentx_valid")) &&
                       !json_is_true(json_object_get(B, "agentx_valid"))
                   ? "A and B are"
                   : !json_is_true(json_object_get(A, "agentx_valid")) ? "A is" : "B is");
    if (nconf > 1)
        printf("warning: %d things differ; a difference in the metrics cannot be pinned on one\n", nconf);
    json_decref(A);
    json_decref(B);
    return rc;
}
