/* bench.c: `agentreplay bench-decode` (the fixed-batch decode measurement
 * of metrics.md, engine/fidelity.h) and `agentreplay fidelity` (the
 * model's predictions for every setup calibration.md lists, next to the
 * calibration point). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/accept.h"
#include "engine/clock/loop.h"
#include "engine/cost.h"
#include "engine/engine.h"
#include "engine/fidelity.h"
#include "engine/preset.h"
#include "replay/cli/cli.h"
#include "replay/results.h"
#include "replay/run.h"
#include "traces/base/err.h"
#include "traces/base/time_ns.h"

#define BENCH_SCHEMA_VERSION 1


/* Prints j (indented, keys in order) and drops it. */
static void print_json(json_t *j)
{
    char *txt = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
    puts(txt);
    free(txt);
    json_decref(j);
}

struct bench_opts {
    struct decode_opts d;
    bool breakdown, json;
};

static void bench_init(void *opts) { decode_opts_defaults(&((struct bench_opts *)opts)->d); }

static const struct flag_choice spec_names[] = {
    {"dspark", 1, false}, {"none", 0, false}, {NULL, 0, false}};

#define O struct bench_opts
static const struct flag bench_flags[] = {
    {"--model", 0, FLAG_BUF, FLAG_AT(O, d.model), "M", "model preset or file", .def = NULL},
    {"--gpu", 0, FLAG_BUF, FLAG_AT(O, d.gpu), "K", "GPU preset or file", .def = NULL},
    {"--gpus", 0, FLAG_INT, FLAG_AT(O, d.gpus), "G", "GPUs of the deployment", .min = 1,
     .max = 1 << 20},
    {"--tp", 0, FLAG_INT, FLAG_AT(O, d.tp), "T", "tensor-parallel size", .min = 1, .max = 1024},
    {"--backend", 0, FLAG_CHOICE, FLAG_AT(O, d.backend), NULL, "decode path",
     .choices = engine_backend_choices},
    {"--batch", 0, FLAG_INT, FLAG_AT(O, d.batch), "B", "requests decoding together", .min = 1,
     .max = 1 << 20},
    {"--isl", 0, FLAG_INT64, FLAG_AT(O, d.isl), "I", "prompt tokens per request", .min = 1,
     .max = INT64_C(1) << 31},
    {"--osl", 0, FLAG_INT64, FLAG_AT(O, d.osl), "O", "output tokens per request", .min = 2,
     .max = INT64_C(1) << 31},
    {"--spec", 0, FLAG_CHOICE, FLAG_AT(O, d.spec), NULL, "speculative decoding",
     .choices = spec_names},
    {"--draft", 0, FLAG_INT, FLAG_AT(O, d.draft), "D", "draft tokens per step (with --spec)",
     .min = 1, .max = ACCEPT_MAX_DRAFT},
    {"--acceptance", 0, FLAG_BUF, FLAG_AT(O, d.acceptance), "curve|fixed:A|p:P1,P2,...",
     "accepted draft tokens (with --spec)", .def = NULL},
    {"--calibration", 0, FLAG_BUF, FLAG_AT(O, d.calibration), "FILE", "measured kernel times", .def = NULL},
    {"--force-calibration", 0, FLAG_BOOL, FLAG_AT(O, d.force), NULL,
     "accept a calibration file for another GPU", .value = true},
    {"--breakdown", 0, FLAG_BOOL, FLAG_AT(O, breakdown), NULL, "per-kernel time per layer",
     .value = true},
    {"--json", 0, FLAG_BOOL, FLAG_AT(O, json), NULL, "the result as JSON", .value = true},
    FLAG_END,
};

const struct flag_spec bench_decode_spec = {
    .usage = "agentreplay bench-decode [flags]",
    .about = "Fixed-batch decode as published: B requests of I prompt tokens decode O\n"
             "tokens together on one replica; decode_tok_s = B * (O - 1) / decode time\n"
             "(first tokens and prefill excluded; metrics.md).",
    .size = sizeof(O),
    .init = bench_init,
    .groups = {{"bench-decode", bench_flags, 0}},
};
#undef O

struct fidelity_opts {
    bool json, external, sensitivity;
    char table[512];
};

static const struct flag fidelity_flags[] = {
    {"--json", 0, FLAG_BOOL, FLAG_AT(struct fidelity_opts, json), NULL, "the rows as JSON",
     .value = true},
    {"--external", 0, FLAG_BOOL, FLAG_AT(struct fidelity_opts, external), NULL,
     "published measurements that are not Kimi K3,\npredicted the way they were measured",
     .value = true},
    {"--table", 0, FLAG_BUF, FLAG_AT(struct fidelity_opts, table), "FILE",
     "the external table (default:\nengine/presets/validation/external.json)", .def = NULL},
    {"--sensitivity", 0, FLAG_BOOL, FLAG_AT(struct fidelity_opts, sensitivity), NULL,
     "the main job's headline across the cited range\nof each uncertain input (runs the sims)",
     .value = true},
    FLAG_END,
};

const struct flag_spec fidelity_spec = {
    .usage = "agentreplay fidelity [--external [--table FILE] | --sensitivity] [--json]",
    .about = "The cost model's predictions for every setup calibration.md lists as\n"
             "\"must predict\", next to the calibration point it was fitted to;\n"
             "--external: published decode and serving measurements of other models\n"
             "and GPUs, each with its error; --sensitivity: how the specialized/\n"
             "standard P90 interactivity ratio of the main job moves across the range\n"
             "of each uncertain input (engine/CALIBRATION.md).",
    .size = sizeof(struct fidelity_opts),
    .groups = {{"fidelity", fidelity_flags, 0}},
};

/* ---- fidelity --external ---- */

static int fidelity_external(const struct fidelity_opts *o)
{
    char err[ERR_LEN] = "";
    struct ext_row *rows;
    int n;
    if (ext_rows_load(o->table[0] ? o->table : NULL, &rows, &n, err) ||
        ext_rows_predict(rows, n, err)) {
        fprintf(stderr, "fidelity: %s\n", err);
        return EXIT_BADINPUT;
    }
    struct ext_stats st;
    ext_rows_stats(rows, n, &st);
    if (o->json) {
        json_t *j = json_object(), *arr = json_array();
        json_object_set_new(j, "schema_version", json_integer(BENCH_SCHEMA_VERSION));
        for (int i = 0; i < n; i++) {
            const struct ext_row *r = &rows[i];
            json_t *e = json_pack("{s:s, s:s, s:s, s:s}", "id", r->id, "role",
                                  ext_role_name(r->role), "source", r->source, "setup", r->setup);
            if (r->role == EXT_EFFICIENCY) {
                json_object_set_new(e, "sets", json_string(r->why));
            } else {
                json_object_set_new(e, "model", json_string(r->model));
                json_object_set_new(e, "gpu", json_string(r->gpu));
            }
            if (r->role == EXT_NOT_MODELLED)
                json_object_set_new(e, "why", json_string(r->why));
            if (r->role == EXT_VALIDATION) {
                json_object_set_new(e, "gpus", json_integer(r->gpus));
                json_object_set_new(e, "tp", json_integer(r->tp));
                json_object_set_new(e, "framework", json_string(r->framework));
                json_object_set_new(e, "concurrency", json_integer(r->concurrency));
                json_object_set_new(e, "isl", json_integer(r->isl));
                json_object_set_new(e, "osl", json_integer(r->osl));
                json_object_set_new(e, "metric", json_string(ext_metric_name(r->metric)));
                json_object_set_new(e, "predicted", json_real(r->predicted));
                json_object_set_new(e, "published", json_real(r->published));
                json_object_set_new(e, "error", json_real(r->error));
                json_object_set_new(e, "band", json_real(r->band));
                json_object_set_new(e, "within_band", json_boolean(r->within));
                json_object_set_new(e, "known_miss", r->known_miss ? json_string(r->why) : json_null());
            }
            json_array_append_new(arr, e);
        }
        json_object_set_new(j, "rows", arr);
        json_object_set_new(j, "summary",
                            json_pack("{s:i, s:i, s:f, s:f, s:s, s:i, s:i}", "validation_rows",
                                      st.validation, "gpu_kinds", st.gpu_kinds, "median_abs_error",
                                      st.median, "worst_abs_error", st.worst, "worst_row",
                                      st.validation ? rows[st.worst_row].id : "", "within_band",
                                      st.within, "known_misses", st.known_misses));
        print_json(j);
        free(rows);
        return EXIT_OK;
    }
    printf("External validation: published decode and serving measurements that are not\n"
           "Kimi K3, each predicted the way it was measured (serving: the engine in a\n"
           "closed loop of `conc` clients, 4 requests each; fixed: bench-decode). error =\n"
           "predicted / published - 1; TPOT in ms. Sources and setups: --json and\n"
           "engine/presets/validation/external.json.\n\n");
    /* The gpu column as wide as its longest preset name (the validation
     * variants, h200-vllm0.14, are longer than a GPU's). */
    int gw = 6;
    for (int i = 0; i < n; i++)
        if (rows[i].role == EXT_VALIDATION && (int)strlen(rows[i].gpu) > gw)
            gw = (int)strlen(rows[i].gpu);
    printf("%-11s %-*s %4s %-18s %-22s %4s %9s %-8s %9s %9s %7s  %s\n", "id", gw, "gpu", "tp",
           "model", "framework", "conc", "isl/osl", "metric", "predicted", "published", "error",
           "note");
    for (int i = 0; i < n; i++) {
        const struct ext_row *r = &rows[i];
        if (r->role != EXT_VALIDATION)
            continue;
        char io[24], fw[24];
        snprintf(io, sizeof io, "%lld/%lld", (long long)r->isl, (long long)r->osl);
        snprintf(fw, sizeof fw, "%.22s", r->framework);
        printf("%-11s %-*s %4d %-18.18s %-22s %4d %9s %-8.8s %9.3f %9.3f %+6.1f%%  %s\n", r->id,
               gw, r->gpu, r->tp, r->model, fw, r->concurrency, io, ext_metric_name(r->metric),
               r->predicted, r->published, 100 * r->error,
               r->within ? "" : r->known_miss ? "known miss" : "MISS");
    }
    printf("\n%d validation rows on %d GPU kinds: median |error| %.1f %%, worst %.1f %% (%s); "
           "%d within their band, %d known misses (reasons: --json).\n",
           st.validation, st.gpu_kinds, 100 * st.median, 100 * st.worst,
           st.validation ? rows[st.worst_row].id : "-", st.within, st.known_misses);
    printf("\nKept, not modelled:\n");
    for (int i = 0; i < n; i++)
        if (rows[i].role == EXT_NOT_MODELLED)
            printf("  %-19s %s\n", rows[i].id, rows[i].why);
    printf("\nEfficiency sources (set the kernel tables; no validation row is among them):\n");
    for (int i = 0; i < n; i++)
        if (rows[i].role == EXT_EFFICIENCY)
            printf("  %-19s %s\n", rows[i].id, rows[i].why);
    free(rows);
    return EXIT_OK;
}

/* Refuses a setup the deployment cannot hold, which would otherwise print
 * a throughput for it: a context beyond the model's, a batch whose state
 * slots or KV cache do not fit one replica (the engine's own memory plan,
 * engine.h). 0, or -1 with a message naming the flags. */
static int bench_check(const struct decode_opts *d, const struct model_preset *m, char *err)
{
    int64_t ctx = d->isl + d->osl;
    if (ctx > m->max_position)
        return err_set(err, "--isl %lld + --osl %lld = %lld tokens: more than %s's context of %lld",
                       (long long)d->isl, (long long)d->osl, (long long)ctx, m->name,
                       (long long)m->max_position);
    struct engine_config ec;
    engine_config_defaults(&ec);
    if (strlen(d->model) >= sizeof ec.model || strlen(d->gpu) >= sizeof ec.gpu)
        return err_set(err, "--model or --gpu: a name or path longer than %zu characters",
                       sizeof ec.model - 1);
    snprintf(ec.model, sizeof ec.model, "%s", d->model);
    snprintf(ec.gpu, sizeof ec.gpu, "%s", d->gpu);
    snprintf(ec.acceptance, sizeof ec.acceptance, "%s", d->acceptance);
    snprintf(ec.calibration, sizeof ec.calibration, "%s", d->calibration);
    ec.force_calibration = d->force;
    ec.gpus = d->gpus;
    ec.tp = d->tp;
    ec.backend = d->backend;
    ec.spec = d->spec;
    ec.draft = d->draft;
    ec.max_num_seqs = d->batch;
    ec.max_model_len = ctx;
    char e2[ERR_LEN];
    struct loop *l = loop_virtual_create();
    struct engine *e = engine_create(&ec, l, e2);
    int rc = 0;
    if (!e) {
        rc = err_set(err, "--batch %d of --isl %lld + --osl %lld on %d x %s, TP%d: %s", d->batch,
                     (long long)d->isl, (long long)d->osl, d->gpus, d->gpu, d->tp, e2);
    } else {
        json_t *j = engine_describe_json(e);
        int64_t kv = (int64_t)json_integer_value(
            json_object_get(json_object_get(j, "capacity"), "kv_tokens_per_replica"));
        int64_t need = (int64_t)d->batch * ((ctx + ec.block_size - 1) / ec.block_size) *
                       ec.block_size;
        if (need > kv)
            rc = err_set(err, "--batch %d of --isl %lld + --osl %lld needs %lld KV tokens; a "
                              "replica of %d x %s at TP%d holds %lld", d->batch, (long long)d->isl,
                         (long long)d->osl, (long long)need, d->tp, d->gpu, d->tp, (long long)kv);
        json_decref(j);
    }
    engine_destroy(e);
    loop_destroy(l);
    return rc;
}

int engine_cmd_bench_decode(int argc, char **argv)
{
    char err[ERR_LEN] = "";
    struct bench_opts o;
    int rc = cli_parse("bench-decode", &bench_decode_spec, &o, argc, argv, NULL, NULL);
    if (rc >= 0)
        return rc;
    struct decode_setup s;
    struct cost_decode_run r;
    if (decode_setup_open(&o.d, &s, err) || bench_check(&o.d, &s.m, err) ||
        decode_setup_run(&o.d, &s, &r, err)) {
        fprintf(stderr, "bench-decode: %s\n", err);
        decode_setup_close(&s);
        return EXIT_BADINPUT;
    }
    const char *cal[256];
    int n_cal = cost_calibrated_kernels(s.c, cal, 256);
    if (n_cal > 256)
        n_cal = 256;
    struct cost_batch bb;
    decode_breakdown_batch(&o.d, &s, &bb);
    struct cost_kernel_time kt[128];
    int n_kt = o.breakdown ? cost_breakdown(s.c, &bb, kt, 128) : 0;

    if (o.json) {
        json_t *j = json_object();
        json_object_set_new(j, "schema_version", json_integer(BENCH_SCHEMA_VERSION));
        json_object_set_new(j, "model", json_string(s.m.name));
        json_object_set_new(j, "gpu", json_string(s.g.name));
        json_object_set_new(j, "gpus", json_integer(o.d.gpus));
        json_object_set_new(j, "tp", json_integer(o.d.tp));
        json_object_set_new(j, "replicas", json_integer(o.d.gpus / o.d.tp));
        json_object_set_new(j, "backend", json_string(engine_backend_name(o.d.backend)));
        json_object_set_new(j, "batch", json_integer(o.d.batch));
        json_object_set_new(j, "isl", json_integer(o.d.isl));
        json_object_set_new(j, "osl", json_integer(o.d.osl));
        if (o.d.spec) {
            json_t *sp = json_object();
            json_object_set_new(sp, "drafter", json_string("dspark"));
            json_object_set_new(sp, "draft", json_integer(o.d.draft));
            json_object_set_new(sp, "acceptance", json_string(o.d.acceptance));
            json_object_set_new(sp, "tokens_per_step", json_real(s.accept_len));
            json_object_set_new(j, "spec", sp);
        } else {
            json_object_set_new(j, "spec", json_null());
        }
        json_object_set_new(j, "decode_tok_s", json_real(r.decode_tok_s));
        json_object_set_new(j, "per_request_tok_s", json_real(r.decode_tok_s / o.d.batch));
        json_object_set_new(j, "decode_s", json_real(r.decode_s));
        json_object_set_new(j, "prefill_ms", json_real(r.prefill_s * 1e3));
        json_object_set_new(j, "step_us", json_real(r.step_us));
        json_object_set_new(j, "layer_us", json_real(r.layer_us));
        json_t *lk = json_object();
        for (int k = 0; k < LAYER_KIND_COUNT; k++)
            if (s.m.n_layers_kind[k])
                json_object_set_new(lk, layer_kind_name(k), json_real(r.layer_us_kind[k]));
        json_object_set_new(j, "layer_us_by_kind", lk);
        json_object_set_new(j, "kernels_per_layer", json_integer(r.kernels_per_layer));
        json_object_set_new(j, "decode_steps", json_integer(r.steps));
        json_object_set_new(j, "fallback_steps", json_integer(r.fallback_steps));
        json_object_set_new(j, "drafter_us", json_real(r.drafter_us));
        json_object_set_new(j, "overhead_us", json_real(r.overhead_us));
        json_t *ca = json_array();
        for (int i = 0; i < n_cal; i++)
            json_array_append_new(ca, json_string(cal[i]));
        json_object_set_new(j, "calibrated_kernels", ca);
        if (o.breakdown) {
            json_t *bd = json_array();
            for (int i = 0; i < n_kt; i++) {
                json_t *e = json_object();
                json_object_set_new(e, "layer_kind", json_string(decode_scope_name(kt[i].layer_kind)));
                json_object_set_new(e, "kernel", json_string(kt[i].name));
                json_object_set_new(e, "us", json_real(kt[i].ns / 1e3));
                json_object_set_new(e, "calibrated", json_boolean(kt[i].calibrated));
                json_array_append_new(bd, e);
            }
            json_object_set_new(j, "breakdown_context", json_integer(o.d.isl + o.d.osl / 2));
            json_object_set_new(j, "breakdown", bd);
        }
        print_json(j);
    } else {
        printf("bench-decode: %s on %d x %s, TP%d (%d replicas), backend %s\n", s.m.name,
               o.d.gpus, s.g.name, o.d.tp, o.d.gpus / o.d.tp, engine_backend_name(o.d.backend));
        printf("  batch %d, isl %lld, osl %lld", o.d.batch, (long long)o.d.isl, (long long)o.d.osl);
        if (o.d.spec)
            printf(", DSpark draft %d, acceptance %s (%.3f tokens/step)", o.d.draft,
                   o.d.acceptance, s.accept_len);
        printf("\n");
        printf("  %-24s %12.2f tok/s\n", "decode (aggregate)", r.decode_tok_s);
        printf("  %-24s %12.2f tok/s\n", "per request", r.decode_tok_s / o.d.batch);
        printf("  %-24s %12.1f us\n", "step (mean)", r.step_us);
        printf("  %-24s %12.2f us\n", "layer (mean)", r.layer_us);
        for (int k = 0; k < LAYER_KIND_COUNT; k++)
            if (s.m.n_layers_kind[k])
                printf("    %-22s %12.2f us\n", layer_kind_name(k), r.layer_us_kind[k]);
        printf("  %-24s %12d\n", "kernels per layer", r.kernels_per_layer);
        printf("  %-24s %12.1f us\n", "drafter per step", r.drafter_us);
        printf("  %-24s %12.1f us\n", "overhead per step", r.overhead_us);
        printf("  %-24s %12lld of %lld\n", "fallback steps", (long long)r.fallback_steps,
               (long long)r.steps);
        printf("  %-24s %12.3f ms\n", "prefill", r.prefill_s * 1e3);
        if (n_cal) {
            printf("  calibrated kernels (%d):", n_cal);
            for (int i = 0; i < n_cal; i++)
                printf(" %s", cal[i]);
            printf("\n");
        }
        if (o.breakdown) {
            printf("  per-kernel time per layer at context %lld:\n", (long long)(o.d.isl + o.d.osl / 2));
            for (int i = 0; i < n_kt; i++)
                printf("    %-5s %-32s %10.3f us%s\n", decode_scope_name(kt[i].layer_kind), kt[i].name,
                       kt[i].ns / 1e3, kt[i].calibrated ? "  (calibrated)" : "");
        }
    }
    decode_setup_close(&s);
    return EXIT_OK;
}

/* ---- fidelity --sensitivity ---- */

/* The main job's headline: P90 interactivity of both paths at these
 * concurrencies on the built-in trace, Kimi K3 on 16 x GB300 TP16, DSpark
 * draft 7, 960 s of traffic per point (the main job's own points). */
static const int sens_conc[] = {1, 8, 64};
#define SENS_NC 3

/* P90 interactivity (tok/s/user) of one point with GPU preset `gpu`. */
static int sens_point(const struct run_env *env, const char *gpu, int backend, int conc,
                      double *p90, char *err)
{
    struct run_point p;
    run_point_init(&p);
    snprintf(p.ec.gpu, sizeof p.ec.gpu, "%s", gpu);
    p.ec.backend = backend;
    p.rc.concurrency = conc;
    p.rc.duration_ns = 960 * NS_PER_S;
    run_point_label(&p);
    void *run = NULL;
    int rc = run_point_exec(env, &p, &run, err);
    if (rc == EXIT_OK)
        *p90 = results_num(run, "metrics.interactivity_tok_s.p90");
    json_decref(run);
    return rc == EXIT_OK ? 0 : -1;
}

static int fidelity_sensitivity(bool json)
{
    char err[ERR_LEN] = "", dir[] = "/tmp/agentreplay-sens-XXXXXX";
    if (!mkdtemp(dir)) {
        fprintf(stderr, "fidelity: %s: cannot create a scratch folder\n", dir);
        return EXIT_FAIL;
    }
    struct run_trace tr;
    struct trace_read_opts tro;
    memset(&tro, 0, sizeof tro);
    if (run_trace_load(&tr, NULL, &tro, err)) {
        fprintf(stderr, "fidelity: %s\n", err);
        rmdir(dir);
        return EXIT_BADINPUT;
    }
    struct run_env env = {.trace = &tr, .command = "agentreplay fidelity --sensitivity",
                          .chrome_kernel_step = -1};
    int nv = sens_variant_count(), rc = EXIT_OK;
    double (*ratio)[SENS_NC] = calloc((size_t)nv, sizeof *ratio);
    double (*p90)[2][SENS_NC] = calloc((size_t)nv, sizeof *p90);
    struct sens_fit *fit = calloc((size_t)nv, sizeof *fit);
    for (int v = 0; v < nv && rc == EXIT_OK; v++) {
        if (sens_variant_write(v, dir, &fit[v], err)) {
            unlink(fit[v].path);
            rc = EXIT_FAIL;
            break;
        }
        for (int k = 0; k < SENS_NC && !fit[v].infeasible && rc == EXIT_OK; k++) {
            for (int be = 0; be < 2; be++)
                if (sens_point(&env, fit[v].path, be, sens_conc[k], &p90[v][be][k], err))
                    rc = EXIT_FAIL;
            ratio[v][k] = p90[v][1][k] / p90[v][0][k];
        }
        unlink(fit[v].path);
    }
    rmdir(dir);
    run_trace_free(&tr);
    if (rc != EXIT_OK) {
        fprintf(stderr, "fidelity: sensitivity: %s\n", err);
    } else if (json) {
        json_t *j = json_object(), *arr = json_array();
        json_object_set_new(j, "schema_version", json_integer(BENCH_SCHEMA_VERSION));
        json_object_set_new(j, "headline", json_string("P90 interactivity latency_specialized / auto, "
                                                       "Kimi K3, 16 x GB300 TP16, built-in trace, "
                                                       "DSpark draft 7, 960 s per point"));
        json_object_set_new(j, "concurrency", json_pack("[i, i, i]", sens_conc[0], sens_conc[1],
                                                        sens_conc[2]));
        for (int v = 0; v < nv; v++) {
            const struct sens_variant *sv = sens_variant_get(v);
            json_t *e = json_pack("{s:s, s:s, s:s, s:b}", "variant", sv->name, "input", sv->input,
                                  "range", sv->range, "fit_feasible", !fit[v].infeasible);
            if (!fit[v].infeasible) {
                json_object_set_new(e, "kernel_floor_us", json_real(fit[v].floor_ns / 1e3));
                json_object_set_new(e, "step_overhead_us", json_real(fit[v].overhead_ns / 1e3));
                json_t *r = json_array(), *a = json_array(), *s = json_array();
                for (int k = 0; k < SENS_NC; k++) {
                    json_array_append_new(r, json_real(ratio[v][k]));
                    json_array_append_new(a, json_real(p90[v][0][k]));
                    json_array_append_new(s, json_real(p90[v][1][k]));
                }
                json_object_set_new(e, "ratio", r);
                json_object_set_new(e, "p90_auto", a);
                json_object_set_new(e, "p90_latency_specialized", s);
            }
            json_array_append_new(arr, e);
        }
        json_object_set_new(j, "variants", arr);
        print_json(j);
    } else {
        printf("Sensitivity of the main job's headline: P90 interactivity, latency_specialized /\n"
               "auto, Kimi K3 on 16 x GB300 TP16, built-in trace, DSpark draft 7, 960 s per\n"
               "point; each row moves one input to an end of its cited range and re-fits the\n"
               "floor and step overhead to the calibration point (engine/CALIBRATION.md).\n\n");
        printf("%-20s %-52s %8s %8s %8s %8s %9s\n", "variant", "range", "floor_us", "ovh_us",
               "c=1", "c=8", "c=64");
        for (int v = 0; v < nv; v++) {
            const struct sens_variant *sv = sens_variant_get(v);
            if (fit[v].infeasible) {
                printf("%-20s %-52.52s %s\n", sv->name, sv->range, "no feasible fit");
                continue;
            }
            printf("%-20s %-52.52s %8.3f %8.1f %8.2f %8.2f %9.2f\n", sv->name, sv->range,
                   fit[v].floor_ns / 1e3, fit[v].overhead_ns / 1e3, ratio[v][0], ratio[v][1],
                   ratio[v][2]);
        }
        printf("\nspan over all variants:");
        for (int k = 0; k < SENS_NC; k++) {
            double lo = 1e300, hi = 0;
            for (int v = 0; v < nv; v++)
                if (!fit[v].infeasible) {
                    lo = ratio[v][k] < lo ? ratio[v][k] : lo;
                    hi = ratio[v][k] > hi ? ratio[v][k] : hi;
                }
            printf("  c=%d %.2f..%.2f", sens_conc[k], lo, hi);
        }
        printf("\n");
    }
    free(ratio);
    free(p90);
    free(fit);
    return rc;
}

int engine_cmd_fidelity(int argc, char **argv)
{
    struct fidelity_opts o;
    int rc = cli_parse("fidelity", &fidelity_spec, &o, argc, argv, NULL, NULL);
    if (rc >= 0)
        return rc;
    if (o.external && o.sensitivity)
        return cli_bad("fidelity", "--external and --sensitivity: one at a time");
    if (o.table[0] && !o.external)
        return cli_bad("fidelity", "--table goes with --external");
    if (o.external)
        return fidelity_external(&o);
    if (o.sensitivity)
        return fidelity_sensitivity(o.json);
    bool json = o.json;
    char err[ERR_LEN] = "";
    struct fidelity_row rows[64];
    int n = fidelity_rows(rows, 64, err);
    if (n < 0) {
        fprintf(stderr, "fidelity: %s\n", err);
        return EXIT_BADINPUT;
    }
    if (json) {
        json_t *j = json_object();
        json_object_set_new(j, "schema_version", json_integer(BENCH_SCHEMA_VERSION));
        json_object_set_new(j, "model", json_string("kimi-k3"));
        json_object_set_new(j, "metric", json_string("aggregate decode tok/s (metrics.md), "
                                                     "isl 1, osl 1000"));
        json_t *arr = json_array();
        for (int i = 0; i < n; i++) {
            const struct fidelity_row *r = &rows[i];
            json_t *e = json_object();
            json_object_set_new(e, "setup", json_string(r->setup));
            json_object_set_new(e, "gpu", json_string(r->gpu));
            json_object_set_new(e, "gpus", json_integer(r->gpus));
            json_object_set_new(e, "tp", json_integer(r->tp));
            json_object_set_new(e, "backend", json_string(r->backend));
            json_object_set_new(e, "batch", json_integer(r->batch));
            json_object_set_new(e, "spec", r->draft ? json_string("dspark") : json_null());
            json_object_set_new(e, "draft", json_integer(r->draft));
            json_object_set_new(e, "acceptance", r->draft ? json_real(r->acceptance) : json_null());
            json_object_set_new(e, "predicted_tok_s", json_real(r->predicted_tok_s));
            json_object_set_new(e, "published_tok_s",
                                r->published_tok_s > 0 ? json_real(r->published_tok_s) : json_null());
            json_object_set_new(e, "step_us", json_real(r->step_us));
            json_object_set_new(e, "layer_us", json_real(r->layer_us));
            json_t *lk = json_object();
            json_object_set_new(lk, "kda", json_real(r->layer_us_kind[LAYER_KDA]));
            json_object_set_new(lk, "mla", json_real(r->layer_us_kind[LAYER_MLA]));
            json_object_set_new(e, "layer_us_by_kind", lk);
            json_object_set_new(e, "kernels_per_layer", json_integer(r->kernels_per_layer));
            json_object_set_new(e, "fallback_steps", json_integer(r->fallback_steps));
            json_array_append_new(arr, e);
        }
        json_object_set_new(j, "rows", arr);
        print_json(j);
        return EXIT_OK;
    }
    printf("Fidelity: Kimi K3, aggregate decode tok/s (metrics.md), isl 1, osl 1000.\n"
           "Fitted to the calibration point only (engine/CALIBRATION.md); every other\n"
           "row is a prediction.\n\n");
    printf("%-15s %-6s %4s %4s %-20s %5s %-13s %11s %11s %9s %9s %5s\n", "setup", "gpu",
           "gpus", "tp", "backend", "batch", "spec", "predicted", "published", "step_us",
           "layer_us", "k/lyr");
    for (int i = 0; i < n; i++) {
        const struct fidelity_row *r = &rows[i];
        char spec[32] = "none", pub[16] = "-";
        if (r->draft)
            snprintf(spec, sizeof spec, "d%d fixed:%g", r->draft, r->acceptance);
        if (r->published_tok_s > 0)
            snprintf(pub, sizeof pub, "%.1f", r->published_tok_s);
        printf("%-15s %-6s %4d %4d %-20s %5d %-13s %11.1f %11s %9.1f %9.2f %5d\n", r->setup,
               r->gpu, r->gpus, r->tp, r->backend, r->batch, spec, r->predicted_tok_s, pub,
               r->step_us, r->layer_us, r->kernels_per_layer);
    }
    printf("\nPer-layer time at the calibration point (batch 1, mean over the decode):\n");
    for (int i = 0; i < 2; i++)
        printf("  %-20s %7.2f us per layer (KDA %.2f, MLA %.2f), %d kernels per layer\n",
               rows[i].backend, rows[i].layer_us, rows[i].layer_us_kind[LAYER_KDA],
               rows[i].layer_us_kind[LAYER_MLA], rows[i].kernels_per_layer);
    printf("  speed-up of the specialized path: %.2fx (published 1.88x)\n",
           rows[0].predicted_tok_s / rows[1].predicted_tok_s);
    /* The view the published per-layer trace of the paths gives: the
     * speculative verification step, 8 positions (draft 7 + 1). */
    const struct fidelity_row *vs = NULL, *va = NULL;
    for (int i = 0; i < n; i++)
        if (!strcmp(rows[i].setup, "dspark") && !strcmp(rows[i].gpu, "gb300")) {
            if (!strcmp(rows[i].backend, "auto"))
                va = &rows[i];
            else
                vs = &rows[i];
        }
    if (vs && va) {
        printf("\nPer-layer time at the verification step (batch 1, %d positions: draft %d + 1):\n",
               vs->draft + 1, vs->draft);
        for (int i = 0; i < 2; i++) {
            const struct fidelity_row *r = i ? va : vs;
            printf("  %-20s %7.2f us per layer (KDA %.2f, MLA %.2f), %d kernels per layer\n",
                   r->backend, r->layer_us, r->layer_us_kind[LAYER_KDA],
                   r->layer_us_kind[LAYER_MLA], r->kernels_per_layer);
        }
        printf("  fused / standard per-layer time: %.2f (no published per-layer trace found; "
               "engine/CALIBRATION.md)\n", vs->layer_us / va->layer_us);
    }
    printf("\nOther models and GPUs: `agentreplay fidelity --external`; robustness of the main\n"
           "job's headline: `agentreplay fidelity --sensitivity`.\n");
    return EXIT_OK;
}
