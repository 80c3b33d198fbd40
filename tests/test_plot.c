/* test_plot.c: charts and report from result folders (plots/plot.c).
 *
 * Writes small, realistic fixture results (a sweep of two configurations
 * on 16 GPUs at three concurrencies with their run folders, breakdown,
 * fidelity and confounded tables, and an 8-GPU run folder) into a fresh
 * folder under /tmp, then plots them: gnuplot must exit 0 with nothing on
 * stderr, PNGs carry the signature and the requested size, SVGs are
 * well-formed XML, mixed GPU counts are refused for the distributions
 * unless allowed, report.md links only to files that exist, and without
 * gnuplot the data, scripts, render.sh and report are still written.
 * The folder names a real `agentreplay sim` result to plot in
 * AGENTREPLAY_PLOT_REAL (optional; skipped when unset).
 */
#include <errno.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "plots/plot.h"
#include "tests/testhelp.h"
#include "traces/base/err.h"
#include "traces/base/mem.h"
#include "traces/base/rng.h"
#include "traces/base/file.h"

static char root[256];

static void must_mkdir(const char *p)
{
    if (mkdir(p, 0777) && errno != EEXIST) {
        fprintf(stderr, "mkdir %s: %s\n", p, strerror(errno));
        exit(1);
    }
}

static FILE *must_open(const char *dir, const char *name)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    if (!f) {
        fprintf(stderr, "open %s: %s\n", p, strerror(errno));
        exit(1);
    }
    return f;
}

/* One configuration of the fixtures. */
struct fx_cfg {
    const char *label, *backend;
    int gpus, tp, replicas;
    double base_tok_s; /* decode speed of one user alone */
};

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Percentile by linear interpolation between closest ranks. */
static double pq(const double *v, int k, double p)
{
    double x = (k - 1) * p;
    int lo = (int)x;
    return lo + 1 < k ? v[lo] + (v[lo + 1] - v[lo]) * (x - lo) : v[k - 1];
}

/* A run folder with run.json, requests.jsonl and timeline.csv; fills the
 * sweep row's figures. */
static void write_run(const char *dir, const struct fx_cfg *c, int conc, uint64_t seed,
                      double *inter, double *ttft90, double *tpot90, double *total_gpu,
                      double *out_gpu)
{
    must_mkdir(dir);
    struct rng r;
    rng_init(&r, seed, RNG_SYNTH);
    int n = 60 + 30 * conc;
    double *tpot = xmalloc(sizeof(double) * (size_t)n);
    double *ttft = xmalloc(sizeof(double) * (size_t)n);
    int nt = 0, nf = 0;
    long long t = 0, in_tok = 0, out_tok = 0, t_end = 0;
    FILE *f = must_open(dir, "requests.jsonl");
    /* speed falls with concurrency; the tail is lognormal */
    double speed = c->base_tok_s / (1.0 + 0.06 * conc);
    for (int i = 0; i < n; i++) {
        bool warm = i < conc;
        bool err = i == n / 2;
        long long prompt = 2000 + (long long)rng_below(&r, 60000);
        long long cached = warm ? 0 : prompt * 8 / 10;
        long long out = i % 17 == 3 ? 1 : 20 + (long long)rng_below(&r, 800);
        long long start = t;
        double ttft_s = (0.05 + (double)(prompt - cached) / 40000.0) *
                        rng_lognormal(&r, 0, 0.3) * (1.0 + 0.02 * conc);
        double tpot_s = rng_lognormal(&r, 0, 0.25) / speed;
        long long first = start + (long long)(ttft_s * 1e9);
        long long end = first + (long long)(tpot_s * 1e9 * (double)(out - 1));
        fprintf(f,
                "{\"session\":\"s%d\",\"lane\":%d,\"call\":%d,\"tree\":%d,"
                "\"intended_start_ns\":%lld,\"start_ns\":%lld,\"first_token_ns\":%lld,"
                "\"end_ns\":%lld,\"chunks\":%lld,\"prompt_tokens\":%lld,"
                "\"cached_tokens\":%lld,\"output_tokens\":%lld,\"replica\":%d,"
                "\"warmup\":%s,\"cancelled\":false,\"error\":%s}\n",
                i % (conc + 3), i % conc, i, i % conc, start, start, first, end, out, prompt,
                cached, out, i % c->replicas, warm ? "true" : "false",
                err ? "\"HTTP 500\"" : "null");
        if (!warm && !err) {
            ttft[nf++] = ttft_s * 1e3;
            if (out > 1)
                tpot[nt++] = tpot_s * 1e3;
            in_tok += prompt;
            out_tok += out;
            if (end > t_end)
                t_end = end;
        }
        t += (long long)(rng_exp(&r, 4.0 / conc) * 1e9);
    }
    fclose(f);
    /* percentiles by linear interpolation, as the replayer computes them */
    qsort(tpot, (size_t)nt, sizeof(double), cmp);
    qsort(ttft, (size_t)nf, sizeof(double), cmp);
    static const double ps[5] = {0.5, 0.75, 0.9, 0.95, 0.99};
    for (int i = 0; i < 5; i++)
        inter[i] = 1e3 / pq(tpot, nt, ps[i]);
    *ttft90 = pq(ttft, nf, 0.9);
    *tpot90 = pq(tpot, nt, 0.9);
    double dur = (double)t_end / 1e9;
    *total_gpu = (double)(in_tok + out_tok) / dur / c->gpus;
    *out_gpu = (double)out_tok / dur / c->gpus;

    f = must_open(dir, "run.json");
    fprintf(f,
            "{\"schema_version\":1,\"tool\":\"agentreplay\",\"version\":\"0.1.0\",\"kind\":\"sim\","
            "\"interrupted\":false,\"partial\":false,\"agentx_valid\":true,\"invalid_reasons\":[],"
            "\"command\":\"agentreplay sim --concurrency %d\",\"label\":\"%s\",\"gpus\":%d,"
            "\"tp\":%d,\"replicas\":%d,\"backend\":\"%s\",\"model\":\"kimi-k3\",\"gpu\":\"gb300\","
            "\"seed\":%llu,\"concurrency\":%d,\"duration_s\":%.0f,"
            "\"metrics\":{\"ttft_ms\":{\"p90\":%.6g},\"tpot_ms\":{\"p90\":%.6g},"
            "\"interactivity_tok_s\":{\"p50\":%.6g,\"p75\":%.6g,\"p90\":%.6g,\"p95\":%.6g,"
            "\"p99\":%.6g},\"throughput_tok_s_per_gpu\":{\"total\":%.6g,\"output\":%.6g},"
            "\"prefix_hit_rate\":0.78,\"requests\":{\"completed\":%d,\"errors\":1,\"warmup\":%d,"
            "\"cancelled\":0,\"overflow\":0}}}\n",
            conc, c->label, c->gpus, c->tp, c->replicas, c->backend,
            (unsigned long long)seed, conc, dur, *ttft90, *tpot90, inter[0], inter[1], inter[2],
            inter[3], inter[4], *total_gpu, *out_gpu, nf, conc);
    fclose(f);

    f = must_open(dir, "timeline.csv");
    fprintf(f, "t_s,live_sessions,running,waiting,kv_used_frac,prefix_hit_rate,tokens_per_s,"
               "output_tokens_per_s\n");
    int secs = (int)dur + 1;
    for (int s = 0; s < secs; s++) {
        int running = (int)rng_below(&r, (uint64_t)conc + 1);
        int waiting = conc > 4 ? (int)rng_below(&r, (uint64_t)conc / 4) : 0;
        double kv = fmin(0.97, 0.1 + 0.05 * conc + 0.02 * rng_uniform(&r));
        double out_s = speed * running;
        double tot = out_s + (running ? 4000.0 * rng_uniform(&r) : 0);
        if (running)
            fprintf(f, "%d,%d,%d,%d,%.4f,%.4f,%.1f,%.1f\n", s, conc, running, waiting, kv,
                    0.6 + 0.35 * rng_uniform(&r), tot, out_s);
        else /* no prompt that second: no hit rate */
            fprintf(f, "%d,%d,0,%d,%.4f,,0,0\n", s, conc, waiting, kv);
    }
    fclose(f);
    free(tpot);
    free(ttft);
}

static const struct fx_cfg cfgs[] = {
    {"TP16x1 latency_specialized", "latency_specialized", 16, 16, 1, 250},
    {"TP8x2 auto", "auto", 16, 8, 2, 120},
};
static const int concs[] = {1, 4, 16};

static void write_sweep(const char *sdir)
{
    must_mkdir(sdir);
    FILE *s = must_open(sdir, "sweep.csv");
    fprintf(s, "label,gpus,tp,replicas,backend,concurrency,seed,interactivity_p50,"
               "interactivity_p75,interactivity_p90,interactivity_p95,interactivity_p99,"
               "ttft_p90_ms,tpot_p90_ms,total_tok_s_per_gpu,output_tok_s_per_gpu,"
               "prefix_hit_rate,errors,dir\n");
    for (size_t c = 0; c < ARRAY_LEN(cfgs); c++)
        for (size_t k = 0; k < ARRAY_LEN(concs); k++) {
            char name[128], dir[512];
            snprintf(name, sizeof name, "TP%dx%d-%s-c%d", cfgs[c].tp, cfgs[c].replicas,
                     cfgs[c].backend, concs[k]);
            snprintf(dir, sizeof dir, "%s/%s", sdir, name);
            double inter[5], ttft, tpot, tot, out;
            write_run(dir, &cfgs[c], concs[k], 1 + c * 10 + k, inter, &ttft, &tpot, &tot, &out);
            fprintf(s, "%s,%d,%d,%d,%s,%d,1,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,0.78,1,%s\n",
                    cfgs[c].label, cfgs[c].gpus, cfgs[c].tp, cfgs[c].replicas, cfgs[c].backend,
                    concs[k], inter[0], inter[1], inter[2], inter[3], inter[4], ttft, tpot, tot,
                    out, name);
        }
    fclose(s);

    /* the engine's per-layer breakdown, both paths, two layer kinds */
    FILE *f = must_open(sdir, "breakdown.csv");
    fprintf(f, "path,layer_kind,kernel,batch,us_per_layer\n");
    static const char *std_k[] = {"rmsnorm", "qkv_proj", "attention", "o_proj", "allreduce",
                                  "residual", "router", "shared_expert", "routed_experts"};
    static const double std_us[] = {2.1, 6.5, 5.0, 3.2, 9.5, 1.6, 2.4, 4.4, 16.0};
    static const char *spc_k[] = {"rmsnorm_qkv_small", "attention", "oproj_allreduce_residual",
                                  "router_split", "experts_overlapped"};
    static const double spc_us[] = {5.8, 4.6, 8.9, 1.8, 15.2};
    static const int batches[] = {1, 8, 64};
    static const char *kinds[] = {"KDA", "MLA"};
    for (int b = 0; b < 3; b++)
        for (int l = 0; l < 2; l++) {
            double sc = (1 + 0.05 * batches[b]) * (l ? 1.3 : 1.0);
            for (size_t k = 0; k < ARRAY_LEN(std_k); k++)
                fprintf(f, "standard,%s,%s,%d,%.3f\n", kinds[l], std_k[k], batches[b],
                        std_us[k] * sc);
            for (size_t k = 0; k < ARRAY_LEN(spc_k); k++)
                fprintf(f, "latency_specialized,%s,%s,%d,%.3f\n", kinds[l], spc_k[k],
                        batches[b], spc_us[k] * sc);
        }
    fclose(f);

    /* the fidelity table as the engine writes it (22 rows) */
    f = must_open(sdir, "fidelity.csv");
    fprintf(f, "setup,gpu,gpus,tp,backend,batch,spec,acceptance,predicted_tok_s,"
               "published_tok_s,step_us,layer_us\n"
               "calibration,gb300,16,16,latency_specialized,1,none,,255.1,256.4,3900,33.6\n"
               "calibration,gb300,16,16,auto,1,none,,137.9,136.4,7331,70.5\n");
    for (int b = 2; b <= 64; b *= 2)
        for (int p = 0; p < 2; p++)
            fprintf(f, "batch-sweep,gb300,16,16,%s,%d,none,,%.1f,,1,1\n",
                    p ? "auto" : "latency_specialized", b, (p ? 136 : 256) * pow(b, 0.78));
    fprintf(f, "dspark,gb300,16,16,latency_specialized,1,dspark,6,855.1,,1,1\n"
               "dspark,gb300,16,16,auto,1,dspark,6,594.7,,1,1\n");
    for (int b = 1; b <= 8; b *= 2)
        fprintf(f, "gb200-standard,gb200,16,16,auto,%d,none,,%.1f,,1,1\n", b, 136 * pow(b, 0.8));
    fprintf(f, "gb200-dspark,gb200,16,16,auto,1,dspark,3,298.2,,1,1\n"
               "gb200-dspark,gb200,16,16,auto,1,dspark,6,594.7,,1,1\n");
    fclose(f);

    f = must_open(sdir, "confounded.csv");
    fprintf(f, "label,gpus,tp,replicas,backend,concurrency,seed,interactivity_p50,"
               "interactivity_p75,interactivity_p90,interactivity_p95,interactivity_p99,"
               "ttft_p90_ms,tpot_p90_ms,total_tok_s_per_gpu,output_tok_s_per_gpu,"
               "prefix_hit_rate,errors,dir\n"
               "TP8x1 auto,8,8,1,auto,1,1,120,115,110,104,95,900,9.1,520,9.5,0.8,0,x\n"
               "TP16x1 latency_specialized,16,16,1,latency_specialized,1,1,240,230,221,210,"
               "190,700,4.5,300,5.1,0.8,0,y\n");
    fclose(f);
}

/* ---- checks ---------------------------------------------------------- */

static bool exists(const char *dir, const char *name)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return access(p, R_OK) == 0;
}

/* Width and height from a PNG's IHDR; false if not a PNG. */
static bool png_size(const char *path, unsigned *w, unsigned *h)
{
    unsigned char b[24];
    FILE *f = fopen(path, "rb");
    if (!f)
        return false;
    size_t k = fread(b, 1, sizeof b, f);
    fclose(f);
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (k < 24 || memcmp(b, sig, 8) || memcmp(b + 12, "IHDR", 4))
        return false;
    *w = (unsigned)b[16] << 24 | (unsigned)b[17] << 16 | (unsigned)b[18] << 8 | b[19];
    *h = (unsigned)b[20] << 24 | (unsigned)b[21] << 16 | (unsigned)b[22] << 8 | b[23];
    return true;
}

static bool have_python(void)
{
    return system("python3 -c 'import xml.dom.minidom' >/dev/null 2>&1") == 0;
}

static bool svg_ok(const char *path)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd,
             "python3 -c 'import sys,xml.dom.minidom as m; d=m.parse(sys.argv[1]); "
             "sys.exit(d.documentElement.tagName != \"svg\")' '%s' 2>/dev/null",
             path);
    return system(cmd) == 0;
}

/* Every Markdown link target in report.md exists; returns the count. */
static int report_links(const char *dir, int *missing)
{
    char p[1024], e[ERR_LEN];
    snprintf(p, sizeof p, "%s/report.md", dir);
    size_t len;
    char *t = file_read(p, &len, e);
    *missing = 0;
    if (!t) {
        *missing = 1;
        return 0;
    }
    int n = 0;
    for (char *s = strstr(t, "]("); s; s = strstr(s + 2, "](")) {
        char *end = strchr(s + 2, ')');
        if (!end)
            break;
        char target[512];
        snprintf(target, sizeof target, "%.*s", (int)(end - s - 2), s + 2);
        n++;
        if (!exists(dir, target)) {
            fprintf(stderr, "report.md links to missing %s\n", target);
            (*missing)++;
        }
    }
    free(t);
    return n;
}

static char *slurp(const char *dir, const char *name)
{
    char p[1024], e[ERR_LEN];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    size_t len;
    return file_read(p, &len, e);
}

static const char *charts[] = {"pareto", "distributions", "timeline", "breakdown", "fidelity"};

static void check_images(const char *out, int n, bool svg, unsigned w, unsigned h, bool pyok)
{
    for (int i = 0; i < n; i++) {
        char p[1024];
        snprintf(p, sizeof p, "%s/%s.png", out, charts[i]);
        unsigned pw = 0, ph = 0;
        CHECKF(png_size(p, &pw, &ph), "%s is a PNG", p);
        CHECKF(pw == w && ph == h, "%s is %ux%u, want %ux%u", p, pw, ph, w, h);
        snprintf(p, sizeof p, "%s/%s.svg", out, charts[i]);
        if (!svg) {
            CHECKF(access(p, F_OK) != 0, "%s not written (png only)", p);
            continue;
        }
        CHECKF(access(p, R_OK) == 0, "%s written", p);
        if (pyok)
            CHECKF(svg_ok(p), "%s is well-formed SVG", p);
    }
}

/* Runs a shell command; returns its exit status and its stderr in err. */
static int sh(const char *cmd, char *errbuf, size_t n)
{
    char full[4096], ef[300];
    snprintf(ef, sizeof ef, "%s/stderr.txt", root);
    snprintf(full, sizeof full, "%s 2>%s", cmd, ef);
    int st = system(full);
    errbuf[0] = 0;
    FILE *f = fopen(ef, "r");
    if (f) {
        size_t k = fread(errbuf, 1, n - 1, f);
        errbuf[k] = 0;
        fclose(f);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int main(void)
{
    snprintf(root, sizeof root, "/tmp/agentreplay-test-plot-%d", (int)getpid());
    must_mkdir(root);
    char sweep[300], run8[300], out[300], err[ERR_LEN];
    snprintf(sweep, sizeof sweep, "%s/sweep", root);
    snprintf(run8, sizeof run8, "%s/run8", root);
    write_sweep(sweep);
    {
        static const struct fx_cfg c8 = {"TP8x1 auto", "auto", 8, 8, 1, 130};
        double inter[5], a, b, c, d;
        write_run(run8, &c8, 4, 99, inter, &a, &b, &c, &d);
    }

    char gp_env[300] = "";
    const char *g = getenv("AGENTREPLAY_GNUPLOT");
    if (g)
        snprintf(gp_env, sizeof gp_env, "%s", g);
    bool have_gp = *gp_env ? access(gp_env, X_OK) == 0
                           : system("command -v gnuplot >/dev/null 2>&1") == 0;
    bool pyok = have_python();
    if (!pyok)
        SKIP("python3 missing: SVG well-formedness not checked");

    struct plot_opts o;
    plot_opts_init(&o);

    /* 1. The sweep: every chart, PNG and SVG, no gnuplot messages. */
    if (!have_gp) {
        SKIP("gnuplot not on PATH: rendering not tested");
    } else {
        snprintf(out, sizeof out, "%s/out-sweep", root);
        const char *dirs[] = {sweep};
        o.command = "agentreplay plot SWEEP -o OUT";
        int rc = plot_results(dirs, 1, out, &o, err);
        CHECKF(rc == PLOT_OK, "sweep plotted cleanly (rc %d: %s)", rc, err);
        CHECK(!exists(out, "gnuplot.log"), "gnuplot wrote nothing on stderr");
        check_images(out, 5, true, 1200, 750, pyok);
        int missing, n = report_links(out, &missing);
        CHECKF(n >= 15 && missing == 0, "report links: %d, %d missing", n, missing);
        char *rep = slurp(out, "report.md");
        CHECK(rep && strstr(rep, "agentreplay plot SWEEP -o OUT"), "report starts with the command");
        CHECK(rep && strstr(rep, "| TP8x2 auto | 16 | TP8 x 2 | auto | 16 |"),
              "key table row per configuration and concurrency");
        CHECK(rep && strstr(rep, "confounded"), "the confounded pair is reported");
        CHECK(rep && strstr(rep, "same 16 GPUs"), "the report states the GPU count");
        free(rep);
        /* pareto data: the P90 statistic of the first point */
        char *pd = slurp(out, "pareto_data.csv");
        CHECK(pd && strstr(pd, "\"TP16x1 latency_specialized (16 GPUs)\""),
              "pareto labels carry the GPU count");
        CHECK(pd && strstr(pd, "\"TP8x2 auto (16 GPUs)\""), "one block per configuration");
        free(pd);
        char *cd = slurp(out, "cdf_data.csv");
        CHECK(cd && strstr(cd, "TP8x2 auto (16 GPUs),"), "distributions at one concurrency");
        /* 4: the middle of the concurrencies both configurations have */
        char *rs = slurp(out, "render.sh");
        CHECK(rs && strstr(rs, "sub='concurrency 4'"), "distributions at the middle common concurrency");
        CHECK(rs && strstr(rs, "batch=8"), "breakdown at the batch nearest 8");
        free(rs);
        free(cd);
    }

    /* 2. Percentile switch and a single run folder, PNG only, other size. */
    if (have_gp) {
        snprintf(out, sizeof out, "%s/out-run", root);
        char one[600];
        snprintf(one, sizeof one, "%s/TP8x2-auto-c4", sweep);
        const char *dirs[] = {one};
        struct plot_opts p = o;
        p.percentile = 50;
        p.svg = false;
        p.width_px = 800;
        p.height_px = 500;
        int rc = plot_results(dirs, 1, out, &p, err);
        CHECKF(rc == PLOT_OK, "one run plotted (rc %d: %s)", rc, err);
        check_images(out, 3, false, 800, 500, pyok);
        CHECK(!exists(out, "breakdown.png") && !exists(out, "fidelity.png"),
              "no breakdown or fidelity chart without their tables");
        int missing;
        report_links(out, &missing);
        CHECK(missing == 0, "single-run report links exist");
        char *pd = slurp(out, "pareto_data.csv");
        char *rj = slurp(one, "run.json");
        const char *k = rj ? strstr(rj, "\"p50\":") : NULL;
        double want = k ? strtod(k + 6, NULL) : 0;
        const char *row = pd ? strchr(pd, '\n') : NULL;
        double got = row ? strtod(row + 1, NULL) : -1;
        CHECK_NEAR(got, want, 1e-5, "--percentile 50 plots interactivity_p50");
        /* the distribution curves cross P90 at the reported P90 */
        char *cd = slurp(out, "cdf_data.csv");
        const char *q = cd ? strstr(cd, "\n0.9000,") : NULL;
        const char *kt = rj ? strstr(rj, "\"tpot_ms\":{\"p90\":") : NULL;
        const char *kf = rj ? strstr(rj, "\"ttft_ms\":{\"p90\":") : NULL;
        CHECK(q && kt && kf, "P90 row and reported P90s found");
        if (q && kt && kf) {
            char *e;
            double ttft = strtod(q + 8, &e);
            double tpot = strtod(e + 1, NULL);
            CHECK_NEAR(ttft, strtod(kf + 17, NULL), 1e-5, "TTFT curve at 0.9 = reported P90");
            CHECK_NEAR(tpot, strtod(kt + 17, NULL), 1e-5, "TPOT curve at 0.9 = reported P90");
        }
        free(cd);
        free(pd);
        free(rj);
    }

    /* 3. Mixed GPU counts: refused without the flag, a warning with it. */
    {
        snprintf(out, sizeof out, "%s/out-mixed", root);
        const char *dirs[] = {sweep, run8};
        struct plot_opts p = o;
        p.concurrency = 4;
        int rc = plot_results(dirs, 2, out, &p, err);
        CHECKF(rc == PLOT_EBADINPUT && strstr(err, "different GPU counts") &&
                   strstr(err, "--allow-mixed-gpus"),
               "mixed GPU counts refused (rc %d: %s)", rc, err);
        CHECK(!exists(out, "report.md"), "nothing written when refused");
        if (have_gp) {
            p.allow_mixed_gpus = true;
            p.svg = false;
            rc = plot_results(dirs, 2, out, &p, err);
            CHECKF(rc == PLOT_OK, "mixed GPU counts allowed (rc %d: %s)", rc, err);
            char *rs = slurp(out, "render.sh");
            CHECK(rs && strstr(rs, "warn='WARNING: these configurations use different GPU counts (16 vs 8 GPUs)"),
                  "the distribution chart carries the warning");
            free(rs);
            char *rep = slurp(out, "report.md");
            CHECK(rep && strstr(rep, "different GPU counts (8 to 16 GPUs)"),
                  "the report states the GPU counts differ");
            free(rep);
            char *pd = slurp(out, "pareto_data.csv");
            CHECK(pd && strstr(pd, "\"TP8x1 auto (8 GPUs)\""), "8-GPU line labelled as such");
            free(pd);
        }
    }

    /* 3b. Sparse data: only one-token calls (no TPOT), seconds without
     * prompts (no hit rate): empty panels, still no gnuplot messages. */
    if (have_gp) {
        char sp[300];
        snprintf(sp, sizeof sp, "%s/sparse", root);
        must_mkdir(sp);
        FILE *f = must_open(sp, "run.json");
        fprintf(f, "{\"schema_version\":1,\"label\":\"TP16x1 auto\",\"gpus\":16,\"tp\":16,"
                   "\"replicas\":1,\"backend\":\"auto\",\"concurrency\":2,\"metrics\":{"
                   "\"interactivity_tok_s\":{\"p90\":null},\"ttft_ms\":{\"p90\":120},"
                   "\"throughput_tok_s_per_gpu\":{\"total\":50,\"output\":0.1}}}\n");
        fclose(f);
        f = must_open(sp, "requests.jsonl");
        for (int i = 0; i < 20; i++)
            fprintf(f, "{\"session\":\"a\",\"start_ns\":%d000000000,\"first_token_ns\":"
                       "%d100000000,\"end_ns\":%d100000000,\"output_tokens\":1,"
                       "\"prompt_tokens\":900,\"warmup\":false,\"cancelled\":false,"
                       "\"error\":null}\n",
                    i + 1, i + 1, i + 1);
        fclose(f);
        f = must_open(sp, "timeline.csv");
        fprintf(f, "t_s,live_sessions,running,waiting,kv_used_frac,prefix_hit_rate,"
                   "tokens_per_s,output_tokens_per_s\n");
        for (int i = 0; i < 20; i++)
            fprintf(f, "%d,2,1,0,0.1,,900,1\n", i);
        fclose(f);
        snprintf(out, sizeof out, "%s/out-sparse", root);
        const char *dirs[] = {sp};
        struct plot_opts p = o;
        p.svg = false;
        int rc = plot_results(dirs, 1, out, &p, err);
        CHECKF(rc == PLOT_OK, "sparse run plotted without gnuplot messages (rc %d: %s)", rc,
               err);
        CHECK(!exists(out, "pareto.png") && exists(out, "distributions.png") &&
                  exists(out, "timeline.png"),
              "no Pareto without interactivity; distributions and timeline drawn");
        int missing;
        report_links(out, &missing);
        CHECK(missing == 0, "sparse report links exist");
    }

    /* 4. Without gnuplot: data, scripts, render.sh and report; exit 0. */
    {
        snprintf(out, sizeof out, "%s/out-nognuplot", root);
        setenv("AGENTREPLAY_GNUPLOT", "/nonexistent/gnuplot", 1);
        const char *dirs[] = {sweep};
        int rc = plot_results(dirs, 1, out, &o, err);
        CHECKF(rc == PLOT_UNRENDERED && strstr(err, "gnuplot not found"),
               "no gnuplot reported (rc %d: %s)", rc, err);
        static const char *files[] = {"pareto_data.csv", "cdf_data.csv", "timeline_data.csv",
                                      "breakdown_data.csv", "fidelity_data.csv", "common.gp",
                                      "pareto.gp", "distributions.gp", "timeline.gp",
                                      "breakdown.gp", "fidelity.gp", "render.sh", "report.md"};
        for (size_t i = 0; i < ARRAY_LEN(files); i++)
            CHECKF(exists(out, files[i]), "%s written without gnuplot", files[i]);
        CHECK(!exists(out, "pareto.png"), "no images without gnuplot");
        int missing;
        report_links(out, &missing);
        CHECK(missing == 0, "report without images links only to existing files");
        char *rep = slurp(out, "report.md");
        CHECK(rep && strstr(rep, "Charts not rendered"), "report says charts are not rendered");
        free(rep);
        if (*gp_env)
            setenv("AGENTREPLAY_GNUPLOT", gp_env, 1);
        else
            unsetenv("AGENTREPLAY_GNUPLOT");
        if (have_gp) {
            char cmd[600], e2[4096];
            snprintf(cmd, sizeof cmd, "sh %s/render.sh", out);
            int st = sh(cmd, e2, sizeof e2);
            CHECKF(st == 0 && !*e2, "render.sh renders later (exit %d, stderr '%s')", st, e2);
            check_images(out, 5, true, 1200, 750, false);
        }
    }

    /* 5. The command line: exit codes and messages. */
    const char *bin = test_bin();
    if (access(bin, X_OK) != 0) {
        SKIP("agentreplay binary not built: command line not tested");
    } else {
        char cmd[2048], e2[4096];
        snprintf(out, sizeof out, "%s/out-cli", root);
        if (have_gp) {
            snprintf(cmd, sizeof cmd, "%s plot %s -o %s --size 640x400 --format png >/dev/null",
                     bin, sweep, out);
            int st = sh(cmd, e2, sizeof e2);
            CHECKF(st == 0 && !*e2, "plot exits 0 quietly (exit %d, stderr '%s')", st, e2);
            check_images(out, 5, false, 640, 400, false);
            char *rep = slurp(out, "report.md");
            CHECK(rep && strstr(rep, "plot ") && strstr(rep, "--size 640x400 --format png"),
                  "report holds the exact command");
            free(rep);
        }
        snprintf(cmd, sizeof cmd, "%s plot %s %s -o %s/out-cli2", bin, sweep, run8, root);
        int st = sh(cmd, e2, sizeof e2);
        CHECKF(st == 2 && strstr(e2, "--allow-mixed-gpus"), "mixed refused: exit %d, '%s'", st,
               e2);
        snprintf(cmd, sizeof cmd,
                 "AGENTREPLAY_GNUPLOT=/nonexistent %s plot %s -o %s/out-cli3 >/dev/null", bin,
                 sweep, root);
        st = sh(cmd, e2, sizeof e2);
        CHECKF(st == 0 && strstr(e2, "gnuplot not found"), "no gnuplot: exit %d, '%s'", st, e2);
        snprintf(cmd, sizeof cmd, "%s plot %s/nothing -o %s/out-cli4", bin, root, root);
        st = sh(cmd, e2, sizeof e2);
        CHECKF(st == 2 && strstr(e2, "neither a run folder"), "missing input: exit %d, '%s'", st,
               e2);
        snprintf(cmd, sizeof cmd, "%s plot %s -o %s/x --percentile 80", bin, sweep, root);
        st = sh(cmd, e2, sizeof e2);
        CHECKF(st == 2, "--percentile 80 refused: exit %d", st);
    }

    /* 6. Bad input names its place. */
    {
        char bad[300];
        snprintf(bad, sizeof bad, "%s/bad", root);
        must_mkdir(bad);
        FILE *f = must_open(bad, "run.json");
        fprintf(f, "{\"gpus\": 16,\n \"tp\": }\n");
        fclose(f);
        const char *dirs[] = {bad};
        int rc = plot_results(dirs, 1, out, &o, err);
        CHECKF(rc == PLOT_EBADINPUT && strstr(err, "run.json:2:"), "bad run.json: %s", err);
        f = must_open(bad, "run.json");
        fprintf(f, "{\"gpus\": 16, \"tp\": 16, \"replicas\": 1}\n");
        fclose(f);
        rc = plot_results(dirs, 1, out, &o, err);
        CHECKF(rc == PLOT_EBADINPUT && strstr(err, "concurrency"), "missing field: %s", err);
        snprintf(bad, sizeof bad, "%s/badsweep", root);
        must_mkdir(bad);
        f = must_open(bad, "sweep.csv");
        fprintf(f, "label,gpus,tp,replicas,backend,concurrency,total_tok_s_per_gpu\n"
                   "a,16,16,1,auto,4,120\na,16,16,1,auto,x8,130\n");
        fclose(f);
        rc = plot_results(dirs, 1, out, &o, err);
        const char *d2[] = {bad};
        rc = plot_results(d2, 1, out, &o, err);
        CHECKF(rc == PLOT_EBADINPUT && strstr(err, "sweep.csv:3: column concurrency"),
               "bad sweep.csv row: %s", err);
    }

    /* 7. A real result, when one is named. */
    const char *real = getenv("AGENTREPLAY_PLOT_REAL");
    if (real && *real && have_gp) {
        snprintf(out, sizeof out, "%s/out-real", root);
        const char *dirs[] = {real};
        int rc = plot_results(dirs, 1, out, &o, err);
        CHECKF(rc == PLOT_OK, "real result plotted (rc %d: %s)", rc, err);
        int missing;
        report_links(out, &missing);
        CHECK(missing == 0, "real report links exist");
    }

    if (!th_failed && !getenv("AGENTREPLAY_KEEP")) {
        char cmd[400];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", root);
    } else {
        fprintf(stderr, "fixtures and outputs kept in %s\n", root);
    }
    return test_report();
}
