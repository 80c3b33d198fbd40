/* preset.c: model and GPU presets from JSON data files (Jansson), and the
 * derived per-GPU sizes (weights, KV per token, recurrent state per
 * sequence) that the memory planner, the cost model and `engine info`
 * share. File formats: engine/presets/README.md. */
#include "engine/preset.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "traces/base/err.h"
#include "traces/base/file.h"
#include "traces/base/limits.h"

/* ---- small JSON readers that name the field in their messages ---- */

struct pctx {
    const char *label; /* file name or "<memory>" */
    char *err;
    int failed;
};

static int pfail(struct pctx *c, const char *field, const char *fmt, double v,
                 const char *limit)
{
    if (!c->failed)
        err_set(c->err, "%s: field '%s': %s (got %.10g%s%s)", c->label, field,
                fmt, v, limit ? ", limit " : "", limit ? limit : "");
    c->failed = 1;
    return -1;
}

static int pfail_s(struct pctx *c, const char *field, const char *what)
{
    if (!c->failed)
        err_set(c->err, "%s: field '%s': %s", c->label, field, what);
    c->failed = 1;
    return -1;
}

/* Looks up a dotted path ("ffn.experts") in obj. */
static json_t *jget(json_t *obj, const char *path)
{
    char buf[128];
    snprintf(buf, sizeof buf, "%s", path);
    json_t *cur = obj;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ".", &save); tok; tok = strtok_r(NULL, ".", &save)) {
        if (!json_is_object(cur))
            return NULL;
        cur = json_object_get(cur, tok);
        if (!cur)
            return NULL;
    }
    return cur;
}

/* A number in [lo, hi]; missing: required -> error, else *out = dflt. */
static double jnum(struct pctx *c, json_t *root, const char *path, double lo,
                   double hi, bool required, double dflt)
{
    json_t *v = jget(root, path);
    if (!v || json_is_null(v)) {
        if (required)
            pfail_s(c, path, "missing");
        return dflt;
    }
    if (!json_is_number(v)) {
        pfail_s(c, path, "must be a number");
        return dflt;
    }
    double x = json_number_value(v);
    char lim[64];
    if (!isfinite(x) || x < lo) {
        snprintf(lim, sizeof lim, ">= %.10g", lo);
        pfail(c, path, "out of range", x, lim);
        return dflt;
    }
    if (x > hi) {
        snprintf(lim, sizeof lim, "<= %.10g", hi);
        pfail(c, path, "out of range", x, lim);
        return dflt;
    }
    return x;
}

static int jint(struct pctx *c, json_t *root, const char *path, int lo, int hi,
                bool required, int dflt)
{
    double x = jnum(c, root, path, lo, hi, required, dflt);
    if (x != floor(x)) {
        pfail(c, path, "must be an integer", x, NULL);
        return dflt;
    }
    return (int)x;
}

static bool jbool(struct pctx *c, json_t *root, const char *path, bool dflt)
{
    json_t *v = jget(root, path);
    if (!v || json_is_null(v))
        return dflt;
    if (!json_is_boolean(v)) {
        pfail_s(c, path, "must be true or false");
        return dflt;
    }
    return json_is_true(v);
}

static void jstr(struct pctx *c, json_t *root, const char *path, char *out,
                 size_t n, bool required)
{
    json_t *v = jget(root, path);
    if (!v) {
        if (required)
            pfail_s(c, path, "missing");
        return;
    }
    if (!json_is_string(v) || json_string_length(v) == 0) {
        pfail_s(c, path, "must be a non-empty string");
        return;
    }
    if (json_string_length(v) >= n) {
        pfail(c, path, "string too long", (double)json_string_length(v), NULL);
        return;
    }
    snprintf(out, n, "%s", json_string_value(v));
}

static json_t *parse_json(const char *text, size_t len, const char *label, char *err)
{
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        err_set(err, "%s:%d:%d: %s", label, je.line, je.column, je.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        err_set(err, "%s:1:1: a preset must be a JSON object", label);
        json_decref(root);
        return NULL;
    }
    return root;
}

const char *layer_kind_name(int kind)
{
    switch (kind) {
    case LAYER_KDA: return "kda";
    case LAYER_MLA: return "mla";
    case LAYER_GQA: return "gqa";
    }
    return "?";
}

static int kind_from_name(const char *s)
{
    for (int k = 0; k < LAYER_KIND_COUNT; k++)
        if (strcmp(s, layer_kind_name(k)) == 0)
            return k;
    return -1;
}

/* ---- models ---- */

int preset_parse_model(const char *text, size_t len, const char *label,
                       struct model_preset *m, char *err)
{
    json_t *root = parse_json(text, len, label, err);
    if (!root)
        return -1;
    struct pctx c = {label, err, 0};
    memset(m, 0, sizeof *m);
    jstr(&c, root, "name", m->name, sizeof m->name, true);
    jstr(&c, root, "source", m->source, sizeof m->source, true);
    m->n_layers = jint(&c, root, "layers", 1, PRESET_MAX_LAYERS, true, 1);
    m->hidden = jint(&c, root, "hidden", 1, 1 << 20, true, 1);
    m->vocab = jint(&c, root, "vocab", 1, 1 << 24, true, 1);
    m->max_position = (int64_t)jnum(&c, root, "max_position", 1, 1e12, true, 1);

    /* Layer kinds: "attention": "mla" for every layer, or "layer_kinds":
     * {"kda": [1-based layers], "mla": [...]} covering each layer once. */
    json_t *lk = json_object_get(root, "layer_kinds");
    json_t *att = json_object_get(root, "attention_kind");
    if (!c.failed && lk && att) {
        pfail_s(&c, "layer_kinds", "give either layer_kinds or attention_kind, not both");
    } else if (!c.failed && att) {
        int k = json_is_string(att) ? kind_from_name(json_string_value(att)) : -1;
        if (k < 0)
            pfail_s(&c, "attention_kind", "must be \"kda\", \"mla\" or \"gqa\"");
        else
            for (int i = 0; i < m->n_layers; i++)
                m->layer_kind[i] = (uint8_t)k;
    } else if (!c.failed && lk) {
        uint8_t seen[PRESET_MAX_LAYERS] = {0};
        if (!json_is_object(lk)) {
            pfail_s(&c, "layer_kinds", "must be an object of layer lists");
        } else {
            const char *key;
            json_t *arr;
            json_object_foreach(lk, key, arr) {
                char path[96];
                snprintf(path, sizeof path, "layer_kinds.%s", key);
                int k = kind_from_name(key);
                if (k < 0) {
                    pfail_s(&c, path, "unknown layer kind (kda, mla, gqa)");
                    break;
                }
                if (!json_is_array(arr)) {
                    pfail_s(&c, path, "must be an array of 1-based layer numbers");
                    break;
                }
                size_t i;
                json_t *v;
                json_array_foreach(arr, i, v) {
                    char p2[128];
                    snprintf(p2, sizeof p2, "%s[%zu]", path, i);
                    if (!json_is_integer(v)) {
                        pfail_s(&c, p2, "must be an integer");
                        break;
                    }
                    json_int_t n = json_integer_value(v);
                    if (n < 1 || n > m->n_layers) {
                        char lim[32];
                        snprintf(lim, sizeof lim, "1..%d", m->n_layers);
                        pfail(&c, p2, "layer number out of range", (double)n, lim);
                        break;
                    }
                    if (seen[n - 1]) {
                        pfail(&c, p2, "layer listed twice", (double)n, NULL);
                        break;
                    }
                    seen[n - 1] = 1;
                    m->layer_kind[n - 1] = (uint8_t)k;
                }
                if (c.failed)
                    break;
            }
            for (int i = 0; !c.failed && i < m->n_layers; i++)
                if (!seen[i])
                    pfail(&c, "layer_kinds", "layer has no kind", i + 1, NULL);
        }
    } else if (!c.failed) {
        pfail_s(&c, "attention_kind", "missing (or give layer_kinds)");
    }
    for (int i = 0; i < m->n_layers; i++)
        m->n_layers_kind[m->layer_kind[i]]++;

    /* Attention dimensions, per kind present. */
    bool has_kda = m->n_layers_kind[LAYER_KDA] > 0;
    bool has_mla = m->n_layers_kind[LAYER_MLA] > 0;
    bool has_gqa = m->n_layers_kind[LAYER_GQA] > 0;
    m->n_heads = jint(&c, root, "attention.heads", 1, 4096, has_mla || has_gqa, 0);
    m->n_kv_heads = jint(&c, root, "attention.kv_heads", 1, 4096, has_gqa, m->n_heads);
    m->head_dim = jint(&c, root, "attention.head_dim", 1, 4096, has_gqa, 0);
    m->q_lora_rank = jint(&c, root, "attention.q_lora_rank", 0, 1 << 16, false, 0);
    m->kv_lora_rank = jint(&c, root, "attention.kv_lora_rank", 1, 1 << 16, has_mla, 0);
    m->qk_nope_dim = jint(&c, root, "attention.qk_nope_dim", 1, 4096, has_mla, 0);
    m->qk_rope_dim = jint(&c, root, "attention.qk_rope_dim", 0, 4096, has_mla, 0);
    m->v_head_dim = jint(&c, root, "attention.v_head_dim", 1, 4096, has_mla, 0);
    m->mla_output_gate = jbool(&c, root, "attention.output_gate", false);
    if (!c.failed && has_gqa && m->n_heads % m->n_kv_heads != 0)
        pfail(&c, "attention.kv_heads", "must divide attention.heads",
              m->n_kv_heads, NULL);
    m->kda_heads = jint(&c, root, "kda.heads", 1, 4096, has_kda, 0);
    m->kda_head_dim = jint(&c, root, "kda.head_dim", 1, 4096, has_kda, 0);
    m->kda_conv = jint(&c, root, "kda.conv", 0, 64, has_kda, 0);
    m->kda_full_rank_gate = jbool(&c, root, "kda.full_rank_gate", false);

    /* FFN / MoE. */
    m->dense_intermediate = jint(&c, root, "ffn.dense_intermediate", 1, 1 << 22, true, 1);
    m->n_experts = jint(&c, root, "ffn.experts", 0, 1 << 16, false, 0);
    bool moe = m->n_experts > 0;
    m->experts_per_token = jint(&c, root, "ffn.experts_per_token", 1, 1 << 16, moe, 0);
    m->n_shared_experts = jint(&c, root, "ffn.shared_experts", 0, 1024, false, 0);
    m->expert_intermediate = jint(&c, root, "ffn.expert_intermediate", 1, 1 << 22, moe, 0);
    m->expert_latent = jint(&c, root, "ffn.expert_latent", 0, 1 << 22, false, 0);
    int first_dense = jint(&c, root, "ffn.first_k_dense", 0, PRESET_MAX_LAYERS, false, 0);
    if (!c.failed && moe && m->experts_per_token > m->n_experts) {
        char lim[32];
        snprintf(lim, sizeof lim, "ffn.experts = %d", m->n_experts);
        pfail(&c, "ffn.experts_per_token", "more than the experts", m->experts_per_token, lim);
    }
    for (int i = 0; i < m->n_layers; i++) {
        m->layer_moe[i] = moe && i >= first_dense;
        m->n_moe_layers += m->layer_moe[i];
    }

    /* Precisions. */
    m->bits_trunk = jnum(&c, root, "precision_bits.trunk", 1, 64, true, 16);
    m->bits_expert = jnum(&c, root, "precision_bits.expert", 1, 64, moe, m->bits_trunk);
    m->bits_shared = jnum(&c, root, "precision_bits.shared", 1, 64, false, m->bits_trunk);
    m->bits_kv = jnum(&c, root, "precision_bits.kv", 1, 64, true, 16);
    m->bits_state = jnum(&c, root, "precision_bits.state", 1, 64, has_kda, 32);
    m->expert_group = jint(&c, root, "precision_bits.expert_group", 0, 1 << 16, false, 0);

    /* Drafter (optional). */
    m->drafter_params = jnum(&c, root, "drafter.params", 0, 1e13, false, 0);
    m->drafter_layers = jint(&c, root, "drafter.layers", 0, 1024, m->drafter_params > 0, 0);
    m->drafter_bits = jnum(&c, root, "drafter.bits", 1, 64, false, 16);

    /* Acceptance points. */
    json_t *acc = json_object_get(root, "acceptance");
    if (!c.failed && acc) {
        if (!json_is_array(acc) || json_array_size(acc) > 8) {
            pfail_s(&c, "acceptance", "must be an array of at most 8 {draft, length}");
        } else {
            size_t i;
            json_t *v;
            json_array_foreach(acc, i, v) {
                char pd[64], pl[64];
                snprintf(pd, sizeof pd, "acceptance[%zu].draft", i);
                snprintf(pl, sizeof pl, "acceptance[%zu].length", i);
                if (!json_is_object(v)) {
                    pfail_s(&c, pd, "entry must be an object");
                    break;
                }
                int d = jint(&c, v, "draft", 1, 64, true, 1);
                double l = jnum(&c, v, "length", 1, 65, true, 1);
                if (c.failed) {
                    /* re-word with the full path */
                    err_set(err, "%s: field '%s' or '%s': missing or out of range",
                            label, pd, pl);
                    break;
                }
                if (l > d + 1) {
                    char lim[32];
                    snprintf(lim, sizeof lim, "draft + 1 = %d", d + 1);
                    pfail(&c, pl, "acceptance length above draft + 1", l, lim);
                    break;
                }
                m->accept_draft[i] = d;
                m->accept_len[i] = l;
                m->n_accept_points++;
            }
        }
    }
    m->specialized_path = jbool(&c, root, "specialized_path", false);
    json_decref(root);
    return c.failed ? -1 : 0;
}

/* ---- GPUs ---- */

static const char *const kt_class_names[KT_CLASS_COUNT] = {
    "gemm", "gemm_bf16", "gemm_fp8", "grouped", "attention", "attention_gqa",
    "attention_mla", "attention_mla_verify", "stream", "elementwise",
    "gemm_bf16_flops", "gemm_fp8_flops",
};
static const char *const kt_key_names[] = {"tokens", "seqs", "expert_shard_mb"};
static const char *const kt_path_names[KT_PATHS] = {"auto", "latency_specialized"};
static const char *const ar_kind_names[AR_TABLE_KINDS] = {"oneshot", "library"};

const char *kt_class_name(int cls)
{
    return cls >= 0 && cls < KT_CLASS_COUNT ? kt_class_names[cls] : "?";
}

const char *kt_key_name(int key)
{
    return key >= 0 && key <= KT_KEY_SHARD_MB ? kt_key_names[key] : "?";
}

void kt_lookup(const struct kt_table *t, double x, double *eff, double *extra_ns)
{
    ASSERT(t->n > 0);
    int n = t->n;
    if (!(x > t->x[0])) {
        *eff = t->eff[0], *extra_ns = t->extra_ns[0];
        return;
    }
    if (x >= t->x[n - 1]) {
        *eff = t->eff[n - 1], *extra_ns = t->extra_ns[n - 1];
        return;
    }
    int i = 1;
    while (t->x[i] < x)
        i++;
    double f = log2(x / t->x[i - 1]) / log2(t->x[i] / t->x[i - 1]);
    *eff = t->eff[i - 1] + (t->eff[i] - t->eff[i - 1]) * f;
    *extra_ns = t->extra_ns[i - 1] + (t->extra_ns[i] - t->extra_ns[i - 1]) * f;
}

/* An array of numbers [x, y(, z)] at path; n numbers wanted (n_opt of
 * them optional at the end). 0 or -1 (c failed). */
static int jpoint(struct pctx *c, json_t *v, const char *path, int n, int n_opt, double *out)
{
    size_t len = json_is_array(v) ? json_array_size(v) : 0;
    if (!json_is_array(v) || len > (size_t)n || len < (size_t)(n - n_opt)) {
        char what[64];
        snprintf(what, sizeof what, "must be an array of %d%s numbers", n - n_opt,
                 n_opt ? " or more" : "");
        return pfail_s(c, path, what);
    }
    for (int i = 0; i < n; i++) {
        json_t *x = (size_t)i < len ? json_array_get(v, (size_t)i) : NULL;
        if (!x) {
            out[i] = 0;
            continue;
        }
        if (!json_is_number(x) || !isfinite(json_number_value(x)))
            return pfail_s(c, path, "must hold finite numbers");
        out[i] = json_number_value(x);
    }
    return 0;
}

/* Index of s in names[0..n), or -1. */
static int name_index(const char *s, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(s, names[i]))
            return i;
    return -1;
}

/* Every table cites its source: o.source a non-empty string. */
static int need_source(struct pctx *c, json_t *o, const char *path)
{
    char p[192];
    snprintf(p, sizeof p, "%s.source", path);
    json_t *sv = json_object_get(o, "source");
    if (!json_is_string(sv) || json_string_length(sv) == 0)
        return pfail_s(c, p, "missing (every table cites its source)");
    return 0;
}

/* o.points: an array of 1..max points; NULL (c failed) otherwise. */
static json_t *points_of(struct pctx *c, json_t *o, const char *path, int max)
{
    char p[192];
    snprintf(p, sizeof p, "%s.points", path);
    json_t *pts = json_object_get(o, "points");
    if (!json_is_array(pts) || json_array_size(pts) < 1 || json_array_size(pts) > (size_t)max) {
        char what[64];
        snprintf(what, sizeof what, "must be an array of 1..%d points", max);
        pfail_s(c, p, what);
        return NULL;
    }
    return pts;
}

/* One kernel table: {"key": K, "points": [[x, eff, extra_us], ...],
 * "source": "..."}; keys strictly increasing and positive, efficiencies in
 * (0, 1], extra time in [-1000, 1000] us. */
static void parse_kt(struct pctx *c, json_t *v, const char *path, struct kt_table *t)
{
    char p[160];
    if (!json_is_object(v)) {
        pfail_s(c, path, "must be an object {key, points, source}");
        return;
    }
    if (need_source(c, v, path))
        return;
    snprintf(p, sizeof p, "%s.key", path);
    json_t *kv = json_object_get(v, "key");
    t->key = json_is_string(kv) ? name_index(json_string_value(kv), kt_key_names, 3) : -1;
    if (t->key < 0) {
        pfail_s(c, p, "must be \"tokens\", \"seqs\" or \"expert_shard_mb\"");
        return;
    }
    json_t *pts = points_of(c, v, path, KT_MAX_POINTS);
    if (!pts)
        return;
    snprintf(p, sizeof p, "%s.points", path);
    size_t i;
    json_t *pt;
    json_array_foreach(pts, i, pt) {
        char pi[176];
        snprintf(pi, sizeof pi, "%s[%zu]", p, i);
        double a[3];
        if (jpoint(c, pt, pi, 3, 1, a))
            return;
        if (!(a[0] > 0) || a[0] > 1e9)
            pfail(c, pi, "key out of range", a[0], "(0, 1e9]");
        else if (i > 0 && !(a[0] > t->x[i - 1]))
            pfail(c, pi, "keys must increase", a[0], NULL);
        else if (!(a[1] > 0) || a[1] > 1)
            pfail(c, pi, "efficiency out of range", a[1], "(0, 1]");
        else if (a[2] < -1000 || a[2] > 1000)
            pfail(c, pi, "extra_us out of range", a[2], "[-1000, 1000]");
        if (c->failed)
            return;
        t->x[i] = a[0];
        t->eff[i] = a[1];
        t->extra_ns[i] = a[2] * 1e3;
    }
    t->n = (int)json_array_size(pts);
}

/* "grouped_flops": [{"expert_shard_mb": MB, "key": "tokens", "points":
 * ..., "source": ...}, ...], shards increasing. */
static void parse_gflops(struct pctx *c, json_t *v, const char *path, struct gpu_preset *g,
                         int p)
{
    size_t n = json_is_array(v) ? json_array_size(v) : 0;
    if (n < 1 || n > KT_GFLOPS_MAX) {
        char what[80];
        snprintf(what, sizeof what, "must be an array of 1..%d tables (one per expert shard)",
                 KT_GFLOPS_MAX);
        pfail_s(c, path, what);
        return;
    }
    size_t i;
    json_t *t;
    json_array_foreach(v, i, t) {
        char pi[176];
        snprintf(pi, sizeof pi, "%s[%zu]", path, i);
        json_t *mb = json_is_object(t) ? json_object_get(t, "expert_shard_mb") : NULL;
        double x = json_is_number(mb) ? json_number_value(mb) : 0;
        if (!(x > 0) || x > 1e6 || (i > 0 && !(x > g->kt_gflops_mb[p][i - 1]))) {
            char pm[192];
            snprintf(pm, sizeof pm, "%s.expert_shard_mb", pi);
            pfail_s(c, pm, "must be a positive number, increasing over the tables");
            return;
        }
        g->kt_gflops_mb[p][i] = x;
        parse_kt(c, t, pi, &g->kt_gflops[p][i]);
        if (c->failed)
            return;
        if (g->kt_gflops[p][i].key != KT_KEY_TOKENS) {
            pfail_s(c, pi, "grouped_flops tables are keyed by tokens");
            return;
        }
    }
    g->n_gflops[p] = (int)n;
}

/* "kernel_tables": {"auto": {class: table, ...}, "latency_specialized":
 * {...}}, both paths optional. */
static void parse_kernel_tables(struct pctx *c, json_t *root, struct gpu_preset *g)
{
    json_t *kt = json_object_get(root, "kernel_tables");
    if (!kt || c->failed)
        return;
    if (!json_is_object(kt)) {
        pfail_s(c, "kernel_tables", "must be an object of paths");
        return;
    }
    const char *pname;
    json_t *pv;
    json_object_foreach(kt, pname, pv) {
        char p[96];
        snprintf(p, sizeof p, "kernel_tables.%.40s", pname);
        int path = name_index(pname, kt_path_names, KT_PATHS);
        if (path < 0) {
            pfail_s(c, p, "unknown path (auto, latency_specialized)");
            return;
        }
        if (!json_is_object(pv)) {
            pfail_s(c, p, "must be an object of kernel classes");
            return;
        }
        const char *cname;
        json_t *cv;
        json_object_foreach(pv, cname, cv) {
            char pc[144];
            snprintf(pc, sizeof pc, "%s.%.40s", p, cname);
            if (!strcmp(cname, "grouped_flops")) {
                parse_gflops(c, cv, pc, g, path);
                if (c->failed)
                    return;
                continue;
            }
            int cls = name_index(cname, kt_class_names, KT_CLASS_COUNT);
            if (cls < 0) {
                pfail_s(c, pc, "unknown kernel class");
                return;
            }
            parse_kt(c, cv, pc, &g->kt[path][cls]);
            if (c->failed)
                return;
            if (cls == KT_GROUPED ? g->kt[path][cls].key != KT_KEY_SHARD_MB
                                  : g->kt[path][cls].key == KT_KEY_SHARD_MB) {
                pfail_s(c, pc, cls == KT_GROUPED ? "grouped tables are keyed by expert_shard_mb"
                                                 : "only grouped tables are keyed by expert_shard_mb");
                return;
            }
        }
    }
}

/* "allreduce_tables": {"oneshot": [{"ranks": R, "points": [[bytes, us],
 * ...], "source": "..."}, ...], "library": [...]}. */
static void parse_ar_tables(struct pctx *c, json_t *root, struct gpu_preset *g)
{
    json_t *at = json_object_get(root, "allreduce_tables");
    if (!at || c->failed)
        return;
    if (!json_is_object(at)) {
        pfail_s(c, "allreduce_tables", "must be an object");
        return;
    }
    const char *kname;
    json_t *kv;
    json_object_foreach(at, kname, kv) {
        char p[96];
        snprintf(p, sizeof p, "allreduce_tables.%.40s", kname);
        int kind = name_index(kname, ar_kind_names, AR_TABLE_KINDS);
        if (kind < 0) {
            pfail_s(c, p, "unknown all-reduce (oneshot, library)");
            return;
        }
        if (!json_is_array(kv) || json_array_size(kv) > AR_MAX_RANKS) {
            char what[64];
            snprintf(what, sizeof what, "must be an array of at most %d tables", AR_MAX_RANKS);
            pfail_s(c, p, what);
            return;
        }
        size_t i;
        json_t *e;
        json_array_foreach(kv, i, e) {
            char pe[112], pp[160];
            snprintf(pe, sizeof pe, "%s[%zu]", p, i);
            struct ar_table *t = &g->ar[kind][i];
            memset(t, 0, sizeof *t);
            if (!json_is_object(e)) {
                pfail_s(c, pe, "must be an object {ranks, points, source}");
                return;
            }
            if (need_source(c, e, pe))
                return;
            snprintf(pp, sizeof pp, "%s.ranks", pe);
            t->ranks = jint(c, e, "ranks", 2, 1 << 16, true, 2);
            for (size_t j = 0; !c->failed && j < i; j++)
                if (g->ar[kind][j].ranks == t->ranks)
                    pfail(c, pp, "rank count listed twice", t->ranks, NULL);
            json_t *pts = c->failed ? NULL : points_of(c, e, pe, AR_MAX_POINTS);
            if (!pts)
                return;
            snprintf(pp, sizeof pp, "%s.points", pe);
            size_t j;
            json_t *pt;
            json_array_foreach(pts, j, pt) {
                char pj[176];
                snprintf(pj, sizeof pj, "%s[%zu]", pp, j);
                double a[2];
                if (jpoint(c, pt, pj, 2, 0, a))
                    return;
                if (!(a[0] >= 1) || a[0] > 1e12)
                    pfail(c, pj, "bytes out of range", a[0], "[1, 1e12]");
                else if (j > 0 && !(a[0] > t->bytes[j - 1]))
                    pfail(c, pj, "message sizes must increase", a[0], NULL);
                else if (!(a[1] >= 0) || a[1] > 1e6)
                    pfail(c, pj, "latency out of range", a[1], "[0, 1e6] us");
                if (c->failed)
                    return;
                t->bytes[j] = a[0];
                t->ns[j] = a[1] * 1e3;
            }
            t->n = (int)json_array_size(pts);
        }
        g->n_ar[kind] = (int)json_array_size(kv);
    }
}

int preset_parse_gpu(const char *text, size_t len, const char *label,
                     struct gpu_preset *g, char *err)
{
    json_t *root = parse_json(text, len, label, err);
    if (!root)
        return -1;
    struct pctx c = {label, err, 0};
    memset(g, 0, sizeof *g);
    jstr(&c, root, "name", g->name, sizeof g->name, true);
    jstr(&c, root, "source", g->source, sizeof g->source, true);
    jstr(&c, root, "family", g->family, sizeof g->family, true);
    g->hbm_bytes = jnum(&c, root, "hbm_gb", 1, 1e6, true, 1) * 1e9;
    g->hbm_bw = jnum(&c, root, "hbm_tb_s", 0.01, 1e3, true, 1) * 1e12;
    g->flops_fp4 = jnum(&c, root, "pflops.fp4", 0, 1e3, false, 0) * 1e15;
    g->flops_fp8 = jnum(&c, root, "pflops.fp8", 0.001, 1e3, true, 1) * 1e15;
    g->flops_bf16 = jnum(&c, root, "pflops.bf16", 0.001, 1e3, true, 1) * 1e15;
    g->link_bw = jnum(&c, root, "link_gb_s", 1, 1e6, true, 1) * 1e9;
    g->nvlink_domain = jint(&c, root, "nvlink_domain", 1, 1 << 20, true, 1);
    g->eff_stream = jnum(&c, root, "efficiency.stream", 0.01, 1, true, 1);
    g->eff_gemm = jnum(&c, root, "efficiency.gemm", 0.01, 1, true, 1);
    g->eff_grouped = jnum(&c, root, "efficiency.grouped", 0.01, 1, true, 1);
    g->eff_attention = jnum(&c, root, "efficiency.attention", 0.01, 1, true, 1);
    g->eff_elementwise = jnum(&c, root, "efficiency.elementwise", 0.01, 1, true, 1);
    g->eff_compute = jnum(&c, root, "efficiency.compute", 0.01, 1, true, 1);
    g->ar_oneshot_ns = jnum(&c, root, "allreduce_us.oneshot_16k", 0, 1e6, true, 0) * 1e3;
    g->ar_oneshot_1m_ns = jnum(&c, root, "allreduce_us.oneshot_1m", 0, 1e6, true, 0) * 1e3;
    g->ar_library_ns = jnum(&c, root, "allreduce_us.library_16k", 0, 1e6, true, 0) * 1e3;
    g->ar_library_1m_ns = jnum(&c, root, "allreduce_us.library_1m", 0, 1e6, true, 0) * 1e3;
    g->ar_multimem_ns = jnum(&c, root, "allreduce_us.multimem_16k", 0, 1e6, false, 0) * 1e3;
    g->ar_multimem_1m_ns = jnum(&c, root, "allreduce_us.multimem_1m", 0, 1e6, false, 0) * 1e3;
    g->kernel_floor_ns = jnum(&c, root, "fit.kernel_floor_us", 0, 1e6, true, 0) * 1e3;
    g->step_overhead_ns = jnum(&c, root, "fit.step_overhead_us", 0, 1e9, true, 0) * 1e3;
    parse_kernel_tables(&c, root, g);
    parse_ar_tables(&c, root, g);
    json_decref(root);
    return c.failed ? -1 : 0;
}

/* ---- loading by name or path ---- */

static int load_file(const char *name_or_path, const char *dir, char *path,
                     size_t n, char *err)
{
    /* A path (has a slash or ends in .json) is used as given. */
    size_t l = strlen(name_or_path);
    if (l == 0)
        return err_set(err, "empty %s preset name", dir);
    if (strchr(name_or_path, '/') || (l > 5 && strcmp(name_or_path + l - 5, ".json") == 0)) {
        snprintf(path, n, "%s", name_or_path);
        return 0;
    }
    for (const char *s = name_or_path; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
              (*s >= '0' && *s <= '9') || *s == '-' || *s == '_' || *s == '.'))
            return err_set(err, "bad %s preset name '%s'", dir, name_or_path);
    char rel[256];
    snprintf(rel, sizeof rel, "engine/presets/%s/%s.json", dir, name_or_path);
    if (file_data_path(rel, path, n) != 0)
        return err_set(err, "unknown %s preset '%s' (no %s found)",
                       strcmp(dir, "models") == 0 ? "model" : "gpu",
                       name_or_path, rel);
    return 0;
}

int preset_load_model(const char *name_or_path, struct model_preset *m, char *err)
{
    char path[4096];
    if (load_file(name_or_path, "models", path, sizeof path, err))
        return -1;
    size_t len;
    char e2[ERR_LEN];
    char *text = file_read_max(path, LIMIT_PRESET_BYTES, &len, e2);
    if (!text)
        return err_set(err, "--model: %s", e2);
    int rc = preset_parse_model(text, len, path, m, err);
    free(text);
    return rc;
}

int preset_load_gpu(const char *name_or_path, struct gpu_preset *g, char *err)
{
    char path[4096];
    if (load_file(name_or_path, "gpus", path, sizeof path, err))
        return -1;
    size_t len;
    char e2[ERR_LEN];
    char *text = file_read_max(path, LIMIT_PRESET_BYTES, &len, e2);
    if (!text)
        return err_set(err, "--gpu: %s", e2);
    int rc = preset_parse_gpu(text, len, path, g, err);
    free(text);
    return rc;
}

/* ---- derived sizes ---- */

void model_layer_params(const struct model_preset *m, int layer,
                        struct layer_params *p)
{
    memset(p, 0, sizeof *p);
    double h = m->hidden;
    switch (m->layer_kind[layer]) {
    case LAYER_KDA: {
        double hd = (double)m->kda_heads * m->kda_head_dim;
        double gate = m->kda_full_rank_gate
                          ? h * hd
                          : h * m->kda_head_dim + (double)m->kda_head_dim * hd;
        /* q, k, v; forget gate; beta; output gate; o; conv taps */
        p->attn_sharded = 3 * h * hd + gate + h * m->kda_heads + gate + hd * h +
                          3 * hd * m->kda_conv;
        break;
    }
    case LAYER_MLA: {
        double H = m->n_heads;
        double qk = m->qk_nope_dim + m->qk_rope_dim;
        if (m->q_lora_rank > 0) {
            p->attn_replicated = h * (m->q_lora_rank + m->kv_lora_rank + m->qk_rope_dim);
            p->attn_sharded = (double)m->q_lora_rank * H * qk;
        } else {
            p->attn_replicated = h * (m->kv_lora_rank + m->qk_rope_dim);
            p->attn_sharded = h * H * qk;
        }
        p->attn_sharded += (double)m->kv_lora_rank * H * (m->qk_nope_dim + m->v_head_dim);
        p->attn_sharded += H * m->v_head_dim * h;
        if (m->mla_output_gate)
            p->attn_sharded += h * H * m->v_head_dim;
        break;
    }
    case LAYER_GQA: {
        double d = m->head_dim;
        p->attn_sharded = h * d * (m->n_heads + 2.0 * m->n_kv_heads) + m->n_heads * d * h;
        break;
    }
    }
    if (m->layer_moe[layer]) {
        double w = m->expert_latent > 0 ? m->expert_latent : h;
        p->router = h * m->n_experts;
        p->shared = 3 * h * (double)m->expert_intermediate * m->n_shared_experts;
        p->latent_proj = m->expert_latent > 0 ? 2 * h * m->expert_latent : 0;
        p->expert_each = 3 * w * m->expert_intermediate;
        p->n_experts = m->n_experts;
    } else {
        p->dense_ffn = 3 * h * (double)m->dense_intermediate;
    }
}

/* Bytes per parameter at b bits, with one 8-bit scale per group. */
static double wbytes(double bits, int group)
{
    return bits / 8.0 + (group > 0 && bits < 8 ? 1.0 / group : 0.0);
}

double model_weight_bytes_per_gpu(const struct model_preset *m, int tp)
{
    double bt = m->bits_trunk / 8, bs = m->bits_shared / 8;
    double be = wbytes(m->bits_expert, m->expert_group);
    double total = 2.0 * m->vocab * m->hidden * bt / tp; /* embedding + head */
    for (int i = 0; i < m->n_layers; i++) {
        struct layer_params p;
        model_layer_params(m, i, &p);
        total += (p.attn_sharded + p.latent_proj + p.dense_ffn) * bt / tp +
                 (p.attn_replicated + p.router) * bt + p.shared * bs / tp +
                 p.n_experts * p.expert_each * be / tp;
    }
    return total;
}

double model_kv_bytes_per_token_per_gpu(const struct model_preset *m, int tp)
{
    double b = m->bits_kv / 8;
    double mla = (double)(m->kv_lora_rank + m->qk_rope_dim) * b; /* replicated */
    int kvh = m->n_kv_heads >= tp ? m->n_kv_heads / tp : 1;
    double gqa = 2.0 * kvh * m->head_dim * b;
    return m->n_layers_kind[LAYER_MLA] * mla + m->n_layers_kind[LAYER_GQA] * gqa;
}

double model_state_bytes_per_seq_per_gpu(const struct model_preset *m, int tp)
{
    if (!m->n_layers_kind[LAYER_KDA])
        return 0;
    double heads = (double)m->kda_heads / tp;
    double d = m->kda_head_dim;
    double rec = heads * d * d * m->bits_state / 8;
    double conv = 3 * heads * d * (m->kda_conv > 0 ? m->kda_conv - 1 : 0) * 2; /* BF16 */
    return m->n_layers_kind[LAYER_KDA] * (rec + conv);
}

double model_total_params(const struct model_preset *m)
{
    double total = 2.0 * m->vocab * m->hidden;
    for (int i = 0; i < m->n_layers; i++) {
        struct layer_params p;
        model_layer_params(m, i, &p);
        total += p.attn_sharded + p.attn_replicated + p.router + p.shared +
                 p.latent_proj + p.dense_ffn + p.n_experts * p.expert_each;
    }
    return total;
}

double model_active_params(const struct model_preset *m)
{
    double total = 2.0 * m->vocab * m->hidden;
    for (int i = 0; i < m->n_layers; i++) {
        struct layer_params p;
        model_layer_params(m, i, &p);
        total += p.attn_sharded + p.attn_replicated + p.router + p.shared +
                 p.latent_proj + p.dense_ffn +
                 (p.n_experts > 0 ? m->experts_per_token * p.expert_each : 0);
    }
    return total;
}

double model_experts_touched(const struct model_preset *m, double tokens)
{
    if (m->n_experts <= 0 || tokens <= 0)
        return 0;
    double E = m->n_experts, k = m->experts_per_token;
    return E * (1.0 - pow(1.0 - k / E, tokens));
}
