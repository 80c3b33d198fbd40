/* http_shape.h: reading the events of an OpenAI-compatible stream
 * without a JSON parse where that is safe: a call's content-event
 * template and the target's event shapes (http_shape.c). The live target
 * (http_target.h) uses them; tests check them against Jansson.
 */
#ifndef HTTP_SHAPE_H
#define HTTP_SHAPE_H

#include <stddef.h>
#include <stdint.h>

/* Content-event templates (used per call by the live target; declared here
 * for tests). A template is a content event Jansson parsed (non-empty
 * content, no usage, no error) cut around the unique `:"CONTENT"` in it;
 * an event that is the template with that string body replaced by another
 * non-empty one needing no escapes is the same document with one string
 * changed: a content chunk without usage or error, so it needs no parse. */
struct http_tpl {
    char *buf;                /* the template event, NULL if none */
    size_t pre, suf, len;     /* content body at [pre, suf) of len bytes */
};
/* Learns from an event and its parsed content; 1 if a template was kept,
 * 0 if none (content absent, escaped, or not found exactly once). */
int http_tpl_learn(struct http_tpl *tpl, const char *ev, size_t n, const char *content, size_t clen);
/* 1 if ev matches: a content chunk with no usage and no error. */
int http_tpl_match(const struct http_tpl *tpl, const char *ev, size_t n);
void http_tpl_free(struct http_tpl *tpl);

/* Event shapes (target-wide, across calls; declared here for tests).
 * OpenAI-compatible servers send the same few event shapes in every call
 * (the first chunk with the role, content chunks, the finish chunk, the
 * usage chunk), differing only in a few scalar values: the id, "created",
 * the content string, the usage counts. A shape is an event Jansson parsed
 * (no backslash anywhere in it, no error) with holes at those values: the
 * string bodies after the unique `"id":"` and `"content":"` (`"text":"`
 * on /v1/completions) and the integers after the unique `"created":`,
 * `"prompt_tokens":`, `"completion_tokens":`, `"total_tokens":`,
 * `"cached_tokens":`, each checked equal to the value Jansson read at its
 * path. An event that is the shape with each string hole filled by a body
 * needing no escapes (no quote, backslash or control character; valid
 * UTF-8) and each integer hole by 1-18 digits without a leading zero is
 * the same document with those values changed, so its meaning is read
 * from the holes without a parse. */
#define HTTP_SHAPE_HOLES 8
#define HTTP_SHAPES 8
struct http_shape {
    char *buf;                  /* the learned event, NULL if none */
    size_t len;
    int n_holes;
    struct {
        size_t at, end;         /* the value's bytes in buf */
        unsigned char is_int, role; /* role: enum in http_shape.c */
    } hole[HTTP_SHAPE_HOLES];
    int usage;                  /* the event has a usage object */
};
struct http_shape_set {
    struct http_shape s[HTTP_SHAPES];
    int next;                   /* the slot the next shape replaces */
    int last;                   /* the slot that matched last */
};
/* What an event means (as on_event reads it from Jansson). */
struct http_event {
    int content;                /* a non-empty content string */
    int usage;                  /* a usage object */
    int64_t prompt_tokens, completion_tokens, cached_tokens; /* -1: absent */
};
/* Learns a shape from an event and its parse (a json_t * object without
 * "error"); chat: /v1/chat/completions. 1 if kept, 0 if not (escapes,
 * ambiguous or spaced keys, a value not found where Jansson read it). */
int http_shape_learn(struct http_shape_set *set, const char *ev, size_t n, const void *json, int chat);
/* 1 and *out if ev matches a shape, 0 if it needs a parse. */
int http_shape_match(struct http_shape_set *set, const char *ev, size_t n, struct http_event *out);
/* What Jansson reads from a parsed event (the reference for the above). */
void http_event_of(const void *json, int chat, struct http_event *out);
void http_shape_set_free(struct http_shape_set *set);

#endif
