/* plot_cmd.c: placeholder until its module lands. */
#include <stdio.h>
#include "replay/cli.h"
int plot_cmd(int argc, char **argv) { (void)argc; fprintf(stderr, "%s: not available yet\n", argv[0]); return 1; }
