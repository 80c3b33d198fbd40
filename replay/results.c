/* results.c: run.json, summary.md, sweep.csv and the printed table
 * (results.h). Everything is written with Jansson in a fixed key order and
 * contains no wall-clock value, so the same run gives the same bytes. */
#include "replay/results.h"

#include <errno.h>
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "traces/base/err.h"
#include "traces/base/file.h"

static json_t *str_or_null(const char *s) { return s ? json_string(s) : json_null(); }

void *results_run_json(const struct run_info *ri, const struct metrics_summary *s,
                       const struct replay_outcome *o, void *repeats)
{
    json_t *r = json_object();
    json_object_set_new(r, "schema_version", json_integer(RESULTS_SCHEMA_VERSION));
    json_object_set_new(r, "tool", json_string("agentreplay"));
    json_object_set_new(r, "version", json_string(AGENTREPLAY_VERSION));
    json_object_set_new(r, "kind", json_string(ri->kind ? ri->kind : "sim"));
    json_object_set_new(r, "interrupted", json_boolean(o->interrupted));
    json_object_set_new(r, "partial", json_boolean(o->partial));
    json_object_set_new(r, "agentx_valid", json_boolean(o->agentx_valid));
    json_t *why = json_array();
    for (int i = 0; i < o->n_reasons; i++)
        json_array_append_new(why, json_string(o->reasons[i]));
    json_object_set_new(r, "invalid_reasons", why);
    json_object_set_new(r, "command", str_or_null(ri->command));
    json_object_set_new(r, "label", str_or_null(ri->label));
    json_object_set_new(r, "gpus", json_integer(ri->gpus));
    json_object_set_new(r, "tp", json_integer(ri->tp));
    json_object_set_new(r, "replicas", json_integer(ri->replicas));
    json_object_set_new(r, "backend", str_or_null(ri->backend));
    json_object_set_new(r, "model", str_or_null(ri->model));
    json_object_set_new(r, "gpu", str_or_null(ri->gpu));
    json_object_set_new(r, "seed", json_integer((json_int_t)ri->seed));
    json_object_set_new(r, "concurrency", json_integer(ri->concurrency));
    json_object_set_new(r, "duration_s", json_real(ri->duration_s));
    if (ri->spec)
        json_object_set_new(r, "spec",
                            json_pack("{s:s, s:i, s:s}", "method",
                                      ri->spec_method ? ri->spec_method : "dspark", "draft",
                                      ri->spec_draft, "acceptance",
                                      ri->spec_acceptance ? ri->spec_acceptance : ""));
    else
        json_object_set_new(r, "spec", json_null());
    char hex[32];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)ri->trace_digest);
    json_t *tr = json_object();
    json_object_set_new(tr, "path", str_or_null(ri->trace_path));
    json_object_set_new(tr, "format", str_or_null(ri->trace_format));
    json_object_set_new(tr, "digest", json_string(hex));
    json_object_set_new(tr, "sessions", json_integer((json_int_t)ri->trace_sessions));
    json_object_set_new(tr, "calls", json_integer((json_int_t)ri->trace_calls));
    json_object_set_new(r, "trace", tr);
    json_object_set_new(r, "engine", ri->engine_json ? (json_t *)ri->engine_json : json_null());
    json_object_set_new(r, "config", ri->config_json ? (json_t *)ri->config_json : json_object());
    json_object_set_new(r, "metrics", metrics_summary_json(s));
    json_t *run = json_object();
    json_object_set_new(run, "calls_sent", json_integer((json_int_t)o->calls_sent));
    json_object_set_new(run, "trees_started", json_integer((json_int_t)o->trees_started));
    json_object_set_new(run, "lanes_recycled", json_integer((json_int_t)o->lanes_recycled));
    json_object_set_new(run, "end_s", json_real((double)o->end_ns / 1e9));
    if (o->agentx) {
        json_t *ax = json_object();
        json_object_set_new(ax, "warmup_calls", json_integer((json_int_t)o->warmup_calls));
        json_object_set_new(ax, "measure_start_s", json_real((double)o->measure_start_ns / 1e9));
        json_object_set_new(ax, "idle_cap_jumps", json_integer((json_int_t)o->idle_jumps));
        json_object_set_new(ax, "idle_cap_skipped_s", json_real((double)o->idle_skipped_ns / 1e9));
        json_object_set_new(ax, "streams_overflowed", json_integer((json_int_t)o->streams_overflowed));
        json_object_set_new(ax, "requests_limit_hit", json_boolean(o->requests_limit_hit));
        json_object_set_new(run, "agentx", ax);
    }
    if (o->aborted[0])
        json_object_set_new(run, "aborted", json_string(o->aborted));
    json_object_set_new(r, "run", run);
    if (repeats)
        json_object_set_new(r, "repeats", (json_t *)repeats);
    return r;
}

int results_write_json(const char *dir, const char *name, const void *json, char *err)
{
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (json_dump_file((const json_t *)json, tmp, JSON_INDENT(2) | JSON_PRESERVE_ORDER))
        return err_set(err, "%s: cannot write", tmp);
    if (rename(tmp, path))
        return err_set(err, "%s: %s", path, strerror(errno));
    return 0;
}

int results_prepare_dir(const char *dir, bool force, char *err)
{
    struct stat st;
    if (stat(dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode))
            return err_set(err, "%s exists and is not a folder", dir);
        DIR *d = opendir(dir);
        bool empty = true;
        struct dirent *e;
        while (d && (e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
                empty = false;
        if (d)
            closedir(d);
        if (!empty && !force)
            return err_set(err, "%s exists; not overwriting it without --force", dir);
        return 0;
    }
    char e2[ERR_LEN];
    if (file_mkdir_p(dir, e2))
        return err_set(err, "cannot create %s: %s", dir, e2);
    return 0;
}

void *results_read_run(const char *dir_or_file, char *err)
{
    char path[4096];
    struct stat st;
    if (stat(dir_or_file, &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(path, sizeof path, "%s/run.json", dir_or_file);
    else
        snprintf(path, sizeof path, "%s", dir_or_file);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) {
        err_set(err, "%s:%d:%d: %s", path, je.line, je.column, je.text);
        return NULL;
    }
    if (!json_is_object(j) || json_integer_value(json_object_get(j, "schema_version")) != 1) {
        json_decref(j);
        err_set(err, "%s: not a run.json of schema_version 1", path);
        return NULL;
    }
    return j;
}

static json_t *at(const void *json, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    json_t *j = (json_t *)json;
    char *save = NULL;
    for (char *k = strtok_r(buf, ".", &save); k && j; k = strtok_r(NULL, ".", &save))
        j = json_object_get(j, k);
    return j;
}

double results_num(const void *json, const char *path)
{
    json_t *j = at(json, path);
    return json_is_number(j) ? json_number_value(j) : NAN;
}

const char *results_str(const void *json, const char *path)
{
    json_t *j = at(json, path);
    return json_is_string(j) ? json_string_value(j) : NULL;
}

const char results_sweep_header[] =
    "label,gpus,tp,replicas,backend,concurrency,seed,interactivity_p50,interactivity_p75,"
    "interactivity_p90,interactivity_p95,interactivity_p99,ttft_p90_ms,tpot_p90_ms,"
    "total_tok_s_per_gpu,output_tok_s_per_gpu,prefix_hit_rate,errors,dir\n";

static void csv_num(FILE *f, double v)
{
    if (isfinite(v))
        fprintf(f, ",%.6g", v);
    else
        fputs(",", f);
}

void results_sweep_row(FILE *f, const void *run, const char *dir)
{
    const char *label = results_str(run, "label");
    fprintf(f, "\"%s\",%d,%d,%d,%s,%d,%lld", label ? label : "",
            (int)results_num(run, "gpus"), (int)results_num(run, "tp"),
            (int)results_num(run, "replicas"),
            results_str(run, "backend") ? results_str(run, "backend") : "",
            (int)results_num(run, "concurrency"), (long long)results_num(run, "seed"));
    const char *k[] = {"metrics.interactivity_tok_s.p50", "metrics.interactivity_tok_s.p75",
                       "metrics.interactivity_tok_s.p90", "metrics.interactivity_tok_s.p95",
                       "metrics.interactivity_tok_s.p99", "metrics.ttft_ms.p90",
                       "metrics.tpot_ms.p90", "metrics.throughput_tok_s_per_gpu.total",
                       "metrics.throughput_tok_s_per_gpu.output", "metrics.prefix_hit_rate"};
    for (size_t i = 0; i < ARRAY_LEN(k); i++)
        csv_num(f, results_num(run, k[i]));
    fprintf(f, ",%lld,%s\n", (long long)results_num(run, "metrics.requests.errors"), dir);
}

void results_table_header(FILE *f)
{
    fprintf(f, "%-38s %5s %4s %12s %12s %12s %13s %6s %6s\n", "configuration", "GPUs", "conc",
            "P90 tok/s/u", "P90 TTFT ms", "tok/s/GPU", "out tok/s/GPU", "hit", "valid");
}

void results_table_row(FILE *f, const void *run)
{
    const char *label = results_str(run, "label");
    json_t *v = at(run, "agentx_valid");
    fprintf(f, "%-38s %5d %4d %12.1f %12.0f %12.0f %13.1f %6.3f %6s\n", label ? label : "?",
            (int)results_num(run, "gpus"), (int)results_num(run, "concurrency"),
            results_num(run, "metrics.interactivity_tok_s.p90"), results_num(run, "metrics.ttft_ms.p90"),
            results_num(run, "metrics.throughput_tok_s_per_gpu.total"),
            results_num(run, "metrics.throughput_tok_s_per_gpu.output"),
            results_num(run, "metrics.prefix_hit_rate"), json_is_true(v) ? "yes" : "no");
}

int results_write_summary(const char *dir, const struct run_info *ri,
                          const struct metrics_summary *s, const struct replay_outcome *o,
                          char *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/summary.md", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return err_set(err, "%s: %s", path, strerror(errno));
    fprintf(f, "# %s\n\n", ri->label ? ri->label : "run");
    fprintf(f, "%d x %s, TP%d x %d replicas, backend %s, model %s; concurrency %d, seed %llu, "
               "duration %.0f s.\n\n",
            ri->gpus, ri->gpu ? ri->gpu : "?", ri->tp, ri->replicas, ri->backend ? ri->backend : "?",
            ri->model ? ri->model : "?", ri->concurrency, (unsigned long long)ri->seed, ri->duration_s);
    fprintf(f, "AgentX-valid: %s", o->agentx_valid ? "yes" : "no");
    for (int i = 0; i < o->n_reasons; i++)
        fprintf(f, "%s%s", i ? "; " : " (", o->reasons[i]);
    fprintf(f, "%s\n\n", o->n_reasons ? ")" : "");
    if (o->interrupted)
        fprintf(f, "**Interrupted: partial results.**\n\n");
    fprintf(f, "| metric | mean | P50 | P75 | P90 | P95 | P99 |\n|---|---|---|---|---|---|---|\n");
    struct {
        const char *name;
        const struct metrics_stat *st;
    } rows[] = {
        {"interactivity (tok/s/user) = 1/TPOT stat", &s->interactivity},
        {"TTFT (ms)", &s->ttft_ms},
        {"TPOT (ms)", &s->tpot_ms},
        {"ITL pooled (ms)", &s->itl_ms},
        {"E2EL (ms)", &s->e2el_ms},
        {"scheduled latency (ms)", &s->sched_ms},
        {"per-session interactivity (tok/s/user)", &s->session_interactivity},
    };
    for (size_t i = 0; i < ARRAY_LEN(rows); i++)
        fprintf(f, "| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", rows[i].name, rows[i].st->mean,
                rows[i].st->p50, rows[i].st->p75, rows[i].st->p90, rows[i].st->p95, rows[i].st->p99);
    fprintf(f, "\n| throughput | value |\n|---|---|\n");
    fprintf(f, "| total tok/s per GPU (whole prompts + output) | %.1f |\n", s->total_tok_s_per_gpu);
    fprintf(f, "| output tok/s per GPU | %.2f |\n", s->output_tok_s_per_gpu);
    if (s->has_slo)
        fprintf(f, "| goodput (req/s meeting the SLO) | %.4f |\n", s->goodput_req_s);
    fprintf(f, "| prefix-cache hit rate (achieved / theoretical) | %.4f / %.4f |\n",
            s->prefix_hit_rate, s->prefix_hit_rate_theoretical);
    fprintf(f, "| requests: completed / errors / warm-up / cancelled / overflow | %llu / %llu / "
               "%llu / %llu / %llu |\n",
            (unsigned long long)s->completed, (unsigned long long)s->errors,
            (unsigned long long)s->warmup, (unsigned long long)s->cancelled,
            (unsigned long long)s->overflow);
    fprintf(f, "| preemptions / decode-path fallback steps | %lld / %lld |\n", (long long)s->preemptions,
            (long long)s->fallback_steps);
    fprintf(f, "| measured duration (s) | %.1f |\n", s->measured_duration_s);
    if (ri->command)
        fprintf(f, "\nCommand: `%s`\n", ri->command);
    if (fclose(f))
        return err_set(err, "%s: %s", path, strerror(errno));
    return 0;
}

