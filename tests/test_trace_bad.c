/* test_trace_bad.c: malformed traces never crash and never lose records
 * silently: each reader rejects truncated files, wrong types, missing
 * fields, negative or absurd counts, too many block ids, unknown subagent
 * shapes, empty files, binary garbage and huge lines with a message naming
 * the place (file:line:column or the JSON path); --skip-bad skips and
 * counts. Also runs each reader over every prefix of small real samples
 * (no crash, errors carry the name).
 */
#include <stdint.h>

#include "tests/testhelp.h"
#include "traces/trace.h"
#include "traces/base/err.h"
#include "traces/base/rng.h"
#include "traces/base/file.h"

static struct trace_read_opts opts_fmt(enum trace_format f, bool skip)
{
    struct trace_read_opts o = {.format = f, .skip_bad = skip};
    return o;
}

/* Expects an error containing every one of the NULL-terminated needles. */
static void expect_err(const char *what, const char *data, size_t len, enum trace_format f,
                       const char *const *needles)
{
    char err[ERR_LEN] = "";
    struct trace_read_opts o = opts_fmt(f, false);
    struct trace *t = trace_read_mem(data, len, "bad.trace", &o, err);
    CHECKF(t == NULL, "%s: rejected", what);
    trace_destroy(t);
    for (const char *const *n = needles; *n; n++)
        CHECKF(strstr(err, *n) != NULL, "%s: message '%s' names '%s'", what, err, *n);
}

#define EXPECT(what, s, f, ...)                                                 \
    do {                                                                        \
        const char *const nn_[] = {__VA_ARGS__, NULL};                          \
        expect_err(what, s, strlen(s), f, nn_);                                 \
    } while (0)

#define AX_HEAD "{\"id\":\"x\",\"block_size\":64,\"hash_id_scope\":\"local\",\"requests\":["
#define AX_CALL "{\"t\":0.0,\"type\":\"n\",\"model\":\"m\",\"in\":200,\"out\":5,\"hash_ids\":[1,2,3]}"

static void test_agentx(void)
{
    const enum trace_format A = TRACE_FMT_AGENTX;
    EXPECT("agentx truncated", AX_HEAD AX_CALL ",{\"t\":1", A, "bad.trace:1:");
    EXPECT("agentx wrong type in", AX_HEAD "{\"t\":0,\"type\":\"n\",\"in\":\"200\",\"out\":5,\"hash_ids\":[]}]}",
           A, "requests[0].in", "integer");
    EXPECT("agentx missing out", AX_HEAD AX_CALL ",{\"t\":0,\"type\":\"n\",\"in\":10,\"hash_ids\":[]}]}", A,
           "requests[1].out", "missing");
    EXPECT("agentx missing t", AX_HEAD "{\"type\":\"n\",\"in\":10,\"out\":1,\"hash_ids\":[]}]}", A,
           "requests[0].t", "missing");
    EXPECT("agentx negative tokens", AX_HEAD "{\"t\":0,\"type\":\"n\",\"in\":-3,\"out\":1,\"hash_ids\":[]}]}",
           A, "requests[0].in", "negative or absurd");
    EXPECT("agentx absurd tokens", AX_HEAD "{\"t\":0,\"type\":\"n\",\"in\":1000000000000,\"out\":1,\"hash_ids\":[]}]}",
           A, "requests[0].in");
    EXPECT("agentx negative t", AX_HEAD "{\"t\":-1,\"type\":\"n\",\"in\":1,\"out\":1,\"hash_ids\":[]}]}", A,
           "requests[0].t");
    EXPECT("agentx too many ids", AX_HEAD "{\"t\":0,\"type\":\"n\",\"in\":100,\"out\":1,\"hash_ids\":[1,2,3]}]}",
           A, "requests[0].hash_ids", "3 block ids for 100 tokens");
    EXPECT("agentx bad id", AX_HEAD "{\"t\":0,\"type\":\"n\",\"in\":100,\"out\":1,\"hash_ids\":[1,\"a\"]}]}", A,
           "requests[0].hash_ids[1]");
    EXPECT("agentx subagent without requests", AX_HEAD AX_CALL ",{\"t\":3.5,\"type\":\"subagent\",\"agent_id\":\"a\"}]}",
           A, "requests[1].requests", "subagent");
    EXPECT("agentx subagent requests not array",
           AX_HEAD AX_CALL ",{\"t\":3.5,\"type\":\"subagent\",\"requests\":{}}]}", A,
           "requests[1].requests", "array");
    EXPECT("agentx nested bad call",
           AX_HEAD AX_CALL ",{\"t\":3.5,\"type\":\"subagent\",\"duration_ms\":1000,\"requests\":[" AX_CALL
                   ",{\"t\":1,\"type\":\"n\",\"in\":1,\"out\":\"x\",\"hash_ids\":[]}]}]}",
           A, "requests[1].requests[1].out");
    EXPECT("agentx requests without subagent type",
           AX_HEAD "{\"t\":3.5,\"type\":\"n\",\"requests\":[]}]}", A, "requests[0].requests");
    EXPECT("agentx type not a string", AX_HEAD "{\"t\":0,\"type\":7}]}", A, "requests[0].type");
    EXPECT("agentx entry not an object", AX_HEAD "42]}", A, "requests[0]", "object");
    EXPECT("agentx top level array", "[1,2,3]", A, "top level");
    EXPECT("agentx no requests", "{\"id\":\"x\"}", A, "requests", "missing");
    EXPECT("agentx bad block size", "{\"block_size\":0,\"requests\":[]}", A, "block_size");
    EXPECT("agentx bad scope", "{\"hash_id_scope\":\"planet\",\"requests\":[]}", A, "hash_id_scope");
    EXPECT("agentx bad tool_tokens", "{\"tool_tokens\":-4,\"requests\":[]}", A, "tool_tokens");
    EXPECT("agentx subagent bad system_tokens",
           AX_HEAD AX_CALL ",{\"t\":1,\"type\":\"subagent\",\"system_tokens\":\"x\",\"requests\":[]}]}",
           A, "requests[1].system_tokens");
    EXPECT("agentx api_time not a number",
           AX_HEAD "{\"t\":0,\"type\":\"n\",\"in\":1,\"out\":1,\"api_time\":\"1\",\"hash_ids\":[]}]}",
           A, "requests[0].api_time");
    EXPECT("agentx empty", "", A, "empty");

    /* skip_bad: bad calls and a bad subagent skipped and counted. */
    const char *mixed = AX_HEAD AX_CALL ",{\"t\":1,\"type\":\"n\",\"in\":-1,\"out\":1,\"hash_ids\":[]},"
                        "{\"t\":2,\"type\":\"subagent\"}," AX_CALL "]}";
    struct trace_read_opts o = opts_fmt(TRACE_FMT_AUTO, true);
    char err[ERR_LEN];
    struct trace *t = trace_read_mem(mixed, strlen(mixed), "mixed.json", &o, err);
    CHECKF(t != NULL, "agentx skip-bad reads: %s", t ? "" : err);
    if (t) {
        CHECKF(t->n_calls == 2 && t->skipped_records == 2, "agentx skip-bad: %u calls, %llu skipped",
               t->n_calls, (unsigned long long)t->skipped_records);
        trace_destroy(t);
    }
}

static void test_mooncake(void)
{
    const enum trace_format M = TRACE_FMT_MOONCAKE;
    const char *good = "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [0, 1]}\n";
    char buf[4096];
    snprintf(buf, sizeof buf, "%s%s", good, "{\"timestamp\": 3, \"input_length\": 10, \"output");
    EXPECT("mooncake truncated", buf, M, "bad.trace:2:");
    snprintf(buf, sizeof buf, "%s%s", good,
             "{\"timestamp\": 3, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [0, 1]}\n");
    EXPECT("mooncake too many ids", buf, M, "bad.trace:2:", "hash_ids", "2 block ids for 10 tokens");
    EXPECT("mooncake wrong type", "{\"timestamp\": \"0\", \"input_length\": 1, \"output_length\": 1, \"hash_ids\": []}",
           M, "bad.trace:1:", "timestamp");
    EXPECT("mooncake missing", "{\"timestamp\": 0, \"input_length\": 1, \"hash_ids\": []}", M,
           "output_length", "missing");
    EXPECT("mooncake absurd", "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 99999999999, \"hash_ids\": []}",
           M, "output_length");
    EXPECT("mooncake negative id", "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 1, \"hash_ids\": [-4]}",
           M, "hash_ids[0]");
    EXPECT("mooncake not an object", "[1]\n", M, "bad.trace:1:", "object");
    EXPECT("mooncake empty", "\n\n", M, "no records");

    /* skip-bad on line 2 and 4 of 5 */
    const char *five =
        "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [0, 1]}\n"
        "{\"timestamp\": 1, \"input_length\": -600, \"output_length\": 5, \"hash_ids\": [0, 1]}\n"
        "{\"timestamp\": 2, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [0, 2]}\n"
        "garbage\n"
        "{\"timestamp\": 4, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [0, 1]}\n";
    struct trace_read_opts o = opts_fmt(M, true);
    char err[ERR_LEN];
    struct trace *t = trace_read_mem(five, strlen(five), "five", &o, err);
    CHECKF(t && t->n_calls == 3 && t->skipped_records == 2, "mooncake skip-bad 3 kept, 2 skipped");
    if (t) {
        /* The shared prefix [0] stored once; call 2 reuses call 0's chain. */
        CHECK(t->calls[1].n_shared == 1 && t->calls[1].base == 0, "mooncake prefix base");
        CHECK(t->calls[2].n_shared == 2 && t->stored_block_ids == 3, "mooncake whole-chain base");
        trace_destroy(t);
    }
}

static void test_csv(void)
{
    EXPECT("azure bad number", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                               "2023-11-16 18:17:03.9799600,4808,10\n"
                               "2023-11-16 18:17:04.0319600,31x0,8\n",
           TRACE_FMT_AUTO, "bad.trace:3:29:", "ContextTokens");
    EXPECT("azure bad date", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                             "2023-13-16 18:17:03,4808,10\n",
           TRACE_FMT_AUTO, "bad.trace:2:1:", "TIMESTAMP");
    EXPECT("azure missing column", "TIMESTAMP,ContextTokens\n2023-11-16 18:17:03,4808\n",
           TRACE_FMT_AZURE, "bad.trace:1:1:", "GeneratedTokens");
    EXPECT("azure short row", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03,4808\n",
           TRACE_FMT_AUTO, "bad.trace:2:", "fields");
    EXPECT("azure negative", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03,-4,1\n",
           TRACE_FMT_AUTO, "bad.trace:2:", "ContextTokens");
    EXPECT("azure header only", "TIMESTAMP,ContextTokens,GeneratedTokens\n", TRACE_FMT_AUTO, "no rows");
    EXPECT("burstgpt bad total",
           "Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
           "1.0,a,1.0,ChatGPT,10,5,16,Conversation log\n",
           TRACE_FMT_AUTO, "bad.trace:2:", "Total tokens");
    EXPECT("burstgpt bad quote",
           "Timestamp,Model,Request tokens,Response tokens\n1.0,\"Chat,10,5\n", TRACE_FMT_AUTO,
           "bad.trace:2:", "quoting");
    EXPECT("burstgpt negative time", "Timestamp,Model,Request tokens,Response tokens\n-1.0,x,10,5\n",
           TRACE_FMT_AUTO, "bad.trace:2:1:", "Timestamp");
}

static void test_native(void)
{
    const enum trace_format N = TRACE_FMT_NATIVE;
#define NH "{\"format\":\"agentreplay-trace\",\"version\":1,\"scopes\":1}\n"
#define NS "{\"session\":0,\"scope\":0,\"block_size\":64}\n"
    EXPECT("native future version", "{\"format\":\"agentreplay-trace\",\"version\":9,\"scopes\":1}\n", N,
           "bad.trace:1:", "version 9");
    EXPECT("native call first", NH "{\"t\":0,\"in\":1,\"out\":1,\"ids\":[]}\n", N, "bad.trace:2:",
           "before any session");
    EXPECT("native base ahead", NH NS "{\"t\":0,\"in\":640,\"out\":1,\"base\":3,\"shared\":1,\"ids\":[]}\n", N,
           "bad.trace:3:", "base");
    EXPECT("native shared too long",
           NH NS "{\"t\":0,\"in\":640,\"out\":1,\"ids\":[1]}\n{\"t\":0,\"in\":640,\"out\":1,\"base\":0,\"shared\":4,\"ids\":[]}\n",
           N, "bad.trace:4:", "shared 4");
    EXPECT("native scope out of range", NH "{\"session\":0,\"scope\":5,\"block_size\":64}\n", N, "bad.trace:2:",
           "scope");
    EXPECT("native session numbering", NH "{\"session\":3,\"scope\":0,\"block_size\":64}\n", N, "bad.trace:2:",
           "session");
    EXPECT("native bad parent", NH NS "{\"session\":1,\"parent\":1,\"scope\":0,\"block_size\":64}\n", N,
           "bad.trace:3:", "parent");
    EXPECT("native too many ids", NH NS "{\"t\":0,\"in\":64,\"out\":1,\"ids\":[1,2]}\n", N, "bad.trace:3:",
           "more than 1 block ids for 64 tokens");
    EXPECT("native empty", "", N, "empty");
    /* Required numbers may not be null (null would read as "not
     * recorded", -1, and a call with -1 tokens; found by fuzz_trace_native). */
    EXPECT("native null in", NH NS "{\"t\":0,\"in\":null,\"out\":1,\"ids\":[]}\n", N, "bad.trace:3:",
           "in");
    EXPECT("native null out", NH NS "{\"t\":0,\"in\":1,\"out\":null,\"ids\":[]}\n", N, "bad.trace:3:",
           "out");
    EXPECT("native null t", NH NS "{\"t\":null,\"in\":1,\"out\":1,\"ids\":[]}\n", N, "bad.trace:3:",
           "t");
    EXPECT("native run too long", NH NS "{\"t\":0,\"in\":640,\"out\":1,\"ids\":[[5,11]]}\n", N,
           "bad.trace:3:", "more than 10 block ids");
    EXPECT("native run of 0", NH NS "{\"t\":0,\"in\":640,\"out\":1,\"ids\":[[5,0]]}\n", N,
           "bad.trace:3:", "ids[0]");
    EXPECT("native bad run", NH NS "{\"t\":0,\"in\":640,\"out\":1,\"ids\":[1,[5]]}\n", N,
           "bad.trace:3:", "ids[1]");
    EXPECT("native huge run", NH NS "{\"t\":0,\"in\":640,\"out\":1,\"ids\":[[5,9223372036854775807]]}\n",
           N, "bad.trace:3:", "more than");
    {
        const char *runs = NH NS "{\"t\":0,\"in\":640,\"out\":1,\"ids\":[7,[100,3],2,[50,4]]}\n";
        char e2[ERR_LEN];
        struct trace *r = trace_read_mem(runs, strlen(runs), "runs", NULL, e2);
        uint64_t got[10] = {0}, want[] = {7, 100, 101, 102, 2, 50, 51, 52, 53};
        CHECKF(r && r->calls[0].n_blocks == 9, "native runs expand: %s", r ? "" : e2);
        if (r) {
            trace_call_blocks(r, &r->calls[0], got, 10);
            CHECK(!memcmp(got, want, sizeof want), "native runs expand to consecutive ids");
            trace_destroy(r);
        }
    }
    /* Sessions without calls are legal; stats must cope (a fuzz finding). */
    const char *nocalls = NH NS "{\"session\":1,\"scope\":0,\"block_size\":64}\n"
                          "{\"session\":2,\"parent\":1,\"scope\":0,\"block_size\":64}\n";
    char err[ERR_LEN];
    struct trace *t = trace_read_mem(nocalls, strlen(nocalls), "nocalls", NULL, err);
    CHECKF(t && t->n_roots == 2 && t->n_calls == 0, "sessions without calls read: %s", t ? "" : err);
    if (t) {
        struct trace_stats s;
        trace_stats_compute(t, &s);
        CHECK(s.sessions == 2 && s.subagents == 1 && s.calls == 0, "stats of call-less sessions");
        trace_destroy(t);
    }
}

static void test_garbage(void)
{
    /* Binary garbage, auto and forced; nothing may crash. */
    struct rng r;
    rng_init(&r, 42, RNG_SYNTH);
    size_t n = 1 << 16;
    char *g = malloc(n);
    for (size_t i = 0; i < n; i++)
        g[i] = (char)rng_next(&r);
    for (int f = TRACE_FMT_AUTO; f <= TRACE_FMT_NATIVE; f++) {
        char err[ERR_LEN] = "";
        struct trace_read_opts o = opts_fmt((enum trace_format)f, false);
        struct trace *t = trace_read_mem(g, n, "garbage.bin", &o, err);
        CHECKF(t == NULL && strstr(err, "garbage.bin"), "garbage rejected as %s: %s",
               trace_format_name((enum trace_format)f), err);
        trace_destroy(t);
        o.skip_bad = true;
        t = trace_read_mem(g, n, "garbage.bin", &o, err);
        CHECKF(t == NULL || t->n_calls == 0 || f == TRACE_FMT_AUTO,
               "garbage under skip-bad yields no calls (%s)", trace_format_name((enum trace_format)f));
        trace_destroy(t);
    }
    free(g);
    /* Huge lines: 8 MiB of one JSON line, and deep nesting. */
    size_t big = 8u << 20;
    char *h = malloc(big + 64);
    memset(h, ' ', big);
    memcpy(h, "{\"timestamp\": 0, \"input_length\": 1, \"x\": \"", 43);
    memset(h + 43, 'a', big - 43);
    strcpy(h + big - 2, "\n");
    char err[ERR_LEN] = "";
    struct trace_read_opts o = opts_fmt(TRACE_FMT_MOONCAKE, false);
    struct trace *t = trace_read_mem(h, strlen(h), "huge.jsonl", &o, err);
    CHECKF(t == NULL && strstr(err, "huge.jsonl:1:"), "huge line rejected: %s", err);
    trace_destroy(t);
    for (size_t i = 0; i < 200000; i++)
        h[i] = '[';
    h[200000] = 0;
    o.format = TRACE_FMT_AGENTX;
    t = trace_read_mem(h, 200000, "deep.json", &o, err);
    CHECKF(t == NULL && strstr(err, "deep.json"), "deep nesting rejected: %s", err);
    trace_destroy(t);
    free(h);
    /* Unknown content under auto detection. */
    EXPECT("unknown format", "hello world\n", TRACE_FMT_AUTO, "bad.trace:1:1:", "unknown trace format");
}

/* Every prefix of a real file: never a crash; an error names the file. */
static void test_prefixes(const char *rel, size_t max, size_t step)
{
    const char *p = test_shared(rel);
    if (!p) {
        SKIP("shared traces absent");
        return;
    }
    size_t len;
    char err[ERR_LEN];
    char *d = file_read(p, &len, err);
    CHECK(d != NULL, "read sample");
    if (!d)
        return;
    if (len > max)
        len = max;
    int errs = 0, named = 0;
    for (size_t k = 0; k < len; k += step) {
        struct trace *t = trace_read_mem(d, k, "prefix", NULL, err);
        if (!t) {
            errs++;
            named += strstr(err, "prefix") != NULL;
        }
        trace_destroy(t);
    }
    CHECKF(errs > 0 && named == errs, "%s prefixes: %d errors, all named", rel, errs);
    free(d);
}

/* A folder with a broken file: an error naming it; skipped under
 * skip-bad. */
static void test_folder(void)
{
    char dir[] = "/tmp/test_trace_dirXXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp");
        return;
    }
    char a[256], b[256];
    snprintf(a, sizeof a, "%s/a.json", dir);
    snprintf(b, sizeof b, "%s/b.json", dir);
    FILE *f = fopen(a, "w");
    fputs(AX_HEAD AX_CALL "]}", f);
    fclose(f);
    f = fopen(b, "w");
    fputs(AX_HEAD AX_CALL, f); /* truncated */
    fclose(f);
    char err[ERR_LEN];
    struct trace *t = trace_read(dir, NULL, err);
    CHECKF(t == NULL && strstr(err, "b.json:1:"), "folder: broken file named: %s", err);
    trace_destroy(t);
    struct trace_read_opts o = opts_fmt(TRACE_FMT_AUTO, true);
    t = trace_read(dir, &o, err);
    CHECKF(t && t->n_roots == 1 && t->skipped_records == 1, "folder skip-bad: one file skipped");
    trace_destroy(t);
    unlink(a);
    unlink(b);
    rmdir(dir);
}

int main(void)
{
    test_folder();
    test_agentx();
    test_mooncake();
    test_csv();
    test_native();
    test_garbage();
    test_prefixes("traces/agentic-cc/trace_0026.json", 4000, 37);
    test_prefixes("traces/mooncake/conversation_trace.jsonl", 3000, 29);
    test_prefixes("traces/azure/AzureLLMInferenceTrace_code.csv", 2000, 13);
    return test_report();
}
