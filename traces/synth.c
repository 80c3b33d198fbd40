/* synth.c: the generator of AgentX-like agentic sessions (trace synth). */
#include "traces/trace_internal.h"

#include <string.h>

void trace_synth_defaults(struct trace_synth_params *p)
{
    memset(p, 0, sizeof *p);
    p->sessions = 32;
    p->seed = 1;
    p->block_size = 64;
}

struct trace *trace_synth(const struct trace_synth_params *p, char *err)
{
    (void)p;
    err_set(err, "generator not available yet");
    return NULL;
}
