/* file.c: whole-file reads and the program's data files (file.h). */
#include "traces/base/file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "traces/base/err.h"
#include "traces/base/limits.h"
#include "traces/base/mem.h"

#ifndef AGENTREPLAY_DATADIR
#define AGENTREPLAY_DATADIR "/usr/local/share/agentreplay"
#endif

void file_size_format(int64_t bytes, char *buf, size_t n)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)bytes;
    size_t u = 0;
    while (v >= 1024 && u + 1 < ARRAY_LEN(units)) {
        v /= 1024;
        u++;
    }
    if (u == 0 || v == (double)(int64_t)v)
        snprintf(buf, n, "%lld %s", (long long)v, units[u]);
    else
        snprintf(buf, n, "%.1f %s", v, units[u]);
}

static void too_big(const char *path, int64_t size, int64_t max, char *err)
{
    char a[32], b[32];
    file_size_format(max, b, sizeof b);
    if (size >= 0) {
        file_size_format(size, a, sizeof a);
        err_set(err, "%s: %s, more than the %s this file may hold", path, a, b);
    } else {
        err_set(err, "%s: more than the %s this file may hold", path, b);
    }
}

char *file_read(const char *path, size_t *len, char *err)
{
    return file_read_max(path, LIMIT_FILE_BYTES, len, err);
}

char *file_read_max(const char *path, int64_t max, size_t *len, char *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        err_set(err, "%s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    size_t cap = 1 << 16, n = 0;
    if (fstat(fileno(f), &st) == 0) {
        if (S_ISDIR(st.st_mode)) {
            fclose(f);
            err_set(err, "%s: a folder, not a file", path);
            return NULL;
        }
        if (S_ISREG(st.st_mode)) {
            if (st.st_size > max) {
                fclose(f);
                too_big(path, st.st_size, max, err);
                return NULL;
            }
            cap = (size_t)st.st_size + 2; /* + the NUL, + 1 to see the end */
        }
    }
    char *buf = xmalloc(cap);
    for (;;) {
        if (cap - n < 2) {
            /* a device or a file that grew: at most max + 1 bytes, to tell */
            if ((int64_t)n > max)
                break;
            cap = cap * 2 > (size_t)max + 2 ? (size_t)max + 2 : cap * 2;
            buf = xrealloc(buf, cap);
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0)
            break;
    }
    int bad = ferror(f);
    fclose(f);
    if (!bad && (int64_t)n > max) {
        free(buf);
        too_big(path, -1, max, err);
        return NULL;
    }
    if (bad) {
        free(buf);
        err_set(err, "%s: read error", path);
        return NULL;
    }
    buf[n] = 0;
    if (len)
        *len = n;
    return buf;
}

int file_data_path(const char *rel, char *buf, size_t n)
{
    char exe[4096];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k > 0) {
        exe[k] = 0;
        char *slash = strrchr(exe, '/');
        if (slash)
            *slash = 0; /* the binary's folder */
        /* The binary may be ./agentreplay or build/<variant>/agentreplay. */
        const char *ups[] = {"", "/../..", "/../../.."};
        for (size_t i = 0; i < ARRAY_LEN(ups); i++) {
            snprintf(buf, n, "%s%s/%s", exe, ups[i], rel);
            if (access(buf, R_OK) == 0)
                return 0;
        }
    }
    snprintf(buf, n, "%s/%s", AGENTREPLAY_DATADIR, rel);
    if (access(buf, R_OK) == 0)
        return 0;
    snprintf(buf, n, "%s", rel);
    return access(buf, R_OK) == 0 ? 0 : -1;
}

int file_mkdir_p(const char *path, char *err)
{
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return err_set(err, "%s: path too long", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return err_set(err, "%s: %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
        return err_set(err, "%s: %s", buf, strerror(errno));
    struct stat st;
    if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))
        return err_set(err, "%s: not a folder", buf);
    return 0;
}
