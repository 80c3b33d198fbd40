/* engine_config.c: the deployment's configuration (engine.h): defaults,
 * the engine flag table every command shares, and the names of its
 * choices. */
#include <stdio.h>
#include <string.h>

#include "engine/accept.h"
#include "engine/engine.h"
#include "traces/base/err.h"
#include "traces/base/flags.h"

void engine_config_defaults(struct engine_config *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->model, sizeof c->model, "kimi-k3");
    snprintf(c->gpu, sizeof c->gpu, "gb300");
    c->gpus = 16;
    c->tp = 16;
    c->backend = ENGINE_BACKEND_AUTO;
    c->router = ENGINE_ROUTER_AFFINITY;
    /* FlashMLA's page size; vLLM uses 64-token blocks for MLA models. It
     * divides the 64-token blocks of the agentic traces and Mooncake's 512. */
    c->block_size = 64;
    /* vLLM V1's defaults for the OpenAI-compatible server: 8192 batched
     * tokens per step (chunked prefill on), 256 sequences. */
    c->max_num_batched_tokens = 8192;
    c->max_num_seqs = 256;
    c->max_model_len = 0;
    c->prefix_caching = true;
    c->gpu_memory_utilization = 0.9;
    c->spec = true;
    c->draft = 7;
    snprintf(c->acceptance, sizeof c->acceptance, "curve");
    c->seed = 1;
}

/* The engine flags every command that builds an engine shares
 * (traces/base/flags.h; engine_flags[] is declared in replay/cli/cli.h). */
const struct flag_choice engine_backend_choices[] = {
    {"auto", ENGINE_BACKEND_AUTO, false},
    {"latency_specialized", ENGINE_BACKEND_LATENCY_SPECIALIZED, false},
    {"standard", ENGINE_BACKEND_AUTO, true},
    {"specialized", ENGINE_BACKEND_LATENCY_SPECIALIZED, true},
    {NULL, 0, false},
};
static const struct flag_choice router_names[] = {
    {"affinity", ENGINE_ROUTER_AFFINITY, false},
    {"round_robin", ENGINE_ROUTER_ROUND_ROBIN, false},
    {"least_loaded", ENGINE_ROUTER_LEAST_LOADED, false},
    {"round-robin", ENGINE_ROUTER_ROUND_ROBIN, true},
    {"least-loaded", ENGINE_ROUTER_LEAST_LOADED, true},
    {NULL, 0, false},
};
static const struct flag_choice spec_names[] = {
    {"dspark", 1, false}, {"none", 0, false}, {NULL, 0, false}};

#define EC struct engine_config
const struct flag engine_flags[] = {
    {"--model", 0, FLAG_BUF, FLAG_AT(EC, model), "NAME|FILE",
     "model preset (kimi-k3, deepseek-v3, llama-3.1-70b)", .def = NULL},
    {"--gpu", 0, FLAG_BUF, FLAG_AT(EC, gpu), "NAME|FILE",
     "GPU preset (gb300, b300, gb200, b200, h200, h100)", .def = NULL},
    {"--gpus", 0, FLAG_INT, FLAG_AT(EC, gpus), "G", "GPUs in the whole deployment", .min = 1,
     .max = 1 << 20},
    {"--tp", 0, FLAG_INT, FLAG_AT(EC, tp), "T", "tensor-parallel size; G/T replicas", .min = 1,
     .max = 1024},
    {"--backend", 0, FLAG_CHOICE, FLAG_AT(EC, backend), NULL,
     "decode path (standard = auto, specialized =\nlatency_specialized)", .choices = engine_backend_choices},
    {"--router", 0, FLAG_CHOICE, FLAG_AT(EC, router), NULL, "which replica takes a request",
     .choices = router_names},
    {"--block-size", 0, FLAG_INT, FLAG_AT(EC, block_size), NULL, "KV block, tokens", .min = 1,
     .max = 1 << 16},
    {"--max-num-batched-tokens", 0, FLAG_INT64, FLAG_AT(EC, max_num_batched_tokens), NULL,
     "token budget per step", .min = 1, .max = INT64_C(1) << 32},
    {"--max-num-seqs", 0, FLAG_INT, FLAG_AT(EC, max_num_seqs), NULL,
     "running sequences per replica", .min = 1, .max = 1 << 20},
    {"--max-model-len", 0, FLAG_INT64, FLAG_AT(EC, max_model_len), NULL,
     "tokens per request (0: the model's)", .min = 0, .max = INT64_C(1) << 40},
    {"--no-prefix-caching", 0, FLAG_BOOL, FLAG_AT(EC, prefix_caching), NULL,
     "turn the prefix cache off", .value = false},
    {"--gpu-memory-utilization", 0, FLAG_DOUBLE, FLAG_AT(EC, gpu_memory_utilization), "F",
     "fraction of HBM used", .fmin = 0, .fmax = 1, .opts = FLAG_OPEN_MIN},
    {"--spec", 0, FLAG_CHOICE, FLAG_AT(EC, spec), NULL, "speculative decoding",
     .choices = spec_names},
    {"--draft", 0, FLAG_INT, FLAG_AT(EC, draft), "D", "draft tokens per step", .min = 1,
     .max = ACCEPT_MAX_DRAFT},
    {"--acceptance", 0, FLAG_BUF, FLAG_AT(EC, acceptance), "curve|fixed:A|p:P1,P2,...",
     "accepted draft tokens: the fitted curve, a fixed\nmean, or per-position probabilities",
     .def = NULL},
    {"--calibration", 0, FLAG_BUF, FLAG_AT(EC, calibration), "FILE",
     "measured kernel times (engine/CALIBRATION.md)", .def = NULL},
    {"--force-calibration", 0, FLAG_BOOL, FLAG_AT(EC, force_calibration), NULL,
     "accept a calibration file for another GPU", .value = true},
    {"--stepwise", 0, FLAG_BOOL, FLAG_AT(EC, stepwise), NULL,
     "one event per engine step (for checking)", .value = true},
    {"--seed", 0, FLAG_U64, FLAG_AT(EC, seed), NULL, "random seed", .def = NULL},
    {"--presets", 0, FLAG_BUF, FLAG_AT(EC, presets_dir), "DIR",
     "where presets live (default: beside the program)", .def = NULL},
    FLAG_END,
};
#undef EC

const char *engine_backend_name(enum engine_backend b)
{
    return b == ENGINE_BACKEND_LATENCY_SPECIALIZED ? "latency_specialized" : "auto";
}

const char *engine_router_name(enum engine_router r)
{
    return r == ENGINE_ROUTER_ROUND_ROBIN ? "round_robin"
         : r == ENGINE_ROUTER_LEAST_LOADED ? "least_loaded" : "affinity";
}
