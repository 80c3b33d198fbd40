/* test_fidelity.c: the fidelity tables beyond the calibration point. The
 * external validation table (engine/presets/validation/external.json):
 * sources and roles, validation and efficiency-source rows disjoint, at
 * least 12 validation rows on two GPU kinds, each row within its stated
 * band or marked as a known miss, the median error pinned; the closed-loop
 * serving prediction deterministic and at concurrency 1 equal to the
 * fixed-batch decode; hostile tables refused; the sensitivity variants
 * written and re-fitted to the calibration point; GB200 and GB300 within
 * the measured 3 %; the per-layer view at the verification step
 * (fidelity --external and --sensitivity end to end: test_cost.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/cost.h"
#include "engine/fidelity.h"
#include "tests/testcaps.h"
#include "tests/testhelp.h"
#include "traces/base/err.h"

static void test_external_table(void)
{
    char err[ERR_LEN] = "";
    struct ext_row *r;
    int n;
    CHECKF(ext_rows_load(NULL, &r, &n, err) == 0, "external table loads: %s", err);
    if (n <= 0)
        return;
    int val = 0, eff = 0, nm = 0;
    for (int i = 0; i < n; i++) {
        CHECKF(r[i].source[0] && r[i].setup[0], "row %s cites a source and a setup", r[i].id);
        val += r[i].role == EXT_VALIDATION;
        eff += r[i].role == EXT_EFFICIENCY;
        nm += r[i].role == EXT_NOT_MODELLED;
        if (r[i].role == EXT_NOT_MODELLED)
            CHECKF(r[i].why[0], "not-modelled row %s says why", r[i].id);
    }
    CHECKF(val >= 12 && eff >= 1 && nm >= 1, "roles: %d validation, %d efficiency, %d kept", val,
           eff, nm);
    /* Disjoint: no validation row's source is an efficiency source's
     * (the tables come from kernel microbenchmarks, the validation rows
     * from end-to-end runs). */
    int shared = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            if (r[i].role == EXT_VALIDATION && r[j].role == EXT_EFFICIENCY &&
                (strstr(r[i].source, r[j].source) || strstr(r[j].source, r[i].source)))
                shared++;
    CHECKF(shared == 0, "validation and efficiency-source rows disjoint (%d shared)", shared);
    CHECKF(ext_rows_predict(r, n, err) == 0, "predict: %s", err);
    struct ext_stats st;
    ext_rows_stats(r, n, &st);
    CHECKF(st.validation == val && st.gpu_kinds >= 2, "%d rows on %d GPU kinds", st.validation,
           st.gpu_kinds);
    /* The validation variants (h100-vllm0.14: the same GPU with an older
     * build's kernel tables) are not kinds of their own: H100, H200, B200. */
    CHECKF(st.gpu_kinds == 3, "GPU kinds counted by preset name before '-' (%d)", st.gpu_kinds);
    for (int i = 0; i < n; i++)
        if (r[i].role == EXT_VALIDATION) {
            CHECKF(r[i].predicted > 0 && isfinite(r[i].error), "row %s predicted (%g)", r[i].id,
                   r[i].predicted);
            CHECKF(r[i].within || r[i].known_miss,
                   "row %s: %+.1f %% is within its %.0f %% band or a known miss", r[i].id,
                   100 * r[i].error, 100 * r[i].band);
            CHECKF(!(r[i].within && r[i].known_miss),
                   "row %s: marked a known miss but within its band (%+.1f %%)", r[i].id,
                   100 * r[i].error);
        }
    /* The values of this commit (engine/CALIBRATION.md), so that a change
     * of the model that moves them is seen. */
    CHECKF(fabs(st.median - 0.080) < 0.01 && st.worst < 0.37,
           "median |error| %.3f (0.080 at this commit), worst %.3f", st.median, st.worst);
    /* Deterministic. */
    struct ext_row *r2;
    int n2;
    CHECK(ext_rows_load(NULL, &r2, &n2, err) == 0 && ext_rows_predict(r2, n2, err) == 0,
          "second prediction");
    int same = n2 == n;
    for (int i = 0; same && i < n; i++)
        same = memcmp(&r[i].predicted, &r2[i].predicted, sizeof r[i].predicted) == 0;
    CHECK(same, "predictions byte-identical across runs");
    free(r);
    free(r2);
}

static void test_external_bad(void)
{
    const char *head = "{\"format\": \"agentreplay-external/1\", \"rows\": [";
    static const char *const rows[] = {
        "{\"id\": \"a\", \"role\": \"nope\", \"source\": \"s\", \"setup\": \"x\"}",
        "{\"id\": \"a\", \"role\": \"validation\", \"source\": \"s\", \"setup\": \"x\", \"model\": "
        "\"m\", \"gpu\": \"g\", \"framework\": \"f\", \"kind\": \"serving\", \"metric\": "
        "\"decode_tok_s\", \"gpus\": 8, \"tp\": 8, \"concurrency\": 4, \"isl\": 10, \"osl\": 10, "
        "\"published\": 1}",
        "{\"id\": \"a\", \"role\": \"validation\", \"source\": \"s\", \"setup\": \"x\", \"model\": "
        "\"m\", \"gpu\": \"g\", \"framework\": \"f\", \"kind\": \"serving\", \"metric\": "
        "\"tpot_ms\", \"gpus\": 8, \"tp\": 8, \"concurrency\": 0, \"isl\": 10, \"osl\": 10, "
        "\"published\": 1}",
        "{\"id\": \"a\", \"role\": \"efficiency_source\", \"source\": \"s\", \"setup\": \"x\"}",
        "{\"id\": \"a\", \"role\": \"not_modelled\", \"source\": \"\", \"setup\": \"x\"}",
        "{\"id\": \"a\", \"role\": \"not_modelled\", \"source\": \"s\", \"setup\": \"x\", "
        "\"model\": \"m\", \"gpu\": \"g\", \"why\": \"w\"}, {\"id\": \"a\", \"role\": "
        "\"not_modelled\", \"source\": \"s\", \"setup\": \"x\", \"model\": \"m\", \"gpu\": \"g\", "
        "\"why\": \"w\"}",
        "3",
    };
    static const char *const want[] = {"role", "kind/metric", "concurrency", "sets", "source",
                                       "twice", "must be an object"};
    char err[ERR_LEN], buf[2048];
    for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
        snprintf(buf, sizeof buf, "%s%s]}", head, rows[i]);
        struct ext_row *r = NULL;
        int n = 0;
        err[0] = 0;
        int rc = ext_rows_parse(buf, strlen(buf), "t.json", &r, &n, err);
        CHECKF(rc != 0 && strstr(err, want[i]) && strstr(err, "t.json"),
               "hostile table %zu refused naming '%s': %s", i, want[i], err);
        free(r);
    }
    struct ext_row *r = NULL;
    int n;
    CHECK(ext_rows_parse("{\"format\": \"x\", \"rows\": []}", 27, "t", &r, &n, err) != 0 &&
              strstr(err, "format"),
          "wrong format refused");
    CHECK(ext_rows_parse("{", 1, "t", &r, &n, err) != 0 && strstr(err, "t:1:"), "bad JSON located");
    /* A file larger than a table may be is refused before it is read. */
    char path[] = "/tmp/agentreplay-test-ext-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0 && ftruncate(fd, 5 << 20) == 0, "a 5 MiB file");
    if (fd >= 0)
        close(fd);
    CHECK(ext_rows_load(path, &r, &n, err) != 0 && strstr(err, "more than"), "oversized table refused");
    unlink(path);
}

/* The closed-loop serving prediction: deterministic; at concurrency 1 (no
 * batching, prefill outside TPOT) equal to the fixed-batch decode. */
static void test_serve(void)
{
    char err[ERR_LEN] = "";
    struct engine_config ec;
    engine_config_defaults(&ec);
    snprintf(ec.model, sizeof ec.model, "llama-3.1-70b-fp8");
    snprintf(ec.gpu, sizeof ec.gpu, "h200");
    ec.gpus = ec.tp = 8;
    ec.spec = false;
    struct serve_result a, b;
    CHECKF(fidelity_serve(&ec, 1, 1024, 256, &a, err) == 0, "serve c=1: %s", err);
    CHECK(a.requests == 4 && a.tpot_ms > 0 && a.ttft_ms > 0, "four requests, TPOT and TTFT");
    struct decode_opts o;
    decode_opts_defaults(&o);
    snprintf(o.model, sizeof o.model, "llama-3.1-70b-fp8");
    snprintf(o.gpu, sizeof o.gpu, "h200");
    o.gpus = o.tp = 8;
    o.isl = 1024;
    o.osl = 256;
    struct decode_setup s;
    struct cost_decode_run r;
    CHECKF(decode_measure(&o, &s, &r, err) == 0, "bench-decode: %s", err);
    CHECK_NEAR(a.tpot_ms, r.step_us / 1e3, 0.01, "concurrency 1 TPOT = the fixed-batch decode step");
    CHECK(fidelity_serve(&ec, 16, 1024, 256, &a, err) == 0 &&
              fidelity_serve(&ec, 16, 1024, 256, &b, err) == 0 && memcmp(&a, &b, sizeof a) == 0,
          "deterministic");
    CHECK(a.requests == 64, "16 clients x 4 requests");
    struct serve_result c64;
    CHECK(fidelity_serve(&ec, 64, 1024, 256, &c64, err) == 0 && c64.tpot_ms > a.tpot_ms,
          "TPOT grows with concurrency");
    CHECK(fidelity_serve(&ec, 0, 1024, 256, &a, err) != 0 && strstr(err, "concurrency"),
          "concurrency 0 refused");
    CHECK(fidelity_serve(&ec, 4, 1024, 1, &a, err) != 0 && strstr(err, "osl"), "osl 1 refused");
}

/* Every variant is written, re-fitted, and reproduces the calibration
 * point; the base variant's fit is the shipped one. */
static void test_sensitivity_variants(void)
{
    char err[ERR_LEN] = "", dir[] = "/tmp/agentreplay-test-sens-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "scratch folder");
    struct gpu_preset ship;
    CHECK(preset_load_gpu("gb300", &ship, err) == 0, "gb300 loads");
    struct model_preset m;
    CHECK(preset_load_model("kimi-k3", &m, err) == 0, "kimi-k3 loads");
    int nv = sens_variant_count(), feasible = 0;
    CHECK(nv >= 8, "at least eight variants");
    for (int v = 0; v < nv; v++) {
        const struct sens_variant *sv = sens_variant_get(v);
        struct sens_fit f;
        CHECKF(sens_variant_write(v, dir, &f, err) == 0, "variant %s: %s", sv->name, err);
        CHECKF(sv->input[0] && (v == 0 || sv->range[0]), "variant %s names its input and range",
               sv->name);
        if (f.infeasible) {
            unlink(f.path);
            continue;
        }
        feasible++;
        struct gpu_preset g;
        CHECKF(preset_load_gpu(f.path, &g, err) == 0, "variant %s loads: %s", sv->name, err);
        struct cost_model *c = cost_create(&m, &g, 16, ENGINE_BACKEND_LATENCY_SPECIALIZED, NULL,
                                           false, err);
        struct cost_decode_run r;
        CHECK(c && cost_decode_run(c, 1, 1, 1000, 0, 0, &r, err) == 0, "variant prices");
        if (c)
            CHECK_NEAR(r.decode_tok_s, 256.4, 0.01, "variant keeps the calibration point");
        cost_destroy(c);
        if (v == 0) {
            CHECK_NEAR(f.floor_ns, ship.kernel_floor_ns, 0.001, "base variant: shipped floor");
            CHECK_NEAR(f.overhead_ns, ship.step_overhead_ns, 0.001, "base variant: shipped overhead");
        }
        unlink(f.path);
    }
    CHECKF(feasible == nv, "every variant fits (%d of %d)", feasible, nv);
    rmdir(dir);
}

/* GB200 and GB300: the same HBM bandwidth and NVLink; their own measured
 * kernel tables differ by at most a few per cent (engine/CALIBRATION.md). */
static void test_gb200_gb300(void)
{
    char err[ERR_LEN];
    struct model_preset m;
    struct gpu_preset a, b;
    CHECK(preset_load_model("kimi-k3", &m, err) == 0 && preset_load_gpu("gb200", &a, err) == 0 &&
              preset_load_gpu("gb300", &b, err) == 0,
          "presets load");
    struct cost_model *ca = cost_create(&m, &a, 16, ENGINE_BACKEND_AUTO, NULL, false, err);
    struct cost_model *cb = cost_create(&m, &b, 16, ENGINE_BACKEND_AUTO, NULL, false, err);
    for (int batch = 1; ca && cb && batch <= 8; batch *= 2) {
        struct cost_decode_run ra, rb;
        cost_decode_run(ca, batch, 1, 1000, 0, 0, &ra, err);
        cost_decode_run(cb, batch, 1, 1000, 0, 0, &rb, err);
        CHECKF(fabs(ra.decode_tok_s / rb.decode_tok_s - 1) < 0.03 && ra.decode_tok_s != rb.decode_tok_s,
               "batch %d: GB200 %.1f vs GB300 %.1f tok/s: within 3 %%, from their own tables",
               batch, ra.decode_tok_s, rb.decode_tok_s);
    }
    cost_destroy(ca);
    cost_destroy(cb);
}

/* The per-layer view at the verification step (8 positions). */
static void test_verify_layer(void)
{
    char err[ERR_LEN];
    struct fidelity_row rows[64];
    int n = fidelity_rows(rows, 64, err);
    const struct fidelity_row *vs = NULL, *va = NULL;
    for (int i = 0; i < n; i++)
        if (!strcmp(rows[i].setup, "dspark") && !strcmp(rows[i].gpu, "gb300"))
            *(strcmp(rows[i].backend, "auto") ? &vs : &va) = &rows[i];
    CHECK(vs && va, "the dspark rows exist");
    if (!vs || !va)
        return;
    CHECK(vs->draft + 1 == 8 && vs->kernels_per_layer == 13 && va->kernels_per_layer == 23,
          "8 positions; 13 and 23 kernels per layer");
    CHECK(vs->layer_us < va->layer_us && vs->layer_us > rows[0].layer_us &&
              va->layer_us > rows[1].layer_us,
          "fused faster than standard; both slower than at one position");
}

int main(void)
{
    test_caps(600);
    test_external_table();
    test_external_bad();
    test_serve();
    test_sensitivity_variants();
    test_gb200_gb300();
    test_verify_layer();
    return test_report();
}
