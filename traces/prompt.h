/* prompt.h: prompts made from block-id chains, deterministically, and the
 * reverse: block ids derived from prompt content (the simulated server).
 *
 * A prompt of T tokens is a sequence of T synthetic tokens. Token i is:
 *   - i < PROMPT_MARKER_TOKENS (unless `unmarked`): drawn from the session
 *     marker (a hash of the run seed and the session tree), so different
 *     session trees never share a prefix and a server's prefix cache keeps
 *     them apart (unmarked prompts carry their marker as a separate word
 *     elsewhere: AgentX's cache-bust marker after the system message);
 *   - else, if block b = i / block_size is in the call's chain: drawn from
 *     (scope, block id, i mod block_size): the same block id gives the same
 *     tokens, so a real server's prefix cache hits exactly where the trace
 *     says (block ids are chained: equal ids imply equal prefixes);
 *   - else (the partial tail beyond the chain): drawn from the call itself.
 *
 * Two renderings:
 *   - text: token k becomes one word of a 256-word list of common English
 *     words, each written with a leading space (" the", " water"). The
 *     BPE tokenizers of current models (Llama 3, Qwen, GPT-4o, DeepSeek,
 *     Kimi) encode each such word as one token, so the prompt is T tokens
 *     give or take the chat template's few tokens; this is the documented
 *     approximation of text mode. The simulated server counts one token
 *     per whitespace-separated word, so against it the count is exact.
 *   - tokens: token k becomes the integer id PROMPT_ID_BASE + k, written as
 *     a JSON array element, for `prompt` as an array of ids on
 *     /v1/completions: exact lengths on any server.
 * Both renderings are JSON-safe (no escaping needed) and are generated as
 * they are sent (prompt_gen_read), never held whole.
 */
#ifndef PROMPT_H
#define PROMPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PROMPT_MARKER_TOKENS 8
#define PROMPT_VOCAB 256
#define PROMPT_ID_BASE 1000 /* ids are PROMPT_ID_BASE + [0, PROMPT_ID_RANGE) */
#define PROMPT_ID_RANGE 16384

enum prompt_mode { PROMPT_TEXT = 0, PROMPT_TOKENS = 1 };

struct prompt_spec {
    uint64_t session_salt;   /* run seed mixed with the session tree */
    uint64_t call_salt;      /* unique per call: the tail beyond the chain */
    uint32_t scope;          /* block-id scope */
    const uint64_t *blocks;  /* the call's chain (not owned) */
    uint32_t n_blocks;
    int64_t block_size;      /* tokens per block */
    int64_t tokens;          /* prompt length in tokens */
    bool unmarked;           /* no marker tokens: every token is content */
};

/* Token i's value in [0, PROMPT_ID_RANGE). */
uint32_t prompt_token(const struct prompt_spec *s, int64_t i);
/* The word of text mode for a token value (with its leading space). */
const char *prompt_word(uint32_t v, size_t *len);

/* Bytes of the rendering (text: the words; tokens: "id,id,...,id"). */
int64_t prompt_bytes(const struct prompt_spec *s, enum prompt_mode m);

/* Streams the rendering. */
struct prompt_gen {
    struct prompt_spec spec;
    enum prompt_mode mode;
    int64_t next;            /* next token to render */
    int64_t block, off;      /* next token's block and offset in it */
    uint64_t key;            /* that block's key (see prompt_token) */
    char pend[16];           /* a token that did not fit in the last read */
    uint8_t pend_len, pend_off;
};
void prompt_gen_init(struct prompt_gen *g, const struct prompt_spec *s,
                     enum prompt_mode m);
/* Writes up to n bytes; returns the count, 0 at the end. */
size_t prompt_gen_read(struct prompt_gen *g, char *buf, size_t n);
/* The whole rendering in a new NUL-terminated string (tests, small). */
char *prompt_render(const struct prompt_spec *s, enum prompt_mode m, size_t *len);

/* Server side: block ids of prompt content, chained, one per full chunk of
 * chunk_tokens tokens (only full chunks get an id, as in the engine's
 * cache). Text: tokens are whitespace-separated words and a chunk's id
 * hashes its bytes; ids: a chunk's id hashes its ids. Returns the token
 * count; writes min(cap, full chunks) ids to out and the full-chunk count
 * to *n_blocks. */
int64_t prompt_blocks_text(const char *text, size_t len, int64_t chunk_tokens,
                           uint64_t *out, uint32_t cap, uint32_t *n_blocks);
int64_t prompt_blocks_ids(const int64_t *ids, size_t n, int64_t chunk_tokens,
                          uint64_t *out, uint32_t cap, uint32_t *n_blocks);

#endif
