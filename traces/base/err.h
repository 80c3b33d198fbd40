/* err.h: error buffers, invariants and the exit codes every command uses.
 *
 * Library functions return 0 or a negative code and write a one-line
 * message (with its location, "file:line:col: ..." for inputs) into a
 * caller's buffer of ERR_LEN bytes. Only the command-line front prints and
 * exits.
 */
#ifndef BASE_ERR_H
#define BASE_ERR_H

#define ERR_LEN 512

/* Exit codes of the command-line front. */
enum {
    EXIT_OK = 0,
    EXIT_FAIL = 1,     /* a run failed (I/O, target gone, test failure)   */
    EXIT_BADINPUT = 2, /* bad flags, bad input files, impossible layouts  */
    EXIT_REFUSED = 3,  /* a comparison refused as unfair (compare)        */
};

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Invariants hold in every build (NDEBUG does not remove them). */
#define ASSERT(cond)                                                        \
    do {                                                                    \
        if (!(cond))                                                        \
            err_assert_fail(__FILE__, __LINE__, #cond);                     \
    } while (0)
void err_assert_fail(const char *file, int line, const char *what)
    __attribute__((noreturn));

/* printf into an error buffer (err may be NULL). Returns -1 so that
 * `return err_set(err, "...")` reads naturally. */
int err_set(char *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
