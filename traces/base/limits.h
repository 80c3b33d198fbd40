/* limits.h: every limit on a size, a count or a rate that comes from input,
 * in one place, each with what it bounds and why that value.
 *
 * The rule: a size read from input (a file, a flag, an environment
 * variable, a server's answer) is checked against its limit here before
 * anything is allocated from it, and an input beyond the limit is refused
 * with a message that names the input and the limit, never truncated. The
 * tests of each limit are listed in tests/RELIABILITY.md ("Hostile inputs
 * and limits"); the trace readers' own bounds on counts and times
 * (prompt <= 1e8 tokens, output <= 1e7, times <= 1e9 s) are in
 * traces/trace_internal.h and traces/FORMAT.md.
 */
#ifndef BASE_LIMITS_H
#define BASE_LIMITS_H

#include <stdint.h>

#define LIMIT_MIB (INT64_C(1) << 20)

/* ---- files ---------------------------------------------------------------- */

/* A file read whole (file_read): results, CSV tables, plot scripts. The
 * largest such file the program writes is a sweep's sweep.csv or a long
 * run's timeline.csv, a few MB. A regular file is refused by its size
 * before it is read; a device or a pipe (/dev/zero) after this many bytes. */
#define LIMIT_FILE_BYTES (256 * LIMIT_MIB)
/* A model or GPU preset, a calibration file: a few KB each. */
#define LIMIT_PRESET_BYTES (4 * LIMIT_MIB)
/* One line of a JSONL or CSV trace. The longest line of the public traces
 * is 38 KB (a Mooncake request of 2,700 block ids); a native line holds
 * one call's new block ids, at most 1e8 / 16 of them. Text traces never
 * hold a NUL byte: one is refused at once (a sparse or binary file). */
#define LIMIT_TRACE_LINE_BYTES (64 * LIMIT_MIB)
/* One AgentX JSON document (a file of a folder, read whole). The largest
 * public one is 1.7 MB. */
#define LIMIT_TRACE_DOC_BYTES (256 * LIMIT_MIB)
/* A name or label stored from a trace and written into every record:
 * models, session names, stop reasons (a 5 MB model name would be copied
 * into every line of requests.jsonl). */
#define LIMIT_NAME_BYTES 256
/* A file name stored in a trace (native traces keep where each session
 * came from). */
#define LIMIT_PATH_BYTES 4096
/* Comma-joined input and output types of a call. */
#define LIMIT_TYPES_BYTES 4096
/* Progress on stderr (a terminal only) while reading a folder of this
 * many trace files or more. */
#define LIMIT_PROGRESS_FILES 50

/* `trace synth`: the calls a synthetic trace is expected to hold (the
 * trace model takes about 350 B a call: bench_memory's million calls take
 * 352 MiB). */
#define LIMIT_SYNTH_CALLS 5e6

/* ---- the replay ----------------------------------------------------------- */

/* Calls that may wait in memory at once. A call waits until the target
 * takes it, holding about 512 B plus 8 B per block of its chain (12 KB for
 * the built-in sample's calls, 0.7 KB for Mooncake's). Closed loops hold
 * at most --concurrency calls (one per live session tree, subagents
 * aside); open loops (--arrival poisson:RATE, gamma:RATE:CV) offer RATE x
 * --duration, all waiting at once when the target does not keep up. Either
 * count at that size must fit in LIMIT_WAITING_BYTES; the rate itself is
 * bounded too. */
#define LIMIT_WAITING_BYTES (4096.0 * 1048576.0)
#define LIMIT_WAITING_CALL_BYTES 512
#define LIMIT_ARRIVAL_RATE 1e6
/* A live target's --grace none ("wait for every call in flight"): the wait
 * stops after this long even so, so that a server that never ends a
 * stream cannot hold the run forever. */
#define LIMIT_LIVE_GRACE_NS (INT64_C(3600) * INT64_C(1000000000))

/* ---- the load generator under a hostile server ---------------------------- */

/* A call's stream is read up to its max_tokens plus this margin of content
 * chunks (servers may split a token's text across chunks): beyond it the
 * call ends as a protocol error. The margin is max_tokens / 4, at least
 * LIMIT_STREAM_MARGIN_MIN. */
#define LIMIT_STREAM_MARGIN_MIN 64
/* ... and up to this many events and bytes per allowed chunk (role-only
 * deltas, usage and keep-alive comments included; a vLLM chunk is about
 * 250 bytes), plus LIMIT_STREAM_BYTES_BASE. */
#define LIMIT_STREAM_EVENTS_PER_CHUNK 4
#define LIMIT_STREAM_BYTES_PER_CHUNK 4096
#define LIMIT_STREAM_BYTES_BASE (1 * LIMIT_MIB)
/* --url (the base URL; the call's URL adds its path) and the API key
 * (--api-key or $OPENAI_API_KEY): refused when longer, never cut. */
#define LIMIT_URL_BYTES 511
#define LIMIT_API_KEY_BYTES 255

/* ---- the engine ------------------------------------------------------------ */

/* A request's prompt + max_tokens is checked against the engine's
 * --max-model-len (at most the model's max_position) before anything is
 * sized from it; a request beyond it ends as too long without an
 * allocation of its size, so max_tokens 1e12 costs nothing. Requests
 * waiting for admission hold no per-token arrays at all (engine/sched.c). */

#endif
