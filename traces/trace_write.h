/* trace_write.h: traces written in the formats the field's tools read
 * (traces/FORMAT.md, "Writing traces"):
 *   - Weka / AgentX JSON, one file per session tree, exactly the keys of
 *     AIPerf's strict weka_trace schema (64-token blocks, hash_id_scope
 *     "local"), or the same objects one a line (GuideLLM reads a file);
 *   - Mooncake JSONL, one line per call (ms timestamps, 512-token blocks,
 *     one global id space), read by AIPerf's mooncake_trace, GuideLLM's
 *     mooncake and vLLM's timed_trace.
 * The native format's writer is trace_write_native (trace.h).
 *
 * Block ids are re-blocked from the trace's block size: out block j of a
 * call (tokens [j*B, min((j+1)*B, prompt))) gets a dense id that is equal
 * for two calls exactly when both lie in the same id space and their
 * native chains agree on every block up to the one holding that out
 * block's last token, and the out blocks have the same size; a block that
 * reaches past the chain gets an id of its own. So equal out ids always
 * mean an equal prefix; an id never has two sizes (AIPerf refuses that);
 * a Mooncake call gets exactly ceil(prompt / B) ids and a Weka call one per
 * full block, floor(prompt / B) (GuideLLM refuses other counts; the public
 * Weka traces id full blocks only); ids are below 2^31 (GuideLLM reads
 * them as int32).
 */
#ifndef TRACE_WRITE_H
#define TRACE_WRITE_H

#include <stdbool.h>
#include <stdint.h>

#include "traces/trace.h"

/* ---- re-blocking ---- */

struct trace_reblock;
/* Ids of out_bs-token blocks; the id spaces are one per root tree
 * (per_root, Weka's "local" scope; trace_reblock_root() starts each) or
 * one for the whole trace (Mooncake), scopes kept apart. NULL with err
 * when out_bs is not positive. */
struct trace_reblock *trace_reblock_create(const struct trace *t, int64_t out_bs, bool per_root,
                                           char *err);
/* Starts the id space of a new root tree (per_root only): ids count from
 * 0 again. */
void trace_reblock_root(struct trace_reblock *r);
/* Call c's ids into out (cap entries); returns their count: one per full
 * block, floor(prompt / out_bs), when full_only (Weka: the partial tail is
 * the call's own text), else ceil(prompt / out_bs) (Mooncake); -1 with
 * err when the ids would pass 2^31 or cap is too small. */
int64_t trace_reblock_call(struct trace_reblock *r, uint32_t call, bool full_only, uint32_t *out,
                           int64_t cap, char *err);
void trace_reblock_destroy(struct trace_reblock *r);

/* ---- writers ---- */

/* A folder of Weka JSON files, "trace_NNNNNN.json" per root tree in
 * order. The folder is made if absent; one holding *.json files is
 * refused unless replace, which removes them first. 0, or -1 with err. */
int trace_write_weka(const struct trace *t, const char *dir, bool replace, char *err);
/* The same objects, one per line, in one file ("-": stdout). */
int trace_write_weka_jsonl(const struct trace *t, const char *path, char *err);
/* Mooncake JSONL ("-": stdout). */
int trace_write_mooncake(const struct trace *t, const char *path, char *err);

#endif
