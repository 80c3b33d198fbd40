/* replay_config.c: the replayer's configuration (replay.h): AgentX
 * defaults, the replay flags every command shares, and run.json's
 * "config.replay". */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay/replay.h"
#include "traces/base/err.h"
#include "traces/base/parse.h"
#include "traces/base/time_ns.h"

void replay_config_defaults(struct replay_config *c)
{
    memset(c, 0, sizeof *c);
    c->mode = REPLAY_MODE_SESSIONS;
    c->concurrency = 8;
    c->duration_ns = 1800 * NS_PER_S;
    c->grace_ns = 300 * NS_PER_S;
    c->idle_cap_ns = 10 * NS_PER_S;
    c->warm_start = true;
    c->warmup_call = true;
    c->skip_early_subagents = true;
    c->recycle = true;
    c->cache_isolation = true;
    c->subagents = true;
    c->honour_join = true;
    c->think_end_to_start = true;
    c->measure_all_types = true;
    c->ignore_eos = true;
    c->max_model_len = 0;
    c->overflow_limit = 0.01;
    c->min_measured_ns = 900 * NS_PER_S;
    c->time_scale = 1.0;
    c->rate = 0;
    c->gamma_cv = 1.0;
    c->seed = 1;
    c->tick_ns = NS_PER_S;
    c->chunk_times = false;
}

const char replay_flags_help[] =
    "replay (AgentX defaults):\n"
    "  --concurrency N        live session trees (closed: lanes) [8]\n"
    "  --duration S           no call starts after S (1800, 90s, 30m) [1800]\n"
    "  --grace S              in-flight calls finish up to S after, then are\n"
    "                         cancelled; 'none' waits for all [300]\n"
    "  --seed N               [1]\n"
    "  --idle-cap S           cap on think times and subagent gaps; 'none' [10]\n"
    "  --mode sessions|closed|timestamp   [sessions]\n"
    "  --arrival poisson:RATE | gamma:RATE:CV   open-loop calls per second\n"
    "  --time-scale X         timestamp mode: recorded times x X [1]\n"
    "  --max-model-len N      calls over it are not sent, counted as overflow\n"
    "  --overflow-limit F     overflow fraction that invalidates a run [0.01]\n"
    "  --min-duration S       measured traffic a valid run needs [900]\n"
    "  --no-warm-start        lanes start at their traces' first call\n"
    "  --no-warmup-call       do not send the call before the start point\n"
    "  --keep-early-subagents do not skip subagents forked before the start\n"
    "  --no-recycle           a lane whose trace ends stays idle\n"
    "  --no-cache-isolation   instances of the same trace share cache\n"
    "  --no-subagents         replay root sessions only\n"
    "  --no-join              never wait for subagents\n"
    "  --join-subagents       parents wait for every subagent (the public\n"
    "                         traces' subagents end before the parent's\n"
    "                         next call; traces/FORMAT.md)\n"
    "  --think start-to-start recorded start-to-start gaps instead\n"
    "  --measure normal       measure only calls of type n\n"
    "  --honour-eos           do not ask to ignore end-of-sequence\n"
    "  --chunk-times          write chunk times into requests.jsonl\n";

const char *replay_mode_name(enum replay_mode m)
{
    switch (m) {
    case REPLAY_MODE_SESSIONS: return "sessions";
    case REPLAY_MODE_TIMESTAMP: return "timestamp";
    case REPLAY_MODE_POISSON: return "poisson";
    case REPLAY_MODE_GAMMA: return "gamma";
    case REPLAY_MODE_CLOSED: return "closed";
    }
    return "?";
}

static int parse_int(const char *s, int64_t lo, int64_t hi, int64_t *v)
{
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (end == s || *end || errno || x < lo || x > hi)
        return -1;
    *v = x;
    return 0;
}

int replay_config_flag(struct replay_config *c, int argc, char **argv, int *i, char *err)
{
    const char *f = argv[*i];
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    int64_t n;
    double d;
    enum replay_mode mode_before = c->mode;
#define NEED_VALUE()                                                        \
    do {                                                                    \
        if (!v)                                                             \
            return err_set(err, "%s needs a value", f);                     \
        (*i)++;                                                             \
    } while (0)
    if (!strcmp(f, "--concurrency")) {
        NEED_VALUE();
        if (parse_int(v, 1, 1000000, &n))
            return err_set(err, "bad --concurrency '%s' (want an integer >= 1)", v);
        c->concurrency = (int)n;
        c->concurrency_set = true;
    } else if (!strcmp(f, "--duration")) {
        NEED_VALUE();
        if (parse_duration(v, &c->duration_ns, err) || c->duration_ns <= 0)
            return err_set(err, "bad --duration '%s' (want e.g. 1800, 90s, 30m; > 0)", v);
    } else if (!strcmp(f, "--grace")) {
        NEED_VALUE();
        if (!strcmp(v, "none"))
            c->grace_ns = -1;
        else if (parse_duration(v, &c->grace_ns, err))
            return -1;
    } else if (!strcmp(f, "--idle-cap")) {
        NEED_VALUE();
        if (!strcmp(v, "none"))
            c->idle_cap_ns = -1;
        else if (parse_duration(v, &c->idle_cap_ns, err))
            return -1;
    } else if (!strcmp(f, "--min-duration")) {
        NEED_VALUE();
        if (parse_duration(v, &c->min_measured_ns, err))
            return -1;
    } else if (!strcmp(f, "--seed")) {
        NEED_VALUE();
        if (parse_int(v, 0, INT64_MAX, &n))
            return err_set(err, "bad --seed '%s' (want an integer >= 0)", v);
        c->seed = (uint64_t)n;
    } else if (!strcmp(f, "--mode")) {
        NEED_VALUE();
        if (!strcmp(v, "sessions"))
            c->mode = REPLAY_MODE_SESSIONS;
        else if (!strcmp(v, "closed"))
            c->mode = REPLAY_MODE_CLOSED;
        else if (!strcmp(v, "timestamp"))
            c->mode = REPLAY_MODE_TIMESTAMP;
        else
            return err_set(err, "bad --mode '%s' (sessions, closed, timestamp)", v);
    } else if (!strcmp(f, "--arrival")) {
        NEED_VALUE();
        char buf[128];
        snprintf(buf, sizeof buf, "%s", v);
        char *p1 = strchr(buf, ':');
        if (!p1)
            return err_set(err, "bad --arrival '%s' (poisson:RATE or gamma:RATE:CV)", v);
        *p1++ = 0;
        char *p2 = strchr(p1, ':');
        if (p2)
            *p2++ = 0;
        if (parse_double(p1, &d, NULL) || !(d > 0))
            return err_set(err, "bad --arrival rate '%s' (calls per second > 0)", p1);
        c->rate = d;
        if (!strcmp(buf, "poisson") && !p2) {
            c->mode = REPLAY_MODE_POISSON;
        } else if (!strcmp(buf, "gamma") && p2) {
            if (parse_double(p2, &d, NULL) || !(d > 0))
                return err_set(err, "bad --arrival gamma CV '%s' (> 0)", p2);
            c->gamma_cv = d;
            c->mode = REPLAY_MODE_GAMMA;
        } else {
            return err_set(err, "bad --arrival '%s' (poisson:RATE or gamma:RATE:CV)", v);
        }
    } else if (!strcmp(f, "--time-scale")) {
        NEED_VALUE();
        if (parse_double(v, &d, NULL) || !(d > 0))
            return err_set(err, "bad --time-scale '%s' (> 0)", v);
        c->time_scale = d;
    } else if (!strcmp(f, "--max-model-len")) {
        NEED_VALUE();
        if (parse_int(v, 0, INT64_MAX, &n))
            return err_set(err, "bad --max-model-len '%s'", v);
        c->max_model_len = n;
    } else if (!strcmp(f, "--overflow-limit")) {
        NEED_VALUE();
        if (parse_double(v, &d, NULL) || d < 0 || d > 1)
            return err_set(err, "bad --overflow-limit '%s' (0..1)", v);
        c->overflow_limit = d;
    } else if (!strcmp(f, "--think")) {
        NEED_VALUE();
        if (!strcmp(v, "end-to-start"))
            c->think_end_to_start = true;
        else if (!strcmp(v, "start-to-start"))
            c->think_end_to_start = false;
        else
            return err_set(err, "bad --think '%s' (end-to-start, start-to-start)", v);
    } else if (!strcmp(f, "--measure")) {
        NEED_VALUE();
        if (!strcmp(v, "all"))
            c->measure_all_types = true;
        else if (!strcmp(v, "normal"))
            c->measure_all_types = false;
        else
            return err_set(err, "bad --measure '%s' (all, normal)", v);
    } else if (!strcmp(f, "--no-warm-start")) {
        c->warm_start = false;
    } else if (!strcmp(f, "--no-warmup-call")) {
        c->warmup_call = false;
    } else if (!strcmp(f, "--keep-early-subagents")) {
        c->skip_early_subagents = false;
    } else if (!strcmp(f, "--no-recycle")) {
        c->recycle = false;
    } else if (!strcmp(f, "--no-cache-isolation")) {
        c->cache_isolation = false;
    } else if (!strcmp(f, "--no-subagents")) {
        c->subagents = false;
    } else if (!strcmp(f, "--no-join")) {
        c->honour_join = false;
    } else if (!strcmp(f, "--join-subagents")) {
        c->join_all = true;
    } else if (!strcmp(f, "--honour-eos")) {
        c->ignore_eos = false;
    } else if (!strcmp(f, "--chunk-times")) {
        c->chunk_times = true;
    } else {
        return 0;
    }
#undef NEED_VALUE
    if (!strcmp(f, "--mode") || !strcmp(f, "--arrival")) {
        if (c->mode_flag[0] && c->mode != mode_before)
            return err_set(err, "conflicting modes: %s and %s %s", c->mode_flag, f, v);
        snprintf(c->mode_flag, sizeof c->mode_flag, "%s", f);
    }
    (*i)++;
    return 1;
}

void *replay_config_json(const struct replay_config *c)
{
    json_t *o = json_object();
    json_object_set_new(o, "mode", json_string(replay_mode_name(c->mode)));
    json_object_set_new(o, "concurrency", json_integer(c->concurrency));
    json_object_set_new(o, "duration_s", json_real((double)c->duration_ns / 1e9));
    json_object_set_new(o, "grace_s", c->grace_ns < 0 ? json_null() : json_real((double)c->grace_ns / 1e9));
    json_object_set_new(o, "idle_cap_s", c->idle_cap_ns < 0 ? json_null() : json_real((double)c->idle_cap_ns / 1e9));
    json_object_set_new(o, "warm_start", json_boolean(c->warm_start));
    json_object_set_new(o, "warmup_call", json_boolean(c->warmup_call));
    json_object_set_new(o, "skip_early_subagents", json_boolean(c->skip_early_subagents));
    json_object_set_new(o, "recycle", json_boolean(c->recycle));
    json_object_set_new(o, "cache_isolation", json_boolean(c->cache_isolation));
    json_object_set_new(o, "subagents", json_boolean(c->subagents));
    json_object_set_new(o, "honour_join", json_boolean(c->honour_join));
    json_object_set_new(o, "join_subagents", json_boolean(c->join_all));
    json_object_set_new(o, "think", json_string(c->think_end_to_start ? "end-to-start" : "start-to-start"));
    json_object_set_new(o, "measure", json_string(c->measure_all_types ? "all" : "normal"));
    json_object_set_new(o, "ignore_eos", json_boolean(c->ignore_eos));
    json_object_set_new(o, "max_model_len", json_integer((json_int_t)c->max_model_len));
    json_object_set_new(o, "overflow_limit", json_real(c->overflow_limit));
    json_object_set_new(o, "min_measured_s", json_real((double)c->min_measured_ns / 1e9));
    json_object_set_new(o, "time_scale", json_real(c->time_scale));
    json_object_set_new(o, "rate", json_real(c->rate));
    json_object_set_new(o, "gamma_cv", json_real(c->gamma_cv));
    json_object_set_new(o, "seed", json_integer((json_int_t)c->seed));
    json_object_set_new(o, "tick_s", json_real((double)c->tick_ns / 1e9));
    return o;
}

/* ---------------------------------------------------------------------- */
/* Trace access. */
