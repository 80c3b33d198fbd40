/* main.c: the command-line front of agentreplay: dispatches subcommands.
 * With no arguments it runs the main job (the fair comparison on the
 * built-in sample trace). */
#include <stdio.h>
#include <string.h>

#include "replay/cli/cli.h"
#include "traces/base/err.h"

struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
};

static const struct command commands[] = {
    {"sim", replay_cmd_sim, "replay a trace against the simulated engine"},
    {"sweep", replay_cmd_sweep, "sim over concurrencies, backends and layouts"},
    {"plan", replay_cmd_plan, "largest load or fewest GPUs meeting SLOs"},
    {"compare", replay_cmd_compare, "two results side by side (same GPU count)"},
    {"demo", replay_cmd_demo, "the main job (also: no arguments)"},
    {"load", load_cmd, "replay a trace against a live OpenAI-compatible URL"},
    {"serve", serve_cmd, "serve the simulated engine over HTTP in real time"},
    {"plot", plot_cmd, "charts (PNG, SVG) and report.md from results"},
    {"trace", trace_cmd, "trace stats | convert | synth"},
    {"engine", engine_cmd_info, "engine info: memory budget and capacity"},
    {"bench-decode", engine_cmd_bench_decode, "fixed-batch decode measurement"},
    {"fidelity", engine_cmd_fidelity, "engine predictions beside the calibration point"},
    {"kernels", kernels_cmd, "CUDA decode-layer kernels: check | bench"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: agentreplay [COMMAND [ARGS...]]\n\n"
               "Replays agentic LLM traffic and reports P90 interactivity, TTFT\n"
               "and throughput per GPU at a fixed GPU count.\n\ncommands:\n");
    for (size_t i = 0; i < ARRAY_LEN(commands); i++)
        fprintf(f, "  %-13s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\nWith no command: the main job (see README.md).\n"
               "'agentreplay COMMAND --help' describes each command.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return replay_cmd_demo(argc, argv);
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return EXIT_OK;
    }
    for (size_t i = 0; i < ARRAY_LEN(commands); i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "agentreplay: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return EXIT_BADINPUT;
}
