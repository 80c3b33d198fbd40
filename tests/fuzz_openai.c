/* fuzz_openai.c: the OpenAI-compatible server end to end, HTTP bytes in:
 * the parser, the routing, the body checks (vLLM's type rules), prompts,
 * the context limits, n and batches, the tokenizer, streams and whole
 * answers, run to their end on the fake backend (virtual clock). Half the
 * inputs are raw bytes (in pieces of 1 to 256 bytes); the other half are
 * a JSON body posted to a route chosen by the second byte, so the body
 * checks see arbitrary JSON whatever the framing. Every answer stays
 * bounded and every request ends (the server is shared by all inputs: a
 * leak of requests or connections grows the process, which libFuzzer's
 * -rss_limit_mb catches). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/server/openai.h"
#include "traces/base/err.h"

static struct loop *fo_loop;      /* shared by every input */
static struct openai_server *fo_srv;

static void fo_setup(void)
{
    struct openai_config c;
    openai_config_defaults(&c);
    c.fake = true;
    c.fake_ttft_ms = 1;
    c.fake_tpot_ms = 1;
    c.engine.max_model_len = 2048;
    c.names[0] = "fake";
    c.names[1] = "org/alias";
    c.n_names = 2;
    c.max_body_mb = 1;
    char err[ERR_LEN];
    fo_loop = loop_virtual_create();
    fo_srv = openai_create(&c, fo_loop, err);
    ASSERT(fo_srv);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    if (!fo_srv)
        fo_setup();
    char *buf = NULL;
    const char *in = (const char *)data + 2;
    size_t n = size - 2;
    if (data[0] & 1) {
        static const char *const routes[] = {"/v1/chat/completions", "/v1/completions", "/tokenize",
                                             "/detokenize", "/v1/completions"};
        const char *route = routes[data[1] % 5];
        buf = malloc(n + 256);
        int h = snprintf(buf, 256,
                         "POST %s HTTP/1.1\r\nHost: f\r\nContent-Type: application/json\r\n"
                         "Content-Length: %zu\r\n\r\n",
                         route, n);
        memcpy(buf + h, in, n);
        in = buf;
        n += (size_t)h;
    }
    struct httpd_conn *c = httpd_conn_mem_create(openai_httpd(fo_srv));
    size_t piece = 1 + (size_t)(data[0] >> 1);
    for (size_t i = 0; i < n; i += piece) {
        size_t k = n - i < piece ? n - i : piece;
        if (httpd_conn_mem_feed(c, in + i, k))
            break;
        loop_run(fo_loop); /* the backend runs every request to its end */
        size_t out;
        httpd_conn_mem_output(c, &out);
        /* A whole answer: at most 8 choices of 2048 words of 16 bytes. */
        ASSERT(out <= (8u << 20));
        httpd_conn_mem_clear(c);
    }
    httpd_conn_mem_destroy(c);
    loop_run(fo_loop);
    free(buf);
    return 0;
}
