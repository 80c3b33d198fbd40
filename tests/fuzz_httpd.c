/* fuzz_httpd.c: the HTTP server's request parsing and handling path fed
 * from memory (in-memory connections): arbitrary bytes in arbitrary
 * pieces, answered at once, streamed, or later; output stays bounded. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/server/httpd.h"
#include "traces/base/err.h"

struct fz {
    struct httpd_conn *held;
    int n;
};

static void on_close(void *ctx) { ((struct fz *)ctx)->held = NULL; }

static void handler(struct httpd_conn *c, const struct httpd_request *r, void *arg)
{
    struct fz *f = arg;
    ASSERT(r->body[r->body_len] == 0);
    ASSERT(r->path && r->method);
    f->n++;
    switch ((r->body_len + strlen(r->path)) % 3) {
    case 0:
        httpd_respond(c, 200, "text/plain", r->body, r->body_len);
        break;
    case 1:
        httpd_stream_begin(c, 200, "text/event-stream");
        httpd_stream_write(c, r->path, strlen(r->path));
        httpd_stream_write(c, r->body, r->body_len);
        httpd_stream_end(c);
        break;
    default:
        f->held = c; /* answered on the next piece */
        httpd_conn_on_close(c, on_close, f);
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static struct loop *l;
    if (!l)
        l = loop_virtual_create();
    struct httpd_limits lim;
    httpd_limits_defaults(&lim);
    lim.max_header_bytes = 2048;
    lim.max_body_bytes = 8192;
    lim.max_out_bytes = 1 << 16;
    struct fz f = {0};
    struct httpd *h = httpd_create(l, &lim, handler, &f);
    struct httpd_conn *c = httpd_conn_mem_create(h);
    size_t piece = 1 + data[0] % 200;
    for (size_t i = 1; i < size; i += piece) {
        size_t n = size - i < piece ? size - i : piece;
        if (f.held) {
            struct httpd_conn *held = f.held;
            f.held = NULL;
            httpd_respond(held, 200, "text/plain", "later", 5);
        }
        if (httpd_conn_mem_feed(c, (const char *)data + i, n))
            break;
        size_t out;
        httpd_conn_mem_output(c, &out);
        ASSERT(out <= lim.max_out_bytes);
        httpd_conn_mem_clear(c);
    }
    httpd_conn_mem_destroy(c);
    httpd_destroy(h);
    return 0;
}
