/* accept.h: speculative-decoding acceptance models.
 *
 * A model is a per-position probability array: p[i] = P(draft position
 * i+1 accepted | position i accepted), i = 0..draft-1. Tokens emitted by
 * one verification step = 1 (the bonus/correction token) + the number of
 * leading accepted draft positions, so the expected length is
 *     1 + sum_{j=1..draft} prod_{i<j} p[i].
 * Forms accepted by accept_parse():
 *   "curve"          the default for agentic replay: a per-position curve
 *                    fitted to the measured Kimi K3 / DSpark mean lengths
 *                    (3.84 at draft 7, 3.36 at 4, 3.00 at 3, 2.51 at 2;
 *                    ../shared/reference/kimi-k3.md);
 *   "fixed:A"        a synthetic fixed length: every verification step
 *                    emits exactly A tokens (1 <= A <= draft + 1; A may be
 *                    fractional, then steps alternate deterministically);
 *   "p:0.9,0.8,..."  explicit per-position probabilities (the last one
 *                    repeats for later positions).
 */
#ifndef ACCEPT_H
#define ACCEPT_H

#include <stdbool.h>

#define ACCEPT_MAX_DRAFT 16

enum accept_kind { ACCEPT_CURVE = 0, ACCEPT_FIXED, ACCEPT_PROBS };

struct accept_model {
    enum accept_kind kind;
    int draft;                   /* draft tokens per step */
    double fixed_len;            /* ACCEPT_FIXED: tokens per verification step */
    double p[ACCEPT_MAX_DRAFT];  /* per-position conditional acceptance */
};

/* Parses spec for a draft length (1..ACCEPT_MAX_DRAFT). 0, or -1 with a
 * message naming the value and the limit. */
int accept_parse(const char *spec, int draft, struct accept_model *out, char *err);

/* Expected tokens emitted per verification step (bonus token included). */
double accept_expected_len(const struct accept_model *a, int draft);

/* The fitted curve: p(i) for 1-based draft position i. Parameters of the
 * fit are in accept.c (and engine/CALIBRATION.md). */
double accept_curve_p(int position);

/* Writes a one-line description ("curve p=0.88,0.78,...; E[len]=3.84 at
 * draft 7") into buf. */
void accept_format(const struct accept_model *a, char *buf, int n);

#endif
