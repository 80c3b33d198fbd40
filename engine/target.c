/* target.c: the request protocol's status names (target.h). */
#include "engine/target.h"

const char *target_status_name(enum target_status st)
{
    switch (st) {
    case TARGET_OK: return "ok";
    case TARGET_ERR_TOO_LONG: return "context overflow";
    case TARGET_ERR_CANCELLED: return "cancelled";
    case TARGET_ERR_NO_SPACE: return "does not fit in the KV cache";
    case TARGET_ERR_HTTP: return "http error";
    case TARGET_ERR_TIMEOUT: return "timeout";
    case TARGET_ERR_OTHER: return "error";
    }
    return "error";
}
