/* sim_cmd.c: placeholder until its module lands. */
#include <stdio.h>
#include "replay/cli.h"
int replay_cmd_sim(int argc, char **argv) { (void)argc; fprintf(stderr, "%s: not available yet\n", argv[0]); return 1; }
int replay_cmd_sweep(int argc, char **argv) { (void)argc; fprintf(stderr, "%s: not available yet\n", argv[0]); return 1; }
int replay_cmd_compare(int argc, char **argv) { (void)argc; fprintf(stderr, "%s: not available yet\n", argv[0]); return 1; }
int replay_cmd_plan(int argc, char **argv) { (void)argc; fprintf(stderr, "%s: not available yet\n", argv[0]); return 1; }
int replay_cmd_demo(int argc, char **argv) { (void)argc; fprintf(stderr, "%s: not available yet\n", argv[0]); return 1; }
