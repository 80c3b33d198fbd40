/* prompt.c: synthetic prompts from block chains and block ids from prompt
 * content (see prompt.h). */
#include "traces/prompt.h"

#include <stdlib.h>
#include <string.h>

#include "traces/base/err.h"
#include "traces/base/mem.h"
#include "traces/base/hash.h"

/* 256 common English words; with a leading space each is a single token
 * in the BPE vocabularies of current open and closed models. */
static const char *const vocab[PROMPT_VOCAB] = {
    " the", " of", " and", " to", " in", " is", " was", " for", " on", " are",
    " with", " as", " his", " they", " be", " at", " one", " have", " this",
    " from", " or", " had", " by", " not", " word", " but", " what", " some",
    " we", " can", " out", " other", " were", " all", " there", " when",
    " up", " use", " your", " how", " said", " an", " each", " she", " which",
    " do", " their", " time", " if", " will", " way", " about", " many",
    " then", " them", " write", " would", " like", " so", " these", " her",
    " long", " make", " thing", " see", " him", " two", " has", " look",
    " more", " day", " could", " go", " come", " did", " number", " sound",
    " no", " most", " people", " my", " over", " know", " water", " than",
    " call", " first", " who", " may", " down", " side", " been", " now",
    " find", " any", " new", " work", " part", " take", " get", " place",
    " made", " live", " where", " after", " back", " little", " only",
    " round", " man", " year", " came", " show", " every", " good", " me",
    " give", " our", " under", " name", " very", " through", " just", " form",
    " sentence", " great", " think", " say", " help", " low", " line",
    " differ", " turn", " cause", " much", " mean", " before", " move",
    " right", " boy", " old", " too", " same", " tell", " does", " set",
    " three", " want", " air", " well", " also", " play", " small", " end",
    " put", " home", " read", " hand", " port", " large", " spell", " add",
    " even", " land", " here", " must", " big", " high", " such", " follow",
    " act", " why", " ask", " men", " change", " went", " light", " kind",
    " off", " need", " house", " picture", " try", " us", " again", " animal",
    " point", " mother", " world", " near", " build", " self", " earth",
    " father", " head", " stand", " own", " page", " should", " country",
    " found", " answer", " school", " grow", " study", " still", " learn",
    " plant", " cover", " food", " sun", " four", " between", " state",
    " keep", " eye", " never", " last", " let", " thought", " city", " tree",
    " cross", " farm", " hard", " start", " might", " story", " saw", " far",
    " sea", " draw", " left", " late", " run", " while", " press", " close",
    " night", " real", " life", " few", " north", " open", " seem",
    " together", " next", " white", " children", " begin", " got", " walk",
    " example", " ease", " paper", " group",
};
static uint8_t vocab_len[PROMPT_VOCAB];
/* The words padded to 16 bytes: a token is rendered with one fixed-size
 * copy (the callers leave 16 bytes of room). */
static char vocab16[PROMPT_VOCAB][16];

static void vocab_init(void)
{
    if (vocab_len[0])
        return;
    for (int i = 0; i < PROMPT_VOCAB; i++) {
        vocab_len[i] = (uint8_t)strlen(vocab[i]);
        memcpy(vocab16[i], vocab[i], vocab_len[i]);
    }
}

const char *prompt_word(uint32_t v, size_t *len)
{
    vocab_init();
    *len = vocab_len[v % PROMPT_VOCAB];
    return vocab[v % PROMPT_VOCAB];
}

static inline int64_t bsize(const struct prompt_spec *s) { return s->block_size > 0 ? s->block_size : 64; }

/* Key of block b: token values inside a chain block depend on the key and
 * the offset only. */
static inline uint64_t block_key(const struct prompt_spec *s, int64_t b)
{
    return b < (int64_t)s->n_blocks ? hash_mix(s->blocks[b], s->scope) : 0;
}

static inline uint32_t token_at(const struct prompt_spec *s, int64_t i, int64_t b, int64_t off,
                                uint64_t key)
{
    uint64_t h;
    if (i < PROMPT_MARKER_TOKENS && !s->unmarked)
        h = hash_mix(s->session_salt ^ 0x6d61726b6572ull, (uint64_t)i);
    else if (b < (int64_t)s->n_blocks)
        h = hash_mix(key, (uint64_t)off);
    else
        h = hash_mix(s->call_salt ^ 0x7461696cull, (uint64_t)i);
    return (uint32_t)(h % PROMPT_ID_RANGE);
}

uint32_t prompt_token(const struct prompt_spec *s, int64_t i)
{
    int64_t bs = bsize(s), b = i / bs;
    return token_at(s, i, b, i % bs, block_key(s, b));
}

/* Renders token value v (token i of the prompt) into out (16 bytes of
 * room; the token takes at most 16); returns its length. */
static size_t render_value(enum prompt_mode m, int64_t i, uint32_t v, char *out)
{
    if (m == PROMPT_TEXT) {
        memcpy(out, vocab16[v % PROMPT_VOCAB], 16);
        return vocab_len[v % PROMPT_VOCAB];
    }
    char tmp[16];
    size_t n = 0;
    uint32_t id = PROMPT_ID_BASE + v;
    do {
        tmp[n++] = (char)('0' + id % 10);
        id /= 10;
    } while (id);
    size_t k = 0;
    if (i > 0)
        out[k++] = ',';
    while (n)
        out[k++] = tmp[--n];
    return k;
}

/* The next token of g (advancing it) rendered into out. */
static size_t gen_next(struct prompt_gen *g, char *out)
{
    const struct prompt_spec *s = &g->spec;
    uint32_t v = token_at(s, g->next, g->block, g->off, g->key);
    size_t n = render_value(g->mode, g->next, v, out);
    g->next++;
    if (++g->off == bsize(s)) {
        g->off = 0;
        g->block++;
        g->key = block_key(s, g->block);
    }
    return n;
}

int64_t prompt_bytes(const struct prompt_spec *s, enum prompt_mode m)
{
    char tmp[16];
    int64_t total = 0;
    struct prompt_gen g;
    prompt_gen_init(&g, s, m);
    while (g.next < s->tokens)
        total += (int64_t)gen_next(&g, tmp);
    return total;
}

void prompt_gen_init(struct prompt_gen *g, const struct prompt_spec *s,
                     enum prompt_mode m)
{
    memset(g, 0, sizeof *g);
    g->spec = *s;
    g->mode = m;
    g->key = block_key(s, 0);
    vocab_init();
}

size_t prompt_gen_read(struct prompt_gen *g, char *buf, size_t n)
{
    size_t k = 0;
    if (g->pend_off < g->pend_len) {
        size_t c = (size_t)(g->pend_len - g->pend_off);
        if (c > n)
            c = n;
        memcpy(buf, g->pend + g->pend_off, c);
        g->pend_off = (uint8_t)(g->pend_off + c);
        k = c;
    }
    while (k < n && g->next < g->spec.tokens) {
        if (n - k >= 16) {
            k += gen_next(g, buf + k);
            continue;
        }
        g->pend_len = (uint8_t)gen_next(g, g->pend);
        size_t c = g->pend_len < n - k ? g->pend_len : n - k;
        memcpy(buf + k, g->pend, c);
        g->pend_off = (uint8_t)c;
        k += c;
    }
    return k;
}

char *prompt_render(const struct prompt_spec *s, enum prompt_mode m, size_t *len)
{
    int64_t n = prompt_bytes(s, m);
    char *out = xmalloc((size_t)n + 1);
    struct prompt_gen g;
    prompt_gen_init(&g, s, m);
    size_t k = 0, r;
    while ((r = prompt_gen_read(&g, out + k, (size_t)n - k)) > 0)
        k += r;
    ASSERT((int64_t)k == n);
    out[k] = 0;
    if (len)
        *len = k;
    return out;
}

static int is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

int64_t prompt_blocks_text(const char *text, size_t len, int64_t chunk_tokens,
                           uint64_t *out, uint32_t cap, uint32_t *n_blocks)
{
    /* FNV-1a over the bytes of the words with a separator between words,
     * so the chain depends on the words, not on the spacing; mixed once
     * per chunk. */
    uint64_t h = 0x70726f6d7074ull;
    int64_t words = 0, in_chunk = 0;
    uint32_t nb = 0;
    int in_word = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        if (is_space((char)c)) {
            if (in_word) {
                in_word = 0;
                words++;
                h = (h ^ 0x1f) * 0x100000001b3ULL;
                if (chunk_tokens > 0 && ++in_chunk == chunk_tokens) {
                    in_chunk = 0;
                    h = hash_mix(h, (uint64_t)words);
                    if (nb < cap)
                        out[nb] = h;
                    nb++;
                }
            }
            continue;
        }
        in_word = 1;
        h = (h ^ c) * 0x100000001b3ULL;
    }
    if (in_word) {
        words++;
        h = (h ^ 0x1f) * 0x100000001b3ULL;
        if (chunk_tokens > 0 && ++in_chunk == chunk_tokens) {
            h = hash_mix(h, (uint64_t)words);
            if (nb < cap)
                out[nb] = h;
            nb++;
        }
    }
    *n_blocks = nb;
    return words;
}

int64_t prompt_blocks_ids(const int64_t *ids, size_t n, int64_t chunk_tokens,
                          uint64_t *out, uint32_t cap, uint32_t *n_blocks)
{
    uint64_t h = 0x6964730aull;
    uint32_t nb = 0;
    for (size_t i = 0; i < n; i++) {
        h = hash_mix(h, (uint64_t)ids[i]);
        if (chunk_tokens > 0 && (int64_t)(i + 1) % chunk_tokens == 0) {
            if (nb < cap)
                out[nb] = h;
            nb++;
        }
    }
    *n_blocks = nb;
    return (int64_t)n;
}
