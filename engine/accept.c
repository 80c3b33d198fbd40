/* accept.c: acceptance models for speculative decoding (accept.h).
 *
 * The default curve: p(i) = A * R^(i-1), the conditional acceptance of
 * draft position i, fitted by least squares on the expected length
 * 1 + sum_j prod_{i<=j} p(i) to the four measured mean lengths of DSpark
 * on Kimi K3 (kimi-k3.md: 3.84 at draft 7, 3.36 at 4, 3.00 at 3, 2.51 at
 * 2). Grid search over A in [0.6, 1), R in [0.6, 1] at 0.002 steps:
 * A = 0.838, R = 0.946; the fit gives 3.832, 3.354, 3.001, 2.502 (all
 * within 0.3 %). A constant rate (R = 1) cannot fit all four, as the
 * reference notes: acceptance falls with draft position. */
#include "engine/accept.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "traces/base/err.h"

#define CURVE_A 0.838
#define CURVE_R 0.946

double accept_curve_p(int position)
{
    if (position < 1)
        return 1.0;
    return CURVE_A * pow(CURVE_R, position - 1);
}

int accept_parse(const char *spec, int draft, struct accept_model *out, char *err)
{
    memset(out, 0, sizeof *out);
    if (draft < 1 || draft > ACCEPT_MAX_DRAFT)
        return err_set(err, "draft length %d out of range (1..%d)", draft,
                       ACCEPT_MAX_DRAFT);
    out->draft = draft;
    if (!spec || !*spec || strcmp(spec, "curve") == 0) {
        out->kind = ACCEPT_CURVE;
        for (int i = 0; i < draft; i++)
            out->p[i] = accept_curve_p(i + 1);
        return 0;
    }
    if (strncmp(spec, "fixed:", 6) == 0) {
        char *end;
        double a = strtod(spec + 6, &end);
        if (end == spec + 6 || *end || !isfinite(a))
            return err_set(err, "acceptance '%s': expected fixed:A with a number A", spec);
        if (a < 1)
            return err_set(err, "acceptance fixed:%g below the minimum 1 (the bonus token)", a);
        if (a > draft + 1)
            return err_set(err, "acceptance fixed:%g above draft + 1 = %d", a, draft + 1);
        out->kind = ACCEPT_FIXED;
        out->fixed_len = a;
        /* The equivalent per-position array: the first floor(a)-1
         * positions always accepted, the next with the fractional part. */
        double acc = a - 1;
        for (int i = 0; i < draft; i++) {
            double pi = acc >= 1 ? 1 : (acc > 0 ? acc : 0);
            out->p[i] = pi;
            acc -= 1;
            if (pi < 1)
                break;
        }
        return 0;
    }
    if (strncmp(spec, "p:", 2) == 0) {
        out->kind = ACCEPT_PROBS;
        const char *s = spec + 2;
        int n = 0;
        while (*s) {
            char *end;
            double v = strtod(s, &end);
            if (end == s || !isfinite(v))
                return err_set(err, "acceptance '%s': bad probability at position %d", spec, n + 1);
            if (v < 0 || v > 1)
                return err_set(err, "acceptance '%s': probability %g at position %d outside [0, 1]",
                               spec, v, n + 1);
            if (n >= ACCEPT_MAX_DRAFT)
                return err_set(err, "acceptance '%s': more than %d positions", spec, ACCEPT_MAX_DRAFT);
            out->p[n++] = v;
            s = end;
            if (*s == ',')
                s++;
            else if (*s)
                return err_set(err, "acceptance '%s': expected ',' after position %d", spec, n);
        }
        if (n == 0)
            return err_set(err, "acceptance '%s': no probabilities", spec);
        for (int i = n; i < ACCEPT_MAX_DRAFT; i++)
            out->p[i] = out->p[n - 1];
        return 0;
    }
    return err_set(err, "acceptance '%s': expected curve, fixed:A or p:P1,P2,...", spec);
}

double accept_expected_len(const struct accept_model *a, int draft)
{
    if (a->kind == ACCEPT_FIXED)
        return a->fixed_len < draft + 1 ? a->fixed_len : draft + 1;
    if (draft > ACCEPT_MAX_DRAFT)
        draft = ACCEPT_MAX_DRAFT;
    double len = 1, c = 1;
    for (int i = 0; i < draft; i++) {
        c *= a->p[i];
        len += c;
    }
    return len;
}

void accept_format(const struct accept_model *a, char *buf, int n)
{
    const char *k = a->kind == ACCEPT_CURVE ? "curve" : a->kind == ACCEPT_FIXED ? "fixed" : "p";
    int off = snprintf(buf, n, "%s p=", k);
    for (int i = 0; i < a->draft && off < n; i++)
        off += snprintf(buf + off, n - off, "%s%.3f", i ? "," : "", a->p[i]);
    if (off < n)
        snprintf(buf + off, n - off, "; E[len]=%.3f at draft %d",
                 accept_expected_len(a, a->draft), a->draft);
}
