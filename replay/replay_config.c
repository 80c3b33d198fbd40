/* replay_config.c: the replayer's configuration (replay.h): AgentX
 * defaults, the replay flag table every command shares, and run.json's
 * "config.replay" (under the legacy rules and in the open-loop modes
 * exactly as before the agentx rules, so earlier results compare). */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "replay/replay.h"
#include "replay/replay_flags.h"
#include "traces/base/err.h"
#include "traces/base/flags.h"
#include "traces/base/parse.h"
#include "traces/base/time_ns.h"
#include "traces/trace.h"

void replay_config_defaults(struct replay_config *c)
{
    memset(c, 0, sizeof *c);
    c->mode = REPLAY_MODE_SESSIONS;
    c->rules = REPLAY_RULES_AGENTX;
    c->concurrency = 8;
    c->duration_ns = 1800 * NS_PER_S;
    c->grace_ns = 300 * NS_PER_S; /* agentx sessions: 30 s unless given */
    c->idle_cap_ns = 10 * NS_PER_S;
    c->think_cap_ns = -1;
    c->start_min_ratio = 0.0;
    c->start_max_ratio = 1.0;
    c->requests = 0;
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

void replay_config_legacy(struct replay_config *c) { c->rules = REPLAY_RULES_LEGACY; }

void replay_config_fit(struct replay_config *c, const struct trace *t)
{
    if (t && t->timestamped && c->mode == REPLAY_MODE_SESSIONS && c->rules == REPLAY_RULES_AGENTX)
        replay_config_legacy(c);
}

/* The grace period in force: 30 s under the agentx rules (AIPerf's
 * --benchmark-grace-period when a duration is given,
 * aiperf/config/flags/cli_config.py), 300 s otherwise, unless given. */
int64_t replay_config_grace(const struct replay_config *c)
{
    if (!c->grace_set && c->mode == REPLAY_MODE_SESSIONS && c->rules == REPLAY_RULES_AGENTX)
        return 30 * NS_PER_S;
    return c->grace_ns;
}

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

/* --mode and --arrival choose the mode; both given must agree. */
static int set_mode(struct replay_config *c, enum replay_mode m, const char *name,
                    const char *v, char *err)
{
    if (c->mode_flag[0] && c->mode != m)
        return err_set(err, "conflicting modes: %s and %s %s", c->mode_flag, name, v);
    c->mode = m;
    snprintf(c->mode_flag, sizeof c->mode_flag, "%s", name);
    return 0;
}

static int parse_mode(const char *name, const char *v, void *group, char *err)
{
    struct replay_config *c = group;
    if (!strcmp(v, "sessions"))
        return set_mode(c, REPLAY_MODE_SESSIONS, name, v, err);
    if (!strcmp(v, "closed"))
        return set_mode(c, REPLAY_MODE_CLOSED, name, v, err);
    if (!strcmp(v, "timestamp"))
        return set_mode(c, REPLAY_MODE_TIMESTAMP, name, v, err);
    return err_set(err, "%s '%s': expected sessions, closed or timestamp", name, v);
}

static int parse_arrival(const char *name, const char *v, void *group, char *err)
{
    struct replay_config *c = group;
    char buf[128], e2[ERR_LEN];
    double d;
    if (strlen(v) >= sizeof buf)
        return err_set(err, "%s: a value longer than %zu characters", name, sizeof buf - 1);
    snprintf(buf, sizeof buf, "%s", v);
    char *p1 = strchr(buf, ':');
    if (!p1)
        return err_set(err, "%s '%s': expected poisson:RATE or gamma:RATE:CV", name, v);
    *p1++ = 0;
    char *p2 = strchr(p1, ':');
    if (p2)
        *p2++ = 0;
    if (parse_double(p1, &d, e2) || !(d > 0))
        return err_set(err, "%s '%s': rate '%s': calls per second > 0", name, v, p1);
    c->rate = d;
    if (!strcmp(buf, "poisson") && !p2)
        return set_mode(c, REPLAY_MODE_POISSON, name, v, err);
    if (!strcmp(buf, "gamma") && p2) {
        if (parse_double(p2, &d, e2) || !(d > 0))
            return err_set(err, "%s '%s': CV '%s': a number > 0", name, v, p2);
        c->gamma_cv = d;
        return set_mode(c, REPLAY_MODE_GAMMA, name, v, err);
    }
    return err_set(err, "%s '%s': expected poisson:RATE or gamma:RATE:CV", name, v);
}

static const struct flag_choice rules_names[] = {
    {"agentx", REPLAY_RULES_AGENTX, false}, {"legacy", REPLAY_RULES_LEGACY, false}, {NULL, 0, false}};
static const struct flag_choice think_names[] = {
    {"end-to-start", 1, false}, {"start-to-start", 0, false}, {NULL, 0, false}};
static const struct flag_choice measure_names[] = {
    {"all", 1, false}, {"normal", 0, false}, {NULL, 0, false}};

/* The replay flags every replaying command shares (traces/base/flags.h). */
#define RC struct replay_config
const struct flag replay_flags[] = {
    {"--concurrency", 0, FLAG_INT, FLAG_AT(RC, concurrency), NULL,
     "live session trees (closed: lanes)", .min = 1, .max = 1000000,
     .seen = FLAG_SEEN(RC, concurrency_set)},
    {"--duration", 0, FLAG_DURATION, FLAG_AT(RC, duration_ns), NULL,
     "no call starts after S (1800, 90s, 30m; agentx:\nfrom the end of the warm-up)", .min = 0, .max = INT64_C(1000000000) * NS_PER_S,
     .opts = FLAG_OPEN_MIN},
    {"--grace", 0, FLAG_DURATION, FLAG_AT(RC, grace_ns), NULL,
     "in-flight calls finish up to S after, then are\ncancelled; none: wait for all",
     .def = "30; legacy, open loop: 300", .min = 0,
     .max = INT64_C(1000000000) * NS_PER_S, .opts = FLAG_NONE, .seen = FLAG_SEEN(RC, grace_set)},
    {"--requests", 0, FLAG_INT64, FLAG_AT(RC, requests), "N",
     "no call starts after N measured calls (0: no\nlimit); the grace follows", .min = 0,
     .max = INT64_MAX},
    {"--seed", 0, FLAG_U64, FLAG_AT(RC, seed), NULL, "random seed", .def = NULL},
    {"--rules", 0, FLAG_CHOICE, FLAG_AT(RC, rules), NULL,
     "sessions mode: AIPerf's AgentX replay of the\ntrace's plan, or the earlier rules (to\n"
     "reproduce earlier results; not AgentX)", .choices = rules_names},
    {"--idle-cap", 0, FLAG_DURATION, FLAG_AT(RC, idle_cap_ns), NULL,
     "agentx: the system-wide idle cap (pending timers\nshift when nothing is in flight; not 10 s:\n"
     "not AgentX); legacy: cap on each think time\nand subagent gap", .min = 0,
     .max = INT64_C(1000000000) * NS_PER_S, .opts = FLAG_NONE},
    {"--think-cap", 0, FLAG_DURATION, FLAG_AT(RC, think_cap_ns), NULL,
     "agentx: cap on each recorded delay and child\noffset (not AgentX)", .min = 0,
     .max = INT64_C(1000000000) * NS_PER_S, .opts = FLAG_NONE},
    {"--start-min-ratio", 0, FLAG_DOUBLE, FLAG_AT(RC, start_min_ratio), "F",
     "agentx: t* range over each initial tree's\nrecorded span, from F", .fmin = 0, .fmax = 1},
    {"--start-max-ratio", 0, FLAG_DOUBLE, FLAG_AT(RC, start_max_ratio), "F",
     "... to F (equal: exactly there)", .fmin = 0, .fmax = 1},
    {"--mode", 0, FLAG_CUSTOM, FLAG_AT(RC, mode), "sessions|closed|timestamp",
     "how calls are scheduled", .def = "sessions", .parse = parse_mode, .example = "closed"},
    {"--arrival", 0, FLAG_CUSTOM, FLAG_AT(RC, rate), "poisson:RATE|gamma:RATE:CV",
     "open-loop calls per second (mode poisson or gamma)", .parse = parse_arrival,
     .example = "poisson:2.5"},
    {"--time-scale", 0, FLAG_DOUBLE, FLAG_AT(RC, time_scale), "X",
     "timestamp mode: recorded times x X", .fmin = 0, .fmax = 1e9, .opts = FLAG_OPEN_MIN},
    {"--max-model-len", 0, FLAG_INT64, FLAG_AT(RC, max_model_len), NULL,
     "calls longer are not sent, counted as overflow\n(0: no limit; sim: also the engine's)",
     .min = 0, .max = INT64_MAX},
    {"--overflow-limit", 0, FLAG_DOUBLE, FLAG_AT(RC, overflow_limit), "F",
     "overflow fraction that invalidates a run", .fmin = 0, .fmax = 1},
    {"--min-duration", 0, FLAG_DURATION, FLAG_AT(RC, min_measured_ns), NULL,
     "a valid run's configured duration (agentx) or\nmeasured traffic (legacy)", .min = 0,
     .max = INT64_C(1000000000) * NS_PER_S},
    {"--no-warm-start", 0, FLAG_BOOL, FLAG_AT(RC, warm_start), NULL,
     "lanes start at their traces' first call, with no\nwarm-up (not AgentX)", .value = false},
    {"--no-warmup-call", 0, FLAG_BOOL, FLAG_AT(RC, warmup_call), NULL,
     "legacy: do not send the call before the start\npoint", .value = false},
    {"--keep-early-subagents", 0, FLAG_BOOL, FLAG_AT(RC, skip_early_subagents), NULL,
     "legacy: do not skip subagents forked before the\nstart", .value = false},
    {"--no-recycle", 0, FLAG_BOOL, FLAG_AT(RC, recycle), NULL,
     "a lane whose tree ends stays idle (not AgentX)", .value = false},
    {"--no-cache-isolation", 0, FLAG_BOOL, FLAG_AT(RC, cache_isolation), NULL,
     "instances of the same trace share cache: no\ncache-bust marker (not AgentX)", .value = false},
    {"--no-subagents", 0, FLAG_BOOL, FLAG_AT(RC, subagents), NULL,
     "replay no subagent (agentx: flat chains stay;\nnot AgentX)", .value = false},
    {"--no-join", 0, FLAG_BOOL, FLAG_AT(RC, honour_join), NULL,
     "legacy: never wait for subagents", .value = false},
    {"--join-subagents", 0, FLAG_BOOL, FLAG_AT(RC, join_all), NULL,
     "legacy: parents wait for every subagent", .value = true},
    {"--think", 0, FLAG_CHOICE, FLAG_AT(RC, think_end_to_start), NULL,
     "legacy: think time from recorded end-to-start\ngaps, or start-to-start", .choices = think_names},
    {"--measure", 0, FLAG_CHOICE, FLAG_AT(RC, measure_all_types), NULL,
     "legacy: measure every call type, or only type n", .choices = measure_names},
    {"--honour-eos", 0, FLAG_BOOL, FLAG_AT(RC, ignore_eos), NULL,
     "do not ask to ignore end-of-sequence", .value = false},
    {"--chunk-times", 0, FLAG_BOOL, FLAG_AT(RC, chunk_times), NULL,
     "write chunk times into requests.jsonl", .value = true},
    FLAG_END,
};
#undef RC

/* The agentx rules' "config.replay". */
static json_t *agentx_json(const struct replay_config *c)
{
    json_t *o = json_object();
    json_object_set_new(o, "mode", json_string(replay_mode_name(c->mode)));
    json_object_set_new(o, "rules", json_string("agentx"));
    json_object_set_new(o, "concurrency", json_integer(c->concurrency));
    json_object_set_new(o, "duration_s", json_real((double)c->duration_ns / 1e9));
    int64_t grace = replay_config_grace(c);
    json_object_set_new(o, "grace_s", grace < 0 ? json_null() : json_real((double)grace / 1e9));
    json_object_set_new(o, "requests", json_integer((json_int_t)c->requests));
    json_object_set_new(o, "idle_cap_s", c->idle_cap_ns < 0 ? json_null() : json_real((double)c->idle_cap_ns / 1e9));
    json_object_set_new(o, "think_cap_s", c->think_cap_ns < 0 ? json_null() : json_real((double)c->think_cap_ns / 1e9));
    json_object_set_new(o, "start_min_ratio", json_real(c->start_min_ratio));
    json_object_set_new(o, "start_max_ratio", json_real(c->start_max_ratio));
    json_object_set_new(o, "warm_start", json_boolean(c->warm_start));
    json_object_set_new(o, "recycle", json_boolean(c->recycle));
    json_object_set_new(o, "cache_isolation", json_boolean(c->cache_isolation));
    json_object_set_new(o, "subagents", json_boolean(c->subagents));
    json_object_set_new(o, "ignore_eos", json_boolean(c->ignore_eos));
    json_object_set_new(o, "max_model_len", json_integer((json_int_t)c->max_model_len));
    json_object_set_new(o, "overflow_limit", json_real(c->overflow_limit));
    json_object_set_new(o, "min_duration_s", json_real((double)c->min_measured_ns / 1e9));
    json_object_set_new(o, "seed", json_integer((json_int_t)c->seed));
    json_object_set_new(o, "tick_s", json_real((double)c->tick_ns / 1e9));
    return o;
}

void *replay_config_json(const struct replay_config *c)
{
    if (c->mode == REPLAY_MODE_SESSIONS && c->rules == REPLAY_RULES_AGENTX)
        return agentx_json(c);
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
