/* flags.h: the one command-line grammar of every command, its parser and
 * the --help text generated from the same tables.
 *
 * Grammar (every command, every flag):
 *   --name VALUE, --name=VALUE   a flag with a value (the next argument is
 *                                the value even when it starts with '-')
 *   -x VALUE                     the flag's one-letter alias (-o, -j)
 *   --name                       a flag without a value (FLAG_BOOL)
 *   --help, -h                   the command's help (exit 0)
 *   --                           everything after it is an operand
 *   anything else                an operand ("-" alone too)
 * An unknown flag is refused naming it; a bad value naming the flag and
 * the value: "--concurrency 'x': not an integer", "--concurrency 0: must
 * be at least 1".
 *
 * A command describes its flags in tables, one per group (its own flags,
 * the engine's into struct engine_config, the replayer's into struct
 * replay_config...), and each group says where its struct lies inside the
 * command's options struct, so a whole command is one static
 * struct flag_spec:
 *
 *     struct sim_opts { struct run_opts run; struct replay_config rc; int repeats; };
 *     static const struct flag sim_flags[] = {
 *         {"--repeats", 0, FLAG_INT, FLAG_AT(struct sim_opts, repeats), "K",
 *          "K seeds: mean and 95 % CI of every metric", .min = 1, .max = 1000},
 *         FLAG_END,
 *     };
 *     static const struct flag_spec sim_spec = {
 *         .usage = "agentreplay sim [flags] -o DIR", .size = sizeof(struct sim_opts),
 *         .init = sim_init,
 *         .groups = {{NULL, sim_flags, 0},
 *                    {"replay", replay_flags, offsetof(struct sim_opts, rc)}},
 *     };
 *
 * One name in several groups of a command is one flag: its value goes to
 * every group that has it (--seed to the engine's and the replayer's
 * config) and help lists it once, in the first group. A flag marked
 * FLAG_SHADOW instead hides the same name in later groups (sweep's
 * --concurrency list over the replayer's single --concurrency).
 *
 * Defaults in help are the values the spec's init function gives (so a
 * command with other defaults shows its own), unless a flag gives `def`.
 */
#ifndef BASE_FLAGS_H
#define BASE_FLAGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum flag_kind {
    FLAG_BOOL,     /* no value; stores `value` into a bool */
    FLAG_INT,      /* int in [min, max] */
    FLAG_INT64,    /* int64_t in [min, max] */
    FLAG_U64,      /* uint64_t, decimal or 0x hex */
    FLAG_DOUBLE,   /* finite double in [fmin, fmax] */
    FLAG_DURATION, /* int64_t ns in [min, max] ("90s", "500ms", "2m"; bare: s) */
    FLAG_STR,      /* const char *, borrowed from argv; at most max_len chars if > 0 */
    FLAG_BUF,      /* char[size], copied; longer values are refused */
    FLAG_CHOICE,   /* one of `choices`: stores its value into an int (or enum) or bool */
    FLAG_LIST,     /* comma-separated ints in [min, max] or names of `choices`:
                      struct flag_list, replaced by each use */
    FLAG_CUSTOM,   /* parse(name, value, group struct, err) */
};

enum {
    FLAG_OPEN_MIN = 1, /* the lower bound is excluded (> min) */
    FLAG_NONE = 2,     /* "none" is accepted and stores -1 (INT, INT64, DURATION) */
    FLAG_SHADOW = 4,   /* hides the same name in the command's later groups */
};

struct flag_choice {
    const char *name;
    int value;
    bool alias;        /* accepted, not shown in help */
};

#define FLAG_LIST_MAX 64
struct flag_list {
    int n;
    int v[FLAG_LIST_MAX];
};

struct flag {
    const char *name;     /* "--concurrency" */
    char alias;           /* 'o' for -o; 0: none */
    enum flag_kind kind;
    size_t off, size;     /* destination in the group's struct: FLAG_AT(type, member) */
    const char *arg;      /* the value's name in help ("N", "DIR"); NULL: from the kind */
    const char *help;     /* lines separated by '\n' */
    const char *def;      /* default shown; NULL: the initialised value; "": none */
    int64_t min, max;     /* INT, INT64, DURATION (ns), LIST items */
    double fmin, fmax;    /* DOUBLE */
    size_t max_len;       /* STR: 0 no limit */
    bool value;           /* BOOL: what it stores */
    const struct flag_choice *choices; /* CHOICE, LIST of names; ended by {NULL} */
    int (*parse)(const char *name, const char *value, void *group, char *err); /* CUSTOM */
    const char *example;  /* a valid value (required for CUSTOM; used by tests) */
    unsigned opts;        /* FLAG_OPEN_MIN | FLAG_NONE | FLAG_SHADOW */
    size_t seen;          /* FLAG_SEEN(type, member): a bool set when given; 0: none */
};

#define FLAG_AT(type, member) offsetof(type, member), sizeof(((type *)0)->member)
#define FLAG_SEEN(type, member) (offsetof(type, member) + 1)
#define FLAG_END {.name = NULL}

#define FLAG_GROUPS_MAX 10

struct flag_group {
    const char *title;    /* heading in help ("replay (AgentX defaults)"); NULL: under
                             the previous group's (the first: "flags") */
    const struct flag *flags;
    size_t off;           /* the group's struct inside the command's options */
};

struct flag_spec {
    const char *usage;    /* after "usage: "; lines separated by '\n' */
    const char *about;    /* what the command does, or NULL */
    const char *operands; /* their name ("A B", "PATH..."), NULL: none taken */
    int min_operands;
    int max_operands;     /* -1: any number */
    size_t size;          /* the options struct */
    void (*init)(void *opts); /* its defaults; NULL: all zero */
    struct flag_group groups[FLAG_GROUPS_MAX]; /* ended by one with flags NULL */
    const char *notes;    /* after the flags, or NULL */
};

/* Parses argv[1..argc) (argv[0] is the command's name) into opts, which
 * the caller has initialised (spec->init). Operands go to operands[]
 * (room for argc pointers, or max_operands when the spec sets one; may
 * be NULL when the spec takes none), their
 * count to *n_operands. Returns 0, FLAGS_HELP when --help or -h came
 * (nothing is printed), or -1 with err set. */
enum { FLAGS_HELP = 1 };
int flags_parse(const struct flag_spec *spec, void *opts, int argc, char **argv,
                const char **operands, int *n_operands, char *err);
/* The spec's help: usage, about, each group's flags with their defaults
 * (from a fresh init), notes. */
void flags_help(const struct flag_spec *spec, FILE *f);
/* Checks the tables: names, aliases, destination sizes against kinds and
 * the options struct, bounds, choices, examples. 0, or -1 with err. */
int flags_verify(const struct flag_spec *spec, char *err);

/* One flag of one table at argv[*i] into dst (the table's struct);
 * advances *i past it. Returns 1 consumed, 0 not in the table, -1 with
 * err. (For code that reads one group at a time.) */
int flags_parse_one(const struct flag *table, void *dst, int argc, char **argv, int *i,
                    char *err);
/* Sets one flag from its value text (NULL for FLAG_BOOL) in the group
 * struct; name is what the messages call it. 0, or -1 with err. */
int flags_set(const struct flag *f, void *group, const char *name, const char *value,
              char *err);

/* A flag table's entry by name ("--seed"), or NULL. */
const struct flag *flags_find(const struct flag *table, const char *name);

#endif
