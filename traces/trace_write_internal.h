/* trace_write_internal.h: helpers the trace writers share
 * (trace_write_common.c): output files written whole or not at all, JSON
 * strings, exact decimal seconds, session start times. Not for use
 * outside traces/. */
#ifndef TRACE_WRITE_INTERNAL_H
#define TRACE_WRITE_INTERNAL_H

#include <stdio.h>

#include "traces/trace_write.h"

/* A file written to path.tmp.PID and renamed into place by tw_close
 * ("-": stdout, written directly). */
struct tw_file {
    FILE *f;
    const char *path;
    char tmp[4200];
};
int tw_open(struct tw_file *w, const char *path, char *err);
/* Closes it; renames it into place unless failed or a write failed (then
 * the temporary file is removed). 0, or -1 with err (unless failed, when
 * err already holds the reason). */
int tw_close(struct tw_file *w, int failed, char *err);

/* ns as decimal seconds, exactly ("12.5", "0.000000001"); -1: null. */
void tw_seconds(FILE *f, int64_t ns);
/* s as a JSON string. */
void tw_str(FILE *f, const char *s);
/* A comma-joined list (the model's input_types) as a JSON array of
 * strings; NULL or "": []. */
void tw_str_list(FILE *f, const char *comma_joined);
/* Each session's start on its root's timeline (ns; a root at 0, a
 * subagent at its parent's start plus its fork time); malloc'ed. */
int64_t *tw_session_starts(const struct trace *t);

#endif
