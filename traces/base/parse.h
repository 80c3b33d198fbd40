/* parse.h: numbers and durations given as text (flags, query strings).
 *
 * Each parser takes the whole string (no trailing text, no empty string)
 * and on failure writes a short reason without the input ("not an
 * integer"); the caller names the input (flags.c: "--concurrency 'x': not
 * an integer"). err may be NULL. */
#ifndef BASE_PARSE_H
#define BASE_PARSE_H

#include <stdint.h>

/* A decimal integer (an optional sign; leading blanks as strtoll). */
int parse_i64(const char *s, int64_t *v, char *err);
/* Two decimal integers joined by 'x' or 'X' ("16x1", "1200x750"). */
int parse_i64_pair(const char *s, int64_t *a, int64_t *b, char *err);
/* A non-negative integer, decimal or 0x hexadecimal. */
int parse_u64(const char *s, uint64_t *v, char *err);
/* A finite number (strtod: 1.5, 1e3, 0x1p4). */
int parse_double(const char *s, double *v, char *err);
/* A duration such as "1800", "90s", "500ms", "250us", "2m", "1.5h"
 * (a bare number is seconds), 0 to 1e9 s, into ns (rounded). */
int parse_duration(const char *s, int64_t *ns, char *err);
/* A duration in ns as text: "none" when negative, else whole hours,
 * minutes, seconds, ms or us where exact ("1800s" is "30m"), else
 * seconds with decimals. */
void parse_duration_format(int64_t ns, char *buf, int n);

#endif
