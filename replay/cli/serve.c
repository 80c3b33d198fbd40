/* serve.c: `agentreplay serve`: the flags, start and signals of the
 * OpenAI-compatible server in front of the simulated engine
 * (engine/server/openai.h), in real time. SIGINT or SIGTERM stops it
 * (exit 0). `--served-model-name A B C` takes vLLM's form (one flag, the
 * names after it) as well as repeated flags. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/server/openai.h"
#include "replay/cli/cli.h"
#include "replay/results.h"
#include "replay/run.h"
#include "traces/base/err.h"
#include "traces/base/mem.h"
#include "traces/base/parse.h"

struct serve_opts {
    struct openai_config cfg;
    char host[256];
    int port;
    const char *port_file;
};

static void serve_init(void *opts)
{
    struct serve_opts *o = opts;
    openai_config_defaults(&o->cfg);
    snprintf(o->host, sizeof o->host, "127.0.0.1");
    o->port = 8000;
    o->cfg.version = AGENTREPLAY_VERSION;
}

static int parse_listen(const char *name, const char *v, void *group, char *err)
{
    struct serve_opts *o = group;
    const char *colon = strrchr(v, ':');
    if (!colon || (size_t)(colon - v) >= sizeof o->host || colon == v)
        return err_set(err, "%s '%s': expected HOST:PORT (an IPv6 host in brackets: [::1]:8000)",
                       name, v);
    if ((v[0] == '[') != (colon[-1] == ']') || (v[0] != '[' && memchr(v, ':', (size_t)(colon - v))))
        return err_set(err, "%s '%s': an IPv6 host goes in brackets: [::1]:8000", name, v);
    int64_t p;
    if (parse_i64(colon + 1, &p, NULL) || p < 0 || p > 65535)
        return err_set(err, "%s '%s': the port must be 0 to 65535", name, v);
    memcpy(o->host, v, (size_t)(colon - v));
    o->host[colon - v] = 0;
    o->port = (int)p;
    return 0;
}

static int parse_name(const char *name, const char *v, void *group, char *err)
{
    struct serve_opts *o = group;
    if (o->cfg.n_names >= OPENAI_NAMES_MAX)
        return err_set(err, "%s: at most %d names", name, OPENAI_NAMES_MAX);
    if (openai_name_check(v, err)) {
        char m[ERR_LEN];
        snprintf(m, sizeof m, "%s", err);
        return err_set(err, "%s '%.64s': %s", name, v, m);
    }
    o->cfg.names[o->cfg.n_names++] = v;
    return 0;
}

#define O struct serve_opts
static const struct flag serve_flags[] = {
    {"--listen", 0, FLAG_CUSTOM, FLAG_AT(O, port), "HOST:PORT", "where to listen (port 0: any free port)",
     .def = "127.0.0.1:8000", .parse = parse_listen, .example = "127.0.0.1:0"},
    {"--port-file", 0, FLAG_STR, FLAG_AT(O, port_file), "PATH",
     "write the port there once listening", .def = NULL},
    {"--served-model-name", 0, FLAG_CUSTOM, FLAG_AT(O, cfg.names), "NAME [ALIAS...]",
     "names served (requests naming another get 404);\nthe first is reported",
     .def = "the engine's model, or fake", .parse = parse_name, .example = "kimi"},
    {"--time-scale", 0, FLAG_DOUBLE, FLAG_AT(O, cfg.time_scale), "X",
     "engine clock runs X times faster than real time", .fmin = 1e-3, .fmax = 1e6},
    {"--api-key", 0, FLAG_STR, FLAG_AT(O, cfg.api_key), "K",
     "require 'Authorization: Bearer K' on /v1 routes\n(required when not listening on loopback;\nat most 1024 bytes)",
     .def = NULL, .max_len = OPENAI_KEY_MAX},
    {"--default-max-tokens", 0, FLAG_INT64, FLAG_AT(O, cfg.default_max_tokens), NULL,
     "output length of a request that gives none\n(0: to the context limit, as vLLM)", .min = 0,
     .max = INT64_MAX},
    {"--fake", 0, FLAG_BOOL, FLAG_AT(O, cfg.fake), NULL,
     "a fixed-rate model instead of the engine", .value = true},
    {"--fake-ttft-ms", 0, FLAG_DOUBLE, FLAG_AT(O, cfg.fake_ttft_ms), "MS",
     "--fake: time to the first token", .fmin = 0, .fmax = 1e7},
    {"--fake-tpot-ms", 0, FLAG_DOUBLE, FLAG_AT(O, cfg.fake_tpot_ms), "MS",
     "--fake: time per further token", .fmin = 0, .fmax = 1e7},
    {"--fake-prefill-us-per-token", 0, FLAG_DOUBLE, FLAG_AT(O, cfg.fake_prefill_us_per_token), "US",
     "--fake: prefill time per uncached prompt token", .fmin = 0, .fmax = 1e7},
    {"--max-body-mb", 0, FLAG_DOUBLE, FLAG_AT(O, cfg.max_body_mb), "N", "request size limit",
     .fmin = 0.001, .fmax = 4096},
    {"--max-conns", 0, FLAG_DOUBLE, FLAG_AT(O, cfg.max_conns), "N",
     "connection limit (at the limit the quietest idle\nconnection makes room)", .fmin = 1, .fmax = 1e6},
    {"--max-conn-requests", 0, FLAG_INT64, FLAG_AT(O, cfg.max_conn_requests), NULL,
     "requests per connection", .min = 1, .max = INT64_MAX},
    {"--header-timeout", 0, FLAG_DOUBLE, FLAG_AT(O, cfg.header_timeout_s), "S",
     "a request's headers must arrive within S seconds", .fmin = 0.001, .fmax = 86400},
    {"--idle-timeout", 0, FLAG_DOUBLE, FLAG_AT(O, cfg.idle_timeout_s), "S",
     "close connections quiet for S seconds", .fmin = 0.001, .fmax = 86400},
    {"--fault-error-rate", 0, FLAG_DOUBLE, FLAG_AT(O, cfg.fault_error_rate), "P",
     "answer 500 to a fraction P of completions", .fmin = 0, .fmax = 1},
    {"--fault-disconnect-rate", 0, FLAG_DOUBLE, FLAG_AT(O, cfg.fault_disconnect_rate), "P",
     "cut a fraction P of streams mid-way", .fmin = 0, .fmax = 1},
    {"--fault-stall-ms", 0, FLAG_DOUBLE, FLAG_AT(O, cfg.fault_stall_ms), "MS",
     "hold requests MS before serving them", .fmin = 0, .fmax = 1e7},
    {"--fault-stall-rate", 0, FLAG_DOUBLE, FLAG_AT(O, cfg.fault_stall_rate), "P",
     "fraction held", .def = "1 with --fault-stall-ms", .fmin = 0, .fmax = 1},
    {"--fault-seed", 0, FLAG_U64, FLAG_AT(O, cfg.fault_seed), "S", "seed of the fault draws",
     .def = NULL},
    FLAG_END,
};

const struct flag_spec serve_spec = {
    .usage = "agentreplay serve [--listen HOST:PORT] [flags]",
    .about = "Serves the simulated engine over an OpenAI-compatible HTTP API in real time.",
    .size = sizeof(O),
    .init = serve_init,
    .groups = {{"serve", serve_flags, 0}, {"engine", engine_flags, offsetof(O, cfg.engine)}},
    .notes = "Routes and answers as vLLM's server (engine/server/SERVER.md); every\n"
             "limit in engine/server/openai.h. Requests are checked against the\n"
             "context: --max-model-len, else the model's (--fake too).\n"
             "The engine runs stepwise and each chunk is streamed when produced;\n"
             "chunks a stream produces in the same loop iteration leave in one\n"
             "write (the fast mode for load tests: --fake --fake-ttft-ms 0\n"
             "--fake-tpot-ms 0, or a large --time-scale).",
};
#undef O

static void sig_cb(struct loop *l, struct loop_io *io, int revents)
{
    char b[16];
    ssize_t n = read(io->fd, b, sizeof b);
    (void)n;
    loop_stop(l);
}

/* Writes the port to path atomically (temp file + rename); 0, or -1 with
 * err. */
static int write_port(const char *path, int port, char *err)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return err_set(err, "--port-file: the path is too long");
    FILE *pf = fopen(tmp, "w");
    if (!pf)
        return err_set(err, "--port-file %s: %s", tmp, strerror(errno));
    int bad = fprintf(pf, "%d\n", port) < 0;
    bad |= fclose(pf) != 0;
    if (bad || rename(tmp, path)) {
        err_set(err, "--port-file %s: %s", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* vLLM's `--served-model-name A B C` (names after one flag) as repeated
 * flags: a new argv (malloc'ed; argv's strings borrowed). */
static char **expand_names(int argc, char **argv, int *n_out)
{
    char **v = xcalloc((size_t)argc * 2 + 1, sizeof *v);
    int n = 0;
    for (int i = 0; i < argc; i++) {
        v[n++] = argv[i];
        if (strcmp(argv[i], "--served-model-name") || i + 1 >= argc)
            continue;
        v[n++] = argv[++i];
        while (i + 1 < argc && argv[i + 1][0] != '-') {
            v[n++] = "--served-model-name";
            v[n++] = argv[++i];
        }
    }
    *n_out = n;
    return v;
}

int serve_cmd(int argc, char **argv)
{
    char err[ERR_LEN] = "";
    struct serve_opts o;
    int nargs;
    char **args = expand_names(argc, argv, &nargs);
    int rc = cli_parse("serve", &serve_spec, &o, nargs, args, NULL, NULL);
    free(args); /* the options borrow argv's strings, not the array */
    if (rc >= 0)
        return rc;
    bool loopback = httpd_host_is_loopback(o.host);
    if (!loopback && (!o.cfg.api_key || !o.cfg.api_key[0])) {
        snprintf(err, sizeof err, "listening on %s (not loopback) needs --api-key", o.host);
        return cli_bad("serve", err);
    }
    struct loop *loop = loop_real_create();
    if (!loop) {
        fprintf(stderr, "agentreplay serve: cannot create the event loop\n");
        return EXIT_FAIL;
    }
    struct openai_server *s = openai_create(&o.cfg, loop, err);
    if (!s) {
        loop_destroy(loop);
        return cli_bad("serve", err);
    }
    if (openai_listen(s, o.host, o.port, err)) {
        fprintf(stderr, "agentreplay serve: %s\n", err);
        openai_destroy(s);
        loop_destroy(loop);
        return EXIT_FAIL;
    }
    run_signals_install();
    struct loop_io sig_io = {.fd = run_signals_fd(), .events = LOOP_READ, .cb = sig_cb};
    bool watching = sig_io.fd >= 0 && loop_io_start(loop, &sig_io) == 0;
    signal(SIGPIPE, SIG_IGN);
    fprintf(stderr, "serve: listening on http://%s:%d (model %s, %s, context %lld, time scale %g)\n",
            o.host, openai_port(s), openai_model(s), o.cfg.fake ? "fake backend" : "engine",
            (long long)openai_max_model_len(s), o.cfg.time_scale);
    if (o.port_file && write_port(o.port_file, openai_port(s), err)) {
        fprintf(stderr, "agentreplay serve: %s\n", err);
        if (watching)
            loop_io_stop(loop, &sig_io);
        openai_destroy(s);
        loop_destroy(loop);
        return EXIT_FAIL;
    }
    loop_run(loop);
    struct openai_counts n;
    openai_get_counts(s, &n);
    fprintf(stderr, "serve: stopped after %lld requests (%lld completions ok, %lld failed)\n",
            (long long)n.http_requests, (long long)n.completions_ok, (long long)n.completions_failed);
    if (watching)
        loop_io_stop(loop, &sig_io);
    openai_destroy(s);
    loop_destroy(loop);
    return EXIT_OK;
}
