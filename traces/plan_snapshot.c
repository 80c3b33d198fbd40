/* plan_snapshot.c: where a tree of the replay plan resumes at a warm-start
 * time t*, as AIPerf 0.13.0's TrajectorySource snapshots it
 * (aiperf/timing/trajectory_source.py:602-621 the draw range, :653-670 the
 * resume boundaries, :695-805 the live streams), and the plan's invariant
 * walker (plan_verify). traces/plan.h.
 */
#include "traces/plan_internal.h"
#include "traces/base/err.h"
#include "traces/base/mem.h"
#include "traces/base/npgen.h"
#include "traces/base/sha256.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double plan_t_star_ms(const struct plan *p, uint32_t tree, double ratio)
{
    const struct plan_tree *tr = &p->trees[tree];
    return tr->t_lo_ms + ratio * (tr->t_hi_ms - tr->t_lo_ms);
}

double plan_t_star_draw(const struct plan *p, uint32_t tree, double lo, double hi, uint64_t seed,
                        int lane)
{
    double a = plan_t_star_ms(p, tree, lo), b = plan_t_star_ms(p, tree, hi);
    if (!(b > a))
        return a;
    const char *id = p->trees[tree].trace_id;
    size_t cap = strlen(id) + 48;
    char *key = xmalloc(cap);
    int n = snprintf(key, cap, "%llu:%s:%d", (unsigned long long)seed, id, lane);
    uint8_t d[32];
    sha256(key, (size_t)n, d);
    free(key);
    uint64_t s = 0;
    for (int i = 0; i < 8; i++)
        s = s << 8 | d[i];
    struct npgen g;
    npgen_init(&g, s);
    return npgen_uniform(&g, a, b);
}

/* First turn of stream s recorded at or after t* (stream order), or
 * PLAN_NONE (_next_turn_index_at_or_after). */
static uint32_t next_turn(const struct plan *p, uint32_t s, double t_star)
{
    const struct plan_stream *st = &p->streams[s];
    for (uint32_t k = 0; k < st->n_turns; k++)
        if (p->turns[st->first_turn + k].t_ms >= t_star)
            return k;
    return PLAN_NONE;
}

static struct plan_resume resume_at(const struct plan *p, uint32_t s, uint32_t next,
                                    double t_star)
{
    const struct plan_stream *st = &p->streams[s];
    struct plan_resume r = {.stream = s, .next_turn = next, .branch = PLAN_NONE,
                            .warm_turn = PLAN_NONE, .lead_ns = -1, .join_turn = PLAN_NONE,
                            .lead_ms = NAN};
    double d = p->turns[st->first_turn + next].t_ms - t_star;
    r.offset_ms = d > 0.0 ? d : 0.0;
    r.offset_ns = plan_ms_to_ns(r.offset_ms);
    if (next >= 1) {
        r.warm_turn = next - 1;
        r.lead_ms = t_star - p->turns[st->first_turn + next - 1].t_ms;
        r.lead_ns = plan_ms_to_ns(r.lead_ms);
    }
    return r;
}

int plan_snapshot_ms(const struct plan *p, uint32_t tree, double t_star, struct plan_resume *out,
                     int cap, uint32_t *boundary)
{
    const struct plan_tree *tr = &p->trees[tree];
    if (boundary)
        for (uint32_t i = 0; i < tr->n_streams; i++) {
            uint32_t nx = next_turn(p, tr->first_stream + i, t_star);
            boundary[i] = nx == PLAN_NONE ? p->streams[tr->first_stream + i].n_turns : nx;
        }
    if (!tr->n_streams || !out)
        return 0;
    uint32_t root = tr->first_stream;
    uint32_t rn = next_turn(p, root, t_star);
    const struct plan_stream *rs = &p->streams[root];
    int n = 1; /* slot 0 is the root's, filled last */
    bool *pending = xcalloc(rs->n_turns ? rs->n_turns : 1, sizeof *pending);
    for (uint32_t b = tr->first_branch; b < tr->first_branch + tr->n_branches; b++) {
        const struct plan_branch *br = &p->branches[b];
        if (br->parent != root)
            continue; /* only the root's branches are live at t* */
        if (t_star < br->start_ms) {
            double spawn_t = p->turns[rs->first_turn + br->spawn_turn].t_ms;
            if (t_star < spawn_t || (rn != PLAN_NONE && rn <= br->spawn_turn))
                continue; /* not spawned yet */
        }
        bool live = false;
        for (uint32_t k = 0; k < br->n_children; k++) {
            uint32_t c = p->children[br->children + k];
            uint32_t nx = next_turn(p, c, t_star);
            if (nx == PLAN_NONE)
                continue;
            if (n >= cap) {
                free(pending);
                return -1;
            }
            struct plan_resume r = resume_at(p, c, nx, t_star);
            r.branch = b;
            r.join_turn = br->join_turn;
            out[n++] = r;
            live = true;
        }
        if (live && br->join_turn != PLAN_NONE)
            pending[br->join_turn] = true;
    }
    int m = n;
    if (rn != PLAN_NONE) {
        if (cap < 1) {
            free(pending);
            return -1;
        }
        out[0] = resume_at(p, root, rn, t_star);
        out[0].waiting = pending[rn];
        out[0].join_turn = pending[rn] ? rn : PLAN_NONE;
    } else {
        memmove(out, out + 1, (size_t)(n - 1) * sizeof *out);
        m = n - 1;
    }
    free(pending);
    bool any = false;
    for (int i = 0; i < m && !any; i++)
        any = !out[i].waiting;
    return any ? m : 0;
}

int plan_snapshot(const struct plan *p, uint32_t tree, int64_t t_star_ns, struct plan_resume *out,
                  int cap, uint32_t *boundary)
{
    return plan_snapshot_ms(p, tree, (double)t_star_ns / 1e6, out, cap, boundary);
}

/* ---- invariants --------------------------------------------------------- */

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (!(cond))                                                       \
            return err_set(err, __VA_ARGS__);                              \
    } while (0)

static int verify_turn(const struct plan *p, const struct plan_stream *st, uint32_t si, uint32_t k,
                       char *err)
{
    const struct plan_turn *u = &p->turns[st->first_turn + k];
    CHECK(u->call < p->tr->n_calls, "%s turn %u: call %u", st->id, k, u->call);
    CHECK(u->total_blocks == p->tr->calls[u->call].n_blocks && u->hit_blocks <= u->total_blocks,
          "%s turn %u: prefix hit %u of %u blocks", st->id, k, u->hit_blocks, u->total_blocks);
    CHECK(k == 0 ? isnan(u->delay_ms) && u->delay_ns == -1 : u->delay_ms >= 0 && u->delay_ns >= 0,
          "%s turn %u: delay", st->id, k);
    CHECK(u->max_tokens >= 1, "%s turn %u: max_tokens %lld", st->id, k, (long long)u->max_tokens);
    CHECK((uint64_t)u->msgs + u->n_msgs <= p->n_msgs, "%s turn %u: messages", st->id, k);
    CHECK((uint64_t)u->after + u->n_after <= p->n_refs, "%s turn %u: gates", st->id, k);
    for (uint32_t i = 0; i < u->n_after; i++) {
        const struct plan_ref *r = &p->refs[u->after + i];
        CHECK(r->stream < p->n_streams && r->stream != si, "%s turn %u: gate on stream %u",
              st->id, k, r->stream);
        const struct plan_stream *o = &p->streams[r->stream];
        CHECK(o->tree == st->tree && o->scope == st->scope && r->turn < o->n_turns,
              "%s turn %u: gate on %s turn %u outside its scope", st->id, k, o->id, r->turn);
        const struct plan_turn *y = &p->turns[o->first_turn + r->turn];
        double w = isfinite(y->api_ms) ? y->api_ms : 0.0;
        CHECK(y->t_ms < u->t_ms && y->t_ms + w <= u->t_ms,
              "%s turn %u: gate on %s turn %u, which had not completed", st->id, k, o->id, r->turn);
    }
    for (int j = 0; j < 2; j++) {
        uint32_t f = j ? u->join : u->spawn, n = j ? u->n_join : u->n_spawn;
        CHECK((uint64_t)f + n <= p->n_branch_refs, "%s turn %u: branch list", st->id, k);
        for (uint32_t i = 0; i < n; i++) {
            uint32_t b = p->branch_refs[f + i];
            CHECK(b < p->n_branches && p->branches[b].parent == si &&
                      (j ? p->branches[b].join_turn : p->branches[b].spawn_turn) == k,
                  "%s turn %u: branch %u does not name it", st->id, k, b);
        }
    }
    return 0;
}

int plan_verify(const struct plan *p, char *err)
{
    uint32_t *owner = xmalloc((p->n_streams ? p->n_streams : 1) * sizeof *owner);
    for (uint32_t i = 0; i < p->n_streams; i++)
        owner[i] = PLAN_NONE;
    int rc = 0;
    uint32_t next_stream = 0, next_turn_i = 0, next_branch = 0;
    for (uint32_t ti = 0; ti < p->n_trees && !rc; ti++) {
        const struct plan_tree *tr = &p->trees[ti];
        if (tr->first_stream != next_stream || tr->first_branch != next_branch ||
            tr->first_stream + (uint64_t)tr->n_streams > p->n_streams ||
            tr->first_branch + (uint64_t)tr->n_branches > p->n_branches || !tr->n_streams) {
            rc = err_set(err, "tree %u: stream or branch range", ti);
            break;
        }
        next_stream += tr->n_streams;
        next_branch += tr->n_branches;
        uint32_t turns = 0;
        for (uint32_t i = 0; i < tr->n_streams && !rc; i++) {
            uint32_t si = tr->first_stream + i;
            const struct plan_stream *st = &p->streams[si];
            bool root = i == 0;
            if (st->tree != ti || (st->kind == PLAN_STREAM_ROOT) != root ||
                (root ? st->parent != PLAN_NONE
                      : st->parent < tr->first_stream || st->parent >= si) ||
                st->first_turn != next_turn_i || !st->id || !st->scope_id) {
                rc = err_set(err, "tree %u stream %u: kind, parent or turn range", ti, i);
                break;
            }
            next_turn_i += st->n_turns;
            turns += st->n_turns;
            if (next_turn_i > p->n_turns) {
                rc = err_set(err, "%s: turns beyond the end", st->id);
                break;
            }
            for (uint32_t k = 0; k < st->n_turns && !rc; k++)
                rc = verify_turn(p, st, si, k, err);
            for (uint32_t k = 0; k < st->n_turns && !rc; k++) {
                double x = p->turns[st->first_turn + k].t_ms;
                if (x < tr->t_lo_ms || x > tr->t_hi_ms)
                    rc = err_set(err, "%s turn %u: outside the tree's time range", st->id, k);
            }
        }
        if (!rc && turns != tr->n_turns)
            rc = err_set(err, "tree %u: %u turns counted, %u recorded", ti, turns, tr->n_turns);
        for (uint32_t b = tr->first_branch; b < tr->first_branch + tr->n_branches && !rc; b++) {
            const struct plan_branch *br = &p->branches[b];
            const struct plan_stream *ps = &p->streams[br->parent];
            if (br->parent < tr->first_stream || br->parent >= tr->first_stream + tr->n_streams ||
                br->spawn_turn >= ps->n_turns ||
                (br->join_turn != PLAN_NONE &&
                 (br->join_turn >= ps->n_turns || br->join_turn == br->spawn_turn)) ||
                br->children + (uint64_t)br->n_children > p->n_children || !br->id) {
                rc = err_set(err, "branch %u: parent, turns or children", b);
                break;
            }
            for (uint32_t k = 0; k < br->n_children && !rc; k++) {
                uint32_t c = p->children[br->children + k];
                if (c >= p->n_streams || p->streams[c].parent != br->parent || owner[c] != PLAN_NONE)
                    rc = err_set(err, "branch %s: child %u", br->id, c);
                else
                    owner[c] = b;
            }
        }
        for (uint32_t i = 1; i < tr->n_streams && !rc; i++)
            if (owner[tr->first_stream + i] == PLAN_NONE)
                rc = err_set(err, "%s: no branch spawns it", p->streams[tr->first_stream + i].id);
    }
    if (!rc && (next_stream != p->n_streams || next_turn_i != p->n_turns ||
                next_branch != p->n_branches))
        rc = err_set(err, "streams, turns or branches outside every tree");
    free(owner);
    return rc;
}
