/* test_fuzz_regressions.c: replays every saved fuzz input through the
 * harness code it was found with, in an ordinary (or sanitizer) build.
 *
 * Each libFuzzer harness (tests/fuzz_*.c) is included here under its own
 * name; the inputs are tests/fuzz/regressions/<harness>/ (crashes found and
 * fixed), tests/fuzz/seeds/<harness>/ (the committed seeds) and a few
 * hand-made edge cases per harness. With FUZZ_CORPUS=1 the working corpora
 * under build/fuzz/corpus/<harness>/ are replayed too. A harness asserts its
 * invariants itself (ASSERT aborts), so passing means: no crash, no abort,
 * and, under make check, no sanitizer report.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#define LLVMFuzzerTestOneInput fuzz_one_native
#include "fuzz_trace_native.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_one_agentx
#include "fuzz_trace_agentx.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_one_mooncake
#include "fuzz_trace_mooncake.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_one_azure
#include "fuzz_trace_azure.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_one_burstgpt
#include "fuzz_trace_burstgpt.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_one_preset
#include "fuzz_preset.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_one_calibration
#include "fuzz_calibration.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_one_sse
#include "fuzz_sse.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_one_httpd
#include "fuzz_httpd.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_one_openai
#include "fuzz_openai.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_one_external
#include "fuzz_external.c"
#undef LLVMFuzzerTestOneInput

#include "testhelp.h"

typedef int (*fuzz_fn)(const uint8_t *, size_t);

static const struct {
    const char *name;
    fuzz_fn fn;
} harnesses[] = {
    {"fuzz_trace_native", fuzz_one_native},     {"fuzz_trace_agentx", fuzz_one_agentx},
    {"fuzz_trace_mooncake", fuzz_one_mooncake}, {"fuzz_trace_azure", fuzz_one_azure},
    {"fuzz_trace_burstgpt", fuzz_one_burstgpt}, {"fuzz_preset", fuzz_one_preset},
    {"fuzz_calibration", fuzz_one_calibration}, {"fuzz_sse", fuzz_one_sse},
    {"fuzz_httpd", fuzz_one_httpd},             {"fuzz_openai", fuzz_one_openai},
    {"fuzz_external", fuzz_one_external},
};

/* Hand-made edge cases every harness gets. */
static const char *const edge[] = {
    "", "\n", "\0\0\0", "{", "[", "{}", "[]", "null", "\"\"", "1e400", "-0",
    "{\"a\":1e309}", "9223372036854775808", "-9223372036854775809",
    "{\"session_id\":\"s\",\"hash_ids\":[18446744073709551616]}",
    "timestamp,input_length,output_length,hash_ids\n0,1,1,\"[1,2]\"\n",
    "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,-1,2\n",
    "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n0,x,1,1,2,y\n",
    "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: [DONE]\n\n",
    "data:\r\n\r\n:comment\r\nevent: x\ndata: \xff\xfe\n\n",
    "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 5\r\n\r\n{\"a\":",
    "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/models HTTP/1.1\r\n\r\n",
    "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n",
};

static int run_dir(const char *dir, fuzz_fn fn)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || !strcmp(e->d_name, "README.md"))
            continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (stat(path, &sb) || !S_ISREG(sb.st_mode))
            continue;
        FILE *f = fopen(path, "rb");
        if (!f)
            continue;
        uint8_t *buf = malloc(sb.st_size ? (size_t)sb.st_size : 1);
        size_t got = fread(buf, 1, (size_t)sb.st_size, f);
        fclose(f);
        fn(buf, got); /* aborts on a broken invariant */
        free(buf);
        n++;
    }
    closedir(d);
    return n;
}

int main(void)
{
    bool corpus = getenv("FUZZ_CORPUS") && atoi(getenv("FUZZ_CORPUS"));
    for (size_t h = 0; h < sizeof harnesses / sizeof *harnesses; h++) {
        int n = 0, nreg, ncorp = 0;
        for (size_t i = 0; i < sizeof edge / sizeof *edge; i++) {
            size_t len = strlen(edge[i]);
            uint8_t *b = malloc(len + 1); /* exact size: overreads show */
            memcpy(b, edge[i], len);
            harnesses[h].fn(b, len);
            free(b);
            n++;
        }
        harnesses[h].fn((const uint8_t *)"\0\0\0\0", 4);
        char dir[512];
        snprintf(dir, sizeof dir, "tests/fuzz/regressions/%s", harnesses[h].name);
        nreg = run_dir(dir, harnesses[h].fn);
        snprintf(dir, sizeof dir, "tests/fuzz/seeds/%s", harnesses[h].name);
        n += run_dir(dir, harnesses[h].fn);
        if (corpus) {
            snprintf(dir, sizeof dir, "build/fuzz/corpus/%s", harnesses[h].name);
            ncorp = run_dir(dir, harnesses[h].fn);
        }
        CHECKF(1, "%s", harnesses[h].name);
        printf("NOTE %s: %d regression inputs, %d seeds and edge cases%s", harnesses[h].name, nreg,
               n, corpus ? "" : "\n");
        if (corpus)
            printf(", %d corpus inputs\n", ncorp);
    }
    return test_report();
}
