/* engine_config.c: the deployment's configuration (engine.h): defaults,
 * the engine flags every command shares, and the names of its choices. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/accept.h"
#include "engine/engine.h"
#include "traces/base/err.h"

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

const char engine_flags_help[] =
    "engine flags:\n"
    "  --model NAME|FILE        model preset (kimi-k3, deepseek-v3, llama-3.1-70b)\n"
    "  --gpu NAME|FILE          GPU preset (gb300, b300, gb200, b200, h200, h100)\n"
    "  --gpus G                 GPUs in the whole deployment (default 16)\n"
    "  --tp T                   tensor-parallel size; G/T replicas (default 16)\n"
    "  --backend auto|latency_specialized   decode path (default auto)\n"
    "  --router affinity|round_robin|least_loaded   (default affinity)\n"
    "  --block-size N           KV block, tokens (default 64)\n"
    "  --max-num-batched-tokens N   token budget per step (default 8192)\n"
    "  --max-num-seqs N         running sequences per replica (default 256)\n"
    "  --max-model-len N        tokens per request (default: the model's)\n"
    "  --no-prefix-caching      turn the prefix cache off\n"
    "  --gpu-memory-utilization F   fraction of HBM used (default 0.9)\n"
    "  --spec dspark|none       speculative decoding (default dspark)\n"
    "  --draft D                draft tokens per step (default 7)\n"
    "  --acceptance curve|fixed:A|p:P1,P2,...   (default curve)\n"
    "  --calibration FILE       measured kernel times (engine/CALIBRATION.md)\n"
    "  --force-calibration      accept a calibration file for another GPU\n"
    "  --stepwise               one event per engine step (for checking)\n"
    "  --seed N                 random seed (default 1)\n";

static int parse_i64(const char *flag, const char *v, int64_t lo, int64_t hi, int64_t *out,
                     char *err)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || errno)
        return err_set(err, "%s '%s': expected an integer", flag, v);
    if (x < lo)
        return err_set(err, "%s %lld: must be at least %lld", flag, x, (long long)lo);
    if (x > hi)
        return err_set(err, "%s %lld: must be at most %lld", flag, x, (long long)hi);
    *out = x;
    return 0;
}

static int copy_str(const char *flag, char *dst, size_t n, const char *v, char *err)
{
    if (strlen(v) >= n)
        return err_set(err, "%s: value longer than %zu characters", flag, n - 1);
    snprintf(dst, n, "%s", v);
    return 0;
}

int engine_config_flag(struct engine_config *c, int argc, char **argv, int *i, char *err)
{
    const char *a = argv[*i];
    if (strncmp(a, "--", 2))
        return 0;
    char name[64];
    const char *val = NULL;
    const char *eq = strchr(a, '=');
    if (eq) {
        size_t n = (size_t)(eq - a);
        if (n >= sizeof name)
            return 0;
        memcpy(name, a, n);
        name[n] = 0;
        val = eq + 1;
    } else {
        snprintf(name, sizeof name, "%s", a);
    }
    /* Flags without a value. */
    if (!strcmp(name, "--no-prefix-caching") || !strcmp(name, "--force-calibration") ||
        !strcmp(name, "--stepwise")) {
        if (val)
            return err_set(err, "%s takes no value", name);
        if (!strcmp(name, "--no-prefix-caching"))
            c->prefix_caching = false;
        else if (!strcmp(name, "--force-calibration"))
            c->force_calibration = true;
        else
            c->stepwise = true;
        (*i)++;
        return 1;
    }
    static const char *const with_value[] = {
        "--model", "--gpu", "--gpus", "--tp", "--backend", "--router", "--block-size",
        "--max-num-batched-tokens", "--max-num-seqs", "--max-model-len",
        "--gpu-memory-utilization", "--spec", "--draft", "--acceptance", "--calibration",
        "--seed", "--presets"};
    bool known = false;
    for (size_t k = 0; k < ARRAY_LEN(with_value); k++)
        if (!strcmp(name, with_value[k]))
            known = true;
    if (!known)
        return 0;
    if (!val) {
        if (*i + 1 >= argc)
            return err_set(err, "%s needs a value", name);
        val = argv[*i + 1];
        *i += 2;
    } else {
        *i += 1;
    }
    int64_t x;
    if (!strcmp(name, "--model"))
        return copy_str(name, c->model, sizeof c->model, val, err) ? -1 : 1;
    if (!strcmp(name, "--gpu"))
        return copy_str(name, c->gpu, sizeof c->gpu, val, err) ? -1 : 1;
    if (!strcmp(name, "--calibration"))
        return copy_str(name, c->calibration, sizeof c->calibration, val, err) ? -1 : 1;
    if (!strcmp(name, "--acceptance"))
        return copy_str(name, c->acceptance, sizeof c->acceptance, val, err) ? -1 : 1;
    if (!strcmp(name, "--presets"))
        return copy_str(name, c->presets_dir, sizeof c->presets_dir, val, err) ? -1 : 1;
    if (!strcmp(name, "--gpus")) {
        if (parse_i64(name, val, 1, 1 << 20, &x, err))
            return -1;
        c->gpus = (int)x;
        return 1;
    }
    if (!strcmp(name, "--tp")) {
        if (parse_i64(name, val, 1, 1024, &x, err))
            return -1;
        c->tp = (int)x;
        return 1;
    }
    if (!strcmp(name, "--block-size")) {
        if (parse_i64(name, val, 1, 1 << 16, &x, err))
            return -1;
        c->block_size = (int)x;
        return 1;
    }
    if (!strcmp(name, "--max-num-batched-tokens")) {
        if (parse_i64(name, val, 1, INT64_C(1) << 32, &x, err))
            return -1;
        c->max_num_batched_tokens = x;
        return 1;
    }
    if (!strcmp(name, "--max-num-seqs")) {
        if (parse_i64(name, val, 1, 1 << 20, &x, err))
            return -1;
        c->max_num_seqs = (int)x;
        return 1;
    }
    if (!strcmp(name, "--max-model-len")) {
        if (parse_i64(name, val, 1, INT64_C(1) << 40, &x, err))
            return -1;
        c->max_model_len = x;
        return 1;
    }
    if (!strcmp(name, "--draft")) {
        if (parse_i64(name, val, 1, ACCEPT_MAX_DRAFT, &x, err))
            return -1;
        c->draft = (int)x;
        return 1;
    }
    if (!strcmp(name, "--seed")) {
        char *end;
        errno = 0;
        unsigned long long s = strtoull(val, &end, 0);
        if (!*val || *end || errno || *val == '-')
            return err_set(err, "--seed '%s': expected a non-negative integer", val);
        c->seed = s;
        return 1;
    }
    if (!strcmp(name, "--gpu-memory-utilization")) {
        char *end;
        double f = strtod(val, &end);
        if (!*val || *end)
            return err_set(err, "--gpu-memory-utilization '%s': expected a number", val);
        if (!(f > 0 && f <= 1))
            return err_set(err, "--gpu-memory-utilization %g: must be in (0, 1]", f);
        c->gpu_memory_utilization = f;
        return 1;
    }
    if (!strcmp(name, "--backend")) {
        if (!strcmp(val, "auto"))
            c->backend = ENGINE_BACKEND_AUTO;
        else if (!strcmp(val, "latency_specialized"))
            c->backend = ENGINE_BACKEND_LATENCY_SPECIALIZED;
        else
            return err_set(err, "--backend '%s': expected auto or latency_specialized", val);
        return 1;
    }
    if (!strcmp(name, "--router")) {
        if (!strcmp(val, "affinity"))
            c->router = ENGINE_ROUTER_AFFINITY;
        else if (!strcmp(val, "round_robin") || !strcmp(val, "round-robin"))
            c->router = ENGINE_ROUTER_ROUND_ROBIN;
        else if (!strcmp(val, "least_loaded") || !strcmp(val, "least-loaded"))
            c->router = ENGINE_ROUTER_LEAST_LOADED;
        else
            return err_set(err, "--router '%s': expected affinity, round_robin or least_loaded",
                           val);
        return 1;
    }
    if (!strcmp(name, "--spec")) {
        if (!strcmp(val, "dspark"))
            c->spec = true;
        else if (!strcmp(val, "none"))
            c->spec = false;
        else
            return err_set(err, "--spec '%s': expected dspark or none", val);
        return 1;
    }
    return 0;
}

const char *engine_backend_name(enum engine_backend b)
{
    return b == ENGINE_BACKEND_LATENCY_SPECIALIZED ? "latency_specialized" : "auto";
}

const char *engine_router_name(enum engine_router r)
{
    return r == ENGINE_ROUTER_ROUND_ROBIN ? "round_robin"
         : r == ENGINE_ROUTER_LEAST_LOADED ? "least_loaded" : "affinity";
}
