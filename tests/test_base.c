/* test_base.c: the ground floor's containers and helpers: list, hmap,
 * stats, csv, file_mkdir_p, sha256 and npgen (traces/base/). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/testhelp.h"
#include "traces/base/csv.h"
#include "traces/base/err.h"
#include "traces/base/file.h"
#include "traces/base/hmap.h"
#include "traces/base/list.h"
#include "traces/base/npgen.h"
#include "traces/base/rng.h"
#include "traces/base/sha256.h"
#include "traces/base/stats.h"

struct item {
    int v;
    struct list_node node;
};

static void test_list(void)
{
    struct list_node h;
    list_init(&h);
    CHECK(list_empty(&h) && !list_first(&h) && !list_last(&h), "a new list is empty");
    struct item it[5];
    for (int i = 0; i < 5; i++) {
        it[i].v = i;
        list_node_init(&it[i].node);
        CHECK(!list_linked(&it[i].node), "a new node is in no list");
    }
    list_push_back(&h, &it[1].node);
    list_push_back(&h, &it[2].node);
    list_push_front(&h, &it[0].node);
    list_push_back(&h, &it[3].node);
    int want[] = {0, 1, 2, 3}, k = 0, ok = 1;
    LIST_FOR_EACH(n, &h) ok &= LIST_ENTRY(n, struct item, node)->v == want[k++];
    CHECK(ok && k == 4, "push_front and push_back keep order");
    list_remove(&it[2].node);
    CHECK(!list_linked(&it[2].node), "a removed node is in no list");
    list_remove(&it[2].node); /* twice: harmless */
    k = 0;
    LIST_FOR_EACH_SAFE(n, nx, &h) {
        struct item *x = LIST_ENTRY(n, struct item, node);
        k++;
        if (x->v == 1)
            list_remove(n); /* removal inside the safe walk */
    }
    CHECK(k == 3, "the safe walk visits every node while removing");
    CHECK(LIST_ENTRY(list_first(&h), struct item, node)->v == 0 &&
              LIST_ENTRY(list_last(&h), struct item, node)->v == 3,
          "first and last after removals");
    list_remove(&it[0].node);
    list_remove(&it[3].node);
    CHECK(list_empty(&h), "empty again");
}

static void test_hmap(void)
{
    struct hmap m;
    hmap_init(&m);
    CHECK(!hmap_get(&m, 0), "an empty map has no key 0");
    struct rng r;
    rng_init(&r, 7, 1);
    enum { N = 50000 };
    uint64_t *keys = malloc(N * sizeof *keys);
    int fresh = 1;
    for (int i = 0; i < N; i++) {
        keys[i] = i == 0 ? 0 : rng_next(&r);
        bool added;
        *hmap_put(&m, keys[i], &added) = (uint64_t)i * 3;
        fresh &= added;
    }
    CHECK(fresh && hmap_size(&m) == N, "50,000 distinct keys, key 0 included");
    int found = 1, order = 1;
    for (int i = 0; i < N; i++) {
        uint64_t *v = hmap_get(&m, keys[i]);
        found &= v && *v == (uint64_t)i * 3;
        order &= hmap_key(&m, (size_t)i) == keys[i] && hmap_val(&m, (size_t)i) == (uint64_t)i * 3;
    }
    CHECK(found, "every key finds its value");
    CHECK(order, "entries iterate in insertion order");
    bool added = true;
    *hmap_put(&m, keys[10], &added) += 1;
    CHECK(!added && *hmap_get(&m, keys[10]) == 31 && hmap_size(&m) == N, "put of a present key");
    CHECK(!hmap_get(&m, 0x1234567812345678ULL), "an absent key");
    hmap_clear(&m);
    CHECK(hmap_size(&m) == 0 && !hmap_get(&m, keys[5]), "clear forgets every entry");
    *hmap_put(&m, 42, NULL) = 1;
    CHECK(hmap_size(&m) == 1 && *hmap_get(&m, 42) == 1, "usable after clear");
    hmap_free(&m);
    free(keys);
}

static void test_stats(void)
{
    double v[] = {5, 1, 4, 2, 3};
    stats_sort(v, 5);
    CHECK(v[0] == 1 && v[4] == 5, "sort");
    CHECK(stats_percentile_sorted(v, 5, 0.5) == 3, "p50 of 1..5");
    CHECK_NEAR(stats_percentile_sorted(v, 5, 0.9), 4.6, 1e-12, "p90 of 1..5 (k = (n-1)p)");
    CHECK(stats_percentile_sorted(v, 5, 0) == 1 && stats_percentile_sorted(v, 5, 1) == 5, "ends");
    CHECK(isnan(stats_percentile_sorted(v, 0, 0.5)), "empty is NaN");
    double one = 7;
    CHECK(stats_percentile_sorted(&one, 1, 0.9) == 7, "one value");
    CHECK(stats_t975(1) == 12.706 && stats_t975(30) == 2.042 && stats_t975(1000) == 1.960 &&
              isnan(stats_t975(0)),
          "t quantiles");
}

static void test_csv(void)
{
    char err[ERR_LEN], path[] = "/tmp/test_base_csv_XXXXXX";
    int fd = mkstemp(path);
    const char *text = "a,b,\"c,d\"\r\n1,\"x \"\"y\"\"\",2.5\n\n3\n";
    CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text), "write");
    close(fd);
    struct csv c;
    CHECK(csv_read(path, &c, err) == 0, "csv_read");
    CHECK(c.ncol == 3 && !strcmp(c.hdr[2], "c,d") && c.nrows == 2, "header and rows");
    CHECK(!strcmp(csv_str_at(&c, 0, "b"), "x \"y\""), "quoted field with quotes");
    double x;
    CHECK(csv_num_at(&c, 0, "c,d", true, &x, err) == 0 && x == 2.5, "number by column name");
    CHECK(csv_num_at(&c, 1, "b", true, &x, err) == 0 && isnan(x), "missing trailing field: NaN");
    CHECK(c.line[1] == 4, "rows keep their source line");
    CHECK(csv_num_at(&c, 0, "b", true, &x, err) == -1 && strstr(err, ":2:"), "a bad number names its line");
    CHECK(csv_num_at(&c, 0, "zz", true, &x, err) == -1 && strstr(err, "no column 'zz'"), "missing column");
    csv_free(&c);
    fd = open(path, O_WRONLY | O_TRUNC);
    CHECK(write(fd, "a,b\n1,2,3\n", 10) == 10, "write");
    close(fd);
    CHECK(csv_read(path, &c, err) == -1 && strstr(err, ":2: 3 fields"), "too many fields");
    unlink(path);
}

static void test_mkdir(void)
{
    char err[ERR_LEN], dir[] = "/tmp/test_base_dir_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char p[256];
    snprintf(p, sizeof p, "%s/a/b/c", dir);
    CHECK(file_mkdir_p(p, err) == 0, "mkdir -p of three levels");
    struct stat st;
    CHECK(stat(p, &st) == 0 && S_ISDIR(st.st_mode), "it exists");
    CHECK(file_mkdir_p(p, err) == 0, "again: no error");
    char f[300];
    snprintf(f, sizeof f, "%s/file", dir);
    FILE *fp = fopen(f, "w");
    fclose(fp);
    snprintf(p, sizeof p, "%s/file/x", dir);
    CHECK(file_mkdir_p(p, err) == -1 && strstr(err, "file"), "a file in the way is named");
    snprintf(p, sizeof p, "rm -rf '%s'", dir);
    CHECK(system(p) == 0, "cleanup");
}

/* SHA-256 against FIPS 180-4's "abc" and Python's hashlib (one block, a
 * tail that spills into a second block, several blocks), and NumPy's
 * default_rng against numpy 2 in AIPerf 0.13.0's venv:
 *   python -c "import numpy as np; g = np.random.default_rng(S);
 *              print([repr(float(g.random())) for _ in range(3)])"
 *   python -c "import hashlib; print(hashlib.sha256(B).hexdigest())" */
static void test_npgen(void)
{
    static const struct {
        const char *in;
        size_t n;
        const char *hex;
    } sh[] = {
        {"abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"1:trace_0001:0", 14, "381edcb2e0ee3973867a9221c463836a42f90e97cf2b4c34458e7baa716d4fba"},
        {NULL, 56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"},
        {NULL, 200, "c2a908d98f5df987ade41b5fce213067efbcc21ef2240212a41e54b5e7c28ae5"},
    };
    char a[200];
    memset(a, 'a', sizeof a);
    for (size_t i = 0; i < sizeof sh / sizeof sh[0]; i++) {
        uint8_t d[32];
        char hex[65];
        sha256(sh[i].in ? sh[i].in : a, sh[i].n, d);
        for (int k = 0; k < 32; k++)
            snprintf(hex + 2 * k, 3, "%02x", d[k]);
        CHECKF(!strcmp(hex, sh[i].hex), "sha256 of %zu bytes (%s)", sh[i].n, hex);
    }
    static const struct {
        uint64_t seed;
        double v[3];
    } np[] = {
        {0, {0.6369616873214543, 0.2697867137638703, 0.04097352393619469}},
        {42, {0.7739560485559633, 0.4388784397520523, 0.8585979199113825}},
        {4294967296ull, {0.8897387912781343, 0.5571380502062263, 0.8009080868919721}},
        {18446744073709551615ull, {0.6800266789616931, 0.8453117585624743, 0.007403081599260064}},
    };
    for (size_t i = 0; i < sizeof np / sizeof np[0]; i++) {
        struct npgen g;
        npgen_init(&g, np[i].seed);
        int same = 0;
        for (int k = 0; k < 3; k++)
            same += npgen_double(&g) == np[i].v[k];
        CHECKF(same == 3, "default_rng(%llu): NumPy's first three doubles (%d of 3)",
               (unsigned long long)np[i].seed, same);
    }
}

int main(void)
{
    test_npgen();
    test_list();
    test_hmap();
    test_stats();
    test_csv();
    test_mkdir();
    return test_report();
}
