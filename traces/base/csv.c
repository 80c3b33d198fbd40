/* csv.c: the result-table reader (csv.h). */
#include "traces/base/csv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "traces/base/err.h"
#include "traces/base/file.h"
#include "traces/base/mem.h"

void csv_free(struct csv *c)
{
    for (int i = 0; i < c->ncol; i++)
        free(c->hdr[i]);
    free(c->hdr);
    for (int r = 0; r < c->nrows; r++) {
        for (int i = 0; i < c->ncol; i++)
            free(c->rows[r][i]);
        free(c->rows[r]);
    }
    free(c->rows);
    free(c->line);
    memset(c, 0, sizeof *c);
}

/* One field from *s (a quoted part, then anything up to a comma or the
 * end of the line); advances *s to the comma or the end. */
static char *field(const char **s)
{
    const char *p = *s;
    size_t cap = strlen(p) + 1, n = 0;
    char *f = xmalloc(cap);
    if (*p == '"') {
        p++;
        while (*p) {
            if (*p == '"' && p[1] == '"') {
                f[n++] = '"';
                p += 2;
            } else if (*p == '"') {
                p++;
                break;
            } else {
                f[n++] = *p++;
            }
        }
    }
    while (*p && *p != ',' && *p != '\r' && *p != '\n')
        f[n++] = *p++;
    f[n] = 0;
    *s = p;
    return f;
}

/* Splits one line into fields; returns the count. */
static int split(const char *s, char ***out)
{
    int n = 0, cap = 8;
    char **f = xmalloc(sizeof *f * (size_t)cap);
    for (;;) {
        if (n == cap) {
            cap *= 2;
            f = xrealloc(f, sizeof *f * (size_t)cap);
        }
        f[n++] = field(&s);
        if (*s != ',')
            break;
        s++;
    }
    *out = f;
    return n;
}

int csv_read(const char *path, struct csv *c, char *err)
{
    memset(c, 0, sizeof *c);
    snprintf(c->path, sizeof c->path, "%s", path);
    size_t len;
    char *text = file_read(path, &len, err);
    if (!text)
        return -1;
    int lineno = 0, cap = 0;
    char *next = text;
    for (char *ln = text; next; ln = next) {
        next = strchr(ln, '\n');
        if (next)
            *next++ = 0;
        lineno++;
        size_t l = strlen(ln);
        if (l && ln[l - 1] == '\r')
            ln[--l] = 0;
        if (!l)
            continue;
        char **f;
        int k = split(ln, &f);
        if (!c->hdr) {
            c->hdr = f;
            c->ncol = k;
            continue;
        }
        if (k > c->ncol) {
            for (int i = 0; i < k; i++)
                free(f[i]);
            free(f);
            free(text);
            err_set(err, "%s:%d: %d fields, the header has %d", path, lineno, k, c->ncol);
            csv_free(c);
            return -1;
        }
        if (k < c->ncol) {
            f = xrealloc(f, sizeof *f * (size_t)c->ncol);
            for (int i = k; i < c->ncol; i++)
                f[i] = xstrdup("");
        }
        if (c->nrows == cap) {
            cap = cap ? cap * 2 : 16;
            c->rows = xrealloc(c->rows, sizeof *c->rows * (size_t)cap);
            c->line = xrealloc(c->line, sizeof *c->line * (size_t)cap);
        }
        c->line[c->nrows] = lineno;
        c->rows[c->nrows++] = f;
    }
    free(text);
    if (!c->hdr)
        return err_set(err, "%s: empty file (no header)", path);
    return 0;
}

int csv_col(const struct csv *c, const char *name)
{
    for (int i = 0; i < c->ncol; i++)
        if (!strcmp(c->hdr[i], name))
            return i;
    return -1;
}

int csv_num_at(const struct csv *c, int r, const char *name, bool required, double *v, char *err)
{
    int i = csv_col(c, name);
    *v = NAN;
    if (i < 0)
        return required ? err_set(err, "%s:1: no column '%s'", c->path, name) : 0;
    const char *s = c->rows[r][i];
    while (*s == ' ')
        s++;
    if (!*s)
        return 0;
    char *end;
    double x = strtod(s, &end);
    while (*end == ' ')
        end++;
    if (*end)
        return err_set(err, "%s:%d: column %s: '%s' is not a number", c->path, c->line[r], name,
                       c->rows[r][i]);
    *v = x;
    return 0;
}

const char *csv_str_at(const struct csv *c, int r, const char *name)
{
    int i = csv_col(c, name);
    return i < 0 ? "" : c->rows[r][i];
}
