/* http_internal.h: what the live target's files share: a transfer (a
 * call's streamed POST or a scrape's GET), the target's state, and the
 * entry points between the driver (http_target.c), request building
 * (http_request.c) and response handling (http_response.c). Not for use
 * outside those files.
 */
#ifndef HTTP_INTERNAL_H
#define HTTP_INTERNAL_H

#include <curl/curl.h>

#include "replay/http_target.h"
#include "replay/sse.h"
#include "traces/base/list.h"

#define SSE_MAX_EVENT (1u << 20) /* bytes: a longer event is a malformed stream */
#define GET_MAX_BODY (4u << 20)  /* bytes of a scrape's answer */
#define SHORT_BODY (32 * 1024)   /* bytes: request bodies up to this are sent whole */

struct http_target;

enum http_xfer_kind { XFER_CALL = 0, XFER_GET = 1 };

/* One transfer on a curl handle; owned by the target from submit (or
 * http_target_get) until http_xfer_finish frees it. */
struct http_xfer {
    enum http_xfer_kind kind;
    struct http_target *t;
    struct target_call *c;    /* XFER_CALL: the replayer's call */
    CURL *easy;               /* NULL while held (http_target_hold) */
    int big;                  /* easy has a big receive buffer */
    /* Request body (http_request.c). */
    struct prompt_gen gen;
    char head[512];           /* JSON before the prompt */
    size_t head_len, head_off;
    char tail[512];           /* JSON after it */
    size_t tail_len, tail_off;
    /* Chat structure (target.h msgs, marker): the prompt's tokens split
     * into messages, the text between them written as the generator
     * reaches each boundary. */
    bool chat_msgs;
    uint32_t msg;             /* the message being written */
    int64_t prompt_total;     /* content tokens (the marker excluded) */
    int64_t msg_tok_end;      /* token where the message being written ends */
    char sep[192];            /* text pending before the next token */
    size_t sep_len, sep_off;
    char *body;               /* a short body, whole (owned; freed when the answer begins) */
    /* Response (http_response.c). */
    struct sse sse;
    int64_t chunks;           /* content chunks received */
    int64_t deferred_t_ns;    /* time of the deferred (last) chunk, -1 none */
    int64_t delivered;        /* tokens delivered */
    int got_done;             /* [DONE] seen */
    int got_usage;
    int failed;               /* a malformed stream or an error event */
    char fail_msg[128];
    int64_t last_byte_ns;
    int64_t events;           /* server-sent events received */
    uint64_t bytes;           /* bytes of the answer received */
    struct loop_timer read_timer;
    char curl_err[CURL_ERROR_SIZE];
    /* The last content event Jansson parsed, as a template (http_shape.h). */
    struct http_tpl tpl;
    /* XFER_GET. */
    http_get_cb get_cb;
    void *get_arg;
    char *gbuf;               /* the answer so far, NUL-terminated */
    size_t glen, gcap;
    int get_status;           /* HTTP status, 0 on a transport error */
    struct list_node node;    /* in http_target.xfers */
};

struct http_target {
    struct target base;
    struct http_target_config cfg;
    CURLM *multi;
    struct curl_slist *headers;
    char model_json[300];     /* the model name as a JSON string */
    char url_call[640];
    struct loop_timer timer;  /* curl's timeout */
    CURL **pool;              /* idle call handles, small receive buffer */
    size_t pool_n, pool_cap;
    CURL **bpool;             /* idle call handles, big receive buffer */
    size_t bpool_n;
    size_t big_made;          /* handles made with a big buffer (at most
                                 BIG_RECV_HANDLES) */
    struct list_node xfers;   /* transfers in flight or held, newest first */
    int64_t running;          /* calls on a curl handle */
    struct target_stats stats;
    struct http_target_counts counts;
    int in_action;            /* inside curl_multi_socket_action */
    struct http_shape_set shapes; /* event shapes seen (http_shape.h) */
    int hold;                 /* http_target_hold() was called */
};

/* Driver (http_target.c): ends x with status st (msg: the error, NULL for
 * the status's name), reports done (calls) or the answer (GETs) and frees
 * x. */
void http_xfer_finish(struct http_target *t, struct http_xfer *x, enum target_status st,
                      const char *msg);

/* Request (http_request.c). */
/* base + path, without doubling a /v1 the base ends in. */
void http_url_join(char *out, size_t n, const char *base, const char *path);
/* The headers of every request (caller frees with curl_slist_free_all). */
struct curl_slist *http_request_headers(const struct http_target_config *cfg);
/* The call's prompt generator and the JSON around the prompt. */
void http_request_init(struct http_target *t, struct http_xfer *x);
/* Gives x's body to its handle: whole when short, else streamed. */
void http_request_attach(struct http_target *t, struct http_xfer *x);
/* The answer has begun: a whole body is no longer needed. */
void http_request_answered(struct http_xfer *x);
/* curl's CURLOPT_READFUNCTION and CURLOPT_SEEKFUNCTION for call bodies. */
size_t http_request_read(char *buf, size_t size, size_t nitems, void *userp);
int http_request_seek(void *userp, curl_off_t off, int origin);

/* Response (http_response.c). */
/* The call's event parser. */
void http_response_init(struct http_xfer *x);
/* curl's CURLOPT_WRITEFUNCTION for every transfer. */
size_t http_response_write(char *ptr, size_t size, size_t nmemb, void *userp);
/* Delivers the deferred last chunk (if any) as `tokens` tokens (at least 1). */
void http_response_deliver_deferred(struct http_xfer *x, int64_t tokens);
/* What a finished call transfer amounts to, from curl's result and the
 * HTTP status: the status for done and its message in msg (n bytes);
 * counts the error kinds. */
enum target_status http_response_outcome(struct http_target *t, struct http_xfer *x,
                                         CURLcode res, long status, char *msg, size_t n);
/* The read timeout's timer callback (arg: the transfer): ends a transfer
 * silent for read_timeout_ns. */
void http_response_read_timeout(struct loop *l, struct loop_timer *tm);

#endif
