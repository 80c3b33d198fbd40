/* test_file.c: whole-file reads and the program's data files
 * (traces/base/file.h), including the binary run from another folder. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/testhelp.h"
#include "traces/base/err.h"
#include "traces/base/file.h"

/* Runs `sh -c cmd` and returns its exit status (-1 if it did not exit). */
static int sh(const char *cmd)
{
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int main(void)
{
    char err[ERR_LEN], path[4096];

    /* file_read: contents, length, a located error. */
    char tmpl[] = "/tmp/test_file_XXXXXX";
    int fd = mkstemp(tmpl);
    CHECK(fd >= 0, "mkstemp");
    CHECK(write(fd, "abc\ndef", 7) == 7, "write");
    close(fd);
    size_t n = 0;
    char *s = file_read(tmpl, &n, err);
    CHECK(s && n == 7 && !strcmp(s, "abc\ndef"), "file_read gives the bytes, NUL-terminated");
    free(s);
    unlink(tmpl);
    CHECK(!file_read("/nonexistent/x", &n, err) && strstr(err, "/nonexistent/x"),
          "file_read names the file it cannot open");

    /* file_data_path from the repository root (the tests' folder). */
    CHECK(file_data_path("engine/presets/models/kimi-k3.json", path, sizeof path) == 0,
          "the model presets are found");
    CHECK(file_data_path("no/such/file", path, sizeof path) == -1, "a missing data file is -1");

    /* The binary finds its presets, plot scripts and sample trace when run
     * from another folder, as ./agentreplay and as build/<variant>/agentreplay
     * (its folder's dirname must not be cut twice). */
    const char *bin = test_bin();
    char absbin[4096];
    if (!realpath(bin, absbin)) {
        SKIP("the agentreplay binary is not built");
        return test_report();
    }
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "cd /tmp && '%s' engine info --tp 8 >/dev/null 2>&1", absbin);
    CHECK(sh(cmd) == 0, "engine info from /tmp finds the presets");
    snprintf(cmd, sizeof cmd,
             "cd /tmp && '%s' sim --duration 60 --concurrency 2 -o /tmp/test_file_sim.$$ --quiet "
             ">/dev/null 2>&1; rc=$?; rm -rf /tmp/test_file_sim.$$; exit $rc", absbin);
    CHECK(sh(cmd) == 0, "sim from /tmp finds the built-in sample trace");
    return test_report();
}
