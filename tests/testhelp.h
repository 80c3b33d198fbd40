/* testhelp.h: the tiny harness every test program uses.
 *
 *   CHECK(cond, "what")          one assertion, counted
 *   CHECKF(cond, "fmt", ...)     the same with a formatted message
 *   SKIP("why")                  a test that cannot run here (counted)
 *   return test_report();        prints "N passed, N failed[, N skipped]"
 *
 * test_output_to(log) sends a child's stdout and stderr to a file before
 * it execs; test_count_lines(path) counts a file's lines.
 *
 * test_shared(path) gives the path of a file under ../shared (or the
 * folder named by AGENTREPLAY_SHARED), or NULL when it is absent, so tests
 * that read the public traces skip instead of failing on a clone elsewhere.
 */
#ifndef TESTHELP_H
#define TESTHELP_H

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int th_passed, th_failed, th_skipped;

#define CHECK(cond, what) CHECKF(cond, "%s", what)
#define CHECKF(cond, ...)                                                   \
    do {                                                                    \
        if (cond) {                                                         \
            th_passed++;                                                    \
        } else {                                                            \
            th_failed++;                                                    \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);            \
            fprintf(stderr, __VA_ARGS__);                                   \
            fputc('\n', stderr);                                            \
        }                                                                   \
    } while (0)
#define CHECK_NEAR(a, b, rel, what)                                         \
    CHECKF(fabs((double)(a) - (double)(b)) <=                               \
               (rel) * fabs((double)(b)) + 1e-12,                           \
           "%s: got %.9g, want %.9g (rel %.3g)", what, (double)(a),         \
           (double)(b), (double)(rel))
#define SKIP(why)                                                           \
    do {                                                                    \
        th_skipped++;                                                       \
        fprintf(stderr, "SKIP %s:%d: %s\n", __FILE__, __LINE__, why);       \
    } while (0)

static inline int test_report(void)
{
    if (th_skipped)
        printf("%d passed, %d failed, %d skipped\n", th_passed, th_failed,
               th_skipped);
    else
        printf("%d passed, %d failed\n", th_passed, th_failed);
    return th_failed ? 1 : 0;
}

/* Path of `rel` under the shared folder, or NULL if it does not exist.
 * The returned string is static storage, valid until the next call. */
static inline const char *test_shared(const char *rel)
{
    static char buf[4096];
    const char *root = getenv("AGENTREPLAY_SHARED");
    if (!root || !*root)
        root = "../shared";
    snprintf(buf, sizeof buf, "%s/%s", root, rel);
    return access(buf, R_OK) == 0 ? buf : NULL;
}

/* The agentreplay binary under test (for end-to-end tests). */
static inline const char *test_bin(void)
{
    const char *b = getenv("AGENTREPLAY_BIN");
    return b && *b ? b : "./agentreplay";
}

/* In a child about to exec: stdout and stderr to `log`, truncated. */
static inline void test_output_to(const char *log)
{
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
    }
}

/* Lines in a file (its newlines), -1 if it cannot be read. */
static inline long test_count_lines(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long n = 0;
    int c;
    while ((c = getc(f)) != EOF)
        n += c == '\n';
    fclose(f);
    return n;
}

#endif
