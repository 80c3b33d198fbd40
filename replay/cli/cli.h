/* cli.h: the commands of ./agentreplay (one file each in replay/cli/),
 * their registry, and what the command fronts share. Each command takes
 * the arguments after its own name (argv[0] is its name) and returns the
 * process exit code (traces/base/err.h: 0 ok, 1 run failed or interrupted,
 * 2 bad input, 3 refused). */
#ifndef CLI_H
#define CLI_H

#include "traces/base/flags.h"

/* A command or subcommand ("trace stats") with its flag spec; spec is NULL
 * for a dispatcher of subcommands (trace, engine's info, kernels). */
struct cli_command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;         /* one line for `agentreplay --help` */
    const struct flag_spec *spec;
};
/* Every command, then every subcommand (names with a space); ended by
 * {NULL}. The top level lists the names without a space. */
extern const struct cli_command cli_commands[];
void cli_usage(FILE *f);

/* Initialises opts (spec->init) and parses argv into it. Returns -1 to go
 * on, or the exit code to return: EXIT_OK after printing the help,
 * EXIT_BADINPUT after "agentreplay CMD: message". */
int cli_parse(const char *cmd, const struct flag_spec *spec, void *opts, int argc, char **argv,
              const char **operands, int *n_operands);
/* Runs the subcommand "CMD argv[1]" of cli_commands; --help (or none)
 * lists the subcommands. */
int cli_dispatch(const char *cmd, int argc, char **argv);
/* "agentreplay CMD: msg" on stderr; returns EXIT_BADINPUT. */
int cli_bad(const char *cmd, const char *msg);
/* "agentreplay" and argv joined by spaces (run.json's command; malloc'ed). */
char *cli_command_line(int argc, char **argv);

int replay_cmd_sim(int argc, char **argv);       /* sim.c */
int replay_cmd_sweep(int argc, char **argv);     /* sweep.c */
int replay_cmd_plan(int argc, char **argv);      /* plan.c */
int replay_cmd_compare(int argc, char **argv);   /* compare.c */
int replay_cmd_demo(int argc, char **argv);      /* demo.c: the main job */
int load_cmd(int argc, char **argv);             /* load.c */
int serve_cmd(int argc, char **argv);            /* serve.c */
int plot_cmd(int argc, char **argv);             /* plot.c */
int trace_cmd(int argc, char **argv);            /* trace.c */
int trace_cmd_stats(int argc, char **argv);
int trace_cmd_convert(int argc, char **argv);
int trace_cmd_synth(int argc, char **argv);
int trace_cmd_plan(int argc, char **argv); extern const struct flag_spec trace_plan_spec; /* trace_plan.c */
int engine_cmd_info(int argc, char **argv);      /* engine.c */
int engine_cmd_bench_decode(int argc, char **argv); /* bench.c */
int engine_cmd_fidelity(int argc, char **argv);
int kernels_cmd(int argc, char **argv);          /* kernels.c */
int kernels_cmd_list(int argc, char **argv);
int kernels_cmd_cpu_check(int argc, char **argv);
int kernels_cmd_driver(int argc, char **argv);

/* The specs of the commands (each command's file). */
extern const struct flag_spec sim_spec, sweep_spec, plan_spec, compare_spec, demo_spec,
    load_spec, serve_spec, plot_spec, trace_stats_spec, trace_convert_spec, trace_synth_spec,
    engine_info_spec, bench_decode_spec, fidelity_spec, kernels_list_spec,
    kernels_cpu_check_spec, kernels_check_spec, kernels_bench_spec;

#endif
