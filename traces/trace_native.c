/* trace_native.c: the native JSONL trace format (traces/FORMAT.md). */
#include "traces/trace_internal.h"

int trace_read_native(struct tb *b, const char *data, size_t len, const char *name,
                      bool skip_bad, char *err)
{
    (void)b; (void)data; (void)len; (void)skip_bad;
    return err_set(err, "%s: native reader not available yet", name);
}

int trace_write_native(const struct trace *t, const char *path, char *err)
{
    (void)t;
    return err_set(err, "%s: native writer not available yet", path);
}
