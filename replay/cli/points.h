/* points.h: what the simulating commands (sim, sweep, plan, the main job)
 * share: their options (the run options, a base point, the grid of
 * layouts x decode paths x concurrencies), the grid's flags, running
 * many points in worker processes, and a sweep folder's files
 * (sweep.csv, sweep.json; replay/SCHEMA.md). */
#ifndef CLI_POINTS_H
#define CLI_POINTS_H

#include <stdbool.h>

#include "replay/cli/cli.h"
#include "replay/replay_flags.h"
#include "replay/run.h"
#include "traces/base/flags.h"

#define GRID_LAYOUTS 16

/* Layouts x backends x concurrencies; an empty list takes the base's. */
struct grid {
    struct flag_list conc;       /* --concurrency 1,2,4 */
    struct flag_list backend;    /* --backend auto,latency_specialized */
    int n_layout;                /* --layout 16x1,8x2 */
    int tp[GRID_LAYOUTS], rep[GRID_LAYOUTS];
};

struct points_opts {
    struct run_opts run;         /* run_flags */
    struct run_point base;       /* run_point_flags, replay_flags, engine_flags */
    struct grid grid;            /* grid_flags (sweep, plan, the main job) */
    int jobs;                    /* -j (sweep, the main job) */
};
void points_init(struct points_opts *o);
/* cli_parse of a simulating command whose options opts embed co; then the
 * SLO into the base point, percentile objectives refused unless allowed
 * (plan's). Returns -1 to go on, or the exit code. */
int points_parse(const char *cmd, const struct flag_spec *spec, void *opts, struct points_opts *co,
                 int argc, char **argv, bool objectives);

/* --backend (a list) and --layout into a struct grid (sweep, plan, the
 * main job); --concurrency (a list) into a struct grid (sweep, the main
 * job). The lists shadow the replayer's and engine's flags of the same
 * names. */
extern const struct flag grid_flags[];
extern const struct flag grid_conc_flags[];
/* -j, --jobs into struct points_opts. */
extern const struct flag jobs_flag[];

/* The flag groups every simulating command ends with, for a command whose
 * options struct `type` embeds a struct points_opts as member co. */
#define POINTS_GROUPS(type, co)                                                            \
    {"run", run_flags, offsetof(type, co.run)},                                            \
        {NULL, trace_read_flags, offsetof(type, co.run.tro)},                                 \
        {"configuration", run_point_flags, offsetof(type, co.base)},                      \
        {"replay (AgentX defaults)", replay_flags, offsetof(type, co.base.rc)},           \
        {"engine", engine_flags, offsetof(type, co.base.ec)}

/* Empty lists from the base point; a layout of another GPU count than
 * the first is refused when same_gpus. Returns 0 or -1 with err. */
int grid_complete(struct grid *g, const struct run_point *base, bool same_gpus, char *err);
/* Every point of the grid (layout, backend, concurrency order), each with
 * its run folder SDIR/<label>-c<N> made; labels from the layout unless the
 * base has one and the grid holds one configuration. sdir NULL: each dir
 * is the folder's name alone and nothing is made (another rank of a
 * distributed sweep). NULL with err. */
struct run_point *grid_points(const struct grid *g, const struct run_point *base, const char *sdir,
                              int *n, char *err);

/* Runs pts[0..n) in up to `jobs` worker processes (replay/pool.h), each
 * into its folder; prints each failure, and with verbose each point's wall
 * time. Returns the number of workers that reported a failure. */
int points_run(const struct run_env *env, const struct run_point *pts, int n, int jobs,
               bool verbose);
/* The same across the ranks of an MPI job (pool_run_ranks, the highest
 * concurrency first); every rank calls it after dist_init(), with sdir its
 * grid_points() folder (rank 0: the sweep folder; others: NULL). Rank 0
 * returns how many points failed or never ran, other ranks 0 or 1;
 * *end_job as pool_ranks.end_job. */
int points_run_ranks(const struct run_env *env, const struct run_point *pts, int n, int jobs,
                     const char *sdir, bool *end_job);

/* SDIR/NAME (sweep.csv, confounded.csv) from the points' run.json files,
 * a row printed per point with print. */
int sweep_write_csv(const char *sdir, const char *name, const struct run_point *pts, int n,
                    bool print, char *err);
/* SDIR/sweep.json: whether every point is there and complete. */
int sweep_write_json(const char *sdir, const struct run_point *pts, int n, char *err);
/* The tables a sweep starts with, before any point: sweep.csv with its
 * header only and sweep.json marked partial (the end rewrites both). */
int sweep_write_start(const char *sdir, const struct run_point *pts, int n, char *err);

#endif
