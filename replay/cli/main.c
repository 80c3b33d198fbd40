/* main.c: the command-line front of agentreplay: dispatches subcommands
 * (replay/cli/cli.c lists them). With no arguments it runs the main job
 * (the fair comparison on the built-in sample trace). */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "replay/cli/cli.h"
#include "traces/base/err.h"

/* Every command's standard output, checked once at the end: a write that
 * failed (a full disk, /dev/full, a closed pipe with SIGPIPE ignored) makes
 * a command that succeeded exit 1 with a message instead of 0. */
static int finish(int rc)
{
    errno = 0;
    bool bad = fflush(stdout) != 0 || ferror(stdout);
    int e = errno;
    if (fclose(stdout) != 0 && !bad) {
        bad = true;
        e = errno;
    }
    if (!bad)
        return rc;
    fprintf(stderr, "agentreplay: writing the standard output: %s\n",
            e ? strerror(e) : "write error");
    return rc == EXIT_OK ? EXIT_FAIL : rc;
}

static int run(int argc, char **argv)
{
    if (argc < 2)
        return replay_cmd_demo(argc, argv);
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        cli_usage(stdout);
        return EXIT_OK;
    }
    if (!strcmp(argv[1], "--version"))
        argv[1] = "version";
    for (const struct cli_command *c = cli_commands; c->name; c++)
        if (!strcmp(argv[1], c->name))
            return c->fn(argc - 1, argv + 1);
    fprintf(stderr, "agentreplay: unknown command '%s'\n\n", argv[1]);
    cli_usage(stderr);
    return EXIT_BADINPUT;
}

int main(int argc, char **argv) { return finish(run(argc, argv)); }
