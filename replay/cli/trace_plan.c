/* trace_plan.c: the `trace plan` subcommand: the AgentX replay plan of a
 * trace (traces/plan.h), as a summary or in its canonical JSON form.
 *
 *   agentreplay trace plan FILE|DIR [--json] [--concurrency N --seed S --ratio LO,HI]
 */
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay/cli/cli.h"
#include "replay/run.h"
#include "traces/plan.h"
#include "traces/trace.h"
#include "traces/base/err.h"

struct plan_cli_opts {
    struct trace_read_opts tro;
    bool json;
    int concurrency;
    uint64_t seed;
    double ratio[2];
    int64_t corpus;
};

static void plan_cli_init(void *opts)
{
    struct plan_cli_opts *o = opts;
    o->seed = 1;
    o->ratio[0] = 0.0;
    o->ratio[1] = 1.0;
}

static int parse_ratio(const char *name, const char *value, void *group, char *err)
{
    struct plan_cli_opts *o = group;
    char *end;
    double lo = strtod(value, &end), hi;
    if (end == value)
        return err_set(err, "%s: expected LO,HI (fractions of the trace's span)", name);
    if (*end == ',') {
        const char *q = end + 1;
        hi = strtod(q, &end);
        if (end == q)
            return err_set(err, "%s: expected LO,HI", name);
    } else {
        hi = lo; /* one value: a single point */
    }
    if (*end || !(lo >= 0 && hi <= 1 && lo <= hi))
        return err_set(err, "%s: expected 0 <= LO <= HI <= 1", name);
    o->ratio[0] = lo;
    o->ratio[1] = hi;
    return 0;
}

#define O struct plan_cli_opts
static const struct flag plan_cli_flags[] = {
    {"--json", 0, FLAG_BOOL, FLAG_AT(O, json), NULL,
     "the plan as one line of canonical JSON (tests/conformance/README.md)", .value = true},
    {"--concurrency", 0, FLAG_INT, FLAG_AT(O, concurrency), "N",
     "with --json: also the initial lanes for N lanes", .def = "none", .min = 0,
     .max = 1000000},
    {"--seed", 0, FLAG_U64, FLAG_AT(O, seed), "S", "the lanes' seed", .def = NULL},
    {"--ratio", 0, FLAG_CUSTOM, FLAG_AT(O, ratio), "LO,HI",
     "the lanes' t* range as fractions of each trace's span (drawn as\n"
     "AIPerf draws it; LO = HI: that point)",
     .def = "0,1", .parse = parse_ratio, .example = "0.5,0.5"},
    {"--corpus-tokens", 0, FLAG_INT64, FLAG_AT(O, corpus), "N",
     "cut synthetic prompt tails to N tokens, as AIPerf's prompt corpus does", .def = "no cut",
     .min = 0, .max = INT64_MAX},
    FLAG_END,
};
#undef O

const struct flag_spec trace_plan_spec = {
    .usage = "agentreplay trace plan FILE|DIR [--json] [--concurrency N --seed S --ratio LO,HI]",
    .about = "The AgentX replay plan of a trace, built as AIPerf 0.13.0 builds it from\n"
             "Weka traces: streams (the root, subagent chains, flat chains), turns with\n"
             "their delays, spawns, joins and happens-before gates. Without --json, a\n"
             "summary per trace.",
    .operands = "FILE|DIR",
    .min_operands = 1,
    .max_operands = 1,
    .size = sizeof(struct plan_cli_opts),
    .init = plan_cli_init,
    .groups = {{"plan", plan_cli_flags, 0},
               {NULL, trace_read_flags, offsetof(struct plan_cli_opts, tro)}},
    .notes = "Traces without sessions (absolute arrival times) have an empty plan.",
};

static void summary(const struct plan *p)
{
    uint64_t turns = 0, spawns = 0, joins = 0, gates = 0;
    for (uint32_t i = 0; i < p->n_trees; i++) {
        const struct plan_tree *tr = &p->trees[i];
        uint32_t sub = 0, flat = 0, j = 0;
        uint64_t g = 0;
        for (uint32_t s = tr->first_stream; s < tr->first_stream + tr->n_streams; s++) {
            sub += p->streams[s].kind == PLAN_STREAM_SUBAGENT;
            flat += p->streams[s].kind == PLAN_STREAM_FLAT;
            for (uint32_t k = 0; k < p->streams[s].n_turns; k++)
                g += p->turns[p->streams[s].first_turn + k].n_after;
        }
        for (uint32_t b = tr->first_branch; b < tr->first_branch + tr->n_branches; b++)
            j += p->branches[b].join_turn != PLAN_NONE;
        printf("%s: %u streams (%u subagent, %u flat), %u turns, %u spawns, %u joins, "
               "%llu gates",
               tr->trace_id, tr->n_streams, sub, flat, tr->n_turns, tr->n_branches, j,
               (unsigned long long)g);
        if (tr->n_dropped)
            printf(", %u subagents dropped", tr->n_dropped);
        printf("\n");
        turns += tr->n_turns;
        spawns += tr->n_branches;
        joins += j;
        gates += g;
    }
    printf("%u traces: %u streams, %llu turns, %llu spawns, %llu joins, %llu gates\n", p->n_trees,
           p->n_streams, (unsigned long long)turns, (unsigned long long)spawns,
           (unsigned long long)joins, (unsigned long long)gates);
}

int trace_cmd_plan(int argc, char **argv)
{
    struct plan_cli_opts o;
    const char *ops[1];
    int n;
    int rc = cli_parse("trace plan", &trace_plan_spec, &o, argc, argv, ops, &n);
    if (rc >= 0)
        return rc;
    if (o.concurrency && !o.json)
        return cli_bad("trace plan", "--concurrency needs --json");
    char err[ERR_LEN];
    struct trace *t = trace_read(ops[0], &o.tro, err);
    if (!t) {
        fprintf(stderr, "agentreplay: %s\n", err);
        return EXIT_BADINPUT;
    }
    if (t->skipped_records)
        fprintf(stderr, "agentreplay: %s: skipped %llu bad records\n", ops[0],
                (unsigned long long)t->skipped_records);
    struct plan_opts po;
    plan_opts_defaults(&po);
    po.corpus_tokens = o.corpus;
    struct plan *p = plan_build(t, &po, err);
    if (!p) {
        fprintf(stderr, "agentreplay: %s\n", err);
        trace_destroy(t);
        return EXIT_BADINPUT;
    }
    if (plan_verify(p, err)) {
        fprintf(stderr, "agentreplay: internal error: the plan fails its checks: %s\n", err);
        rc = EXIT_FAIL;
    } else if (o.json) {
        struct plan_json_opts jo = {.lanes = o.concurrency, .ratio_lo = o.ratio[0],
                                    .ratio_hi = o.ratio[1], .seed = o.seed};
        if (plan_write_json(p, &jo, stdout, err)) {
            fprintf(stderr, "agentreplay: %s\n", err);
            rc = EXIT_FAIL;
        } else {
            rc = EXIT_OK;
        }
    } else {
        summary(p);
        rc = EXIT_OK;
    }
    plan_destroy(p);
    trace_destroy(t);
    return rc;
}
