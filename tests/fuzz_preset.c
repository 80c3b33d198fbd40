/* fuzz_preset.c: libFuzzer harness for the preset parsers (models and
 * GPUs with their kernel and all-reduce tables, from memory): any input is
 * either parsed into a preset whose derived sizes and step costs are
 * finite, or rejected with a message; never a crash or a leak. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "engine/cost.h"
#include "engine/preset.h"
#include "traces/base/err.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct gpu_preset gb300;
    static int have_gpu = -1;
    char err[ERR_LEN];
    if (have_gpu < 0)
        have_gpu = preset_load_gpu("gb300", &gb300, err) == 0;
    struct model_preset m;
    if (preset_parse_model((const char *)data, size, "fuzz", &m, err) == 0) {
        ASSERT(m.n_layers >= 1 && m.n_layers <= PRESET_MAX_LAYERS);
        for (int tp = 1; tp <= 16; tp *= 2) {
            ASSERT(!isnan(model_weight_bytes_per_gpu(&m, tp)));
            ASSERT(!isnan(model_kv_bytes_per_token_per_gpu(&m, tp)));
            ASSERT(!isnan(model_state_bytes_per_seq_per_gpu(&m, tp)));
        }
        ASSERT(!isnan(model_experts_touched(&m, 100)));
        if (have_gpu) {
            for (int be = 0; be < 2; be++) {
                struct cost_model *c = cost_create(&m, &gb300, 1, be, NULL, false, err);
                if (!c)
                    continue;
                struct cost_batch bs[3] = {
                    {.n_decode = 1, .decode_positions = 1, .sum_ctx = 1},
                    {.n_decode = 64, .decode_positions = 8, .draft = 7, .sum_ctx = 64000},
                    {.n_prefill = 2, .prefill_tokens = 4096, .prefill_attn = 1 << 22,
                     .decode_positions = 1},
                };
                for (int i = 0; i < 3; i++) {
                    struct cost_result r;
                    cost_step(c, &bs[i], &r);
                    ASSERT(r.step_ns >= 0);
                    struct cost_kernel_time kt[128];
                    cost_breakdown(c, &bs[i], kt, 128);
                }
                cost_destroy(c);
            }
        }
    }
    static struct model_preset kimi;
    static int have_kimi = -1;
    if (have_kimi < 0)
        have_kimi = preset_load_model("kimi-k3", &kimi, err) == 0;
    static struct gpu_preset g;
    if (preset_parse_gpu((const char *)data, size, "fuzz", &g, err) == 0) {
        ASSERT(g.hbm_bw > 0 && g.eff_stream > 0 && g.eff_stream <= 1);
        /* Its kernel and all-reduce tables price steps that are finite and
         * not negative, on both paths, with and without verification. */
        for (int be = 0; have_kimi && be < 2; be++) {
            struct cost_model *c = cost_create(&kimi, &g, 16, be, NULL, false, err);
            if (!c)
                continue;
            struct cost_batch bs[3] = {
                {.n_decode = 1, .decode_positions = 1, .sum_ctx = 100},
                {.n_decode = 8, .decode_positions = 8, .draft = 7, .sum_ctx = 800000},
                {.n_prefill = 1, .prefill_tokens = 8192, .prefill_attn = 1 << 25,
                 .decode_positions = 1},
            };
            for (int i = 0; i < 3; i++) {
                struct cost_result r;
                cost_step(c, &bs[i], &r);
                ASSERT(r.step_ns >= 0);
            }
            cost_destroy(c);
        }
    }
    return 0;
}
