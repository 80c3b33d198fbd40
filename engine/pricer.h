/* pricer.h: step prices for the scheduler, memoised so that a step costs a
 * few nanoseconds to price.
 *
 * Decode-only steps are priced by linear interpolation between
 * cost_step() at sum_ctx grid points (every PRICE_GRID tokens); each grid
 * point is priced once (through cost_step_memo(), which reprices only the
 * kernels that read sum_ctx) and kept in a table. Steps with prefill, or
 * outside the table's key range, go to cost_step() directly. Both advance
 * modes use the same prices, so they stay identical. One pricer serves
 * every replica of an engine (they share the cost model). */
#ifndef PRICER_H
#define PRICER_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/cost.h"

#define PRICE_GRID 4096

struct pricer;
/* The model must outlive the pricer. */
struct pricer *pricer_create(const struct cost_model *c);
void pricer_destroy(struct pricer *p);
/* Step time in ns; *fallback set when the specialized path fell back. */
int64_t pricer_step(struct pricer *p, const struct cost_batch *b, bool *fallback);

#endif
