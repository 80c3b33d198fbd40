/* bench_cmd.c: placeholder until its module lands. */
#include <stdio.h>
#include "replay/cli.h"
int engine_cmd_bench_decode(int argc, char **argv) { (void)argc; fprintf(stderr, "%s: not available yet\n", argv[0]); return 1; }
int engine_cmd_fidelity(int argc, char **argv) { (void)argc; fprintf(stderr, "%s: not available yet\n", argv[0]); return 1; }
