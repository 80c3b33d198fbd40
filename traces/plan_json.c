/* plan_json.c: the replay plan in its canonical JSON form (traces/plan.h
 * plan_write_json; the schema is tests/conformance/README.md): one line,
 * keys sorted, the text Python's json.dumps(sort_keys=True,
 * separators=(",", ":"), ensure_ascii=True) gives for the same object, so
 * that it compares byte for byte with the dump of AIPerf's own plan
 * (tests/conformance/plan/aiperf_plan.py). Written as it goes: the plan
 * of a large folder never sits in memory as text.
 */
#include "traces/plan_internal.h"
#include "traces/base/err.h"
#include "traces/base/mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- scalars as Python writes them -------------------------------------- */

static void put_str(FILE *f, const char *s)
{
    const unsigned char *q = (const unsigned char *)s;
    putc('"', f);
    while (*q) {
        uint32_t cp;
        int n = 1;
        /* Decode UTF-8; a byte that does not start a valid sequence is
         * written as Python's surrogateescape reads it (U+DC80 + byte). */
        if (q[0] < 0x80) {
            cp = q[0];
        } else if ((q[0] & 0xe0) == 0xc0 && (q[1] & 0xc0) == 0x80 && q[0] >= 0xc2) {
            cp = (uint32_t)(q[0] & 0x1f) << 6 | (q[1] & 0x3f);
            n = 2;
        } else if ((q[0] & 0xf0) == 0xe0 && (q[1] & 0xc0) == 0x80 && (q[2] & 0xc0) == 0x80) {
            cp = (uint32_t)(q[0] & 0x0f) << 12 | (uint32_t)(q[1] & 0x3f) << 6 | (q[2] & 0x3f);
            n = 3;
            if (cp < 0x800 || (cp >= 0xd800 && cp < 0xe000))
                cp = 0xdc00 + q[0], n = 1;
        } else if ((q[0] & 0xf8) == 0xf0 && (q[1] & 0xc0) == 0x80 && (q[2] & 0xc0) == 0x80 &&
                   (q[3] & 0xc0) == 0x80) {
            cp = (uint32_t)(q[0] & 0x07) << 18 | (uint32_t)(q[1] & 0x3f) << 12 |
                 (uint32_t)(q[2] & 0x3f) << 6 | (q[3] & 0x3f);
            n = 4;
            if (cp < 0x10000 || cp > 0x10ffff)
                cp = 0xdc00 + q[0], n = 1;
        } else {
            cp = 0xdc00 + q[0];
        }
        q += n;
        switch (cp) {
        case '"': fputs("\\\"", f); continue;
        case '\\': fputs("\\\\", f); continue;
        case '\n': fputs("\\n", f); continue;
        case '\r': fputs("\\r", f); continue;
        case '\t': fputs("\\t", f); continue;
        case '\b': fputs("\\b", f); continue;
        case '\f': fputs("\\f", f); continue;
        default: break;
        }
        if (cp >= 0x20 && cp < 0x7f)
            putc((int)cp, f);
        else if (cp < 0x10000)
            fprintf(f, "\\u%04x", cp);
        else
            fprintf(f, "\\u%04x\\u%04x", 0xd800 + ((cp - 0x10000) >> 10),
                    0xdc00 + ((cp - 0x10000) & 0x3ff));
    }
    putc('"', f);
}

static void put_str_or_null(FILE *f, const char *s)
{
    if (s)
        put_str(f, s);
    else
        fputs("null", f);
}

static void put_i(FILE *f, int64_t x) { fprintf(f, "%lld", (long long)x); }

/* An index, or null for PLAN_NONE. */
static void put_idx(FILE *f, uint32_t x)
{
    if (x == PLAN_NONE)
        fputs("null", f);
    else
        fprintf(f, "%u", x);
}

/* A time in ms rounded half up, or null when absent (NAN). */
static void put_ms(FILE *f, double x)
{
    if (isnan(x))
        fputs("null", f);
    else
        put_i(f, plan_round_ms(x));
}

static void put_bool(FILE *f, bool b) { fputs(b ? "true" : "false", f); }

/* repr() of a Python float: the shortest digits that read back to x,
 * positional for exponents -4 .. 15, else scientific. */
static void put_float(FILE *f, double x)
{
    if (x == 0) {
        fputs(signbit(x) ? "-0.0" : "0.0", f);
        return;
    }
    char buf[40];
    int p = 1;
    for (; p < 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p - 1, x);
        if (strtod(buf, NULL) == x)
            break;
    }
    snprintf(buf, sizeof buf, "%.*e", p - 1, x);
    const char *q = buf;
    if (*q == '-') {
        putc('-', f);
        q++;
    }
    char dig[24];
    int nd = 0;
    for (; *q && *q != 'e'; q++)
        if (*q != '.')
            dig[nd++] = *q;
    while (nd > 1 && dig[nd - 1] == '0')
        nd--;
    dig[nd] = 0;
    int e = atoi(q + 1), dp = e + 1;
    if (dp > -4 && dp <= 16) {
        if (dp <= 0) {
            fputs("0.", f);
            for (int i = 0; i < -dp; i++)
                putc('0', f);
            fputs(dig, f);
        } else if (dp >= nd) {
            fputs(dig, f);
            for (int i = nd; i < dp; i++)
                putc('0', f);
            fputs(".0", f);
        } else {
            fprintf(f, "%.*s.%s", dp, dig, dig + dp);
        }
    } else {
        putc(dig[0], f);
        if (nd > 1)
            fprintf(f, ".%s", dig + 1);
        fprintf(f, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    }
}

/* ---- the plan ----------------------------------------------------------- */

static const char *const kind_name[] = {"root", "subagent", "flat"};
static const char *const role_name[] = {"system", "user", "assistant"};

static void put_turn(FILE *f, const struct plan *p, const struct plan_stream *st, uint32_t k,
                     const char *model, uint64_t **ids, uint32_t *cap_ids)
{
    const struct trace *t = p->tr;
    const struct plan_turn *u = &p->turns[st->first_turn + k];
    const struct trace_call *c = &t->calls[u->call];
    fputs("{\"after\":[", f);
    for (uint32_t i = 0; i < u->n_after; i++) {
        const struct plan_ref *r = &p->refs[u->after + i];
        fputs(i ? ",[" : "[", f);
        put_str(f, p->streams[r->stream].id);
        fprintf(f, ",%u]", r->turn);
    }
    fputs("],\"api_ms\":", f);
    put_ms(f, u->api_ms);
    fputs(",\"delay_ms\":", f);
    put_ms(f, u->delay_ms);
    fputs(",\"hash_ids\":[", f);
    if (c->n_blocks > *cap_ids) {
        *cap_ids = c->n_blocks + 1024;
        *ids = xrealloc(*ids, *cap_ids * sizeof **ids);
    }
    trace_call_blocks(t, c, *ids, c->n_blocks);
    for (uint32_t i = 0; i < c->n_blocks; i++)
        fprintf(f, i ? ",%lld" : "%lld", (long long)(*ids)[i]);
    fprintf(f, "],\"in\":%lld,\"input_kind\":", (long long)c->prompt_tokens);
    fputs(u->input_kind == PLAN_INPUT_TOOL_RESULT ? "\"tool_result\""
          : u->input_kind == PLAN_INPUT_USER      ? "\"user_input\""
                                                  : "null",
          f);
    fputs(",\"join\":[", f);
    for (uint32_t i = 0; i < u->n_join; i++) {
        if (i)
            putc(',', f);
        put_str(f, p->branches[p->branch_refs[u->join + i]].id);
    }
    fprintf(f, "],\"max_tokens\":%lld,\"model\":", (long long)u->max_tokens);
    put_str(f, model);
    fputs(",\"msgs\":[", f);
    for (uint32_t i = 0; i < u->n_msgs; i++) {
        const struct plan_msg *m = &p->msgs[u->msgs + i];
        fprintf(f, "%s[\"%s\",%lld]", i ? "," : "", role_name[m->role], (long long)m->tokens);
    }
    fprintf(f, "],\"out\":%lld,\"prefix_hit_blocks\":%u,\"prefix_total_blocks\":%u,\"reset\":",
            (long long)c->output_tokens, u->hit_blocks, u->total_blocks);
    put_bool(f, u->reset);
    fputs(",\"spawn\":[", f);
    for (uint32_t i = 0; i < u->n_spawn; i++) {
        if (i)
            putc(',', f);
        put_str(f, p->branches[p->branch_refs[u->spawn + i]].id);
    }
    /* src: [position in the file's list, position in the subagent's or null] */
    const struct trace_session *ss = &t->sessions[c->session];
    if (ss->parent == TRACE_NONE)
        fprintf(f, "],\"src\":[%u,null],\"t_ms\":", c->pos);
    else
        fprintf(f, "],\"src\":[%u,%u],\"t_ms\":", ss->pos, c->pos);
    put_ms(f, u->t_ms);
    putc('}', f);
}

static void put_branch(FILE *f, const struct plan *p, uint32_t b)
{
    const struct plan_branch *br = &p->branches[b];
    fputs("{\"background\":", f);
    put_bool(f, br->join_turn == PLAN_NONE);
    fputs(",\"child_offsets_ms\":[", f);
    for (uint32_t k = 0; k < br->n_children; k++) {
        if (k)
            putc(',', f);
        put_ms(f, plan_child_offset_ms(p, b, k));
    }
    fputs("],\"children\":[", f);
    for (uint32_t k = 0; k < br->n_children; k++) {
        if (k)
            putc(',', f);
        put_str(f, p->streams[p->children[br->children + k]].id);
    }
    fputs("],\"dispatch\":", f);
    fputs(br->dispatch == PLAN_AT_ISSUE ? "\"issue\"" : "\"return\"", f);
    fputs(",\"id\":", f);
    put_str(f, br->id);
    fputs(",\"join_turn\":", f);
    put_idx(f, br->join_turn);
    fputs(",\"parent\":", f);
    put_str(f, p->streams[br->parent].id);
    fprintf(f, ",\"spawn_turn\":%u,\"start_ms\":", br->spawn_turn);
    put_ms(f, br->start_ms);
    putc('}', f);
}

static void put_tree(FILE *f, const struct plan *p, uint32_t ti, const char *model)
{
    const struct plan_tree *tr = &p->trees[ti];
    fprintf(f, "{\"block_size\":%lld,\"dropped_subagents\":[", (long long)tr->block_size);
    for (uint32_t i = 0; i < tr->n_dropped; i++) {
        if (i)
            putc(',', f);
        put_str(f, p->strings[tr->dropped + i]);
    }
    fputs("],\"file\":", f);
    put_str_or_null(f, tr->file);
    fprintf(f, ",\"n_requests_in_file\":%u,\"n_turns\":%u,\"spawns\":[", tr->n_file_calls,
            tr->n_turns);
    bool any = false;
    for (uint32_t i = 0; i < tr->n_streams; i++) /* grouped by parent, stream order */
        for (uint32_t b = tr->first_branch; b < tr->first_branch + tr->n_branches; b++)
            if (p->branches[b].parent == tr->first_stream + i) {
                if (any)
                    putc(',', f);
                any = true;
                put_branch(f, p, b);
            }
    fputs("],\"streams\":[", f);
    uint64_t *ids = NULL;
    uint32_t cap_ids = 0;
    for (uint32_t i = 0; i < tr->n_streams; i++) {
        const struct plan_stream *st = &p->streams[tr->first_stream + i];
        fputs(i ? ",{\"id\":" : "{\"id\":", f);
        put_str(f, st->id);
        fprintf(f, ",\"kind\":\"%s\",\"parent\":", kind_name[st->kind]);
        put_str_or_null(f, st->parent == PLAN_NONE ? NULL : p->streams[st->parent].id);
        fputs(",\"replay_scope\":", f);
        put_str(f, st->scope_id);
        fputs(",\"turns\":[", f);
        for (uint32_t k = 0; k < st->n_turns; k++) {
            if (k)
                putc(',', f);
            put_turn(f, p, st, k, model, &ids, &cap_ids);
        }
        fputs("]}", f);
    }
    free(ids);
    fprintf(f, "],\"system_tokens\":%lld,\"t_bounds_ms\":", (long long)tr->system_tokens);
    if (tr->n_turns)
        fprintf(f, "[%lld,%lld]", (long long)plan_round_ms(tr->t_lo_ms),
                (long long)plan_round_ms(tr->t_hi_ms));
    else
        fputs("null", f);
    fprintf(f, ",\"tool_tokens\":%lld,\"trace_id\":", (long long)tr->tool_tokens);
    put_str(f, tr->trace_id);
    putc('}', f);
}

static void put_settings(FILE *f, const struct plan_opts *o)
{
    /* aiperf/common/environment.py; the AgentX overflow rule (:131-156). */
    fputs("{\"CONTEXT_OVERFLOW_RATE_LIMIT\":0.01,\"CONTEXT_OVERFLOW_SUBSTRINGS\":"
          "[\"context length\",\"maximum context\",\"context_length_exceeded\","
          "\"prompt is too long\"],\"WEKA_AUX_CROSS_MODEL\":",
          f);
    put_bool(f, o->aux_cross_model);
    fprintf(f, ",\"WEKA_AUX_ISL_FLOOR\":%lld,\"WEKA_AUX_ISL_RATIO\":", (long long)o->aux_isl_floor);
    put_float(f, o->aux_isl_ratio);
    fprintf(f, ",\"WEKA_AUX_MAX_REQUESTS\":%d,\"WEKA_AUX_REDUCTION_OSL_MAX\":%lld,"
               "\"WEKA_AUX_REDUCTION_RATIO\":",
            o->aux_max_requests, (long long)o->aux_reduction_osl_max);
    put_float(f, o->aux_reduction_ratio);
    fputs(",\"WEKA_SEAM_MAX_GAP_SECONDS\":", f);
    put_float(f, o->seam_max_gap_s);
    fputs(",\"WEKA_SEAM_MIN_OVERLAP_RATIO\":", f);
    put_float(f, o->seam_min_overlap_ratio);
    fputs(",\"WEKA_SPLIT_FLATTENED_AGENTS\":", f);
    put_bool(f, o->split_flat_chains);
    fprintf(f, ",\"WEKA_TOOL_SHAPED_MESSAGES\":false,\"WEKA_WORKER_GROUP_MIN\":%d}",
            o->worker_group_min);
}

/* ---- lanes -------------------------------------------------------------- */

struct bref {
    const char *id;
    uint32_t b;
};

static int cmp_bref(const void *x, const void *y)
{
    return strcmp(((const struct bref *)x)->id, ((const struct bref *)y)->id);
}

/* One lane at t*: its live streams and resume boundaries. */
static void put_lane(FILE *f, const struct plan *p, int lane, uint32_t ti, double t_star,
                     const struct plan_resume *st, int n)
{
    const struct plan_tree *tr = &p->trees[ti];
    fprintf(f, "{\"lane\":%d,\"resume_boundaries\":[", lane);
    uint32_t *bd = xmalloc(tr->n_streams * sizeof *bd);
    struct bref *br = xmalloc(tr->n_streams * sizeof *br);
    plan_snapshot_ms(p, ti, t_star, NULL, 0, bd);
    uint32_t nb = 0;
    for (uint32_t i = 0; i < tr->n_streams; i++)
        if (bd[i])
            br[nb++] = (struct bref){p->streams[tr->first_stream + i].id, bd[i]};
    qsort(br, nb, sizeof *br, cmp_bref);
    for (uint32_t i = 0; i < nb; i++) {
        fputs(i ? ",[" : "[", f);
        put_str(f, br[i].id);
        fprintf(f, ",%u]", br[i].b);
    }
    free(br);
    free(bd);
    fputs("],\"states\":[", f);
    for (int i = 0; i < n; i++) {
        const struct plan_resume *r = &st[i];
        fputs(i ? ",{\"branch\":" : "{\"branch\":", f);
        put_str_or_null(f, r->branch == PLAN_NONE ? NULL : p->branches[r->branch].id);
        fputs(",\"join_turn\":", f);
        put_idx(f, r->join_turn);
        fprintf(f, ",\"next_turn\":%u,\"offset_ms\":", r->next_turn);
        put_ms(f, r->offset_ms);
        fputs(",\"stream\":", f);
        put_str(f, p->streams[r->stream].id);
        fputs(",\"waiting_on_children\":", f);
        put_bool(f, r->waiting);
        fputs(",\"warmup_lead_ms\":", f);
        put_ms(f, r->lead_ms);
        fputs(",\"warmup_turn\":", f);
        put_idx(f, r->warm_turn);
        putc('}', f);
    }
    fputs("],\"t_star_ms\":", f);
    put_ms(f, t_star);
    fputs(",\"trace_id\":", f);
    put_str(f, tr->trace_id);
    putc('}', f);
}

/* The initial lanes as AIPerf's TrajectorySource builds them with the
 * sequential sampler (trajectory_source.py:446-473, 878-897): lane i takes
 * the next root from one cursor over the roots, skipping (without using a
 * lane) roots with no turns or nothing live at t*. */
static void put_lanes(FILE *f, const struct plan *p, const struct plan_json_opts *o)
{
    uint32_t pool = p->n_trees, cursor = 0;
    fprintf(f, "{\"concurrency\":%d,\"lanes\":[", o->lanes);
    uint32_t cap = 1;
    for (uint32_t i = 0; i < p->n_trees; i++)
        if (p->trees[i].n_streams > cap)
            cap = p->trees[i].n_streams;
    struct plan_resume *st = xmalloc(cap * sizeof *st);
    int lanes = 0;
    uint64_t attempts = 0, max_attempts = (uint64_t)o->lanes + 2 * (pool ? pool : 1);
    while (pool && lanes < o->lanes && attempts < max_attempts) {
        attempts++;
        uint32_t ti = cursor++ % pool;
        const struct plan_tree *tr = &p->trees[ti];
        if (!tr->n_turns)
            continue;
        double t_star = plan_t_star_draw(p, ti, o->ratio_lo, o->ratio_hi, o->seed, lanes);
        int n = plan_snapshot_ms(p, ti, t_star, st, (int)cap, NULL);
        if (n <= 0)
            continue;
        if (lanes)
            putc(',', f);
        put_lane(f, p, lanes, ti, t_star, st, n);
        lanes++;
    }
    free(st);
    fputs("],\"next_recycle_root\":", f);
    const char *next = NULL;
    for (uint32_t i = 0; i < (pool ? pool : 1) && pool && !next; i++) {
        uint32_t ti = cursor++ % pool;
        if (p->trees[ti].n_turns)
            next = p->trees[ti].trace_id;
    }
    put_str_or_null(f, next);
    fputs(",\"ratio\":[", f);
    put_float(f, o->ratio_lo);
    putc(',', f);
    put_float(f, o->ratio_hi);
    fprintf(f, "],\"seed\":%llu}", (unsigned long long)o->seed);
}

int plan_write_json(const struct plan *p, const struct plan_json_opts *o, FILE *f, char *err)
{
    struct plan_json_opts def = {0};
    if (!o)
        o = &def;
    const char *model = o->model ? o->model : "plan";
    fputs("{\"aiperf_version\":\"0.13.0\",", f);
    if (o->lanes > 0) {
        fputs("\"lanes\":", f);
        put_lanes(f, p, o);
        putc(',', f);
    }
    fputs("\"root_order\":[", f);
    for (uint32_t i = 0; i < p->n_trees; i++) {
        if (i)
            putc(',', f);
        put_str(f, p->trees[i].trace_id);
    }
    fputs("],\"sampler\":\"sequential\",\"schema\":\"agentreplay.agentx-plan/1\",\"settings\":", f);
    put_settings(f, &p->opts);
    fputs(",\"traces\":[", f);
    for (uint32_t i = 0; i < p->n_trees; i++) {
        if (i)
            putc(',', f);
        put_tree(f, p, i, model);
    }
    fputs("]}\n", f);
    if (fflush(f) || ferror(f))
        return err_set(err, "writing the plan: %s", "write error");
    return 0;
}
