/* engine_cmd.c: placeholder until its module lands. */
#include <stdio.h>
#include "replay/cli.h"
int engine_cmd_info(int argc, char **argv) { (void)argc; fprintf(stderr, "%s: not available yet\n", argv[0]); return 1; }
