/* http_shape.c: reading an OpenAI-compatible stream's events without a
 * JSON parse where that is safe: content-event templates (per call) and
 * event shapes (across calls), each checked against what Jansson reads
 * (http_shape.h). */
#define _GNU_SOURCE /* memmem */
#include "replay/http_shape.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "traces/base/mem.h"

/* ---- content-event templates ----
 *
 * A streamed answer is mostly content events that differ from each other
 * only in the content string (OpenAI-compatible servers repeat the id,
 * model, index and finish_reason in every chunk). Parsing each with Jansson
 * cost about 35,000 instructions an event (most of the load generator's CPU
 * per call); so once Jansson has parsed a content event that carries no
 * usage and no error, that event is kept as a template: the bytes before
 * and after the unique `:"CONTENT"` in it. A later event of the form
 * prefix + S + suffix, where S is a non-empty JSON string body that needs
 * no escapes (no quote, backslash or control character; valid UTF-8), is
 * the same JSON document with one string value replaced by another: it
 * parses, has the same keys and structure, carries no usage and no error,
 * and its content is non-empty (S itself, or the template's own when the
 * replaced value lies elsewhere). Anything else goes to Jansson. */

/* 1 if s[0..n) is a JSON string body as is: no quote, backslash or control
 * character, valid UTF-8 (no overlong forms, surrogates or code points
 * above U+10FFFF), as Jansson's decoder requires. */
static int plain_json_string(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) {
            if (c < 0x20 || c == '"' || c == '\\')
                return 0;
            i++;
            continue;
        }
        size_t k;
        unsigned v;
        if (c >= 0xc2 && c <= 0xdf) {
            k = 1;
            v = c & 0x1f;
        } else if (c >= 0xe0 && c <= 0xef) {
            k = 2;
            v = c & 0x0f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            k = 3;
            v = c & 0x07;
        } else {
            return 0;
        }
        if (n - i <= k)
            return 0;
        for (size_t j = 1; j <= k; j++) {
            unsigned d = s[i + j];
            if ((d & 0xc0) != 0x80)
                return 0;
            v = (v << 6) | (d & 0x3f);
        }
        if ((k == 2 && v < 0x800) || (k == 3 && (v < 0x10000 || v > 0x10ffff)) ||
            (v >= 0xd800 && v <= 0xdfff))
            return 0;
        i += k + 1;
    }
    return 1;
}

int http_tpl_match(const struct http_tpl *tpl, const char *data, size_t n)
{
    if (!tpl->buf)
        return 0;
    size_t suf = tpl->len - tpl->suf;
    if (n <= tpl->pre + suf)
        return 0;
    if (memcmp(data, tpl->buf, tpl->pre) || memcmp(data + n - suf, tpl->buf + tpl->suf, suf))
        return 0;
    return plain_json_string((const unsigned char *)data + tpl->pre, n - tpl->pre - suf);
}

void http_tpl_free(struct http_tpl *tpl)
{
    free(tpl->buf);
    memset(tpl, 0, sizeof *tpl);
}

int http_tpl_learn(struct http_tpl *tpl, const char *data, size_t n, const char *content, size_t clen)
{
    http_tpl_free(tpl);
    if (!clen || clen + 3 > n || !plain_json_string((const unsigned char *)content, clen))
        return 0;
    const char *found = NULL, *p = data, *end = data + n;
    while (p + clen + 3 <= end) {
        const char *q = memmem(p, (size_t)(end - p), content, clen);
        if (!q)
            break;
        if (q - data >= 2 && q[-1] == '"' && q[-2] == ':' && q + clen < end && q[clen] == '"') {
            if (found)
                return 0; /* twice: ambiguous */
            found = q;
        }
        p = q + 1;
    }
    if (!found)
        return 0;
    tpl->buf = xmalloc(n);
    memcpy(tpl->buf, data, n);
    tpl->pre = (size_t)(found - data);
    tpl->suf = tpl->pre + clen;
    tpl->len = n;
    return 1;
}

/* ---- event shapes (see http_target.h) ---- */

enum { SHR_OTHER = 0, SHR_CONTENT, SHR_PROMPT, SHR_COMPLETION, SHR_CACHED };

void http_event_of(const void *json, int chat, struct http_event *ev)
{
    json_t *j = (json_t *)json;
    memset(ev, 0, sizeof *ev);
    ev->prompt_tokens = ev->completion_tokens = ev->cached_tokens = -1;
    json_t *choices = json_object_get(j, "choices");
    json_t *ch = json_is_array(choices) ? json_array_get(choices, 0) : NULL;
    if (ch) {
        json_t *content = chat ? json_object_get(json_object_get(ch, "delta"), "content")
                               : json_object_get(ch, "text");
        ev->content = json_is_string(content) && json_string_length(content) > 0;
    }
    json_t *usage = json_object_get(j, "usage");
    if (json_is_object(usage)) {
        ev->usage = 1;
        json_t *pt = json_object_get(usage, "prompt_tokens");
        json_t *ct = json_object_get(usage, "completion_tokens");
        json_t *cached = json_object_get(json_object_get(usage, "prompt_tokens_details"), "cached_tokens");
        if (json_is_integer(pt))
            ev->prompt_tokens = json_integer_value(pt);
        if (json_is_integer(ct))
            ev->completion_tokens = json_integer_value(ct);
        if (json_is_integer(cached))
            ev->cached_tokens = json_integer_value(cached);
    }
}

/* The one place `key` (a quoted key and colon) occurs in ev[0..n): its
 * value's offset in *at; 0 if absent, 1 if once, 2 if more. */
static int find_key(const char *ev, size_t n, const char *key, size_t *at)
{
    size_t kl = strlen(key);
    int found = 0;
    const char *p = ev, *end = ev + n;
    while (p < end) {
        const char *q = memmem(p, (size_t)(end - p), key, kl);
        if (!q)
            break;
        if (found++)
            return 2;
        *at = (size_t)(q - ev) + kl;
        p = q + 1;
    }
    return found;
}

/* Digits at ev[at..n) as JSON writes a non-negative integer that fits in
 * 18 digits; their count, or 0. */
static size_t int_digits(const char *ev, size_t n, size_t at, int64_t *v)
{
    size_t k = 0;
    int64_t x = 0;
    while (at + k < n && ev[at + k] >= '0' && ev[at + k] <= '9') {
        if (k == 18)
            return 0;
        x = x * 10 + (ev[at + k] - '0');
        k++;
    }
    if (k > 1 && ev[at] == '0')
        return 0;
    *v = x;
    return k;
}

/* Adds a hole for the value after `key` to sh. want: the value Jansson
 * read at the key's path (NULL: the key is not a role's, any value);
 * returns 0 when fine (hole added, or none needed), -1 to give up. */
static int shape_hole(struct http_shape *sh, const char *ev, size_t n, const char *key, int is_int,
                      int role, json_t *want)
{
    size_t at = 0;
    int f = find_key(ev, n, key, &at);
    if (role != SHR_OTHER) {
        /* A role's key must be exactly where Jansson read the value, or
         * nowhere when there is none. */
        if (!want)
            return f == 0 ? 0 : -1;
        if (f != 1)
            return -1;
    } else if (f != 1) {
        return 0; /* absent or repeated: stays fixed */
    }
    size_t end;
    if (is_int) {
        int64_t v;
        size_t k = int_digits(ev, n, at, &v);
        if (!k)
            return role != SHR_OTHER ? -1 : 0;
        if (want && (!json_is_integer(want) || json_integer_value(want) != v))
            return -1;
        end = at + k;
    } else {
        const char *q = memchr(ev + at, '"', n - at);
        if (!q)
            return -1;
        end = (size_t)(q - ev);
        if (!plain_json_string((const unsigned char *)ev + at, end - at))
            return -1;
        if (want && (!json_is_string(want) || json_string_length(want) != end - at ||
                     memcmp(json_string_value(want), ev + at, end - at)))
            return -1;
    }
    if (sh->n_holes == HTTP_SHAPE_HOLES)
        return -1;
    sh->hole[sh->n_holes].at = at;
    sh->hole[sh->n_holes].end = end;
    sh->hole[sh->n_holes].is_int = (unsigned char)is_int;
    sh->hole[sh->n_holes].role = (unsigned char)role;
    sh->n_holes++;
    return 0;
}

static void shape_free(struct http_shape *sh)
{
    free(sh->buf);
    memset(sh, 0, sizeof *sh);
}

int http_shape_learn(struct http_shape_set *set, const char *ev, size_t n, const void *json, int chat)
{
    json_t *j = (json_t *)json;
    if (!json_is_object(j) || json_object_get(j, "error") || memchr(ev, '\\', n))
        return 0;
    struct http_shape sh;
    memset(&sh, 0, sizeof sh);
    json_t *choices = json_object_get(j, "choices");
    json_t *ch = json_is_array(choices) ? json_array_get(choices, 0) : NULL;
    json_t *content = !ch ? NULL : chat ? json_object_get(json_object_get(ch, "delta"), "content")
                                        : json_object_get(ch, "text");
    json_t *usage = json_object_get(j, "usage");
    json_t *u = json_is_object(usage) ? usage : NULL;
    json_t *id = json_object_get(j, "id");
    json_t *created = json_object_get(j, "created");
    if (shape_hole(&sh, ev, n, "\"id\":\"", 0, SHR_OTHER, json_is_string(id) ? id : NULL) ||
        shape_hole(&sh, ev, n, "\"created\":", 1, SHR_OTHER, json_is_integer(created) ? created : NULL) ||
        shape_hole(&sh, ev, n, chat ? "\"content\":\"" : "\"text\":\"", 0, SHR_CONTENT,
                   json_is_string(content) ? content : NULL) ||
        shape_hole(&sh, ev, n, "\"prompt_tokens\":", 1, SHR_PROMPT,
                   u ? json_object_get(u, "prompt_tokens") : NULL) ||
        shape_hole(&sh, ev, n, "\"completion_tokens\":", 1, SHR_COMPLETION,
                   u ? json_object_get(u, "completion_tokens") : NULL) ||
        shape_hole(&sh, ev, n, "\"total_tokens\":", 1, SHR_OTHER, NULL) ||
        shape_hole(&sh, ev, n, "\"cached_tokens\":", 1, SHR_CACHED,
                   u ? json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens")
                     : NULL))
        return 0;
    /* Holes in order of position (they never overlap: distinct values). */
    for (int a = 1; a < sh.n_holes; a++)
        for (int b = a; b > 0 && sh.hole[b].at < sh.hole[b - 1].at; b--) {
            __typeof__(sh.hole[0]) h = sh.hole[b];
            sh.hole[b] = sh.hole[b - 1];
            sh.hole[b - 1] = h;
        }
    for (int a = 1; a < sh.n_holes; a++)
        if (sh.hole[a].at < sh.hole[a - 1].end)
            return 0;
    sh.usage = u != NULL;
    sh.buf = xmalloc(n);
    memcpy(sh.buf, ev, n);
    sh.len = n;
    struct http_shape *slot = &set->s[set->next];
    set->next = (set->next + 1) % HTTP_SHAPES;
    shape_free(slot);
    *slot = sh;
    return 1;
}

static int shape_match1(const struct http_shape *sh, const char *ev, size_t n, struct http_event *out)
{
    size_t s = 0, d = 0; /* offsets in sh->buf and in ev */
    out->content = 0;
    out->usage = sh->usage;
    out->prompt_tokens = out->completion_tokens = out->cached_tokens = -1;
    for (int i = 0; i < sh->n_holes; i++) {
        size_t fixed = sh->hole[i].at - s;
        if (n - d < fixed || memcmp(ev + d, sh->buf + s, fixed))
            return 0;
        d += fixed;
        size_t k;
        int64_t v = 0;
        if (sh->hole[i].is_int) {
            k = int_digits(ev, n, d, &v);
            if (!k)
                return 0;
        } else {
            const char *q = memchr(ev + d, '"', n - d);
            if (!q)
                return 0;
            k = (size_t)(q - (ev + d));
            if (!plain_json_string((const unsigned char *)ev + d, k))
                return 0;
        }
        switch (sh->hole[i].role) {
        case SHR_CONTENT: out->content = k > 0; break;
        case SHR_PROMPT: out->prompt_tokens = v; break;
        case SHR_COMPLETION: out->completion_tokens = v; break;
        case SHR_CACHED: out->cached_tokens = v; break;
        default: break;
        }
        d += k;
        s = sh->hole[i].end;
    }
    return n - d == sh->len - s && !memcmp(ev + d, sh->buf + s, sh->len - s);
}

int http_shape_match(struct http_shape_set *set, const char *ev, size_t n, struct http_event *out)
{
    /* The shape that matched last first: content events come in runs. */
    for (int k = 0; k < HTTP_SHAPES; k++) {
        int i = (set->last + k) % HTTP_SHAPES;
        if (set->s[i].buf && shape_match1(&set->s[i], ev, n, out)) {
            set->last = i;
            return 1;
        }
    }
    return 0;
}

void http_shape_set_free(struct http_shape_set *set)
{
    for (int i = 0; i < HTTP_SHAPES; i++)
        shape_free(&set->s[i]);
    set->next = set->last = 0;
}
