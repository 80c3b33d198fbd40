/* cli.h: the subcommands of ./agentreplay. Each takes the arguments after
 * its own name (argv[0] is the subcommand) and returns the process exit
 * code (traces/base/err.h: 0 ok, 1 run failed, 2 bad input, 3 refused). */
#ifndef CLI_H
#define CLI_H

int trace_cmd(int argc, char **argv);            /* traces/trace_cmd.c */
int engine_cmd_info(int argc, char **argv);      /* engine/engine_cmd.c */
/* engine/bench_cmd.c: */
int engine_cmd_bench_decode(int argc, char **argv);
int engine_cmd_fidelity(int argc, char **argv);
int replay_cmd_sim(int argc, char **argv);       /* replay/sim_cmd.c */
int replay_cmd_sweep(int argc, char **argv);
int replay_cmd_compare(int argc, char **argv);
int replay_cmd_plan(int argc, char **argv);
int replay_cmd_demo(int argc, char **argv);      /* the main job */
int plot_cmd(int argc, char **argv);             /* plots/plot_cmd.c */
int load_cmd(int argc, char **argv);             /* replay/load_cmd.c */
int serve_cmd(int argc, char **argv);            /* engine/serve.c */
int kernels_cmd(int argc, char **argv);          /* kernels/kernels_cmd.c */

#endif
