/* time_ns.h: time is int64 nanoseconds everywhere; the unit constants and
 * the monotonic wall clock (progress bars and benchmarks only, never in
 * results). */
#ifndef BASE_TIME_NS_H
#define BASE_TIME_NS_H

#include <stdint.h>

#define NS_PER_S 1000000000LL
#define NS_PER_MS 1000000LL
#define NS_PER_US 1000LL

int64_t wall_ns(void);

#endif
