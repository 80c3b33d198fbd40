/* trace.c: the `trace` command: stats, convert and synth.
 *
 *   agentreplay trace stats PATH... [--json] [--format F] [--skip-bad]
 *   agentreplay trace convert IN -o OUT [--to native|weka|weka-jsonl|mooncake] [--force]
 *                                       [--format F] [--skip-bad]
 *   agentreplay trace synth --sessions N --seed S -o OUT [distribution flags]
 */
#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

#include "replay/cli/cli.h"
#include "replay/run.h"
#include "traces/trace.h"
#include "traces/trace_write.h"
#include "traces/base/err.h"
#include "traces/base/limits.h"

struct stats_opts {
    struct trace_read_opts tro;
    bool json;
};

static const struct flag stats_flags[] = {
    {"--json", 0, FLAG_BOOL, FLAG_AT(struct stats_opts, json), NULL,
     "one JSON object per trace", .value = true},
    FLAG_END,
};

#define FORMATS_NOTE                                                                       \
    "Formats: auto (by content), agentx, mooncake, azure, burstgpt, native.\n"              \
    "PATH may be a folder of AgentX *.json files (one session tree each)."

const struct flag_spec trace_stats_spec = {
    .usage = "agentreplay trace stats PATH... [--json] [--format F] [--skip-bad]",
    .about = "Calls, sessions, token and think-time percentiles, duration and the\n"
             "theoretical prefix-cache hit rate of each trace.",
    .operands = "PATH...",
    .min_operands = 1,
    .max_operands = -1,
    .size = sizeof(struct stats_opts),
    .groups = {{"stats", stats_flags, 0},
               {NULL, trace_read_flags, offsetof(struct stats_opts, tro)}},
    .notes = FORMATS_NOTE,
};

enum convert_to { TO_NATIVE, TO_WEKA, TO_WEKA_JSONL, TO_MOONCAKE };

struct convert_opts {
    struct trace_read_opts tro;
    const char *out;
    int to;
    bool force;
};

static const struct flag_choice to_choices[] = {
    {"native", TO_NATIVE, false},
    {"weka", TO_WEKA, false},
    {"agentx", TO_WEKA, true},
    {"weka-jsonl", TO_WEKA_JSONL, false},
    {"mooncake", TO_MOONCAKE, false},
    {NULL, 0, false},
};

static const struct flag convert_flags[] = {
    {"--out", 'o', FLAG_STR, FLAG_AT(struct convert_opts, out), "OUT",
     "what is written (required): a file, or a folder\nfor weka", .def = NULL},
    {"--to", 0, FLAG_CHOICE, FLAG_AT(struct convert_opts, to), "FORMAT", "the format written",
     .choices = to_choices},
    {"--force", 0, FLAG_BOOL, FLAG_AT(struct convert_opts, force), NULL,
     "write over the input itself, or replace the\n*.json files of a weka folder", .value = true},
    FLAG_END,
};

const struct flag_spec trace_convert_spec = {
    .usage = "agentreplay trace convert IN -o OUT [--to FORMAT] [--force] [--format F] [--skip-bad]",
    .about = "Writes a trace in the native format, or in the formats AIPerf,\n"
             "GuideLLM and vLLM's benchmark read (traces/FORMAT.md, \"Writing traces\"):\n"
             "weka (a folder of JSON files, one per session tree, AIPerf's\n"
             "weka_trace), weka-jsonl (the same, one a line, GuideLLM's weka) and\n"
             "mooncake (JSONL, AIPerf's mooncake_trace, GuideLLM, vLLM's\n"
             "timed_trace).",
    .operands = "IN",
    .min_operands = 1,
    .max_operands = 1,
    .size = sizeof(struct convert_opts),
    .groups = {{"convert", convert_flags, 0},
               {NULL, trace_read_flags, offsetof(struct convert_opts, tro)}},
    .notes = FORMATS_NOTE,
};

struct synth_opts {
    struct trace_synth_params p;
    const char *out;
    int64_t sessions, subagent_calls;
};

static void synth_init(void *opts)
{
    struct synth_opts *o = opts;
    trace_synth_defaults(&o->p);
    o->subagent_calls = o->p.subagent_calls_mean;
}

#define O struct synth_opts
/* Distribution parameters, bounded in the table so that a message names
 * the flag (the generator's own checks, traces/synth.c, say which kind). */
#define DIST(flag, member, what, lo, hi)                                                  \
    {flag, 0, FLAG_DOUBLE, FLAG_AT(O, p.member), "X", what, .fmin = lo, .fmax = hi}
#define MU(flag, member, what) DIST(flag, member, what, -20, 20)
#define SIGMA(flag, member, what) DIST(flag, member, what, 0, 10)
static const struct flag synth_flags[] = {
    {"--sessions", 0, FLAG_INT64, FLAG_AT(O, sessions), NULL, "root sessions (required)",
     .def = "", .min = 1, .max = 10000000},
    {"--seed", 0, FLAG_U64, FLAG_AT(O, p.seed), "S", "random seed", .def = NULL},
    {"--out", 'o', FLAG_STR, FLAG_AT(O, out), "OUT", "the native trace written (required)", .def = NULL},
    {"--block-size", 0, FLAG_INT64, FLAG_AT(O, p.block_size), NULL, "tokens per block",
     .min = 1, .max = 1048576},
    MU("--initial-mu", initial_mu, "lognormal first prompt (tokens): mu"),
    SIGMA("--initial-sigma", initial_sigma, "lognormal first prompt: sigma"),
    MU("--calls-mu", calls_mu, "lognormal calls per root session: mu"),
    SIGMA("--calls-sigma", calls_sigma, "lognormal calls per root session: sigma"),
    MU("--growth-mu", growth_mu, "lognormal new tokens per call: mu"),
    SIGMA("--growth-sigma", growth_sigma, "lognormal new tokens per call: sigma"),
    MU("--output-mu", output_mu, "lognormal output tokens: mu"),
    SIGMA("--output-sigma", output_sigma, "lognormal output tokens: sigma"),
    MU("--think-mu", think_mu, "lognormal think time (s): mu"),
    SIGMA("--think-sigma", think_sigma, "lognormal think time: sigma"),
    DIST("--think-max", think_max_s, "cap on one think time (s)", 0, 1e6),
    DIST("--api-per-ktok", api_s_per_ktok, "recorded api time per 1k output tokens (s)", 0, 1e4),
    DIST("--subagent-p", subagent_p, "chance a call forks a subagent", 0, 1),
    {"--subagent-calls", 0, FLAG_INT64, FLAG_AT(O, subagent_calls), NULL,
     "mean calls of a subagent", .min = 0, .max = 100000},
    DIST("--subagent-initial", subagent_initial, "subagent first prompt (tokens)", 1, 1e8),
    DIST("--compact-p", compact_p, "chance a call compacts its context", 0, 1),
    {"--compact-keep", 0, FLAG_DOUBLE, FLAG_AT(O, p.compact_keep), "X",
     "fraction a compaction keeps", .fmin = 0, .fmax = 1, .opts = FLAG_OPEN_MIN},
    {"--max-prompt", 0, FLAG_INT64, FLAG_AT(O, p.max_prompt), NULL, "context limit (tokens)",
     .min = 4, .max = 100000000},
    {"--model", 0, FLAG_STR, FLAG_AT(O, p.model), "NAME", "model name recorded", .def = NULL,
     .max_len = LIMIT_NAME_BYTES},
    {"--subagent-model", 0, FLAG_STR, FLAG_AT(O, p.subagent_model), "NAME",
     "subagents' model name recorded", .def = NULL, .max_len = LIMIT_NAME_BYTES},
    FLAG_END,
};
#undef MU
#undef SIGMA
#undef DIST

const struct flag_spec trace_synth_spec = {
    .usage = "agentreplay trace synth --sessions N [--seed S] -o OUT [flags]",
    .about = "A synthetic agentic trace in the native format; the distributions'\n"
             "defaults come from the public agentic traces.",
    .size = sizeof(O),
    .init = synth_init,
    .groups = {{"synth", synth_flags, 0}},
};
#undef O

static void print_p(const char *what, const double p[5], const char *unit)
{
    printf("  %-18s p50 %.6g  p90 %.6g  p99 %.6g  mean %.6g  max %.6g%s\n", what, p[0], p[1],
           p[2], p[3], p[4], unit);
}

int trace_cmd_stats(int argc, char **argv)
{
    struct stats_opts so;
    const char **paths = calloc((size_t)argc + 1, sizeof *paths);
    int n = 0;
    int prc = cli_parse("trace stats", &trace_stats_spec, &so, argc, argv, paths, &n);
    if (prc >= 0) {
        free(paths);
        return prc;
    }
    struct trace_read_opts o = so.tro;
    bool json = so.json;
    int rc = EXIT_OK;
    for (int i = 0; i < n; i++) {
        char err[ERR_LEN];
        struct run_read_progress rp;
        run_read_progress_attach(&rp, &o);
        struct trace *t = trace_read(paths[i], &o, err);
        run_read_progress_end(&rp);
        if (!t) {
            fprintf(stderr, "agentreplay: %s\n", err);
            rc = EXIT_BADINPUT;
            continue;
        }
        if (t->skipped_records)
            fprintf(stderr, "agentreplay: %s: skipped %llu bad records\n", paths[i],
                    (unsigned long long)t->skipped_records);
        struct trace_stats s;
        trace_stats_compute(t, &s);
        if (json) {
            json_t *j = trace_stats_json(t, &s);
            json_object_set_new(j, "path", json_string(paths[i]));
            char *txt = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(10));
            printf("%s\n", txt);
            free(txt);
            json_decref(j);
        } else {
            printf("%s (%s)\n", paths[i], trace_format_name(t->format));
            printf("  calls %llu, sessions %llu, subagents %llu, scopes %u%s\n",
                   (unsigned long long)s.calls, (unsigned long long)s.sessions,
                   (unsigned long long)s.subagents, t->n_scopes,
                   t->timestamped ? ", timestamped" : "");
            printf("  prompt tokens %llu, output tokens %llu, duration %.1f s\n",
                   (unsigned long long)s.prompt_tokens, (unsigned long long)s.output_tokens,
                   (double)s.duration_ns / 1e9);
            printf("  theoretical hit rate %.4f (blocks %.4f, full blocks only %.4f)\n",
                   s.hit_rate_tokens, s.hit_rate_blocks, s.hit_rate_full_blocks);
            print_p("prompt tokens", s.prompt_p, "");
            print_p("output tokens", s.output_p, "");
            if (s.think_samples)
                print_p("think time", s.think_p, " s");
            else
                printf("  %-18s not recorded\n", "think time");
            print_p("calls per session", s.calls_per_session_p, "");
            printf("  block ids stored %llu of %llu, digest %016llx\n",
                   (unsigned long long)t->stored_block_ids,
                   (unsigned long long)t->total_block_ids, (unsigned long long)t->digest);
        }
        trace_destroy(t);
    }
    free(paths);
    return rc;
}

/* True when path names in itself (or, for a folder, a file in it). */
static bool same_place(const char *in, const char *out)
{
    struct stat a, b;
    if (stat(in, &a) || stat(out, &b))
        return false;
    return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* What the written format cannot hold, for stderr. */
static void convert_notes(const struct trace *t, int to, const char *out)
{
    uint32_t nested = 0, subs = t->n_sessions - t->n_roots;
    for (uint32_t i = 0; i < t->n_sessions; i++) {
        uint32_t p = t->sessions[i].parent;
        nested += p != TRACE_NONE && t->sessions[p].parent != TRACE_NONE;
    }
    if (to == TO_MOONCAKE)
        fprintf(stderr, "%s: Mooncake keeps arrivals (ms), lengths and 512-token prefix blocks; "
                        "sessions (%u), subagents (%u), think/api/ttft times and models are not kept\n",
                out, t->n_roots, subs);
    if ((to == TO_WEKA || to == TO_WEKA_JSONL) && t->global_scope && t->n_roots > 1)
        fprintf(stderr, "%s: Weka ids are per session tree: prefixes shared across the %u sessions of "
                        "this global-scope trace are not kept (--to mooncake keeps them)\n",
                out, t->n_roots);
    if ((to == TO_WEKA || to == TO_WEKA_JSONL) && nested)
        fprintf(stderr, "%s: %u subagents of subagents are written as subagents of their root "
                        "(AIPerf's schema has one level)\n",
                out, nested);
}

int trace_cmd_convert(int argc, char **argv)
{
    struct convert_opts co;
    const char *ops[1];
    int n;
    int rc = cli_parse("trace convert", &trace_convert_spec, &co, argc, argv, ops, &n);
    if (rc >= 0)
        return rc;
    if (!co.out)
        return cli_bad("trace convert", "-o OUT is required");
    const struct trace_read_opts o = co.tro;
    const char *in = ops[0], *out = co.out;
    char err[ERR_LEN];
    if (same_place(in, out) && !co.force) {
        snprintf(err, sizeof err, "-o %s is the input itself; --force writes over it", out);
        return cli_bad("trace convert", err);
    }
    struct trace *t = trace_read(in, &o, err);
    if (!t) {
        fprintf(stderr, "agentreplay: %s\n", err);
        return EXIT_BADINPUT;
    }
    if (t->skipped_records)
        fprintf(stderr, "agentreplay: %s: skipped %llu bad records\n", in,
                (unsigned long long)t->skipped_records);
    switch (co.to) {
    case TO_WEKA: rc = trace_write_weka(t, out, co.force, err); break;
    case TO_WEKA_JSONL: rc = trace_write_weka_jsonl(t, out, err); break;
    case TO_MOONCAKE: rc = trace_write_mooncake(t, out, err); break;
    default: rc = trace_write_native(t, out, err); break;
    }
    if (rc) {
        fprintf(stderr, "agentreplay: %s\n", err);
    } else {
        static const char *const names[] = {"", " (weka)", " (weka-jsonl)", " (mooncake)"};
        fprintf(stderr, "%s: %u calls in %u sessions written%s\n", out, t->n_calls, t->n_sessions,
                names[co.to]);
        convert_notes(t, co.to, out);
    }
    trace_destroy(t);
    return rc ? EXIT_FAIL : EXIT_OK;
}

int trace_cmd_synth(int argc, char **argv)
{
    struct synth_opts so;
    int rc = cli_parse("trace synth", &trace_synth_spec, &so, argc, argv, NULL, NULL);
    if (rc >= 0)
        return rc;
    if (!so.out || !so.sessions)
        return cli_bad("trace synth", "--sessions N and -o OUT are required");
    struct trace_synth_params p = so.p;
    p.sessions = (uint32_t)so.sessions;
    p.subagent_calls_mean = (uint32_t)so.subagent_calls;
    /* The trace's expected size (calls per root are lognormal, at most
     * 100,000; each call forks a subagent with --subagent-p) against
     * limits.h, before anything is generated. */
    double per_root = exp(p.calls_mu + p.calls_sigma * p.calls_sigma / 2);
    if (!(per_root < 1e5))
        per_root = 1e5;
    double calls = (double)p.sessions * per_root *
                   (1 + p.subagent_p * (p.subagent_calls_mean ? p.subagent_calls_mean : 1));
    if (calls > LIMIT_SYNTH_CALLS) {
        char e2[ERR_LEN];
        snprintf(e2, sizeof e2, "--sessions %u with these distributions makes about %.3g calls, "
                                "more than the %g a synthetic trace may have", p.sessions, calls,
                 LIMIT_SYNTH_CALLS);
        return cli_bad("trace synth", e2);
    }
    const char *out = so.out;
    char err[ERR_LEN];
    struct trace *t = trace_synth(&p, err);
    if (!t) {
        fprintf(stderr, "trace synth: %s\n", err);
        return EXIT_BADINPUT;
    }
    rc = trace_write_native(t, out, err);
    if (rc)
        fprintf(stderr, "agentreplay: %s\n", err);
    else
        fprintf(stderr, "%s: %u sessions (%u subagents), %u calls\n", out, t->n_roots,
                t->n_sessions - t->n_roots, t->n_calls);
    trace_destroy(t);
    return rc ? EXIT_FAIL : EXIT_OK;
}

int trace_cmd(int argc, char **argv) { return cli_dispatch("trace", argc, argv); }
