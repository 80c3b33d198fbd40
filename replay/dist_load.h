/* dist_load.h: a live run (`load`) split across the ranks of an MPI job
 * (dist.h), with one result at rank 0.
 *
 *   - the split: every rank replays the same trace with the same config
 *     and seed and plays its share of the schedule (replay_set_share:
 *     lanes i with i % N == rank, or every N-th arrival);
 *   - the common start: the ranks compare their monotonic clocks with
 *     rank 0's (dist_clock_sync), rank 0 names an instant 100 ms ahead on
 *     its clock, and each rank waits for it on its own clock (plus its
 *     offset); each creates its loop at once, so that time 0 of every
 *     rank's records is that instant (to within the offset's error);
 *   - the records: each completed record goes, as written (the same JSON
 *     line a single process writes, plus the numbers the statistics
 *     need), to rank 0 in batches (every 10 ms or 64 KiB), with no shared
 *     file system; rank 0 appends every record, its own and the others',
 *     to DIR/requests.jsonl.spool as it arrives, and adds the others' to
 *     its replayer's statistics (replay_add_record), so that the
 *     summary is that of the merged records and histograms;
 *   - the end: each rank sends its outcome (calls sent, trees, whether it
 *     was interrupted), its timeline and the caller's counters; rank 0
 *     waits for every rank's, or for a signal (mpirun sends SIGTERM when
 *     a rank dies, and SIGKILL a second later), then writes
 *     DIR/timeline.csv (the ranks' rows summed per tick) and
 *     DIR/requests.jsonl (every record once, ordered by intended start;
 *     ties by rank, then arrival), and removes the spool. A rank that never
 *     ended makes the result partial and interrupted, with a reason.
 *     Killed before that, rank 0 leaves the spool: every record it had
 *     received, unsorted.
 * run.json gains "ranks": each rank's index, calls, errors, schedule lag
 * and clock offset (no host names).
 */
#ifndef DIST_LOAD_H
#define DIST_LOAD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/clock/loop.h"
#include "replay/records.h"
#include "replay/replay.h"

struct dist_load;

/* After dist_init(): the split for this rank; dir is rank 0's result
 * folder (existing; ignored elsewhere). NULL with err set. */
struct dist_load *dist_load_create(const char *dir, char *err);
/* Every rank: compares clocks and returns at the common start; create the
 * loop right after. 0 or -1 with err set. */
int dist_load_start(struct dist_load *dl, char *err);
/* The streams for run_spec.records_to and timeline_to (owned by dl). */
FILE *dist_load_records_stream(struct dist_load *dl);
FILE *dist_load_timeline_stream(struct dist_load *dl);
/* Before replay_start (run_spec.started): takes rp's share and starts the
 * 10 ms exchange on l. At rank 0, merged(arg, record) is called for each
 * record of another rank (the caller's own statistics, as its records
 * observer sees its own). */
void dist_load_attach(struct dist_load *dl, struct replay *rp, struct loop *l,
                      records_observer merged, void *arg);
/* From the records observer: the record just written (its line is in the
 * records stream). */
void dist_load_record(struct dist_load *dl, const struct replay_record *r);
/* After the loop (run_spec.stopped): ranks > 0 send the rest and their end
 * of run with the caller's bytes `extra`; rank 0 gathers until every rank
 * ended or a signal came, then writes timeline.csv and requests.jsonl.
 * 0 or -1 with err set (the result is then partial). */
int dist_load_end(struct dist_load *dl, const void *extra, size_t extra_len, char *err);
/* Rank 0 (run_spec.summarized): the other ranks' outcomes folded into o. */
void dist_load_outcome(const struct dist_load *dl, struct replay_outcome *o);
/* Rank 0: run.json's "ranks" array (json_t*, caller owns). */
void *dist_load_ranks_json(const struct dist_load *dl);
/* Rank 0: the bytes rank r sent with its end of run (NULL when it did
 * not end; *len 0). */
const void *dist_load_extra(const struct dist_load *dl, int r, size_t *len);
void dist_load_destroy(struct dist_load *dl);

#endif
