/* fuzz_calibration.c: libFuzzer harness for calibration files (from
 * memory, format in engine/CALIBRATION.md): any input is either loaded
 * (and steps priced with it are non-negative) or rejected with a message;
 * never a crash or a leak. */
#include <stddef.h>
#include <stdint.h>

#include "engine/cost.h"
#include "engine/preset.h"
#include "traces/base/err.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct model_preset m;
    static struct gpu_preset g;
    static struct cost_model *c[2];
    static int ready = -1;
    char err[ERR_LEN];
    if (ready < 0) {
        ready = preset_load_model("kimi-k3", &m, err) == 0 && preset_load_gpu("gb300", &g, err) == 0;
        for (int be = 0; ready && be < 2; be++)
            c[be] = cost_create(&m, &g, 16, be, NULL, false, err);
    }
    if (!ready || !c[0] || !c[1])
        return 0;
    for (int be = 0; be < 2; be++) {
        if (cost_load_calibration_mem(c[be], (const char *)data, size, "fuzz", size & 1, err) != 0)
            continue;
        const char *names[8];
        cost_calibrated_kernels(c[be], names, 8);
        for (int b = 1; b <= 128; b *= 4) {
            struct cost_batch cb = {.n_decode = b, .decode_positions = 1, .sum_ctx = (int64_t)b * 777};
            struct cost_result r;
            cost_step(c[be], &cb, &r);
            ASSERT(r.step_ns >= 0);
        }
    }
    return 0;
}
