/* bench.c: `agentreplay bench-decode` (the fixed-batch decode measurement
 * of metrics.md, engine/fidelity.h) and `agentreplay fidelity` (the
 * model's predictions for every setup calibration.md lists, next to the
 * calibration point). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/accept.h"
#include "engine/clock/loop.h"
#include "engine/cost.h"
#include "engine/engine.h"
#include "engine/fidelity.h"
#include "engine/preset.h"
#include "replay/cli/cli.h"
#include "traces/base/err.h"

#define BENCH_SCHEMA_VERSION 1


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
    bool json;
};

static const struct flag fidelity_flags[] = {
    {"--json", 0, FLAG_BOOL, FLAG_AT(struct fidelity_opts, json), NULL, "the rows as JSON",
     .value = true},
    FLAG_END,
};

const struct flag_spec fidelity_spec = {
    .usage = "agentreplay fidelity [--json]",
    .about = "The cost model's predictions for every setup calibration.md lists as\n"
             "\"must predict\", next to the calibration point it was fitted to.",
    .size = sizeof(struct fidelity_opts),
    .groups = {{"fidelity", fidelity_flags, 0}},
};

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
        char *txt = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
        puts(txt);
        free(txt);
        json_decref(j);
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

int engine_cmd_fidelity(int argc, char **argv)
{
    struct fidelity_opts o;
    int rc = cli_parse("fidelity", &fidelity_spec, &o, argc, argv, NULL, NULL);
    if (rc >= 0)
        return rc;
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
        char *txt = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
        puts(txt);
        free(txt);
        json_decref(j);
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
    return EXIT_OK;
}
