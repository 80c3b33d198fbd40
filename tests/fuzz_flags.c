/* fuzz_flags.c: the command-line flag parser (traces/base/flags.c) fed
 * arbitrary argument vectors against every command's flag tables.
 *
 * The first byte picks the command (cli_commands[], those with a spec) and
 * whether its help is printed too; the rest is split at NUL and newline
 * bytes into at most 64 arguments, each in a buffer of its exact size (so
 * that an overread shows under ASan). Invariants, asserted:
 *   - flags_parse returns 0, FLAGS_HELP or -1, never crashes;
 *   - -1 comes with a one-line message that names an argument at fault (a
 *     flag as typed, a value, an operand) or says which operands were
 *     expected: "every message names the flag or field at fault";
 *   - 0 leaves a number of operands within the spec's bounds, each one of
 *     the arguments;
 *   - parsing the same vector again gives the same result, byte for byte.
 * test_hostile.c replays the committed seeds and edge cases through it in
 * every make test. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay/cli/cli.h"
#include "traces/base/err.h"
#include "traces/base/flags.h"

/* The fuzz build leaves out the kernels command (kernels/ is not built
 * with clang): stand-ins for what the command registry names. Weak, so
 * that a program linked with the real ones (test_hostile) keeps them. */
#define FF_WEAK __attribute__((weak))
FF_WEAK const struct flag_spec kernels_list_spec = {.usage = "kernels list", .size = 1};
FF_WEAK const struct flag_spec kernels_cpu_check_spec = {.usage = "kernels cpu-check", .size = 1};
FF_WEAK const struct flag_spec kernels_check_spec = {.usage = "kernels check", .size = 1};
FF_WEAK const struct flag_spec kernels_bench_spec = {.usage = "kernels bench", .size = 1};
FF_WEAK int kernels_cmd(int argc, char **argv) { return EXIT_BADINPUT; }
FF_WEAK int kernels_cmd_list(int argc, char **argv) { return EXIT_BADINPUT; }
FF_WEAK int kernels_cmd_cpu_check(int argc, char **argv) { return EXIT_BADINPUT; }
FF_WEAK int kernels_cmd_driver(int argc, char **argv) { return EXIT_BADINPUT; }

#define FF_MAX_ARGS 64

/* Whether err names one of the arguments: a flag as typed (up to an '='),
 * or a value or an operand (their first 40 bytes), or the operands that
 * were expected. */
static bool names_an_argument(const char *err, char **argv, int argc)
{
    if (!strncmp(err, "expected ", 9))
        return true;
    for (int i = 1; i < argc; i++) {
        char key[48];
        size_t n = strlen(argv[i]);
        const char *eq = argv[i][0] == '-' && argv[i][1] == '-' ? strchr(argv[i], '=') : NULL;
        if (eq)
            n = (size_t)(eq - argv[i]);
        if (n > 40)
            n = 40;
        if (!n) { /* an empty argument shows as '' */
            if (strstr(err, "''"))
                return true;
            continue;
        }
        memcpy(key, argv[i], n);
        key[n] = 0;
        if (strstr(err, key))
            return true;
    }
    return false;
}

/* Parses argv into a fresh options struct: returns flags_parse's result;
 * *opts (malloc'ed) and the operands are the caller's. */
static int parse(const struct flag_spec *spec, int argc, char **argv, void **opts,
                 const char **ops, int *n_ops, char *err)
{
    *opts = calloc(1, spec->size ? spec->size : 1);
    if (spec->init)
        spec->init(*opts);
    err[0] = 0;
    return flags_parse(spec, *opts, argc, argv, ops, n_ops, err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const struct cli_command *with_spec[64];
    int n_cmd = 0;
    for (const struct cli_command *c = cli_commands; c->name && n_cmd < 64; c++)
        if (c->spec)
            with_spec[n_cmd++] = c;
    ASSERT(n_cmd > 0);
    const struct cli_command *cmd = with_spec[(data[0] & 0x7f) % n_cmd];
    const struct flag_spec *spec = cmd->spec;
    if (data[0] & 0x80) {
        FILE *null = fopen("/dev/null", "w");
        if (null) {
            flags_help(spec, null);
            fclose(null);
        }
    }
    /* argv[0] is the command's name; the arguments follow. */
    char *argv[FF_MAX_ARGS + 2];
    int argc = 0;
    argv[argc++] = strdup(cmd->name);
    size_t start = 1;
    for (size_t i = 1; i <= size && argc <= FF_MAX_ARGS; i++) {
        if (i < size && data[i] != 0 && data[i] != '\n')
            continue;
        size_t n = i - start;
        char *a = malloc(n + 1);
        memcpy(a, data + start, n);
        a[n] = 0;
        argv[argc++] = a;
        start = i + 1;
    }
    argv[argc] = NULL;

    const char **ops = calloc((size_t)argc + 1, sizeof *ops);
    const char **ops2 = calloc((size_t)argc + 1, sizeof *ops2);
    char err[ERR_LEN], err2[ERR_LEN];
    void *opts, *opts2;
    int n_ops = -1, n_ops2 = -1;
    int rc = parse(spec, argc, argv, &opts, ops, &n_ops, err);
    ASSERT(rc == 0 || rc == FLAGS_HELP || rc == -1);
    if (rc == -1) {
        ASSERT(err[0] && strlen(err) < ERR_LEN && !strchr(err, '\n'));
        if (!names_an_argument(err, argv, argc)) {
            fprintf(stderr, "fuzz_flags: %s: a message that names no argument: %s\n", cmd->name,
                    err);
            ASSERT(!"a message names the flag or value at fault");
        }
    }
    if (rc == 0) {
        ASSERT(n_ops >= spec->min_operands);
        ASSERT(spec->max_operands < 0 || n_ops <= spec->max_operands);
        for (int k = 0; k < n_ops; k++) {
            bool found = false;
            for (int i = 1; i < argc && !found; i++)
                found = ops[k] == argv[i];
            ASSERT(found);
        }
    }
    int rc2 = parse(spec, argc, argv, &opts2, ops2, &n_ops2, err2);
    ASSERT(rc2 == rc && !strcmp(err, err2));
    if (rc == 0 && (n_ops2 != n_ops || memcmp(opts, opts2, spec->size))) {
        size_t at = 0;
        while (at < spec->size && ((char *)opts)[at] == ((char *)opts2)[at])
            at++;
        fprintf(stderr, "fuzz_flags: %s: a second parse differs (operands %d/%d, byte %zu of %zu)\n",
                cmd->name, n_ops, n_ops2, at, spec->size);
        ASSERT(!"parsing is deterministic");
    }
    free(opts);
    free(opts2);
    free(ops);
    free(ops2);
    for (int i = 0; i < argc; i++)
        free(argv[i]);
    return 0;
}
