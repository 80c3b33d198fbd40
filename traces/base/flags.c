/* flags.c: the command-line grammar, its checks and the generated help
 * (flags.h). */
#include "traces/base/flags.h"

#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "traces/base/err.h"
#include "traces/base/mem.h"
#include "traces/base/parse.h"

/* Column where help text starts. */
#define HELP_COL 30

static void *at(void *base, size_t off) { return (char *)base + off; }

/* The choice names shown in help and messages ("a|b|c"), aliases left out. */
static void choice_names(const struct flag_choice *c, const char *sep, char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = 0;
    for (; c && c->name; c++) {
        if (c->alias)
            continue;
        int w = snprintf(buf + k, n - k, "%s%s", k ? sep : "", c->name);
        if (w < 0 || (size_t)w >= n - k)
            break;
        k += (size_t)w;
    }
}

static const struct flag_choice *choice_find(const struct flag_choice *c, const char *name)
{
    for (; c && c->name; c++)
        if (!strcmp(c->name, name))
            return c;
    return NULL;
}

/* Bounds of an integer-valued flag: a message naming the flag and value. */
static int check_int(const struct flag *f, const char *name, const char *v, int64_t x, char *err)
{
    char lo[48], hi[48];
    if (f->kind == FLAG_DURATION) {
        parse_duration_format(f->min, lo, sizeof lo);
        parse_duration_format(f->max, hi, sizeof hi);
    } else {
        snprintf(lo, sizeof lo, "%" PRId64, f->min);
        snprintf(hi, sizeof hi, "%" PRId64, f->max);
    }
    if ((f->opts & FLAG_OPEN_MIN) && x <= f->min)
        return err_set(err, "%s %s: must be > %s", name, v, lo);
    if (x < f->min)
        return err_set(err, "%s %s: must be at least %s", name, v, lo);
    if (x > f->max)
        return err_set(err, "%s %s: must be at most %s", name, v, hi);
    return 0;
}

static int parse_list(const struct flag *f, const char *name, const char *v, struct flag_list *out,
                      char *err)
{
    struct flag_list l = {0};
    char names[256];
    choice_names(f->choices, ", ", names, sizeof names);
    const char *p = v;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[128];
        if (len >= sizeof item)
            return err_set(err, "%s '%s': item too long", name, v);
        memcpy(item, p, len);
        item[len] = 0;
        if (!len) { /* "1,,2" is "1,2" */
            if (!comma)
                break;
            p = comma + 1;
            continue;
        }
        if (l.n == FLAG_LIST_MAX)
            return err_set(err, "%s '%s': more than %d items", name, v, FLAG_LIST_MAX);
        if (f->choices) {
            const struct flag_choice *c = choice_find(f->choices, item);
            if (!c)
                return err_set(err, "%s '%s': unknown item '%s' (%s)", name, v, item, names);
            l.v[l.n++] = c->value;
        } else {
            int64_t x;
            char e2[ERR_LEN];
            if (parse_i64(item, &x, e2))
                return err_set(err, "%s '%s': item '%s': %s", name, v, item, e2);
            if (check_int(f, name, item, x, err))
                return -1;
            l.v[l.n++] = (int)x;
        }
        if (!comma)
            break;
        p = comma + 1;
    }
    if (!l.n)
        return err_set(err, "%s '%s': an empty list", name, v);
    *out = l;
    return 0;
}

int flags_set(const struct flag *f, void *group, const char *name, const char *v, char *err)
{
    void *dst = at(group, f->off);
    char e2[ERR_LEN] = "";
    int64_t x;
    ASSERT(f->kind == FLAG_BOOL || v);
    switch (f->kind) {
    case FLAG_BOOL:
        *(bool *)dst = f->value;
        break;
    case FLAG_INT:
    case FLAG_INT64:
    case FLAG_DURATION:
        if ((f->opts & FLAG_NONE) && !strcmp(v, "none")) {
            x = -1;
        } else {
            int rc = f->kind == FLAG_DURATION ? parse_duration(v, &x, e2) : parse_i64(v, &x, e2);
            if (rc)
                return err_set(err, "%s '%s': %s", name, v, e2);
            if (check_int(f, name, v, x, err))
                return -1;
        }
        if (f->kind == FLAG_INT)
            *(int *)dst = (int)x;
        else
            *(int64_t *)dst = x;
        break;
    case FLAG_U64: {
        uint64_t u;
        if (parse_u64(v, &u, e2))
            return err_set(err, "%s '%s': %s", name, v, e2);
        *(uint64_t *)dst = u;
        break;
    }
    case FLAG_DOUBLE: {
        double d;
        if (parse_double(v, &d, e2))
            return err_set(err, "%s '%s': %s", name, v, e2);
        if ((f->opts & FLAG_OPEN_MIN) && !(d > f->fmin))
            return err_set(err, "%s %s: must be > %g", name, v, f->fmin);
        if (d < f->fmin)
            return err_set(err, "%s %s: must be at least %g", name, v, f->fmin);
        if (d > f->fmax)
            return err_set(err, "%s %s: must be at most %g", name, v, f->fmax);
        *(double *)dst = d;
        break;
    }
    case FLAG_STR:
        if (f->max_len && strlen(v) > f->max_len)
            return err_set(err, "%s: a value longer than %zu characters", name, f->max_len);
        *(const char **)dst = v;
        break;
    case FLAG_BUF:
        if (strlen(v) >= f->size)
            return err_set(err, "%s: a value longer than %zu characters", name, f->size - 1);
        memcpy(dst, v, strlen(v) + 1);
        break;
    case FLAG_CHOICE: {
        const struct flag_choice *c = choice_find(f->choices, v);
        if (!c) {
            char names[256];
            choice_names(f->choices, ", ", names, sizeof names);
            return err_set(err, "%s '%s': expected one of %s", name, v, names);
        }
        if (f->size == sizeof(bool))
            *(bool *)dst = c->value != 0;
        else
            *(int *)dst = c->value;
        break;
    }
    case FLAG_LIST:
        if (parse_list(f, name, v, (struct flag_list *)dst, err))
            return -1;
        break;
    case FLAG_CUSTOM:
        if (f->parse(name, v, group, err))
            return -1;
        break;
    }
    if (f->seen)
        *(bool *)at(group, f->seen - 1) = true;
    return 0;
}

const struct flag *flags_find(const struct flag *table, const char *name)
{
    for (const struct flag *f = table; f && f->name; f++)
        if (!strcmp(f->name, name))
            return f;
    return NULL;
}

/* Splits argv[i] into the flag's name as typed and an "=value" part.
 * Returns false when it is not a flag. */
static bool split_flag(const char *a, char *name, size_t n, const char **val)
{
    *val = NULL;
    if (a[0] != '-' || !a[1])
        return false;
    const char *eq = a[1] == '-' ? strchr(a, '=') : NULL;
    size_t len = eq ? (size_t)(eq - a) : strlen(a);
    if (len >= n)
        len = n - 1;
    memcpy(name, a, len);
    name[len] = 0;
    if (eq)
        *val = eq + 1;
    return true;
}

static bool matches(const struct flag *f, const char *name)
{
    if (name[1] == '-')
        return !strcmp(f->name, name);
    return f->alias && name[1] == f->alias && !name[2];
}

int flags_parse(const struct flag_spec *spec, void *opts, int argc, char **argv,
                const char **operands, int *n_operands, char *err)
{
    int n_ops = 0;
    bool only_operands = false;
    if (n_operands)
        *n_operands = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        char name[128];
        const char *val;
        if (only_operands || !split_flag(a, name, sizeof name, &val)) {
            if (!spec->operands)
                return err_set(err, "unexpected argument '%s' (see --help)", a);
            if (spec->max_operands >= 0 && n_ops >= spec->max_operands)
                return err_set(err, "too many arguments at '%s' (expected %s)", a, spec->operands);
            if (operands)
                operands[n_ops] = a;
            n_ops++;
            continue;
        }
        if (!strcmp(a, "--")) {
            only_operands = true;
            continue;
        }
        if (!strcmp(name, "--help") || !strcmp(name, "-h"))
            return FLAGS_HELP;
        /* Every group's flag of that name, up to one that shadows the rest. */
        const struct flag *hit[FLAG_GROUPS_MAX];
        void *base[FLAG_GROUPS_MAX];
        int n_hit = 0;
        for (int g = 0; g < FLAG_GROUPS_MAX && spec->groups[g].flags; g++) {
            const struct flag *f = spec->groups[g].flags;
            for (; f->name && !matches(f, name); f++) {
            }
            if (!f->name)
                continue;
            hit[n_hit] = f;
            base[n_hit++] = at(opts, spec->groups[g].off);
            if (f->opts & FLAG_SHADOW)
                break;
        }
        if (!n_hit)
            return err_set(err, "unknown flag '%s' (see --help)", name);
        if (hit[0]->kind == FLAG_BOOL) {
            if (val)
                return err_set(err, "%s takes no value", name);
        } else if (!val) {
            if (i + 1 >= argc)
                return err_set(err, "%s needs a value", name);
            val = argv[++i];
        }
        for (int k = 0; k < n_hit; k++) {
            if ((hit[k]->kind == FLAG_BOOL) != (hit[0]->kind == FLAG_BOOL))
                return err_set(err, "%s: defined with and without a value", name);
            if (flags_set(hit[k], base[k], name, val, err))
                return -1;
        }
    }
    if (n_ops < spec->min_operands)
        return err_set(err, "expected %s (see --help)", spec->operands);
    if (n_operands)
        *n_operands = n_ops;
    return 0;
}

int flags_parse_one(const struct flag *table, void *dst, int argc, char **argv, int *i, char *err)
{
    char name[128];
    const char *val;
    if (*i >= argc || !split_flag(argv[*i], name, sizeof name, &val))
        return 0;
    const struct flag *f = table;
    for (; f->name && !matches(f, name); f++) {
    }
    if (!f->name)
        return 0;
    int next = *i + 1;
    if (f->kind == FLAG_BOOL) {
        if (val)
            return err_set(err, "%s takes no value", name);
    } else if (!val) {
        if (next >= argc)
            return err_set(err, "%s needs a value", name);
        val = argv[next++];
    }
    if (flags_set(f, dst, name, val, err))
        return -1;
    *i = next;
    return 1;
}

/* ---- help ---------------------------------------------------------------- */

/* The default a flag shows: from `def`, or its initialised value. */
static void default_text(const struct flag *f, const void *group, char *buf, size_t n)
{
    buf[0] = 0;
    if (f->def) {
        snprintf(buf, n, "%s", f->def);
        return;
    }
    const void *p = (const char *)group + f->off;
    switch (f->kind) {
    case FLAG_BOOL:
    case FLAG_CUSTOM:
        break;
    case FLAG_INT:
        if ((f->opts & FLAG_NONE) && *(const int *)p < 0)
            snprintf(buf, n, "none");
        else
            snprintf(buf, n, "%d", *(const int *)p);
        break;
    case FLAG_INT64:
        if ((f->opts & FLAG_NONE) && *(const int64_t *)p < 0)
            snprintf(buf, n, "none");
        else
            snprintf(buf, n, "%" PRId64, *(const int64_t *)p);
        break;
    case FLAG_U64:
        snprintf(buf, n, "%" PRIu64, *(const uint64_t *)p);
        break;
    case FLAG_DOUBLE:
        snprintf(buf, n, "%g", *(const double *)p);
        break;
    case FLAG_DURATION:
        parse_duration_format(*(const int64_t *)p, buf, (int)n);
        break;
    case FLAG_STR:
        if (*(const char *const *)p)
            snprintf(buf, n, "%s", *(const char *const *)p);
        break;
    case FLAG_BUF:
        snprintf(buf, n, "%s", (const char *)p);
        break;
    case FLAG_CHOICE: {
        int v = f->size == sizeof(bool) ? *(const bool *)p : *(const int *)p;
        for (const struct flag_choice *c = f->choices; c->name; c++)
            if (c->value == v && !c->alias) {
                snprintf(buf, n, "%s", c->name);
                break;
            }
        break;
    }
    case FLAG_LIST: {
        const struct flag_list *l = p;
        size_t k = 0;
        for (int i = 0; i < l->n && k < n; i++) {
            const char *nm = NULL;
            for (const struct flag_choice *c = f->choices; c && c->name && !nm; c++)
                if (c->value == l->v[i] && !c->alias)
                    nm = c->name;
            int w = nm ? snprintf(buf + k, n - k, "%s%s", i ? "," : "", nm)
                       : snprintf(buf + k, n - k, "%s%d", i ? "," : "", l->v[i]);
            if (w < 0)
                break;
            k += (size_t)w;
        }
        break;
    }
    }
}

/* The value's name in help. */
static void arg_text(const struct flag *f, char *buf, size_t n)
{
    buf[0] = 0;
    if (f->kind == FLAG_BOOL)
        return;
    if (f->arg) {
        snprintf(buf, n, "%s", f->arg);
        return;
    }
    switch (f->kind) {
    case FLAG_INT:
    case FLAG_INT64:
    case FLAG_U64:
        snprintf(buf, n, "N");
        break;
    case FLAG_DOUBLE:
        snprintf(buf, n, "X");
        break;
    case FLAG_DURATION:
        snprintf(buf, n, "%s", f->opts & FLAG_NONE ? "S|none" : "S");
        break;
    case FLAG_CHOICE:
        choice_names(f->choices, "|", buf, n);
        break;
    case FLAG_LIST:
        if (f->choices) {
            choice_names(f->choices, ",", buf, n);
        } else {
            snprintf(buf, n, "N,N,...");
        }
        break;
    default:
        snprintf(buf, n, "TEXT");
        break;
    }
}

static bool listed_before(const struct flag_spec *spec, int g, const struct flag *f)
{
    for (int k = 0; k < g; k++)
        if (flags_find(spec->groups[k].flags, f->name))
            return true;
    return false;
}

static void print_lines(FILE *out, const char *text)
{
    if (!text)
        return;
    fputs(text, out);
    if (*text && text[strlen(text) - 1] != '\n')
        fputc('\n', out);
}

void flags_help(const struct flag_spec *spec, FILE *out)
{
    void *opts = xcalloc(1, spec->size ? spec->size : 1);
    if (spec->init)
        spec->init(opts);
    /* usage: each line after the first indented under the first */
    fputs("usage: ", out);
    for (const char *p = spec->usage; *p; p++) {
        fputc(*p, out);
        if (*p == '\n' && p[1])
            fputs("       ", out);
    }
    if (spec->usage[0] && spec->usage[strlen(spec->usage) - 1] != '\n')
        fputc('\n', out);
    print_lines(out, spec->about);
    bool headed = false;
    for (int g = 0; g < FLAG_GROUPS_MAX && spec->groups[g].flags; g++) {
        const struct flag_group *gr = &spec->groups[g];
        bool head = !gr->title && headed;
        for (const struct flag *f = gr->flags; f->name; f++) {
            if (listed_before(spec, g, f))
                continue;
            if (!head) {
                fprintf(out, "\n%s%s", gr->title ? gr->title : "flags", ":\n");
                head = headed = true;
            }
            char arg[256], left[320], def[256];
            arg_text(f, arg, sizeof arg);
            if (f->alias)
                snprintf(left, sizeof left, "  -%c, %s%s%s", f->alias, f->name, *arg ? " " : "", arg);
            else
                snprintf(left, sizeof left, "  %s%s%s", f->name, *arg ? " " : "", arg);
            default_text(f, at(opts, gr->off), def, sizeof def);
            int col = (int)strlen(left);
            fputs(left, out);
            if (col >= HELP_COL - 1) {
                fputc('\n', out);
                col = 0;
            }
            const char *h = f->help ? f->help : "";
            for (;;) {
                const char *nl = strchr(h, '\n');
                int len = nl ? (int)(nl - h) : (int)strlen(h);
                fprintf(out, "%*s%.*s", HELP_COL - col, "", len, h);
                col = HELP_COL;
                if (!nl)
                    break;
                fputc('\n', out);
                col = 0;
                h = nl + 1;
            }
            if (*def)
                fprintf(out, " [%s]", def);
            fputc('\n', out);
        }
    }
    if (spec->notes) {
        fputc('\n', out);
        print_lines(out, spec->notes);
    }
    free(opts);
}

/* ---- checks -------------------------------------------------------------- */

static size_t kind_size(const struct flag *f)
{
    switch (f->kind) {
    case FLAG_BOOL: return sizeof(bool);
    case FLAG_INT: return sizeof(int);
    case FLAG_INT64:
    case FLAG_DURATION: return sizeof(int64_t);
    case FLAG_U64: return sizeof(uint64_t);
    case FLAG_DOUBLE: return sizeof(double);
    case FLAG_STR: return sizeof(const char *);
    case FLAG_LIST: return sizeof(struct flag_list);
    case FLAG_CHOICE: return f->size == sizeof(bool) ? sizeof(bool) : sizeof(int);
    case FLAG_BUF:
    case FLAG_CUSTOM: return f->size;
    }
    return 0;
}

int flags_verify(const struct flag_spec *spec, char *err)
{
    if (!spec->usage || !spec->size)
        return err_set(err, "a spec needs a usage line and an options size");
    if (!spec->operands && (spec->min_operands || spec->max_operands))
        return err_set(err, "%s: operand counts without operands", spec->usage);
    for (int g = 0; g < FLAG_GROUPS_MAX && spec->groups[g].flags; g++) {
        const struct flag_group *gr = &spec->groups[g];
        for (const struct flag *f = gr->flags; f->name; f++) {
            const char *nm = f->name;
            if (strncmp(nm, "--", 2) || !nm[2] || strchr(nm, '=') || strchr(nm, ' '))
                return err_set(err, "'%s': a flag name is --name", nm);
            if (!strcmp(nm, "--help"))
                return err_set(err, "--help is every command's own");
            if (f->alias && (!isalnum((unsigned char)f->alias) || f->alias == 'h'))
                return err_set(err, "%s: bad alias '%c'", nm, f->alias);
            if (!f->help || !f->help[0])
                return err_set(err, "%s: no help text", nm);
            for (const struct flag *o = gr->flags; o != f; o++)
                if (!strcmp(o->name, nm) || (f->alias && o->alias == f->alias))
                    return err_set(err, "%s: twice in one table", nm);
            if (f->size != kind_size(f) || !f->size)
                return err_set(err, "%s: destination of %zu bytes for its kind", nm, f->size);
            if (gr->off + f->off + f->size > spec->size)
                return err_set(err, "%s: destination outside the options", nm);
            if (f->seen && gr->off + f->seen - 1 + sizeof(bool) > spec->size)
                return err_set(err, "%s: seen flag outside the options", nm);
            if ((f->kind == FLAG_CHOICE) && (!f->choices || !f->choices[0].name))
                return err_set(err, "%s: a choice without names", nm);
            bool ints = f->kind == FLAG_INT || f->kind == FLAG_INT64 || f->kind == FLAG_DURATION ||
                        (f->kind == FLAG_LIST && !f->choices);
            if (ints && f->min > f->max)
                return err_set(err, "%s: min above max", nm);
            if (f->kind == FLAG_INT && (f->min < INT32_MIN || f->max > INT32_MAX))
                return err_set(err, "%s: int bounds beyond int", nm);
            if (f->kind == FLAG_LIST && !f->choices && (f->min < INT32_MIN || f->max > INT32_MAX))
                return err_set(err, "%s: list bounds beyond int", nm);
            if (f->kind == FLAG_DOUBLE && !(f->fmin <= f->fmax))
                return err_set(err, "%s: fmin above fmax", nm);
            if (f->kind == FLAG_CUSTOM && (!f->parse || !f->example || !f->arg))
                return err_set(err, "%s: a custom flag needs parse, arg and example", nm);
            /* one name in several groups: all with a value or all without */
            for (int k = 0; k < g; k++) {
                const struct flag *o = flags_find(spec->groups[k].flags, nm);
                if (o && (o->kind == FLAG_BOOL) != (f->kind == FLAG_BOOL))
                    return err_set(err, "%s: with a value in one group, without in another", nm);
                if (o && o->alias != f->alias)
                    return err_set(err, "%s: different aliases in two groups", nm);
                for (o = spec->groups[k].flags; f->alias && o->name; o++)
                    if (o->alias == f->alias && strcmp(o->name, nm))
                        return err_set(err, "-%c: the alias of %s and %s", f->alias, o->name, nm);
            }
        }
    }
    return 0;
}
