/* testmpi.h: what test_mpi and bench_mpi share: the mpirun command line of
 * a job on this machine, the port a `serve --port-file` reports, and the
 * server's count of completed calls. */
#ifndef TESTMPI_H
#define TESTMPI_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/testhelp.h"

/* out = [prefix...] mpirun [--allow-run-as-root] --oversubscribe -np N
 * -x ASAN_OPTIONS -x AGENTREPLAY_TEST_JOB BIN args... NULL (prefix and
 * args NULL-terminated; prefix may be NULL). Local ranks inherit mpirun's
 * environment; the -x names it for remote ones. */
static inline void mpirun_argv(char **out, char *const prefix[], int np, char *const args[])
{
    static char nps[16];
    snprintf(nps, sizeof nps, "%d", np);
    int n = 0;
    for (int i = 0; prefix && prefix[i]; i++)
        out[n++] = prefix[i];
    out[n++] = "mpirun";
    if (geteuid() == 0)
        out[n++] = "--allow-run-as-root";
    out[n++] = "--oversubscribe";
    out[n++] = "-np";
    out[n++] = nps;
    out[n++] = "-x";
    out[n++] = "ASAN_OPTIONS";
    out[n++] = "-x";
    out[n++] = "AGENTREPLAY_TEST_JOB";
    out[n++] = (char *)test_bin();
    for (int i = 0; args[i]; i++)
        out[n++] = args[i];
    out[n] = NULL;
}

/* The port written to port_file within 10 s, or -1. */
static inline int wait_port(const char *port_file)
{
    for (int i = 0; i < 200; i++) {
        FILE *f = fopen(port_file, "r");
        int port = 0;
        if (f) {
            if (fscanf(f, "%d", &port) != 1)
                port = 0;
            fclose(f);
        }
        if (port > 0)
            return port;
        usleep(50000);
    }
    return -1;
}

/* agentreplay_completions_total{status="ok"} of the server on port, or
 * -1 (no curl, no answer). */
static inline long server_completed(int port)
{
    char cmd[256], line[512];
    snprintf(cmd, sizeof cmd, "curl -s --max-time 5 http://127.0.0.1:%d/metrics", port);
    FILE *p = popen(cmd, "r");
    long ok = -1;
    const char *key = "agentreplay_completions_total{status=\"ok\"} ";
    while (p && fgets(line, sizeof line, p))
        if (!strncmp(line, key, strlen(key)))
            ok = atol(line + strlen(key));
    if (p)
        pclose(p);
    return ok;
}

#endif
