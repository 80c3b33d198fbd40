/* cli.c: the command registry, the top-level help and the helpers every
 * command front uses (cli.h). */
#include "replay/cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay/results.h"
#include "traces/base/err.h"
#include "traces/base/mem.h"

/* `agentreplay version` (and --version): the version results record. */
static const struct flag_spec version_spec = {
    .usage = "agentreplay version",
    .about = "Prints the version (the one run.json records).",
    .size = sizeof(int),
};

static int version_cmd(int argc, char **argv)
{
    int unused;
    int rc = cli_parse("version", &version_spec, &unused, argc, argv, NULL, NULL);
    if (rc >= 0)
        return rc;
    if (printf("agentreplay %s\n", AGENTREPLAY_VERSION) < 0 || fflush(stdout))
        return EXIT_FAIL;
    return EXIT_OK;
}

const struct cli_command cli_commands[] = {
    {"sim", replay_cmd_sim, "replay a trace against the simulated engine", &sim_spec},
    {"sweep", replay_cmd_sweep, "sim over concurrencies, backends and layouts", &sweep_spec},
    {"plan", replay_cmd_plan, "largest load or fewest GPUs meeting SLOs", &plan_spec},
    {"compare", replay_cmd_compare, "two results side by side (same GPU count)", &compare_spec},
    {"demo", replay_cmd_demo, "the main job (also: no arguments)", &demo_spec},
    {"load", load_cmd, "replay a trace against a live OpenAI-compatible URL", &load_spec},
    {"serve", serve_cmd, "serve the simulated engine over HTTP in real time", &serve_spec},
    {"plot", plot_cmd, "charts (PNG, SVG) and report.md from results", &plot_spec},
    {"trace", trace_cmd, "trace stats | convert | synth | plan", NULL},
    {"engine", engine_cmd_info, "engine info: memory budget and capacity", &engine_info_spec},
    {"bench-decode", engine_cmd_bench_decode, "fixed-batch decode measurement",
     &bench_decode_spec},
    {"fidelity", engine_cmd_fidelity, "engine predictions beside the calibration point",
     &fidelity_spec},
    {"kernels", kernels_cmd, "CUDA decode-layer kernels: list | cpu-check | check | bench", NULL},
    {"version", version_cmd, "the version (also --version)", &version_spec},
    /* subcommands */
    {"trace stats", trace_cmd_stats, "statistics of traces", &trace_stats_spec},
    {"trace convert", trace_cmd_convert, "a trace in the native format", &trace_convert_spec},
    {"trace synth", trace_cmd_synth, "a synthetic agentic trace", &trace_synth_spec},
    {"trace plan", trace_cmd_plan, "the AgentX replay plan of a trace", &trace_plan_spec},
    {"engine info", engine_cmd_info, "memory budget and capacity", &engine_info_spec},
    {"kernels list", kernels_cmd_list, "the kernel sequences", &kernels_list_spec},
    {"kernels cpu-check", kernels_cmd_cpu_check, "both paths in C, compared",
     &kernels_cpu_check_spec},
    {"kernels check", kernels_cmd_driver, "the CUDA kernels against the C reference",
     &kernels_check_spec},
    {"kernels bench", kernels_cmd_driver, "the CUDA kernels timed: a calibration file",
     &kernels_bench_spec},
    {NULL, NULL, NULL, NULL},
};

void cli_usage(FILE *f)
{
    fprintf(f, "usage: agentreplay [COMMAND [ARGS...]]\n\n"
               "Replays agentic LLM traffic and reports P90 interactivity, TTFT\n"
               "and throughput per GPU at a fixed GPU count.\n\ncommands:\n");
    for (const struct cli_command *c = cli_commands; c->name; c++)
        if (!strchr(c->name, ' '))
            fprintf(f, "  %-13s %s\n", c->name, c->summary);
    fprintf(f, "\nWith no command: the main job (see README.md).\n"
               "'agentreplay COMMAND --help' describes each command.\n");
}

static void dispatch_usage(const char *cmd, FILE *f)
{
    size_t k = strlen(cmd);
    fprintf(f, "usage: agentreplay %s SUBCOMMAND [ARGS...]\n\nsubcommands:\n", cmd);
    for (const struct cli_command *c = cli_commands; c->name; c++)
        if (!strncmp(c->name, cmd, k) && c->name[k] == ' ')
            fprintf(f, "  %-13s %s\n", c->name + k + 1, c->summary);
    fprintf(f, "\n'agentreplay %s SUBCOMMAND --help' describes each.\n", cmd);
}

int cli_dispatch(const char *cmd, int argc, char **argv)
{
    if (argc < 2) {
        dispatch_usage(cmd, stderr);
        return EXIT_BADINPUT;
    }
    const char *sub = argv[1];
    if (!strcmp(sub, "-h") || !strcmp(sub, "--help") || !strcmp(sub, "help")) {
        dispatch_usage(cmd, stdout);
        return EXIT_OK;
    }
    char name[128];
    snprintf(name, sizeof name, "%s %s", cmd, sub);
    for (const struct cli_command *c = cli_commands; c->name; c++)
        if (!strcmp(c->name, name))
            return c->fn(argc - 1, argv + 1);
    fprintf(stderr, "agentreplay %s: unknown subcommand '%s'\n\n", cmd, sub);
    dispatch_usage(cmd, stderr);
    return EXIT_BADINPUT;
}

int cli_bad(const char *cmd, const char *msg)
{
    fprintf(stderr, "agentreplay %s: %s\n", cmd, msg);
    return EXIT_BADINPUT;
}

int cli_parse(const char *cmd, const struct flag_spec *spec, void *opts, int argc, char **argv,
              const char **operands, int *n_operands)
{
    char err[ERR_LEN] = "";
    memset(opts, 0, spec->size);
    if (spec->init)
        spec->init(opts);
    int rc = flags_parse(spec, opts, argc, argv, operands, n_operands, err);
    if (rc == FLAGS_HELP) {
        flags_help(spec, stdout);
        return EXIT_OK;
    }
    if (rc < 0)
        return cli_bad(cmd, err);
    return -1;
}

char *cli_command_line(int argc, char **argv)
{
    size_t n = 16;
    for (int i = 0; i < argc; i++)
        n += strlen(argv[i]) + 3;
    char *s = xmalloc(n);
    strcpy(s, "agentreplay");
    for (int i = 0; i < argc; i++) {
        strcat(s, " ");
        strcat(s, argv[i]);
    }
    return s;
}
