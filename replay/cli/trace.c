/* trace_cmd.c: the `trace` command: stats, convert and synth.
 *
 *   agentreplay trace stats PATH... [--json] [--format F] [--skip-bad]
 *   agentreplay trace convert IN -o OUT [--format F] [--skip-bad]
 *   agentreplay trace synth --sessions N --seed S -o OUT [distribution flags]
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay/cli/cli.h"
#include "traces/trace.h"
#include "traces/base/err.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: agentreplay trace stats PATH... [--json] [--format F] [--skip-bad]\n"
            "       agentreplay trace convert IN -o OUT [--format F] [--skip-bad]\n"
            "       agentreplay trace synth --sessions N --seed S -o OUT [flags]\n"
            "formats: auto (default, by content), agentx, mooncake, azure, burstgpt, native\n"
            "PATH may be a folder of AgentX *.json files (one session tree each).\n"
            "synth flags (defaults from the public agentic traces):\n"
            "  --block-size N      --initial-mu X --initial-sigma X\n"
            "  --calls-mu X --calls-sigma X    --growth-mu X --growth-sigma X\n"
            "  --output-mu X --output-sigma X  --think-mu X --think-sigma X\n"
            "  --think-max S       --api-per-ktok S  --subagent-p P\n"
            "  --subagent-calls N  --subagent-initial N  --compact-p P\n"
            "  --compact-keep F    --max-prompt N  --model NAME  --subagent-model NAME\n");
}

static int parse_u64(const char *s, uint64_t *v)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(s, &end, 10);
    if (!*s || *end || errno || *s == '-')
        return -1;
    *v = x;
    return 0;
}

static int parse_double(const char *s, double *v)
{
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    if (!*s || *end || errno || x != x)
        return -1;
    *v = x;
    return 0;
}

static void print_p(const char *what, const double p[5], const char *unit)
{
    printf("  %-18s p50 %.6g  p90 %.6g  p99 %.6g  mean %.6g  max %.6g%s\n", what, p[0], p[1],
           p[2], p[3], p[4], unit);
}

static int cmd_stats(int argc, char **argv)
{
    struct trace_read_opts o = {0};
    bool json = false;
    const char **paths = calloc((size_t)argc + 1, sizeof *paths);
    int n = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) {
            json = true;
        } else if (!strcmp(argv[i], "--skip-bad")) {
            o.skip_bad = true;
        } else if (!strcmp(argv[i], "--format") && i + 1 < argc) {
            if (trace_format_parse(argv[++i], &o.format)) {
                fprintf(stderr, "trace stats: unknown format '%s'\n", argv[i]);
                free(paths);
                return EXIT_BADINPUT;
            }
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            free(paths);
            return EXIT_OK;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "trace stats: unknown flag '%s'\n", argv[i]);
            usage(stderr);
            free(paths);
            return EXIT_BADINPUT;
        } else {
            paths[n++] = argv[i];
        }
    }
    if (!n) {
        usage(stderr);
        free(paths);
        return EXIT_BADINPUT;
    }
    int rc = EXIT_OK;
    for (int i = 0; i < n; i++) {
        char err[ERR_LEN];
        struct trace *t = trace_read(paths[i], &o, err);
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

static int cmd_convert(int argc, char **argv)
{
    struct trace_read_opts o = {0};
    const char *in = NULL, *out = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-o") && i + 1 < argc) {
            out = argv[++i];
        } else if (!strcmp(argv[i], "--skip-bad")) {
            o.skip_bad = true;
        } else if (!strcmp(argv[i], "--format") && i + 1 < argc) {
            if (trace_format_parse(argv[++i], &o.format)) {
                fprintf(stderr, "trace convert: unknown format '%s'\n", argv[i]);
                return EXIT_BADINPUT;
            }
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "trace convert: unknown flag '%s'\n", argv[i]);
            return EXIT_BADINPUT;
        } else if (!in) {
            in = argv[i];
        } else {
            fprintf(stderr, "trace convert: one input only\n");
            return EXIT_BADINPUT;
        }
    }
    if (!in || !out) {
        usage(stderr);
        return EXIT_BADINPUT;
    }
    char err[ERR_LEN];
    struct trace *t = trace_read(in, &o, err);
    if (!t) {
        fprintf(stderr, "agentreplay: %s\n", err);
        return EXIT_BADINPUT;
    }
    if (t->skipped_records)
        fprintf(stderr, "agentreplay: %s: skipped %llu bad records\n", in,
                (unsigned long long)t->skipped_records);
    int rc = trace_write_native(t, out, err);
    if (rc)
        fprintf(stderr, "agentreplay: %s\n", err);
    else
        fprintf(stderr, "%s: %u calls in %u sessions written\n", out, t->n_calls,
                t->n_sessions);
    trace_destroy(t);
    return rc ? EXIT_FAIL : EXIT_OK;
}

static int cmd_synth(int argc, char **argv)
{
    struct trace_synth_params p;
    trace_synth_defaults(&p);
    const char *out = NULL;
    bool have_n = false;
    struct {
        const char *flag;
        double *d;
    } dflags[] = {
        {"--initial-mu", &p.initial_mu}, {"--initial-sigma", &p.initial_sigma},
        {"--calls-mu", &p.calls_mu},     {"--calls-sigma", &p.calls_sigma},
        {"--growth-mu", &p.growth_mu},   {"--growth-sigma", &p.growth_sigma},
        {"--output-mu", &p.output_mu},   {"--output-sigma", &p.output_sigma},
        {"--think-mu", &p.think_mu},     {"--think-sigma", &p.think_sigma},
        {"--think-max", &p.think_max_s}, {"--api-per-ktok", &p.api_s_per_ktok},
        {"--subagent-p", &p.subagent_p}, {"--subagent-initial", &p.subagent_initial},
        {"--compact-p", &p.compact_p},   {"--compact-keep", &p.compact_keep},
    };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        uint64_t u;
        double d;
        bool done = false;
        for (size_t k = 0; k < ARRAY_LEN(dflags) && !done; k++) {
            if (strcmp(a, dflags[k].flag))
                continue;
            if (!v || parse_double(v, &d)) {
                fprintf(stderr, "trace synth: %s wants a number\n", a);
                return EXIT_BADINPUT;
            }
            *dflags[k].d = d;
            i++;
            done = true;
        }
        if (done)
            continue;
        if (!strcmp(a, "-o") && v) {
            out = v;
            i++;
        } else if (!strcmp(a, "--model") && v) {
            p.model = v;
            i++;
        } else if (!strcmp(a, "--subagent-model") && v) {
            p.subagent_model = v;
            i++;
        } else if ((!strcmp(a, "--sessions") || !strcmp(a, "--seed") ||
                    !strcmp(a, "--block-size") || !strcmp(a, "--subagent-calls") ||
                    !strcmp(a, "--max-prompt")) && v) {
            if (parse_u64(v, &u)) {
                fprintf(stderr, "trace synth: %s wants a non-negative integer\n", a);
                return EXIT_BADINPUT;
            }
            if (!strcmp(a, "--sessions")) {
                if (u == 0 || u > 10000000) {
                    fprintf(stderr, "trace synth: --sessions must be 1 .. 1e7\n");
                    return EXIT_BADINPUT;
                }
                p.sessions = (uint32_t)u;
                have_n = true;
            } else if (!strcmp(a, "--seed")) {
                p.seed = u;
            } else if (!strcmp(a, "--block-size")) {
                p.block_size = (int64_t)u;
            } else if (!strcmp(a, "--subagent-calls")) {
                p.subagent_calls_mean = (uint32_t)(u > 100000 ? 100000 : u);
            } else {
                p.max_prompt = (int64_t)u;
            }
            i++;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return EXIT_OK;
        } else {
            fprintf(stderr, "trace synth: unknown or incomplete flag '%s'\n", a);
            usage(stderr);
            return EXIT_BADINPUT;
        }
    }
    if (!out || !have_n) {
        fprintf(stderr, "trace synth: --sessions N and -o OUT are required\n");
        return EXIT_BADINPUT;
    }
    char err[ERR_LEN];
    struct trace *t = trace_synth(&p, err);
    if (!t) {
        fprintf(stderr, "trace synth: %s\n", err);
        return EXIT_BADINPUT;
    }
    int rc = trace_write_native(t, out, err);
    if (rc)
        fprintf(stderr, "agentreplay: %s\n", err);
    else
        fprintf(stderr, "%s: %u sessions (%u subagents), %u calls\n", out, t->n_roots,
                t->n_sessions - t->n_roots, t->n_calls);
    trace_destroy(t);
    return rc ? EXIT_FAIL : EXIT_OK;
}

int trace_cmd(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return EXIT_BADINPUT;
    }
    if (!strcmp(argv[1], "stats"))
        return cmd_stats(argc - 1, argv + 1);
    if (!strcmp(argv[1], "convert"))
        return cmd_convert(argc - 1, argv + 1);
    if (!strcmp(argv[1], "synth"))
        return cmd_synth(argc - 1, argv + 1);
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(stdout);
        return EXIT_OK;
    }
    fprintf(stderr, "trace: unknown subcommand '%s'\n", argv[1]);
    usage(stderr);
    return EXIT_BADINPUT;
}
