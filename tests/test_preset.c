/* test_preset.c: model and GPU presets load from engine/presets/, carry
 * their sources, give the derived sizes of the reference, and bad files
 * are refused with a message naming the file, the field and the problem. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "engine/preset.h"
#include "tests/testcaps.h"
#include "tests/testhelp.h"
#include "traces/base/err.h"
#include "traces/base/file.h"

static int parse_model(const char *txt, char *err)
{
    struct model_preset m;
    return preset_parse_model(txt, strlen(txt), "mem.json", &m, err);
}

static int parse_gpu(const char *txt, char *err)
{
    struct gpu_preset g;
    return preset_parse_gpu(txt, strlen(txt), "gpu.json", &g, err);
}

static const char *LLAMA_MIN =
    "{\"name\":\"t\",\"source\":\"s\",\"layers\":2,\"hidden\":64,\"vocab\":100,"
    "\"max_position\":1000,\"attention_kind\":\"gqa\","
    "\"attention\":{\"heads\":8,\"kv_heads\":2,\"head_dim\":8},"
    "\"ffn\":{\"dense_intermediate\":128},\"precision_bits\":{\"trunk\":16,\"kv\":16}}";

static void test_models(void)
{
    char err[ERR_LEN] = "";
    struct model_preset m;
    CHECKF(preset_load_model("kimi-k3", &m, err) == 0, "load kimi-k3: %s", err);
    CHECK(strcmp(m.name, "kimi-k3") == 0, "kimi name");
    CHECK(strstr(m.source, "config.json") != NULL, "kimi cites its source");
    CHECK(m.n_layers == 93, "93 layers");
    CHECK(m.n_layers_kind[LAYER_KDA] == 69 && m.n_layers_kind[LAYER_MLA] == 24, "69 KDA : 24 MLA");
    CHECK(m.layer_kind[3] == LAYER_MLA && m.layer_kind[91] == LAYER_MLA &&
              m.layer_kind[92] == LAYER_MLA && m.layer_kind[0] == LAYER_KDA &&
              m.layer_kind[90] == LAYER_KDA,
          "MLA at 1-based 4, 92, 93; KDA at 1 and 91");
    CHECK(m.layer_moe[0] == 0 && m.layer_moe[1] == 1 && m.n_moe_layers == 92, "first layer dense");
    CHECK(m.n_experts == 896 && m.experts_per_token == 16 && m.n_shared_experts == 2, "MoE shape");
    CHECK(m.expert_latent == 3584 && m.expert_intermediate == 3072, "expert dims");
    CHECK(m.drafter_params == 3.56e9 && m.drafter_layers == 5, "drafter");
    CHECK(m.n_accept_points == 4, "4 acceptance points");
    CHECK(m.specialized_path, "specialized path declared");
    /* Derived sizes against kimi-k3.md's estimates. */
    CHECK_NEAR(model_total_params(&m), 2.78e12, 0.02, "total params ~2.78 T");
    CHECK_NEAR(model_active_params(&m), 104e9, 0.10, "active params ~104 B");
    CHECK_NEAR(model_kv_bytes_per_token_per_gpu(&m, 16), 24 * 576, 1e-9,
               "MLA cache 576 B per layer, replicated");
    double rec = 69 * 96.0 * 128 * 128 * 4;
    CHECK_NEAR(model_state_bytes_per_seq_per_gpu(&m, 1), rec, 0.04, "KDA state ~434 MB");
    CHECK_NEAR(model_state_bytes_per_seq_per_gpu(&m, 16) * 16,
               model_state_bytes_per_seq_per_gpu(&m, 1), 1e-9, "state split by heads");
    CHECK_NEAR(model_experts_touched(&m, 1), 16, 1e-9, "1 token touches k experts");
    CHECK(model_experts_touched(&m, 4096) > 895 && model_experts_touched(&m, 4096) <= 896,
          "many tokens touch all experts");
    double w16 = model_weight_bytes_per_gpu(&m, 16);
    CHECK(w16 > 90e9 && w16 < 110e9, "kimi weights per GPU at TP16 ~100 GB");

    CHECKF(preset_load_model("deepseek-v3", &m, err) == 0, "load deepseek-v3: %s", err);
    CHECK(m.n_layers == 61 && m.n_layers_kind[LAYER_MLA] == 61 && m.n_moe_layers == 58,
          "deepseek: 61 MLA layers, 3 dense");
    CHECK_NEAR(model_total_params(&m), 671e9, 0.03, "deepseek ~671 B params");
    CHECK_NEAR(model_active_params(&m), 37e9, 0.08, "deepseek ~37 B active");
    CHECKF(preset_load_model("llama-3.1-70b", &m, err) == 0, "load llama: %s", err);
    CHECK(m.n_layers_kind[LAYER_GQA] == 80 && m.n_moe_layers == 0, "llama GQA dense");
    CHECK_NEAR(model_total_params(&m), 70.6e9, 0.02, "llama ~70.6 B params");
    CHECK_NEAR(model_kv_bytes_per_token_per_gpu(&m, 8), 80 * 2 * 1 * 128 * 2.0, 1e-9,
               "llama KV at TP8: one KV head per GPU");
}

static void test_gpus(void)
{
    const char *names[] = {"gb300", "b300", "gb200", "b200", "h200", "h100"};
    char err[ERR_LEN] = "";
    struct gpu_preset g;
    for (size_t i = 0; i < ARRAY_LEN(names); i++) {
        CHECKF(preset_load_gpu(names[i], &g, err) == 0, "load %s: %s", names[i], err);
        CHECKF(strcmp(g.name, names[i]) == 0, "%s name", names[i]);
        CHECKF(strstr(g.source, "hardware.md") != NULL, "%s cites hardware.md", names[i]);
        CHECKF(g.kernel_floor_ns > 0 && g.step_overhead_ns > 0, "%s has the fit", names[i]);
    }
    /* The validation variants (engine/CALIBRATION.md "External
     * validation"): the same GPU, datasheet and fit as their base preset,
     * other dense-model kernel tables. */
    const char *variants[][2] = {{"h100-vllm0.14", "h100"}, {"h200-vllm0.14", "h200"},
                                 {"b200-vllm0.19", "b200"}};
    for (size_t i = 0; i < ARRAY_LEN(variants); i++) {
        struct gpu_preset v, b;
        CHECKF(preset_load_gpu(variants[i][0], &v, err) == 0 &&
                   preset_load_gpu(variants[i][1], &b, err) == 0,
               "load %s: %s", variants[i][0], err);
        CHECKF(strcmp(v.name, variants[i][0]) == 0 && strcmp(v.family, b.family) == 0 &&
                   v.hbm_bw == b.hbm_bw && v.flops_fp8 == b.flops_fp8 && v.link_bw == b.link_bw &&
                   v.kernel_floor_ns == b.kernel_floor_ns &&
                   v.step_overhead_ns == b.step_overhead_ns && strstr(v.source, "hardware.md"),
               "%s: %s's GPU and fit", variants[i][0], variants[i][1]);
        CHECKF(v.kt[0][KT_GEMM_FP8].n > 0 && v.kt[0][KT_ATTENTION_GQA].n > 0 &&
                   v.kt[0][KT_GROUPED].n == 0,
               "%s: dense-model tables only", variants[i][0]);
    }
    preset_load_gpu("gb300", &g, err);
    CHECK(g.hbm_bw == 8e12 && g.flops_fp4 == 15e15 && g.link_bw == 900e9 &&
              g.nvlink_domain == 72 && strcmp(g.family, "blackwell") == 0,
          "gb300 datasheet");
    CHECK(g.ar_oneshot_ns == 7000 && g.ar_library_ns == 29000 && g.ar_multimem_ns == 13000,
          "gb300 all-reduce latencies");
    preset_load_gpu("h100", &g, err);
    CHECK(g.hbm_bw == 3.35e12 && g.flops_fp4 == 0 && strcmp(g.family, "hopper") == 0, "h100");
    /* Kernel and all-reduce tables (engine/CALIBRATION.md "Kernel tables"):
     * every preset has the standard path's measured classes; the grouped
     * efficiency rises with the expert shard (per-expert overhead matters
     * less for bigger shards) until it saturates, in every preset. */
    for (size_t i = 0; i < ARRAY_LEN(names); i++) {
        preset_load_gpu(names[i], &g, err);
        const struct kt_table *k = g.kt[0];
        CHECKF(k[KT_GEMM_BF16].n && k[KT_GEMM_FP8].n && k[KT_GROUPED].n && k[KT_ATTENTION_GQA].n &&
                   k[KT_ATTENTION_MLA].n,
               "%s: standard-path tables", names[i]);
        CHECKF(k[KT_GEMM_BF16_FLOPS].n && k[KT_GEMM_FP8_FLOPS].n && g.n_gflops[0] >= 2 &&
                   k[KT_GEMM_BF16_FLOPS].key == KT_KEY_TOKENS && k[KT_GEMM_BF16_FLOPS].x[0] == 512,
               "%s: FLOP tables (GEMMs from M 512, grouped per shard)", names[i]);
        for (int j = 0; j < k[KT_GEMM_FP8_FLOPS].n; j++)
            CHECKF(k[KT_GEMM_FP8_FLOPS].eff[j] < 0.8 && k[KT_GEMM_BF16_FLOPS].eff[j] < 0.8,
                   "%s: measured GEMM FLOP efficiency below the old flat 0.8 (M %g)", names[i],
                   k[KT_GEMM_FP8_FLOPS].x[j]);
        CHECKF(!g.kt[1][KT_GROUPED].n && !g.kt[1][KT_GEMM].n,
               "%s: no specialized-path tables (its flat values stand)", names[i]);
        CHECKF((k[KT_ATTENTION_MLA_VERIFY].n > 0) == !strcmp(g.family, "blackwell"),
               "%s: the MLA verification table on Blackwell only", names[i]);
        CHECKF(k[KT_GROUPED].key == KT_KEY_SHARD_MB && k[KT_GEMM_BF16].key == KT_KEY_TOKENS &&
                   k[KT_ATTENTION_MLA].key == KT_KEY_SEQS,
               "%s: keys", names[i]);
        int mono = 1;
        for (int j = 1; j < k[KT_GROUPED].n; j++)
            mono &= k[KT_GROUPED].eff[j] >= k[KT_GROUPED].eff[j - 1] - 0.01;
        CHECKF(mono, "%s: grouped efficiency rises with the shard (0.01 noise where it saturates)",
               names[i]);
        CHECKF(g.n_ar[AR_TABLE_ONESHOT] >= 2 && g.n_ar[AR_TABLE_LIBRARY] >= 2,
               "%s: all-reduce tables", names[i]);
    }
    /* Interpolation: exact at the points, log-linear between, flat outside. */
    struct kt_table t = {.n = 3, .key = KT_KEY_TOKENS, .x = {1, 4, 16}, .eff = {0.2, 0.4, 0.8},
                         .extra_ns = {0, 1000, 3000}};
    double e, x;
    kt_lookup(&t, 4, &e, &x);
    CHECK(e == 0.4 && x == 1000, "at a point");
    kt_lookup(&t, 2, &e, &x);
    CHECK_NEAR(e, 0.3, 1e-12, "log-linear between points (eff)");
    CHECK_NEAR(x, 500, 1e-12, "log-linear between points (extra)");
    kt_lookup(&t, 8, &e, &x);
    CHECK_NEAR(e, 0.6, 1e-12, "second segment");
    kt_lookup(&t, 0.5, &e, &x);
    CHECK(e == 0.2 && x == 0, "flat below");
    kt_lookup(&t, 0, &e, &x);
    CHECK(e == 0.2, "key 0 is the first point");
    kt_lookup(&t, 1e6, &e, &x);
    CHECK(e == 0.8 && x == 3000, "flat above");
    CHECK(!strcmp(kt_class_name(KT_ATTENTION_MLA_VERIFY), "attention_mla_verify") &&
              !strcmp(kt_key_name(KT_KEY_SHARD_MB), "expert_shard_mb"),
          "names");
}

/* Bad kernel and all-reduce tables: refused naming the field. */
static void test_bad_tables(void)
{
    static const char *const gpu =
        "{\"name\":\"g\",\"source\":\"s\",\"family\":\"hopper\",\"hbm_gb\":80,\"hbm_tb_s\":3,"
        "\"pflops\":{\"fp8\":1,\"bf16\":1},\"link_gb_s\":450,\"nvlink_domain\":8,"
        "\"efficiency\":{\"stream\":0.9,\"gemm\":0.6,\"grouped\":0.6,\"attention\":0.8,"
        "\"elementwise\":0.8,\"compute\":0.8},\"allreduce_us\":{\"oneshot_16k\":5,"
        "\"oneshot_1m\":10,\"library_16k\":10,\"library_1m\":20},\"fit\":{\"kernel_floor_us\":1,"
        "\"step_overhead_us\":100}%s}";
    static const struct { const char *add, *want; } cases[] = {
        {"", NULL},
        {",\"kernel_tables\":{\"auto\":{\"gemm\":{\"key\":\"tokens\",\"points\":[[1,0.5],[8,0.6,2]],"
         "\"source\":\"s\"}}}", NULL},
        {",\"allreduce_tables\":{\"oneshot\":[{\"ranks\":8,\"points\":[[1024,5],[4096,6]],"
         "\"source\":\"s\"}]}", NULL},
        {",\"kernel_tables\":{\"fast\":{}}", "unknown path"},
        {",\"kernel_tables\":{\"auto\":{\"magic\":{}}}", "unknown kernel class"},
        {",\"kernel_tables\":{\"auto\":{\"gemm\":{\"key\":\"tokens\",\"points\":[[1,0.5]]}}}",
         "kernel_tables.auto.gemm.source"},
        {",\"kernel_tables\":{\"auto\":{\"gemm\":{\"key\":\"bytes\",\"points\":[[1,0.5]],"
         "\"source\":\"s\"}}}", "kernel_tables.auto.gemm.key"},
        {",\"kernel_tables\":{\"auto\":{\"gemm\":{\"key\":\"tokens\",\"points\":[[4,0.5],[2,0.6]],"
         "\"source\":\"s\"}}}", "keys must increase"},
        {",\"kernel_tables\":{\"auto\":{\"gemm\":{\"key\":\"tokens\",\"points\":[[1,1.5]],"
         "\"source\":\"s\"}}}", "efficiency out of range"},
        {",\"kernel_tables\":{\"auto\":{\"gemm\":{\"key\":\"tokens\",\"points\":[[0,0.5]],"
         "\"source\":\"s\"}}}", "key out of range"},
        {",\"kernel_tables\":{\"auto\":{\"gemm\":{\"key\":\"tokens\",\"points\":[[1,0.5,5000]],"
         "\"source\":\"s\"}}}", "extra_us"},
        {",\"kernel_tables\":{\"auto\":{\"gemm\":{\"key\":\"tokens\",\"points\":[[1]],"
         "\"source\":\"s\"}}}", "points[0]"},
        {",\"kernel_tables\":{\"auto\":{\"grouped\":{\"key\":\"tokens\",\"points\":[[1,0.5]],"
         "\"source\":\"s\"}}}", "expert_shard_mb"},
        {",\"kernel_tables\":{\"auto\":{\"gemm\":{\"key\":\"expert_shard_mb\",\"points\":[[1,0.5]],"
         "\"source\":\"s\"}}}", "only grouped"},
        {",\"kernel_tables\":{\"auto\":{\"gemm\":{\"key\":\"tokens\",\"points\":[],"
         "\"source\":\"s\"}}}", "1..16 points"},
        {",\"kernel_tables\":{\"auto\":{\"grouped_flops\":{\"key\":\"tokens\"}}}",
         "one per expert shard"},
        {",\"kernel_tables\":{\"auto\":{\"grouped_flops\":[{\"expert_shard_mb\":2,"
         "\"key\":\"tokens\",\"points\":[[256,0.01]],\"source\":\"s\"},{\"expert_shard_mb\":1,"
         "\"key\":\"tokens\",\"points\":[[256,0.01]],\"source\":\"s\"}]}}", "increasing"},
        {",\"kernel_tables\":{\"auto\":{\"grouped_flops\":[{\"expert_shard_mb\":2,"
         "\"key\":\"seqs\",\"points\":[[256,0.01]],\"source\":\"s\"}]}}", "keyed by tokens"},
        {",\"kernel_tables\":{\"auto\":{\"grouped_flops\":[{\"expert_shard_mb\":2,"
         "\"key\":\"tokens\",\"points\":[[256,0.01]]}]}}", "source"},
        {",\"allreduce_tables\":{\"nvls\":[]}", "unknown all-reduce"},
        {",\"allreduce_tables\":{\"oneshot\":[{\"ranks\":8,\"points\":[[1024,5]],\"source\":\"s\"},"
         "{\"ranks\":8,\"points\":[[1024,5]],\"source\":\"s\"}]}", "listed twice"},
        {",\"allreduce_tables\":{\"oneshot\":[{\"ranks\":8,\"points\":[[4096,5],[1024,6]],"
         "\"source\":\"s\"}]}", "must increase"},
        {",\"allreduce_tables\":{\"oneshot\":[{\"ranks\":8,\"points\":[[1024,-5]],\"source\":\"s\"}]}",
         "latency out of range"},
        {",\"allreduce_tables\":{\"oneshot\":[{\"ranks\":8,\"points\":[[1024,5]]}]}", "source"},
        {",\"allreduce_tables\":{\"library\":[{\"ranks\":1,\"points\":[[1024,5]],\"source\":\"s\"}]}",
         "ranks"},
    };
    char buf[4096], err[ERR_LEN];
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        snprintf(buf, sizeof buf, gpu, cases[i].add);
        err[0] = 0;
        struct gpu_preset g;
        int rc = preset_parse_gpu(buf, strlen(buf), "gpu.json", &g, err);
        if (!cases[i].want)
            CHECKF(rc == 0, "table case %zu parses: %s", i, err);
        else
            CHECKF(rc != 0 && strstr(err, cases[i].want) && strstr(err, "gpu.json"),
                   "table case %zu refused naming '%s': %s", i, cases[i].want, err);
        if (i == 1 && rc == 0)
            CHECK(g.kt[0][KT_GEMM].n == 2 && g.kt[0][KT_GEMM].extra_ns[1] == 2000 &&
                      g.kt[0][KT_GEMM].extra_ns[0] == 0,
                  "extra_us optional, in ns");
        if (i == 2 && rc == 0)
            CHECK(g.n_ar[AR_TABLE_ONESHOT] == 1 && g.ar[0][0].ranks == 8 && g.ar[0][0].ns[1] == 6000,
                  "all-reduce table read");
    }
}

static void test_bad(void)
{
    char err[ERR_LEN] = "";
    struct model_preset m;
    CHECK(preset_load_model("no-such-model", &m, err) != 0, "unknown model refused");
    CHECKF(strstr(err, "no-such-model") && strstr(err, "unknown model preset"), "message: %s", err);
    struct gpu_preset g;
    CHECK(preset_load_gpu("tpu9", &g, err) != 0, "unknown gpu refused");
    CHECKF(strstr(err, "tpu9") != NULL, "message: %s", err);
    CHECK(preset_load_model("/nonexistent/x.json", &m, err) != 0, "missing path refused");

    CHECK(parse_model(LLAMA_MIN, err) == 0, "minimal GQA preset parses");
    CHECK(parse_model("{\"name\": ", err) != 0, "truncated JSON refused");
    CHECKF(strncmp(err, "mem.json:1:", 11) == 0, "location in message: %s", err);
    CHECK(parse_model("[1,2]", err) != 0, "array refused");

    char buf[2048];
    /* negative size */
    snprintf(buf, sizeof buf, "%s", LLAMA_MIN);
    char *p = strstr(buf, "\"hidden\":64");
    memcpy(p, "\"hidden\":-4", 11);
    CHECK(parse_model(buf, err) != 0, "negative hidden refused");
    CHECKF(strstr(err, "mem.json") && strstr(err, "'hidden'") && strstr(err, "-4") &&
               strstr(err, ">= 1"),
           "names file, field, value and limit: %s", err);
    /* missing field */
    snprintf(buf, sizeof buf, "%s", LLAMA_MIN);
    p = strstr(buf, "\"vocab\":100,");
    memmove(p, p + 12, strlen(p + 12) + 1);
    CHECK(parse_model(buf, err) != 0, "missing vocab refused");
    CHECKF(strstr(err, "'vocab'") && strstr(err, "missing"), "message: %s", err);
    /* wrong type */
    snprintf(buf, sizeof buf, "%s", LLAMA_MIN);
    p = strstr(buf, "\"layers\":2");
    memcpy(p, "\"layers\":\"", 10);
    CHECK(parse_model(buf, err) != 0, "string layers refused");
    /* kv heads must divide heads */
    snprintf(buf, sizeof buf, "%s", LLAMA_MIN);
    p = strstr(buf, "\"kv_heads\":2");
    memcpy(p, "\"kv_heads\":3", 12);
    CHECK(parse_model(buf, err) != 0, "kv_heads not dividing refused");
    CHECKF(strstr(err, "attention.kv_heads") != NULL, "message: %s", err);
    /* layer lists: twice, out of range, incomplete */
    const char *base = "{\"name\":\"t\",\"source\":\"s\",\"layers\":3,\"hidden\":64,\"vocab\":100,"
                       "\"max_position\":1000,\"layer_kinds\":%s,"
                       "\"attention\":{\"heads\":8,\"kv_lora_rank\":16,\"qk_nope_dim\":8,"
                       "\"qk_rope_dim\":8,\"v_head_dim\":8},"
                       "\"ffn\":{\"dense_intermediate\":128},\"precision_bits\":{\"trunk\":16,\"kv\":8}}";
    snprintf(buf, sizeof buf, base, "{\"mla\":[1,2,3]}");
    CHECKF(parse_model(buf, err) == 0, "MLA list parses: %s", err);
    snprintf(buf, sizeof buf, base, "{\"mla\":[1,2,2]}");
    CHECK(parse_model(buf, err) != 0 && strstr(err, "twice"), "layer twice refused");
    snprintf(buf, sizeof buf, base, "{\"mla\":[1,2,4]}");
    CHECKF(parse_model(buf, err) != 0 && strstr(err, "layer_kinds.mla[2]") && strstr(err, "1..3"),
           "layer out of range refused: %s", err);
    snprintf(buf, sizeof buf, base, "{\"mla\":[1,2]}");
    CHECK(parse_model(buf, err) != 0 && strstr(err, "no kind"), "uncovered layer refused");
    snprintf(buf, sizeof buf, base, "{\"xyz\":[1,2,3]}");
    CHECK(parse_model(buf, err) != 0 && strstr(err, "unknown layer kind"), "unknown kind refused");
    /* acceptance above draft + 1 */
    snprintf(buf, sizeof buf, "%.*s,\"acceptance\":[{\"draft\":2,\"length\":3.5}]}",
             (int)strlen(LLAMA_MIN) - 1, LLAMA_MIN);
    CHECKF(parse_model(buf, err) != 0 && strstr(err, "draft + 1 = 3"), "acceptance limit: %s", err);

    /* GPUs */
    CHECK(parse_gpu("{}", err) != 0 && strstr(err, "gpu.json") && strstr(err, "'name'"),
          "empty gpu refused");
    static char gtxt[65536];
    size_t glen;
    char path[1024];
    CHECK(file_data_path("engine/presets/gpus/gb300.json", path, sizeof path) == 0, "gb300 file found");
    char *t = file_read(path, &glen, err);
    CHECK(t != NULL, "read gb300");
    if (t) {
        snprintf(gtxt, sizeof gtxt, "%s", t);
        free(t);
        CHECKF(parse_gpu(gtxt, err) == 0, "gb300 text parses: %s", err);
        char *q = strstr(gtxt, "\"stream\": 0.9");
        if (q) {
            memcpy(q, "\"stream\": 1.9", 13);
            CHECK(parse_gpu(gtxt, err) != 0, "efficiency above 1 refused");
            CHECKF(strstr(err, "efficiency.stream") && strstr(err, "<= 1"), "message: %s", err);
        } else {
            CHECK(0, "stream efficiency found in gb300.json");
        }
    }
}

int main(void)
{
    test_caps(600);
    test_models();
    test_gpus();
    test_bad();
    test_bad_tables();
    return test_report();
}
