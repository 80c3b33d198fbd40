/* trace_csv.c: readers of the CSV trace formats (Azure LLM inference,
 * BurstGPT). */
#include "traces/trace_internal.h"

int trace_read_azure(struct tb *b, const char *data, size_t len, const char *name,
                     bool skip_bad, char *err)
{
    (void)b; (void)data; (void)len; (void)skip_bad;
    return err_set(err, "%s: Azure CSV reader not available yet", name);
}

int trace_read_burstgpt(struct tb *b, const char *data, size_t len, const char *name,
                        bool skip_bad, char *err)
{
    (void)b; (void)data; (void)len; (void)skip_bad;
    return err_set(err, "%s: BurstGPT CSV reader not available yet", name);
}
