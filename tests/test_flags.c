/* test_flags.c: the one flag grammar (traces/base/flags.h) and every
 * command's tables (replay/cli/cli.c's registry):
 *   - the grammar on a small spec: --x v and --x=v, aliases, flags without
 *     a value, unknown flags, missing values, operands and --, a name in
 *     two groups setting both, a shadowing flag, lists, durations, choices;
 *   - every command's tables pass flags_verify; every flag parses in both
 *     grammars with a valid value and is refused, named, with a bad one;
 *   - through the binary: --help and -h exit 0 for every command and
 *     subcommand, and every flag of a command is listed in its help
 *     exactly once; a bad value and an unknown flag exit 2 naming the flag.
 */
#include <float.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <stdarg.h>
#include <sys/wait.h>

#include "replay/cli/cli.h"
#include "tests/testhelp.h"
#include "tests/testproc.h"
#include "traces/base/err.h"
#include "traces/base/flags.h"
#include "traces/base/mem.h"
#include "traces/base/parse.h"
#include "traces/base/time_ns.h"

/* ---- the grammar on a small spec --------------------------------------- */

struct inner {
    int n;
    uint64_t seed;
};
struct toy {
    int count;
    bool quiet;
    const char *out;
    int64_t wait_ns;
    double frac;
    int mode;
    struct flag_list list;
    char name[8];
    struct inner a, b;
    bool count_seen;
};

static const struct flag_choice mode_names[] = {
    {"fast", 1, false}, {"slow", 2, false}, {"quick", 1, true}, {NULL, 0, false}};

#define T struct toy
static const struct flag toy_flags[] = {
    {"--count", 'c', FLAG_INT, FLAG_AT(T, count), NULL, "a count", .min = 1, .max = 10,
     .seen = FLAG_SEEN(T, count_seen)},
    {"--quiet", 0, FLAG_BOOL, FLAG_AT(T, quiet), NULL, "quiet", .value = true},
    {"--out", 'o', FLAG_STR, FLAG_AT(T, out), "DIR", "a folder", .max_len = 5},
    {"--wait", 0, FLAG_DURATION, FLAG_AT(T, wait_ns), NULL, "a wait", .min = 0,
     .max = 60 * NS_PER_S, .opts = FLAG_NONE | FLAG_OPEN_MIN},
    {"--frac", 0, FLAG_DOUBLE, FLAG_AT(T, frac), NULL, "a fraction", .fmin = 0, .fmax = 1,
     .opts = FLAG_OPEN_MIN},
    {"--mode", 0, FLAG_CHOICE, FLAG_AT(T, mode), NULL, "a mode", .choices = mode_names},
    {"--list", 0, FLAG_LIST, FLAG_AT(T, list), NULL, "a list", .min = 1, .max = 99},
    {"--name", 0, FLAG_BUF, FLAG_AT(T, name), NULL, "a name", .def = NULL},
    FLAG_END,
};
#undef T

/* The same names in two groups: one flag for both. */
static const struct flag inner_flags[] = {
    {"--n", 0, FLAG_INT, FLAG_AT(struct inner, n), NULL, "n", .min = 0, .max = 100},
    {"--seed", 0, FLAG_U64, FLAG_AT(struct inner, seed), NULL, "seed", .def = NULL},
    FLAG_END,
};
/* A flag that hides the groups' --n. */
static const struct flag shadow_flags[] = {
    {"--n", 0, FLAG_LIST, FLAG_AT(struct toy, list), NULL, "n list", .min = 1, .max = 5,
     .opts = FLAG_SHADOW},
    FLAG_END,
};

static void toy_init(void *p) { ((struct toy *)p)->count = 3; }

static const struct flag_spec toy_spec = {
    .usage = "toy [flags] X...",
    .operands = "X...",
    .min_operands = 1,
    .max_operands = 2,
    .size = sizeof(struct toy),
    .init = toy_init,
    .groups = {{"toy", toy_flags, 0},
               {"a", inner_flags, offsetof(struct toy, a)},
               {"b", inner_flags, offsetof(struct toy, b)}},
};

static const struct flag_spec shadow_spec = {
    .usage = "shadow",
    .size = sizeof(struct toy),
    .groups = {{NULL, shadow_flags, 0}, {"a", inner_flags, offsetof(struct toy, a)}},
};

/* Parses the NULL-terminated args (after a command name) into *t. */
static int toy_parse(const struct flag_spec *s, struct toy *t, const char **ops, int *n, char *err,
                     ...)
{
    char *argv[32] = {"toy"};
    int argc = 1;
    va_list ap;
    va_start(ap, err);
    for (const char *a; argc < 31 && (a = va_arg(ap, const char *));)
        argv[argc++] = (char *)a;
    va_end(ap);
    memset(t, 0, sizeof *t);
    if (s->init)
        s->init(t);
    return flags_parse(s, t, argc, argv, ops, n, err);
}

static void test_grammar(void)
{
    char err[ERR_LEN];
    struct toy t;
    const char *ops[8];
    int n;
    CHECKF(flags_verify(&toy_spec, err) == 0, "toy spec verifies (%s)", err);
    CHECK(toy_parse(&toy_spec, &t, ops, &n, err, "--count", "5", "x", NULL) == 0 && t.count == 5 &&
              t.count_seen && n == 1 && !strcmp(ops[0], "x"),
          "--count 5, an operand");
    CHECK(toy_parse(&toy_spec, &t, ops, &n, err, "--count=6", "x", NULL) == 0 && t.count == 6,
          "--count=6");
    CHECK(toy_parse(&toy_spec, &t, ops, &n, err, "-c", "7", "x", NULL) == 0 && t.count == 7, "-c 7");
    CHECK(toy_parse(&toy_spec, &t, ops, &n, err, "x", NULL) == 0 && t.count == 3 && !t.count_seen,
          "the default stays, not seen");
    CHECK(toy_parse(&toy_spec, &t, ops, &n, err, "--count", "x", "x", NULL) < 0 &&
              strstr(err, "--count 'x': not an integer"),
          "the message names the flag and the value");
    CHECK(toy_parse(&toy_spec, &t, ops, &n, err, "--count", "11", "x", NULL) < 0 &&
              strstr(err, "at most 10"),
          "above the bound");
    CHECK(toy_parse(&toy_spec, &t, ops, &n, err, "x", "--count", NULL) < 0 && strstr(err, "needs a value"),
          "a missing value");
    CHECK(toy_parse(&toy_spec, &t, ops, &n, err, "--bogus", "x", NULL) < 0 && strstr(err, "--bogus"),
          "an unknown flag is named");
    CHECK(toy_parse(&toy_spec, &t, ops, &n, err, "--quiet", "x", NULL) == 0 && t.quiet, "--quiet");
    CHECK(toy_parse(&toy_spec, &t, ops, &n, err, "--quiet=1", "x", NULL) < 0 &&
              strstr(err, "takes no value"),
          "--quiet=1 refused");
    CHECK(toy_parse(&toy_spec, &t, ops, &n, err, "--help", NULL) == FLAGS_HELP, "--help");
    CHECK(toy_parse(&toy_spec, &t, ops, &n, err, "x", "-h", NULL) == FLAGS_HELP, "-h");
    CHECK(toy_parse(&toy_spec, &t, ops, &n, err, NULL) < 0 && strstr(err, "X..."), "too few operands");
    CHECK(toy_parse(&toy_spec, &t, ops, &n, err, "a", "b", "c", NULL) < 0, "too many operands");
    CHECK(toy_parse(&toy_spec, &t, ops, &n, err, "--", "--count", NULL) == 0 && n == 1 &&
              !strcmp(ops[0], "--count") && t.count == 3,
          "-- ends the flags");
    CHECK(toy_parse(&toy_spec, &t, ops, &n, err, "-", NULL) == 0 && n == 1, "- is an operand");
    CHECK(toy_parse(&toy_spec, &t, ops, &n, err, "--count", "-4", "x", NULL) < 0 &&
              strstr(err, "--count -4: must be at least 1"),
          "a value may start with '-'");
    CHECK(toy_parse(&toy_spec, &t, ops, &n, err, "-o", "abcde", "x", NULL) == 0 &&
              !strcmp(t.out, "abcde"),
          "-o at its length limit");
    CHECK(toy_parse(&toy_spec, &t, ops, &n, err, "--out=abcdef", "x", NULL) < 0 && strstr(err, "--out"),
          "over the limit");
    CHECK(toy_parse(&toy_spec, &t, ops, &n, err, "--name", "1234567", "x", NULL) == 0 &&
              !strcmp(t.name, "1234567"),
          "a buffer filled");
    CHECK(toy_parse(&toy_spec, &t, ops, &n, err, "--name", "12345678", "x", NULL) < 0,
          "a buffer overflowing is refused");
    CHECK(toy_parse(&toy_spec, &t, ops, &n, err, "--wait", "1.5m", "x", NULL) < 0 &&
              strstr(err, "at most 1m"),
          "a duration over its bound");
    CHECK(toy_parse(&toy_spec, &t, ops, &n, err, "--wait", "250ms", "x", NULL) == 0 &&
              t.wait_ns == 250 * NS_PER_MS,
          "250ms");
    CHECK(toy_parse(&toy_spec, &t, ops, &n, err, "--wait", "none", "x", NULL) == 0 && t.wait_ns == -1,
          "none");
    CHECK(toy_parse(&toy_spec, &t, ops, &n, err, "--wait", "0", "x", NULL) < 0 && strstr(err, "> 0s"),
          "an open lower bound");
    CHECK(toy_parse(&toy_spec, &t, ops, &n, err, "--wait", "5parsecs", "x", NULL) < 0 &&
              strstr(err, "unit"),
          "an unknown unit");
    CHECK(toy_parse(&toy_spec, &t, ops, &n, err, "--frac", "0", "x", NULL) < 0 &&
              toy_parse(&toy_spec, &t, ops, &n, err, "--frac", "1", "x", NULL) == 0 && t.frac == 1 &&
              toy_parse(&toy_spec, &t, ops, &n, err, "--frac", "nan", "x", NULL) < 0,
          "(0, 1]");
    CHECK(toy_parse(&toy_spec, &t, ops, &n, err, "--mode", "quick", "x", NULL) == 0 && t.mode == 1,
          "a choice's alias");
    CHECK(toy_parse(&toy_spec, &t, ops, &n, err, "--mode", "medium", "x", NULL) < 0 &&
              strstr(err, "fast, slow") && !strstr(err, "quick"),
          "a bad choice lists the names, not the aliases");
    CHECK(toy_parse(&toy_spec, &t, ops, &n, err, "--list", "3,,5,7", "x", NULL) == 0 &&
              t.list.n == 3 && t.list.v[2] == 7,
          "a list");
    CHECK(toy_parse(&toy_spec, &t, ops, &n, err, "--list", "3,0", "x", NULL) < 0 && strstr(err, "0: must be at least 1"),
          "a bad list item");
    CHECK(toy_parse(&toy_spec, &t, ops, &n, err, "--seed", "0x10", "--n=4", "x", NULL) == 0 &&
              t.a.seed == 16 && t.b.seed == 16 && t.a.n == 4 && t.b.n == 4,
          "one name in two groups sets both");
    CHECK(toy_parse(&toy_spec, &t, ops, &n, err, "--seed", "-1", "x", NULL) < 0, "a negative seed");
    CHECK(flags_verify(&shadow_spec, err) == 0, "shadow spec verifies");
    CHECK(toy_parse(&shadow_spec, &t, NULL, NULL, err, "--n", "1,2", NULL) == 0 && t.list.n == 2 &&
              t.a.n == 0,
          "a shadowing flag hides the later group's");

    /* Help: each flag once, defaults from init, the shared one once. */
    char buf[8192] = "";
    FILE *f = fmemopen(buf, sizeof buf - 1, "w");
    flags_help(&toy_spec, f);
    fclose(f);
    CHECK(strstr(buf, "usage: toy [flags] X...") && strstr(buf, "-c, --count N") &&
              strstr(buf, "a count [3]") && strstr(buf, "--mode fast|slow"),
          "help: usage, alias, default, choices");
    const char *s1 = strstr(buf, "--seed"), *s2 = s1 ? strstr(s1 + 1, "--seed") : NULL;
    CHECK(s1 && !s2, "help lists a shared flag once");

    /* The checks catch a wrong destination size. */
    static const struct flag wrong[] = {
        {"--x", 0, FLAG_INT64, FLAG_AT(struct toy, count), NULL, "x", .def = NULL}, FLAG_END};
    struct flag_spec ws = {.usage = "w", .size = sizeof(struct toy), .groups = {{NULL, wrong, 0}}};
    CHECK(flags_verify(&ws, err) < 0 && strstr(err, "--x"), "a destination of the wrong size");

    int64_t ns, a, b;
    CHECK(parse_duration("1.5h", &ns, err) == 0 && ns == 5400 * NS_PER_S, "1.5h");
    CHECK(parse_i64_pair("16x1", &a, &b, err) == 0 && a == 16 && b == 1 &&
              parse_i64_pair("640X400", &a, &b, err) == 0 && b == 400 &&
              parse_i64_pair("8x2x", &a, &b, err) < 0 && parse_i64_pair("16", &a, &b, err) < 0,
          "NxM pairs");
    uint64_t u;
    CHECK(parse_u64("0x1f", &u, err) == 0 && u == 31 && parse_u64("+5", &u, err) == 0 && u == 5 &&
              parse_u64("-5", &u, err) < 0 && parse_u64("99999999999999999999", &u, err) < 0,
          "u64: hex, sign, range");
    char d[32];
    parse_duration_format(1800 * NS_PER_S, d, sizeof d);
    CHECK(!strcmp(d, "30m"), "1800 s is 30m");
    parse_duration_format(1500 * NS_PER_MS, d, sizeof d);
    CHECK(!strcmp(d, "1500ms"), "1.5 s is 1500ms");
}

/* ---- every command's tables --------------------------------------------- */

/* The entries a flag name has in a spec: every group's, up to a shadow. */
static const struct flag *first_of(const struct flag_spec *s, const char *name)
{
    for (int g = 0; g < FLAG_GROUPS_MAX && s->groups[g].flags; g++) {
        const struct flag *f = flags_find(s->groups[g].flags, name);
        if (f)
            return f;
    }
    return NULL;
}

/* A value the flag accepts (NULL for FLAG_BOOL). */
static const char *valid_value(const struct flag *f, char *buf, size_t n)
{
    if (f->example)
        return f->example;
    switch (f->kind) {
    case FLAG_BOOL:
        return NULL;
    case FLAG_INT:
    case FLAG_INT64: {
        int64_t v = f->opts & FLAG_OPEN_MIN ? f->min + 1 : f->min;
        snprintf(buf, n, "%" PRId64, v);
        return buf;
    }
    case FLAG_DURATION: {
        int64_t v = f->opts & FLAG_OPEN_MIN ? f->min + NS_PER_S : f->min;
        snprintf(buf, n, "%" PRId64 "ms", (int64_t)(v / NS_PER_MS));
        return buf;
    }
    case FLAG_U64:
        return "7";
    case FLAG_DOUBLE: {
        double v = f->fmin;
        if (0 >= f->fmin && 0 <= f->fmax && !((f->opts & FLAG_OPEN_MIN) && f->fmin >= 0))
            v = 0;
        else if (f->opts & FLAG_OPEN_MIN)
            v = f->fmin + (f->fmax - f->fmin) / 2;
        snprintf(buf, n, "%.17g", v);
        return buf;
    }
    case FLAG_STR:
    case FLAG_BUF:
        return "x";
    case FLAG_CHOICE:
        return f->choices[0].name;
    case FLAG_LIST:
        if (f->choices)
            return f->choices[0].name;
        snprintf(buf, n, "%" PRId64, f->min);
        return buf;
    case FLAG_CUSTOM:
        return f->example;
    }
    return NULL;
}

/* A value the flag refuses, or NULL when it has none. */
static const char *bad_value(const struct flag *f, char *buf, size_t n)
{
    switch (f->kind) {
    case FLAG_BOOL:
        return NULL;
    case FLAG_STR:
        if (!f->max_len || f->max_len + 2 > n)
            return NULL;
        memset(buf, 'a', f->max_len + 1);
        buf[f->max_len + 1] = 0;
        return buf;
    case FLAG_BUF:
        if (f->size + 1 > n)
            return NULL;
        memset(buf, 'a', f->size);
        buf[f->size] = 0;
        return buf;
    default:
        return "%bad%";
    }
}

/* Parses "CMD --flag v" or "CMD --flag=v" (or the alias) into a fresh
 * options struct of the spec, with the operands it requires; returns
 * flags_parse's value. */
static int parse_one(const struct flag_spec *s, const char *a1, const char *a2, char *err)
{
    void *opts = xcalloc(1, s->size);
    if (s->init)
        s->init(opts);
    char *argv[8] = {"cmd", (char *)a1};
    int argc = 2;
    if (a2)
        argv[argc++] = (char *)a2;
    for (int i = 0; i < s->min_operands && argc < 7; i++)
        argv[argc++] = "operand";
    const char *ops[8];
    int n;
    int rc = flags_parse(s, opts, argc, argv, s->operands ? ops : NULL, &n, err);
    free(opts);
    return rc;
}

/* Every distinct flag of a spec, in help order. */
static int spec_flags(const struct flag_spec *s, const struct flag **out, int cap)
{
    int k = 0;
    for (int g = 0; g < FLAG_GROUPS_MAX && s->groups[g].flags; g++)
        for (const struct flag *f = s->groups[g].flags; f->name; f++)
            if (first_of(s, f->name) == f && k < cap) /* later namesakes: one flag */
                out[k++] = f;
    return k;
}

static void test_tables(void)
{
    char err[ERR_LEN];
    int n_specs = 0, n_flags = 0;
    for (const struct cli_command *c = cli_commands; c->name; c++) {
        if (!c->spec)
            continue;
        n_specs++;
        const struct flag_spec *s = c->spec;
        CHECKF(flags_verify(s, err) == 0, "%s: tables verify (%s)", c->name, err);
        const struct flag *fl[256];
        int n = spec_flags(s, fl, 256);
        for (int i = 0; i < n; i++) {
            const struct flag *f = fl[i];
            char vb[1200], flageq[1400], bb[1200];
            const char *v = valid_value(f, vb, sizeof vb);
            n_flags++;
            if (f->kind == FLAG_BOOL) {
                CHECKF(parse_one(s, f->name, NULL, err) == 0, "%s %s (%s)", c->name, f->name, err);
                snprintf(flageq, sizeof flageq, "%s=1", f->name);
                CHECKF(parse_one(s, flageq, NULL, err) < 0 && strstr(err, f->name),
                       "%s %s=1 refused", c->name, f->name);
                continue;
            }
            CHECKF(v && parse_one(s, f->name, v, err) == 0, "%s %s %s (%s)", c->name, f->name,
                   v ? v : "?", err);
            snprintf(flageq, sizeof flageq, "%s=%s", f->name, v ? v : "");
            CHECKF(parse_one(s, flageq, NULL, err) == 0, "%s %s (%s)", c->name, flageq, err);
            if (f->alias) {
                char al[4] = {'-', f->alias, 0};
                CHECKF(parse_one(s, al, v, err) == 0, "%s %s %s (%s)", c->name, al, v, err);
            }
            const char *b = bad_value(f, bb, sizeof bb);
            if (b)
                CHECKF(parse_one(s, f->name, b, err) < 0 && strstr(err, f->name),
                       "%s %s %s refused naming it (%s)", c->name, f->name, b, err);
        }
    }
    printf("NOTE %d commands, %d flags\n", n_specs, n_flags);
    CHECK(n_specs >= 18, "every command has a spec");
}

/* ---- through the binary -------------------------------------------------- */

static char tmpdir[256];

/* Runs the binary with the words of cmd ("trace stats") and args (as a
 * child, tests/testproc.h); returns its exit status, with what it wrote
 * (stdout and stderr) in out. */
static int run_cmd(const char *cmd, const char *const *args, char *out, size_t cap)
{
    char *argv[64];
    int k = 0;
    char words[128];
    snprintf(words, sizeof words, "%s", cmd);
    argv[k++] = (char *)test_bin();
    for (char *save = NULL, *w = strtok_r(words, " ", &save); w; w = strtok_r(NULL, " ", &save))
        argv[k++] = w;
    for (int i = 0; args && args[i] && k < 63; i++)
        argv[k++] = (char *)args[i];
    argv[k] = NULL;
    char log[600];
    snprintf(log, sizeof log, "%s/log", tmpdir);
    unlink(log);
    fflush(NULL);
    pid_t p = spawn(argv, log);
    int st = 0;
    double end = mono_s() + 60;
    while (waitpid(p, &st, WNOHANG) == 0) {
        if (mono_s() > end) {
            kill(p, SIGKILL);
            waitpid(p, &st, 0);
            return -999;
        }
        sleep_s(0.002);
    }
    FILE *f = fopen(log, "r");
    size_t n = f ? fread(out, 1, cap - 1, f) : 0;
    out[n] = 0;
    if (f)
        fclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Lines of help that list flag f: "  --name ..." or "  -x, --name ...". */
static int listed(const char *help, const struct flag *f)
{
    int count = 0;
    size_t ln = strlen(f->name);
    for (const char *l = help; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        const char *p = l;
        if (strncmp(p, "  ", 2))
            continue;
        p += 2;
        if (p[0] == '-' && p[1] && p[1] != '-' && p[2] == ',' && p[3] == ' ')
            p += 4;
        if (!strncmp(p, f->name, ln) && (p[ln] == ' ' || p[ln] == '\n' || !p[ln]))
            count++;
    }
    return count;
}

static void test_binary(void)
{
    static char out[1 << 16];
    const char *help[] = {"--help", NULL}, *h[] = {"-h", NULL};
    CHECK(run_cmd("--help", NULL, out, sizeof out) == 0 && strstr(out, "commands:"),
          "agentreplay --help");
    CHECK(run_cmd("help", NULL, out, sizeof out) == 0, "agentreplay help");
    CHECK(run_cmd("trace", help, out, sizeof out) == 0 && strstr(out, "stats"),
          "trace --help lists its subcommands");
    CHECK(run_cmd("kernels", help, out, sizeof out) == 0 && strstr(out, "cpu-check"),
          "kernels --help lists its subcommands");
    CHECK(run_cmd("trace", NULL, out, sizeof out) == 2, "trace alone: exit 2");
    CHECK(run_cmd("nosuch", NULL, out, sizeof out) == 2 && strstr(out, "nosuch"),
          "an unknown command");
    for (const struct cli_command *c = cli_commands; c->name; c++) {
        int rc = run_cmd(c->name, help, out, sizeof out);
        CHECKF(rc == 0 && !strncmp(out, "usage: ", 7), "%s --help exits 0 with a usage (%d)", c->name,
               rc);
        if (!c->spec)
            continue;
        const struct flag *fl[256];
        int n = spec_flags(c->spec, fl, 256);
        for (int i = 0; i < n; i++)
            CHECKF(listed(out, fl[i]) == 1, "%s --help lists %s once (%d)", c->name, fl[i]->name,
                   listed(out, fl[i]));
        /* every flag line of the help is a flag of the tables */
        int lines = 0;
        for (const char *l = out; l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
            if (!strncmp(l, "  -", 3))
                lines++;
        CHECKF(lines == n, "%s --help has %d flag lines for %d flags", c->name, lines, n);
        CHECKF(run_cmd(c->name, h, out, sizeof out) == 0, "%s -h", c->name);
        if (!c->spec->groups[0].flags)
            continue; /* kernels check, bench: their arguments go to the driver */
        const char *unk[] = {"--no-such-flag", "1", NULL};
        rc = run_cmd(c->name, unk, out, sizeof out);
        CHECKF(rc == 2 && strstr(out, "--no-such-flag"), "%s refuses an unknown flag naming it (%d)",
               c->name, rc);
        for (int i = 0; i < n; i++) {
            char bb[1200], eq[1400];
            const char *b = bad_value(fl[i], bb, sizeof bb);
            const char *args[3] = {fl[i]->name, b, NULL};
            if (!b) {
                snprintf(eq, sizeof eq, "%s=1", fl[i]->name);
                if (fl[i]->kind != FLAG_BOOL)
                    continue;
                args[0] = eq;
                args[1] = NULL;
            }
            rc = run_cmd(c->name, args, out, sizeof out);
            CHECKF(rc == 2 && strstr(out, fl[i]->name), "%s %s %s: exit %d naming it (%s)", c->name,
                   args[0], b ? b : "", rc, out);
        }
    }
    /* Both grammars and the values every command takes alike. */
    char path[600], arg[700];
    snprintf(path, sizeof path, "%s/synth.jsonl", tmpdir);
    snprintf(arg, sizeof arg, "--out=%s", path);
    const char *synth[] = {"--sessions=2", "--seed", "3", arg, NULL};
    CHECK(run_cmd("trace synth", synth, out, sizeof out) == 0 && access(path, R_OK) == 0,
          "trace synth --sessions=2 --seed 3 --out=FILE");
    const char *info[] = {"info", "--backend=standard", "--tp=8", "--json", NULL};
    CHECK(run_cmd("engine", info, out, sizeof out) == 0 &&
              strstr(out, "\"tp\": 8"),
          "engine info --backend=standard --tp=8");
    snprintf(path, sizeof path, "%s/sim", tmpdir);
    char simtrace[700];
    snprintf(simtrace, sizeof simtrace, "--trace=%s/synth.jsonl", tmpdir);
    const char *simargs[] = {simtrace, "--backend", "standard", "--duration=60", "--quiet",
                             "-o", path, NULL};
    int rc = run_cmd("sim", simargs, out, sizeof out);
    CHECKF(rc == 0, "sim --backend standard (as sweep takes it): exit %d (%s)", rc, out);
    const char *sloargs[] = {simtrace, "--slo", "interactivity_p90=10", "-o", path, "--force", NULL};
    rc = run_cmd("sim", sloargs, out, sizeof out);
    CHECKF(rc == 2 && strstr(out, "interactivity_p90"), "sim refuses plan's objectives (%d)", rc);
    const char *cmpargs[] = {"a", NULL};
    rc = run_cmd("compare", cmpargs, out, sizeof out);
    CHECKF(rc == 2 && strstr(out, "A B"), "compare wants two results (%d)", rc);
}

int main(void)
{
    test_grammar();
    test_tables();
    snprintf(tmpdir, sizeof tmpdir, "/tmp/test_flags_%d", (int)getpid());
    mkdir(tmpdir, 0755);
    if (access(test_bin(), X_OK) != 0)
        SKIP("no agentreplay binary (AGENTREPLAY_BIN)");
    else
        test_binary();
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (!getenv("KEEP_TMP") && th_failed == 0 && system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    return test_report();
}
