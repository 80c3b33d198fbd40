/* test_preset.c: model and GPU presets load from engine/presets/, carry
 * their sources, give the derived sizes of the reference, and bad files
 * are refused with a message naming the file, the field and the problem. */
#include <stdio.h>
#include <string.h>

#include "engine/preset.h"
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
    preset_load_gpu("gb300", &g, err);
    CHECK(g.hbm_bw == 8e12 && g.flops_fp4 == 15e15 && g.link_bw == 900e9 &&
              g.nvlink_domain == 72 && strcmp(g.family, "blackwell") == 0,
          "gb300 datasheet");
    CHECK(g.ar_oneshot_ns == 7000 && g.ar_library_ns == 29000 && g.ar_multimem_ns == 13000,
          "gb300 all-reduce latencies");
    preset_load_gpu("h100", &g, err);
    CHECK(g.hbm_bw == 3.35e12 && g.flops_fp4 == 0 && strcmp(g.family, "hopper") == 0, "h100");
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
    char gtxt[8192];
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
    test_models();
    test_gpus();
    test_bad();
    return test_report();
}
