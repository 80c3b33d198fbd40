/* run.h: replay one configuration into a folder: the pipeline of every
 * replaying command (sim, sweep's workers, plan, the main job, load).
 *
 *   - the trace: run_trace_load (the built-in sample without a path; the
 *     theoretical prefix-hit rate for the summary);
 *   - the target: the simulated engine or the fixed-rate fake on a
 *     virtual clock (run_point_exec), or the caller's own on its loop
 *     (run_replay; load: the HTTP target on the real clock);
 *   - the run folder: requests.jsonl, timeline.csv, run.json, summary.md
 *     (replay/SCHEMA.md);
 *   - progress: a bar on a terminal (virtual clock) or a line every 10 s
 *     (real clock);
 *   - SIGINT and SIGTERM, once run_signals_install() ran: nothing new
 *     starts, calls in flight are cancelled (a target that can hold new
 *     calls, such as the live one, first gets up to --grace to finish
 *     them; a second signal cancels at once), the partial result is
 *     written and marked, and the run returns EXIT_FAIL with "interrupted"
 *     in err.
 */
#ifndef RUN_H
#define RUN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/engine.h"
#include "engine/target.h"
#include "replay/metrics.h"
#include "replay/records.h"
#include "replay/replay.h"
#include "replay/results.h"
#include "traces/base/flags.h"
#include "traces/trace.h"

/* ---- signals --------------------------------------------------------- */

/* Catches SIGINT and SIGTERM from now on: they no longer end the process
 * but interrupt the run in progress (or the next one, at its start). One
 * handler for every command; idempotent. */
void run_signals_install(void);
/* A signal came since run_signals_install(). */
bool run_interrupted(void);
/* A descriptor that becomes readable (one byte per signal) when a signal
 * comes, for event loops that watch it (serve); -1 before install. */
int run_signals_fd(void);

/* ---- what the replaying commands share -------------------------------- */

/* The trace, the SLO and the result folder (flags: run_flags). */
struct run_opts {
    const char *trace;           /* --trace; NULL: the built-in sample */
    struct trace_read_opts tro;  /* --format, --skip-bad */
    struct metrics_slo slo;      /* --slo */
    const char *out;             /* -o, --out: the result folder */
    bool force;                  /* --force: write into a non-empty folder */
    bool quiet;                  /* --quiet: no table, no progress lines */
};
/* --trace, --slo, -o/--out, --force, --quiet into a struct run_opts. */
extern const struct flag run_flags[];
/* --format, --skip-bad into a struct trace_read_opts (run_opts.tro). */
extern const struct flag trace_read_flags[];

/* A trace read's progress line on stderr, when stderr is a terminal and
 * the read is long (a folder of LIMIT_PROGRESS_FILES files or more, 64 MiB
 * of one file: traces/base/limits.h), and its interrupt: once
 * run_signals_install() ran, a signal stops the read where it is (the
 * trace holds what was read). attach sets o's callback; end clears the
 * line and says whether a signal stopped the read. */
struct run_read_progress {
    bool tty, shown, stopped;
    int64_t last_ns;             /* wall time of the last line */
};
void run_read_progress_attach(struct run_read_progress *rp, struct trace_read_opts *o);
bool run_read_progress_end(struct run_read_progress *rp);

/* A loaded trace and what every run needs from it. */
struct run_trace {
    struct trace *tr;
    char path[1024];
    double hit_theoretical;      /* token-weighted prefix-hit rate (trace stats) */
};
/* Reads path (NULL: traces/samples/agentic-synth.jsonl beside the
 * program), with a progress line (above); a trace without calls is an
 * error. 0, or an exit code with err: EXIT_BADINPUT, or EXIT_FAIL when a
 * signal stopped the read before any call (a read stopped later keeps
 * what it read, and the run that follows is interrupted at its start). */
int run_trace_load(struct run_trace *t, const char *path, const struct trace_read_opts *o,
                   char *err);
void run_trace_free(struct run_trace *t);

/* ---- one run on the caller's loop and target -------------------------- */

struct run_result {
    struct metrics_summary sum;
    struct replay_outcome out;
    int interrupts;              /* signals seen during the run */
};

enum run_progress {
    RUN_PROGRESS_NONE,
    RUN_PROGRESS_BAR,            /* a bar on stderr, redrawn at most 10 times a second */
    RUN_PROGRESS_LINES,          /* a line on stderr every 10 s of the run's clock */
};

struct run_spec {
    const char *kind;            /* "sim" or "load": run.json and messages */
    const struct run_trace *trace;
    const struct replay_config *rc;
    const struct metrics_slo *slo;  /* NULL: none */
    const char *dir;             /* the run folder (existing); NULL or "": no files */
    struct loop *loop;           /* not owned */
    struct target *tg;           /* on loop; not owned */
    /* Targets that can stop taking new calls (the live one): the first
     * signal holds them and waits up to rc->grace_ns for the calls in
     * flight. NULL: a signal cancels at once. */
    void (*hold)(struct target *t);
    int64_t (*inflight)(const struct target *t);
    enum run_progress progress;
    size_t records_buffer;       /* > 0: requests.jsonl buffered, flushed every 100 ms */
    records_observer observe;    /* each record written, or NULL */
    void *observe_arg;
    /* run.json's fields from the caller (label, layout, model, command,
     * config_json: stolen); kind, trace and engine are filled here. */
    struct run_info info;
    /* Hooks (may be NULL), called with hook_arg: */
    void (*started)(void *arg, struct replay *r); /* before the first call */
    void (*stopped)(void *arg);                   /* after the loop */
    /* run_json (a json_t*) before it is written; the result is final. */
    void (*extend)(void *arg, void *run_json, const struct run_result *res);
    void *hook_arg;
    /* A run split across ranks (replay/dist_load.h): */
    /* requests.jsonl's lines and timeline.csv's rows go to these streams
     * (not owned, not closed; both or neither) instead of s->dir's files,
     * which then get run.json and summary.md only; */
    FILE *records_to, *timeline_to;
    /* the summary and outcome once made, before run.json (the rank that
     * merges folds the others' into them); may be NULL. */
    void (*summarized)(void *arg, struct run_result *res);
};

/* Replays s->trace on s->tg. Returns EXIT_OK, EXIT_BADINPUT (the
 * replayer refused the configuration; nothing written) or EXIT_FAIL (I/O,
 * or interrupted: the partial result is written and marked). On return
 * *run_json is the run.json object (json_t*, caller owns) whenever the
 * run took place, else NULL; res is filled likewise. */
int run_replay(const struct run_spec *s, struct run_result *res, void **run_json, char *err);

/* ---- one simulated configuration (sim, sweep, plan, the main job) ----- */

struct run_point {
    struct engine_config ec;
    struct replay_config rc;
    struct metrics_slo slo;      /* goodput limits */
    char label[128];             /* "": the layout's (run_point_label) */
    char dir[1024];              /* the run folder; "": no files */
    bool fake;                   /* the fixed-rate fake instead of the engine */
    struct target_fake_config fc;
};
/* Engine and replay defaults; the fake at 20 ms + 20 us/token, 10 ms/token. */
void run_point_init(struct run_point *p);
/* --label, --target into a struct run_point. */
extern const struct flag run_point_flags[];
/* "TP16x1 auto", "TP8x2 latency_specialized" or "fake target". */
void run_point_label(struct run_point *p);
/* The run folder's name of a label at a concurrency ("TP8x2_auto-c4"). */
void run_point_dirname(const char *label, int concurrency, char *out, size_t n);

struct run_env {
    const struct run_trace *trace;
    const char *command;         /* run.json's "command" */
    bool progress;               /* the bar (a terminal) */
    const char *chrome_trace;    /* engine steps as a Chrome trace, or NULL */
    int64_t chrome_kernel_step;  /* step whose kernels it shows; -1: none */
};
/* Builds the point's target and replayer and drops them: exit-2 errors
 * (a layout the engine refuses, a mode the trace cannot do) before a run.
 * EXIT_OK or EXIT_BADINPUT. */
int run_point_check(const struct run_env *env, const struct run_point *p, char *err);
/* Runs the point on a virtual clock (into p->dir when set); as run_replay. */
int run_point_exec(const struct run_env *env, const struct run_point *p, void **run_json,
                   char *err);

#endif
