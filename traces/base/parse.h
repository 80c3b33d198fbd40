/* parse.h: numbers and durations given as text (flags, query strings). */
#ifndef BASE_PARSE_H
#define BASE_PARSE_H

#include <stdint.h>

/* Parses a duration such as "1800", "90s", "500ms", "2m", "1.5h" into ns. */
int parse_duration(const char *s, int64_t *ns, char *err);

#endif
