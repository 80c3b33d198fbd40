/* fidelity_sens.c: the inputs of the sensitivity analysis (fidelity.h):
 * each variant is the GB300 preset with one uncertain input moved to an
 * end of the range its cited sources span, re-fitted to the calibration
 * point (so the calibration point still holds), written as a preset file
 * the engine can load. engine/CALIBRATION.md cites every range. */
#include "engine/fidelity.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cost.h"
#include "traces/base/err.h"
#include "traces/base/file.h"

#define CAL_SPEC_TOK_S 256.4
#define CAL_AUTO_TOK_S 136.4
#define K3_TP16_SHARD_MB 1.097 /* one Kimi K3 routed expert's TP16 shard, MB */

enum sens_op {
    OP_NONE,
    OP_GROUPED_AUTO,   /* the standard path's grouped table, scaled to `value` at the shard */
    OP_GROUPED_SPEC,   /* a flat grouped efficiency `value` for the specialized path */
    OP_MLA_VERIFY_TS,  /* the verification table: the CuTe-DSL kernel's */
    OP_MLA_VERIFY_NONE,/* no verification table: the q=1 table applies */
    OP_MLA_SPEC,       /* the specialized path takes the standard path's MLA tables */
    OP_MULTIMEM,       /* the multimem all-reduce at 16 KiB = `value` us */
    OP_CAL_RATIO,      /* the standard path's calibration figure = 256.4 / `value` */
};

static const struct sens_variant variants[] = {
    {"base", "as shipped", "", OP_NONE, 0},
    {"grouped-auto-low", "standard MoE grouped efficiency at the TP16 shard", "0.37: vLLM 0.24 Marlin MXFP4 lane, GB300",
     OP_GROUPED_AUTO, 0.37},
    {"grouped-auto-high", "standard MoE grouped efficiency at the TP16 shard", "0.46: FlashInfer TRT-LLM-gen w4a8 lane, GB300",
     OP_GROUPED_AUTO, 0.46},
    {"grouped-spec-low", "specialized MoE grouped efficiency", "0.41: the standard path's measured kernel at this shard",
     OP_GROUPED_SPEC, 0.41},
    {"grouped-spec-high", "specialized MoE grouped efficiency", "0.72: the same kernel at large shards (>= 4 MB)",
     OP_GROUPED_SPEC, 0.72},
    {"mla-verify-cutedsl", "standard MLA attention at verification", "CuTe-DSL decode (vLLM #41778 tokenspeed column)",
     OP_MLA_VERIFY_TS, 0},
    {"mla-verify-none", "standard MLA attention at verification", "reads the KV like one-position decode (q=1 table)",
     OP_MLA_VERIFY_NONE, 0},
    {"mla-spec-measured", "specialized MLA attention", "the standard path's measured tables (not 0.80)", OP_MLA_SPEC, 0},
    {"multimem-11", "standard TP16 all-reduce (multimem, 16 KiB)", "11 us (fit feasible 11-15; hardware.md 13)",
     OP_MULTIMEM, 11},
    {"multimem-15", "standard TP16 all-reduce (multimem, 16 KiB)", "15 us", OP_MULTIMEM, 15},
    {"cal-1.86x", "standard calibration figure (\"about 136.4\", 1.88x)", "1.86x: 137.8 tok/s", OP_CAL_RATIO, 1.86},
    {"cal-1.90x", "standard calibration figure (\"about 136.4\", 1.88x)", "1.90x: 134.9 tok/s", OP_CAL_RATIO, 1.90},
};

int sens_variant_count(void) { return (int)(sizeof variants / sizeof variants[0]); }
const struct sens_variant *sens_variant_get(int i)
{
    return i >= 0 && i < sens_variant_count() ? &variants[i] : NULL;
}

/* The tokenspeed (CuTe-DSL) column of vLLM PR #41778: 110, 107, 112, 112,
 * 176, 318, 610, 1218 us at batch 1..128 (q_len 4, kv_len 81920, FP8 KV). */
static json_t *tokenspeed_table(void)
{
    static const int b[] = {1, 2, 4, 8, 16, 32, 64, 128};
    static const double us[] = {110, 107, 112, 112, 176, 318, 610, 1218};
    json_t *pts = json_array();
    for (int i = 0; i < 8; i++) {
        double eff = b[i] * 81920.0 * 576 / (us[i] * 1e-6) / 8e12;
        json_array_append_new(pts, json_pack("[i, f, i]", b[i], round(eff * 1000) / 1000, 0));
    }
    return json_pack("{s:s, s:o, s:s}", "key", "seqs", "points", pts, "source",
                     "vLLM PR #41778 tokenspeed_mla_decode column (sensitivity)");
}

static json_t *path_obj(json_t *root, const char *path)
{
    json_t *kt = json_object_get(root, "kernel_tables");
    if (!kt) {
        kt = json_object();
        json_object_set_new(root, "kernel_tables", kt);
    }
    json_t *p = json_object_get(kt, path);
    if (!p) {
        p = json_object();
        json_object_set_new(kt, path, p);
    }
    return p;
}

static int apply(json_t *root, const struct sens_variant *v, char *err)
{
    json_t *aut = path_obj(root, "auto"), *spec = path_obj(root, "latency_specialized");
    switch (v->op) {
    case OP_NONE:
    case OP_CAL_RATIO:
        return 0;
    case OP_GROUPED_AUTO: {
        json_t *pts = json_object_get(json_object_get(aut, "grouped"), "points");
        double at = -1;
        size_t i;
        json_t *p;
        /* the value at the shard, then every point scaled by the same factor */
        json_array_foreach(pts, i, p) {
            if (fabs(json_number_value(json_array_get(p, 0)) - K3_TP16_SHARD_MB) < 1e-3)
                at = json_number_value(json_array_get(p, 1));
        }
        if (!(at > 0))
            return err_set(err, "sensitivity: the preset's grouped table has no %.3f MB point",
                           K3_TP16_SHARD_MB);
        json_array_foreach(pts, i, p) {
            double e = json_number_value(json_array_get(p, 1)) * v->value / at;
            json_array_set_new(p, 1, json_real(e < 1 ? e : 1));
        }
        return 0;
    }
    case OP_GROUPED_SPEC:
        json_object_set_new(spec, "grouped",
                            json_pack("{s:s, s:[[f, f, i]], s:s}", "key", "expert_shard_mb",
                                      "points", K3_TP16_SHARD_MB, v->value, 0, "source",
                                      "sensitivity"));
        return 0;
    case OP_MLA_VERIFY_TS:
        json_object_set_new(aut, "attention_mla_verify", tokenspeed_table());
        return 0;
    case OP_MLA_VERIFY_NONE:
        json_object_del(aut, "attention_mla_verify");
        return 0;
    case OP_MLA_SPEC: {
        json_t *a = json_object_get(aut, "attention_mla"), *b = json_object_get(aut, "attention_mla_verify");
        if (a)
            json_object_set_new(spec, "attention_mla", json_deep_copy(a));
        if (b)
            json_object_set_new(spec, "attention_mla_verify", json_deep_copy(b));
        return 0;
    }
    case OP_MULTIMEM:
        json_object_set_new(json_object_get(root, "allreduce_us"), "multimem_16k", json_real(v->value));
        return 0;
    }
    return err_set(err, "sensitivity: unknown variant");
}

int sens_variant_write(int i, const char *dir, struct sens_fit *out, char *err)
{
    const struct sens_variant *v = sens_variant_get(i);
    if (!v)
        return err_set(err, "sensitivity: no variant %d", i);
    memset(out, 0, sizeof *out);
    char src[4096];
    if (file_data_path("engine/presets/gpus/gb300.json", src, sizeof src) != 0)
        return err_set(err, "no engine/presets/gpus/gb300.json found");
    json_error_t je;
    json_t *root = json_load_file(src, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return err_set(err, "%s:%d:%d: %s", src, je.line, je.column, je.text);
    struct model_preset m;
    struct gpu_preset g;
    int rc = -1;
    snprintf(out->path, sizeof out->path, "%s/gb300-%s.json", dir, v->name);
    if (apply(root, v, err) || preset_load_model("kimi-k3", &m, err))
        goto out;
    /* Refit the floor and overhead to the calibration point with the
     * changed input (the fit reads the preset back from its file). */
    for (int pass = 0; pass < 2; pass++) {
        if (json_dump_file(root, out->path, JSON_INDENT(1) | JSON_PRESERVE_ORDER) != 0) {
            err_set(err, "%s: cannot write", out->path);
            goto out;
        }
        if (pass)
            break;
        if (preset_load_gpu(out->path, &g, err))
            goto out;
        double auto_tok_s = v->op == OP_CAL_RATIO ? CAL_SPEC_TOK_S / v->value : CAL_AUTO_TOK_S;
        if (cost_fit(&m, &g, 16, CAL_SPEC_TOK_S, auto_tok_s, &out->floor_ns, &out->overhead_ns,
                     err)) {
            out->infeasible = true;
            rc = 0;
            goto out;
        }
        json_object_set_new(root, "fit",
                            json_pack("{s:f, s:f}", "kernel_floor_us", out->floor_ns / 1e3,
                                      "step_overhead_us", out->overhead_ns / 1e3));
    }
    rc = 0;
out:
    json_decref(root);
    return rc;
}
