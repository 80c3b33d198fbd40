/* plot_render.c: gnuplot: finding it, the scripts and render.sh beside
 * the data, and rendering every chart (plot_data.h). */
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plots/plot_data.h"
#include "traces/base/err.h"
#include "traces/base/mem.h"
#include "traces/base/file.h"

/* Finds gnuplot: AGENTREPLAY_GNUPLOT (a path) or PATH. */
static int find_gnuplot(char *buf, size_t n, char *why)
{
    const char *env = getenv("AGENTREPLAY_GNUPLOT");
    if (env && *env) {
        snprintf(buf, n, "%s", env);
        if (access(buf, X_OK) == 0)
            return 0;
        return err_set(why, "gnuplot not found: AGENTREPLAY_GNUPLOT=%s is not an executable",
                       env);
    }
    const char *path = getenv("PATH");
    char dirs[8192];
    snprintf(dirs, sizeof dirs, "%s", path && *path ? path : "/usr/local/bin:/usr/bin:/bin");
    char *save = NULL;
    for (char *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(buf, n, "%s/gnuplot", *d ? d : ".");
        if (access(buf, X_OK) == 0)
            return 0;
    }
    return err_set(why, "gnuplot not found on PATH (install gnuplot-nox, or set "
                        "AGENTREPLAY_GNUPLOT to its path)");
}

const char *const plot_fmt_name[2] = {"png", "svg"};

static void chart_expr(const struct chart *ch, int fmt, const struct plot_opts *o, char *buf,
                       size_t n)
{
    snprintf(buf, n, "fmt='%s'; out='%s.%s'; W=%d; H=%d; data='%s'; %s", plot_fmt_name[fmt],
             ch->name, plot_fmt_name[fmt], o->width_px, o->height_px, ch->data, ch->vars);
}

/* Runs gnuplot in outdir with stderr appended to gnuplot.log. Returns the
 * exit status, or -1 if it could not run. */
static int run_gnuplot(const char *gp, const char *outdir, const char *expr, const char *script)
{
    char logp[PATH_MAX + 32];
    snprintf(logp, sizeof logp, "%s/gnuplot.log", outdir);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int null = open("/dev/null", O_RDWR);
        int log = open(logp, O_WRONLY | O_CREAT | O_APPEND, 0666);
        if (null < 0 || log < 0 || chdir(outdir) != 0)
            _exit(127);
        dup2(null, 0);
        dup2(null, 1);
        dup2(log, 2);
        execl(gp, gp, "-e", expr, script, (char *)NULL);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

static long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* First line of the log from byte offset `from`, into dst. */
static void log_line(const char *logp, long from, char *dst, size_t n)
{
    dst[0] = 0;
    FILE *f = fopen(logp, "r");
    if (!f)
        return;
    fseek(f, from, SEEK_SET);
    char buf[512];
    while (fgets(buf, sizeof buf, f)) {
        buf[strcspn(buf, "\n")] = 0;
        if (buf[strspn(buf, " ^")]) {
            scopy(dst, n, buf);
            break;
        }
    }
    fclose(f);
}

static int copy_script(const char *name, const char *outdir, char *err)
{
    char rel[128], src[PATH_MAX], dst[PATH_MAX + 64];
    snprintf(rel, sizeof rel, "plots/%s", name);
    if (file_data_path(rel, src, sizeof src))
        return err_set(err, "%s: gnuplot script not found (looked beside the program, under "
                            "%s and in the current folder)",
                       rel, AGENTREPLAY_DATADIR);
    size_t len;
    char *text = file_read(src, &len, err);
    if (!text)
        return -1;
    snprintf(dst, sizeof dst, "%s/%s", outdir, name);
    FILE *f = fopen(dst, "w");
    if (!f) {
        free(text);
        return err_set(err, "%s: %s", dst, strerror(errno));
    }
    fwrite(text, 1, len, f);
    free(text);
    if (fclose(f))
        return err_set(err, "%s: write failed", dst);
    return 0;
}

int plot_write_scripts(const struct chart *charts, int nch, const char *outdir,
                       const struct plot_opts *o, char *err)
{
    if (copy_script("common.gp", outdir, err))
        return -1;
    for (int i = 0; i < nch; i++)
        if (copy_script(charts[i].script, outdir, err))
            return -1;
    FILE *f = open_out(outdir, "render.sh", err);
    if (!f)
        return -1;
    fprintf(f, "#!/bin/sh\n# Renders the charts of this folder from their CSV data "
               "(needs gnuplot with the pngcairo and svg terminals).\n"
               "cd \"$(dirname \"$0\")\" || exit 1\nGNUPLOT=${GNUPLOT:-gnuplot}\n");
    for (int i = 0; i < nch; i++)
        for (int fm = 0; fm < 2; fm++) {
            if (!(fm ? o->svg : o->png))
                continue;
            char expr[2600];
            chart_expr(&charts[i], fm, o, expr, sizeof expr);
            fprintf(f, "\"$GNUPLOT\" -e \"%s\" %s || exit 1\n", expr, charts[i].script);
        }
    if (close_out(f, outdir, "render.sh", err))
        return -1;
    char p[PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/render.sh", outdir);
    chmod(p, 0755);
    return 0;
}

int plot_render(struct chart *charts, int nch, const char *outdir, const struct plot_opts *o,
                char *why, char *err)
{
    char gp[PATH_MAX];
    char logp[PATH_MAX + 32];
    snprintf(logp, sizeof logp, "%s/gnuplot.log", outdir);
    unlink(logp);
    if (find_gnuplot(gp, sizeof gp, why))
        return PLOT_UNRENDERED;
    int rc = PLOT_OK;
    char first_warn[300] = "";
    for (int i = 0; i < nch && rc >= 0; i++)
        for (int fm = 0; fm < 2 && rc >= 0; fm++) {
            if (!(fm ? o->svg : o->png))
                continue;
            char expr[2600], img[PATH_MAX + 64];
            chart_expr(&charts[i], fm, o, expr, sizeof expr);
            snprintf(img, sizeof img, "%s/%s.%s", outdir, charts[i].name, plot_fmt_name[fm]);
            unlink(img);
            long before = file_size(logp);
            int st = run_gnuplot(gp, outdir, expr, charts[i].script);
            long after = file_size(logp);
            char line[256] = "";
            if (after > (before < 0 ? 0 : before))
                log_line(logp, before < 0 ? 0 : before, line, sizeof line);
            if (st != 0) {
                err_set(err, "gnuplot %s (%s) failed (exit %d)%s%s; see %s", charts[i].script,
                        plot_fmt_name[fm], st, *line ? ": " : "", line, logp);
                rc = PLOT_EFAIL;
            } else if (!file_exists(img)) {
                err_set(err, "gnuplot %s wrote no %s", charts[i].script, img);
                rc = PLOT_EFAIL;
            } else {
                charts[i].rendered[fm] = true;
                if (*line && !*first_warn)
                    snprintf(first_warn, sizeof first_warn, "%s (%s): %s", charts[i].script,
                             plot_fmt_name[fm], line);
            }
        }
    if (rc == PLOT_OK && *first_warn) {
        err_set(err, "gnuplot warned: %s; all messages in %s", first_warn, logp);
        rc = PLOT_WARNED;
    }
    if (file_size(logp) == 0)
        unlink(logp);
    return rc;
}
