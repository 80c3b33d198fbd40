/* time_ns.c: the monotonic wall clock (time_ns.h). */
#include "traces/base/time_ns.h"

#include <time.h>

int64_t wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * NS_PER_S + ts.tv_nsec;
}
