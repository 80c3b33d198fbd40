/* testcaps.h: caps for tests of hostile input: file size, address space
 * (not under AddressSanitizer, which reserves far more) and time. */
#ifndef TESTCAPS_H
#define TESTCAPS_H

#include <sys/resource.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_ASAN 1
#endif
#endif

/* 256 MiB per file, 4 GiB of address space, `seconds` of wall time. */
static inline void test_caps(unsigned seconds)
{
    struct rlimit f = {(rlim_t)256 << 20, (rlim_t)256 << 20};
    setrlimit(RLIMIT_FSIZE, &f);
#ifndef TEST_ASAN
    struct rlimit a = {(rlim_t)4 << 30, (rlim_t)4 << 30};
    setrlimit(RLIMIT_AS, &a);
#endif
    alarm(seconds);
}

#endif
