/* plot_engine.c: the engine's charts: where a decode step's time goes
 * (breakdown.csv) and its predictions beside the published figures
 * (fidelity.csv) (plot_data.h). */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plots/plot_data.h"
#include "traces/base/err.h"
#include "traces/base/mem.h"
#include "traces/base/csv.h"

static void short_backend(const char *b, char *dst, size_t n)
{
    if (strstr(b, "special"))
        snprintf(dst, n, "specialized");
    else if (!strcmp(b, "auto") || strstr(b, "standard"))
        snprintf(dst, n, "standard");
    else
        scopy(dst, n, b);
}

/* breakdown_data.csv: rows = decode path / layer kind, columns = kernels
 * (microseconds per layer), last column the row total. */
int plot_write_breakdown(const struct set *s, int want_batch, const char *outdir,
                          struct chart *ch, char *err)
{
    struct csv c;
    if (csv_read(s->breakdown, &c, err))
        return -1;
    static const char *need[] = {"path", "layer_kind", "kernel", "batch", "us_per_layer"};
    for (size_t i = 0; i < ARRAY_LEN(need); i++)
        if (csv_col(&c, need[i]) < 0) {
            err_set(err, "%s:1: no column '%s'", s->breakdown, need[i]);
            csv_free(&c);
            return -1;
        }
    /* the batch: as asked, or the one nearest 8 (geometrically) */
    int batch = want_batch;
    double bestd = INFINITY;
    bool found = false;
    for (int r = 0; r < c.nrows; r++) {
        double b;
        if (csv_num_at(&c, r, "batch", true, &b, err)) {
            csv_free(&c);
            return -1;
        }
        if (!(b >= 1))
            continue;
        if (want_batch) {
            found |= (int)b == want_batch;
        } else if (fabs(log(b / 8.0)) < bestd) {
            bestd = fabs(log(b / 8.0));
            batch = (int)b;
            found = true;
        }
    }
    if (!found) {
        err_set(err, "%s: no rows for batch %d", s->breakdown, want_batch);
        csv_free(&c);
        return -1;
    }
    enum { MAXL = 8, MAXP = 4, MAXK = 64 };
    char kinds[MAXL][40], paths[MAXP][40], kern[MAXK][64];
    double val[MAXL][MAXP][MAXK] = {{{0}}};
    bool any[MAXL][MAXP] = {{false}};
    int nl = 0, np = 0, nk = 0, rc = 0;
    for (int r = 0; r < c.nrows; r++) {
        double b, us;
        if ((rc = csv_num_at(&c, r, "batch", true, &b, err)) ||
            (rc = csv_num_at(&c, r, "us_per_layer", true, &us, err)))
            break;
        if ((int)b != batch || !isfinite(us))
            continue;
        char kname[64], pth[40], kind[40], pshort[40];
        clean_text(pth, sizeof pth, csv_str_at(&c, r, "path"));
        clean_text(kind, sizeof kind, csv_str_at(&c, r, "layer_kind"));
        clean_text(kname, sizeof kname, csv_str_at(&c, r, "kernel"));
        short_backend(pth, pshort, sizeof pshort);
        int l, p, k;
        for (l = 0; l < nl && strcmp(kinds[l], kind); l++)
            ;
        for (p = 0; p < np && strcmp(paths[p], pshort); p++)
            ;
        for (k = 0; k < nk && strcmp(kern[k], kname); k++)
            ;
        if (l == MAXL || p == MAXP || k == MAXK) {
            rc = err_set(err, "%s: more than %d layer kinds, %d paths or %d kernels",
                         s->breakdown, MAXL, MAXP, MAXK);
            break;
        }
        if (l == nl)
            snprintf(kinds[nl++], sizeof kinds[0], "%s", kind);
        if (p == np)
            snprintf(paths[np++], sizeof paths[0], "%s", pshort);
        if (k == nk)
            snprintf(kern[nk++], sizeof kern[0], "%s", kname);
        val[l][p][k] += us;
        any[l][p] = true;
    }
    csv_free(&c);
    if (rc)
        return -1;
    /* standard before specialized within each layer kind */
    for (int p = 1; p < np; p++)
        if (!strcmp(paths[p], "standard")) {
            for (int q = p; q > 0; q--) {
                char t[40];
                memcpy(t, paths[q], sizeof t);
                memcpy(paths[q], paths[q - 1], sizeof t);
                memcpy(paths[q - 1], t, sizeof t);
                for (int l = 0; l < nl; l++) {
                    bool ta = any[l][q];
                    any[l][q] = any[l][q - 1];
                    any[l][q - 1] = ta;
                    for (int k = 0; k < nk; k++) {
                        double tv = val[l][q][k];
                        val[l][q][k] = val[l][q - 1][k];
                        val[l][q - 1][k] = tv;
                    }
                }
            }
            break;
        }
    FILE *f = open_out(outdir, "breakdown_data.csv", err);
    if (!f)
        return -1;
    fprintf(f, "layer / path");
    for (int k = 0; k < nk; k++)
        fprintf(f, ",%s", kern[k]);
    fprintf(f, ",total_us\n");
    double tmax = 0;
    int nr = 0;
    for (int l = 0; l < nl; l++) {
        char kd[48];
        if (!strcmp(kinds[l], "step"))
            snprintf(kd, sizeof kd, "step");
        else if (strlen(kinds[l]) <= 4) {
            for (size_t i = 0; i <= strlen(kinds[l]); i++)
                kd[i] = (char)(kinds[l][i] >= 'a' && kinds[l][i] <= 'z' ? kinds[l][i] - 32
                                                                         : kinds[l][i]);
        } else
            snprintf(kd, sizeof kd, "%s", kinds[l]);
        if (l) { /* a gap between layer kinds */
            fprintf(f, "\" \""); /* (gnuplot misreads an empty quoted field) */
            for (int k = 0; k < nk; k++)
                fprintf(f, ",0");
            fprintf(f, ",\n");
            nr++;
        }
        for (int p = 0; p < np; p++) {
            if (!any[l][p])
                continue;
            double tot = 0;
            fprintf(f, "\"%s|%s\"", kd,
                    !strcmp(paths[p], "standard")      ? "std"
                    : !strcmp(paths[p], "specialized") ? "spec"
                                                       : paths[p]);
            for (int k = 0; k < nk; k++) {
                fprintf(f, ",%.6g", val[l][p][k]);
                tot += val[l][p][k];
            }
            fprintf(f, ",%.6g\n", tot);
            tmax = fmax(tmax, tot);
            nr++;
        }
    }
    if (close_out(f, outdir, "breakdown_data.csv", err))
        return -1;
    if (!nr)
        return 0;
    /* colours: one hue per kernel family (the name up to its first '_'),
     * lighter shades for its members */
    static const unsigned hues[] = {0x0072B2, 0xD55E00, 0x009E73, 0xCC79A7, 0xE69F00,
                                    0x56B4E9, 0x6A3D9A, 0xB8A300, 0x882255, 0x44AA99,
                                    0x8C564B, 0x555555};
    char fam[MAXK][24];
    int fam_of[MAXK], nf = 0, member[MAXK], fam_size[MAXK] = {0};
    char fams[MAXK][24];
    for (int k = 0; k < nk; k++) {
        size_t u = strcspn(kern[k], "_");
        u = u < sizeof fam[k] - 1 ? u : sizeof fam[k] - 1;
        memcpy(fam[k], kern[k], u);
        fam[k][u] = 0;
        int f2;
        for (f2 = 0; f2 < nf && strcmp(fams[f2], fam[k]); f2++)
            ;
        if (f2 == nf)
            memcpy(fams[nf++], fam[k], sizeof fams[0]);
        fam_of[k] = f2;
        member[k] = fam_size[f2]++;
    }
    struct sbuf col = {0};
    for (int k = 0; k < nk; k++) {
        unsigned h = hues[fam_of[k] % ARRAY_LEN(hues)];
        double t = fam_size[fam_of[k]] > 1 ? 0.65 * member[k] / (fam_size[fam_of[k]] - 1) : 0;
        int rgb[3] = {(int)(h >> 16) & 255, (int)(h >> 8) & 255, (int)h & 255};
        for (int i = 0; i < 3; i++)
            rgb[i] = (int)(rgb[i] + (255 - rgb[i]) * t + 0.5);
        sb_printf(&col, "%s#%02x%02x%02x", k ? " " : "", rgb[0], rgb[1], rgb[2]);
    }
    snprintf(ch->vars, sizeof ch->vars, "nk=%d; nr=%d; batch=%d; ymax=%.6g; colors='%s'", nk,
             nr, batch, tmax * 1.15, col.p);
    sb_free(&col);
    snprintf(ch->data, sizeof ch->data, "breakdown_data.csv");
    snprintf(ch->about, sizeof ch->about,
             "Where one decode step's time goes at batch %d: the engine's per-layer time of "
             "each kernel (microseconds per layer), standard against latency-specialized "
             "path, for each layer kind, stacked by kernel (kernels of one family share a "
             "hue); the number above each bar is the layer's total. From %.300s.",
             batch, s->breakdown);
    return 1;
}


/* fidelity_data.csv: x position, tick label (lines split by '|'),
 * predicted and published tok/s (published empty where none),
 * predicted/published, 1 for the specialized path. Rows of one setup sit
 * together; a gap separates setups, whose names and positions go to the
 * script (gnames, gx). The decode path is told by colour. */
int plot_write_fidelity(const struct set *s, const char *outdir, struct chart *ch,
                          char *err)
{
    struct csv c;
    if (csv_read(s->fidelity, &c, err))
        return -1;
    if (csv_col(&c, "predicted_tok_s") < 0) {
        err_set(err, "%s:1: no column 'predicted_tok_s'", s->fidelity);
        csv_free(&c);
        return -1;
    }
    /* GPU count and TP of the Kimi K3 rows: in the title when uniform, else
     * in each label. External validation rows (role "validation": other
     * models and GPUs, per-user tok/s) are labelled by TP and concurrency
     * under their GPU's group. */
    bool has_role = csv_col(&c, "role") >= 0, any_ext = false;
    double g0 = NAN, t0 = NAN;
    bool uniform = true;
    for (int r = 0, k = 0; r < c.nrows; r++) {
        double g, t;
        if (has_role && !strcmp(csv_str_at(&c, r, "role"), "validation")) {
            any_ext = true;
            continue;
        }
        if (csv_num_at(&c, r, "gpus", false, &g, err) || csv_num_at(&c, r, "tp", false, &t, err))
            break;
        if (k++ == 0) {
            g0 = g;
            t0 = t;
        } else if (!(g == g0 && t == t0)) {
            uniform = false;
        }
    }
    FILE *f = open_out(outdir, "fidelity_data.csv", err);
    if (!f) {
        csv_free(&c);
        return -1;
    }
    fprintf(f, "x,label,predicted_tok_s,published_tok_s,ratio,specialized\n");
    int n = 0, npub = 0, rc = 0, ng = 0;
    double lo = INFINITY, hi = 0, x = 0, gstart = 0;
    char prev[96] = "";
    struct sbuf gnames = {0}, gx = {0};
    sb_printf(&gnames, "%s", "");
    sb_printf(&gx, "%s", "");
    for (int r = 0; r < c.nrows && !rc; r++) {
        double pred, pub, batch, gpus, tp;
        if ((rc = csv_num_at(&c, r, "predicted_tok_s", true, &pred, err)) ||
            (rc = csv_num_at(&c, r, "published_tok_s", false, &pub, err)) ||
            (rc = csv_num_at(&c, r, "batch", false, &batch, err)) ||
            (rc = csv_num_at(&c, r, "gpus", false, &gpus, err)) ||
            (rc = csv_num_at(&c, r, "tp", false, &tp, err)))
            break;
        if (!(pred > 0))
            continue;
        char gpu[32], spec[48], acc[32], setup[96], label[200], raw_be[64];
        clean_text(gpu, sizeof gpu, csv_str_at(&c, r, "gpu"));
        clean_text(spec, sizeof spec, csv_str_at(&c, r, "spec"));
        clean_text(acc, sizeof acc, csv_str_at(&c, r, "acceptance"));
        clean_text(setup, sizeof setup, csv_str_at(&c, r, "setup"));
        clean_text(raw_be, sizeof raw_be, csv_str_at(&c, r, "backend"));
        for (char *q = setup; *q; q++)
            if (*q == ' ')
                *q = '-';
        if (n == 0 || strcmp(setup, prev)) {
            if (n) {
                sb_printf(&gx, "%s%.2f", ng > 1 ? " " : "", (gstart + x - 1) / 2);
                x += 0.6;
            }
            sb_printf(&gnames, "%s%s%s%s%s", ng ? " " : "", *setup ? setup : "-",
                      *gpu && !strstr(setup, gpu) ? "|(" : "", *gpu && !strstr(setup, gpu) ? gpu : "",
                      *gpu && !strstr(setup, gpu) ? ")" : "");
            ng++;
            gstart = x;
            scopy(prev, sizeof prev, setup);
        }
        int l = 0;
        label[0] = 0;
        bool ext = has_role && !strcmp(csv_str_at(&c, r, "role"), "validation");
        if (ext)
            l = snprintf(label, sizeof label, "TP%d|c=%d", (int)tp, (int)batch);
        else if (!uniform && isfinite(gpus))
            l = snprintf(label, sizeof label, "%dx TP%d|", (int)gpus, (int)tp);
        if (isfinite(batch) && !ext)
            l += snprintf(label + l, sizeof label - (size_t)l, "b=%d", (int)batch);
        if (!ext && *spec && strcmp(spec, "none") && strcmp(spec, "off") && strcmp(spec, "-"))
            snprintf(label + l, sizeof label - (size_t)l, "|%s%s%s", spec, *acc ? "|a=" : "", acc);
        if (pub > 0) /* room for the published bar beside */
            x += 0.4;
        fprintf(f, "%.2f,\"%s\",%.6g,", x, label, pred);
        plot_csv_num(f, pub > 0 ? pub : NAN);
        fputc(',', f);
        plot_csv_num(f, pub > 0 ? pred / pub : NAN);
        fprintf(f, ",%d\n", strstr(raw_be, "special") != NULL);
        lo = fmin(lo, pred);
        hi = fmax(hi, pred);
        if (pub > 0) {
            lo = fmin(lo, pub);
            hi = fmax(hi, pub);
            npub++;
        }
        n++;
        x += pub > 0 ? 1.4 : 1;
    }
    if (n)
        sb_printf(&gx, "%s%.2f", ng > 1 ? " " : "", (gstart + x - 1) / 2);
    csv_free(&c);
    if (close_out(f, outdir, "fidelity_data.csv", err) || rc || !n) {
        sb_free(&gnames);
        sb_free(&gx);
        return rc || n ? -1 : 0;
    }
    char sub[64] = "";
    if (uniform && isfinite(g0) && isfinite(t0))
        snprintf(sub, sizeof sub, "%s%d GPUs, TP%d", any_ext ? "Kimi K3: " : "", (int)g0, (int)t0);
    snprintf(ch->vars, sizeof ch->vars,
             "n=%d; xmax=%.2f; logy=%d; npub=%d; sub='%s'; gnames='%s'; gx='%s'%s", n, x - 1,
             want_log(lo, hi, 20), npub, sub, gnames.p, gx.p,
             any_ext ? "; ylab='tok/s: Kimi K3 aggregate decode; external: per user (1000 / TPOT)'; "
                       "pubtitle='published; ratio = predicted / published'"
                     : "");
    sb_free(&gnames);
    sb_free(&gx);
    snprintf(ch->data, sizeof ch->data, "fidelity_data.csv");
    snprintf(ch->about, sizeof ch->about,
             "The engine's predicted aggregate decode throughput (tok/s; all requests' "
             "tokens after their first over the decode phase) for each setup (b = batch "
             "size; dspark a=N = speculative decoding with N tokens accepted per step), "
             "grouped by setup, beside the published figure where one exists (the "
             "calibration point); the ratio predicted / published is written above each "
             "published bar. Groups named ext-MODEL-GPU are published measurements of other "
             "models (engine/presets/validation/external.json) in per-user tok/s (1000 / "
             "TPOT), labelled by TP and benchmark concurrency c. From %.300s.",
             s->fidelity);
    return 1;
}
