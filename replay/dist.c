/* dist.c: the MPI layer (dist.h): MPI calls where the build has mpi.h
 * (AGENTREPLAY_MPI, set by the Makefile where mpicc exists), a job of one
 * otherwise. The only file compiled with mpicc's flags. */
#define _GNU_SOURCE
#include "replay/dist.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "traces/base/err.h"
#include "traces/base/mem.h"
#include "traces/base/time_ns.h"

#ifdef AGENTREPLAY_MPI
#include <mpi.h>
#endif

/* A positive integer from the environment, or -1. */
static long env_int(const char *name)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return -1;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || x < 0 || x > INT_MAX)
        return -1;
    return x;
}

/* The launcher's (size, rank) pair, or size -1 when none is set. */
static void env_job(long *size, long *rank)
{
    static const char *const pairs[][2] = {
        {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"},
        {"PMI_SIZE", "PMI_RANK"},
        {"SLURM_STEP_NUM_TASKS", "SLURM_PROCID"},
    };
    for (size_t i = 0; i < ARRAY_LEN(pairs); i++) {
        long s = env_int(pairs[i][0]), r = env_int(pairs[i][1]);
        if (s >= 1 && r >= 0 && r < s) {
            *size = s;
            *rank = r;
            return;
        }
    }
    *size = -1;
    *rank = 0;
}

int dist_env_size(void)
{
    long s, r;
    env_job(&s, &r);
    return s > 1 ? (int)s : 1;
}

int dist_env_rank(void)
{
    long s, r;
    env_job(&s, &r);
    return s > 1 ? (int)r : 0;
}

/* Internal tags, above the callers' range. */
enum { TAG_PING = 32760, TAG_PONG, TAG_CLOCK };

#ifdef AGENTREPLAY_MPI

static bool g_init;
static int g_rank, g_size = 1;
static pid_t g_pid;              /* the process that joined */

/* Posted sends and their buffers. */
static MPI_Request *g_req;
static void **g_buf;
static int g_n, g_cap;

bool dist_compiled(void) { return true; }

static int mpi_err(char *err, const char *what, int rc)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
        snprintf(msg, sizeof msg, "error %d", rc);
    return err_set(err, "MPI: %s: %s", what, msg);
}

static void finalize_at_exit(void)
{
    int fin = 0;
    if (!g_init || getpid() != g_pid || MPI_Finalized(&fin) != MPI_SUCCESS || fin)
        return;
    /* What is still posted goes before MPI ends (rank 0 is reading). */
    dist_drain(5 * NS_PER_S);
    MPI_Finalize();
}

int dist_init(char *err)
{
    if (g_init)
        return 0;
    int provided = 0;
    int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS)
        return err_set(err, "MPI_Init failed (%d)", rc);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    g_init = true;
    g_pid = getpid();
    atexit(finalize_at_exit);
    int want = dist_env_size();
    if (g_size != want)
        return err_set(err, "the launcher started %d ranks but MPI sees a job of %d (with srun, "
                            "give --mpi=pmix)", want, g_size);
    return 0;
}

bool dist_on(void) { return g_init && g_size > 1; }
int dist_rank(void) { return g_init ? g_rank : 0; }
int dist_size(void) { return g_init ? g_size : 1; }

void dist_abort(int code)
{
    if (g_init)
        MPI_Abort(MPI_COMM_WORLD, code);
    _exit(code);
}

int dist_send(int to, int tag, const void *buf, size_t len, char *err)
{
    ASSERT(len <= INT32_MAX);
    int rc = MPI_Send(buf, (int)len, MPI_BYTE, to, tag, MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? 0 : mpi_err(err, "send", rc);
}

int dist_post(int to, int tag, void *buf, size_t len, char *err)
{
    ASSERT(len <= INT32_MAX);
    if (g_n == g_cap) {
        g_cap = g_cap ? 2 * g_cap : 16;
        g_req = xrealloc(g_req, (size_t)g_cap * sizeof *g_req);
        g_buf = xrealloc(g_buf, (size_t)g_cap * sizeof *g_buf);
    }
    int rc = MPI_Isend(buf, (int)len, MPI_BYTE, to, tag, MPI_COMM_WORLD, &g_req[g_n]);
    if (rc != MPI_SUCCESS) {
        free(buf);
        return mpi_err(err, "send", rc);
    }
    g_buf[g_n++] = buf;
    return 0;
}

int dist_progress(void)
{
    int k = 0;
    for (int i = 0; i < g_n; i++) {
        int done = 0;
        if (MPI_Test(&g_req[i], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            done = 1; /* a failed send is not retried */
        if (done) {
            free(g_buf[i]);
            continue;
        }
        g_req[k] = g_req[i];
        g_buf[k++] = g_buf[i];
    }
    g_n = k;
    return g_n;
}

int dist_drain(int64_t timeout_ns)
{
    int64_t end = timeout_ns < 0 ? INT64_MAX : wall_ns() + timeout_ns;
    while (dist_progress() && wall_ns() < end) {
        struct timespec ts = {0, 100 * 1000};
        nanosleep(&ts, NULL);
    }
    return g_n;
}

bool dist_peek(int *from, int *tag, size_t *len)
{
    if (!g_init)
        return false;
    int flag = 0, count = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st) != MPI_SUCCESS || !flag)
        return false;
    MPI_Get_count(&st, MPI_BYTE, &count);
    *from = st.MPI_SOURCE;
    *tag = st.MPI_TAG;
    *len = (size_t)count;
    return true;
}

int dist_recv(int from, int tag, void *buf, size_t cap, size_t *len, char *err)
{
    MPI_Status st;
    int count = 0;
    int rc = MPI_Recv(buf, cap > INT32_MAX ? INT32_MAX : (int)cap, MPI_BYTE, from, tag,
                      MPI_COMM_WORLD, &st);
    if (rc != MPI_SUCCESS)
        return mpi_err(err, "receive", rc);
    MPI_Get_count(&st, MPI_BYTE, &count);
    *len = (size_t)count;
    return 0;
}

int dist_bcast(void *buf, size_t len, char *err)
{
    ASSERT(len <= INT32_MAX);
    int rc = MPI_Bcast(buf, (int)len, MPI_BYTE, 0, MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? 0 : mpi_err(err, "broadcast", rc);
}

#define CLOCK_ROUNDS 16
#define BYTE_ORDER_MAGIC UINT64_C(0x0102030405060708)

int dist_clock_sync(int64_t *offsets, int64_t *rtts, int64_t *self, char *err)
{
    *self = 0;
    int rc = MPI_SUCCESS;
    int32_t ok = 1;
    if (g_rank == 0) {
        offsets[0] = rtts[0] = 0;
        /* One rank at a time, so that each exchange has rank 0 to itself. */
        for (int r = 1; r < g_size && rc == MPI_SUCCESS; r++) {
            for (int k = 0; k < CLOCK_ROUNDS && rc == MPI_SUCCESS; k++) {
                char ping;
                rc = MPI_Recv(&ping, 1, MPI_BYTE, r, TAG_PING, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                int64_t t = wall_ns();
                if (rc == MPI_SUCCESS)
                    rc = MPI_Send(&t, 8, MPI_BYTE, r, TAG_PONG, MPI_COMM_WORLD);
            }
            int64_t got[3] = {0};
            if (rc == MPI_SUCCESS)
                rc = MPI_Recv(got, 24, MPI_BYTE, r, TAG_CLOCK, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            offsets[r] = got[0];
            rtts[r] = got[1];
            if ((uint64_t)got[2] != BYTE_ORDER_MAGIC)
                ok = 0;
        }
    } else {
        int64_t best_rtt = INT64_MAX, best_off = 0;
        for (int k = 0; k < CLOCK_ROUNDS && rc == MPI_SUCCESS; k++) {
            char ping = 0;
            int64_t t0 = 0, t1 = wall_ns();
            rc = MPI_Send(&ping, 1, MPI_BYTE, 0, TAG_PING, MPI_COMM_WORLD);
            if (rc == MPI_SUCCESS)
                rc = MPI_Recv(&t0, 8, MPI_BYTE, 0, TAG_PONG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            int64_t t2 = wall_ns();
            /* Rank 0 read its clock about halfway through the trip. */
            if (t2 - t1 < best_rtt) {
                best_rtt = t2 - t1;
                best_off = t1 + (t2 - t1) / 2 - t0;
            }
        }
        int64_t out[3] = {best_off, best_rtt, (int64_t)BYTE_ORDER_MAGIC};
        if (rc == MPI_SUCCESS)
            rc = MPI_Send(out, 24, MPI_BYTE, 0, TAG_CLOCK, MPI_COMM_WORLD);
        *self = best_off;
    }
    if (rc != MPI_SUCCESS)
        return mpi_err(err, "clock comparison", rc);
    if (dist_bcast(&ok, sizeof ok, err))
        return -1;
    if (!ok)
        return err_set(err, "the ranks differ in byte order");
    return 0;
}

#else /* no MPI: a job of one */

bool dist_compiled(void) { return false; }

int dist_init(char *err)
{
    if (dist_env_size() > 1)
        return err_set(err, "started as rank %d of %d, but this agentreplay was built without MPI "
                            "(install libopenmpi-dev and rebuild)",
                       dist_env_rank(), dist_env_size());
    return 0;
}

bool dist_on(void) { return false; }
int dist_rank(void) { return 0; }
int dist_size(void) { return 1; }
void dist_abort(int code) { _exit(code); }

int dist_send(int to, int tag, const void *buf, size_t len, char *err)
{
    return err_set(err, "built without MPI");
}

int dist_post(int to, int tag, void *buf, size_t len, char *err)
{
    free(buf);
    return err_set(err, "built without MPI");
}

int dist_progress(void) { return 0; }
int dist_drain(int64_t timeout_ns) { return 0; }
bool dist_peek(int *from, int *tag, size_t *len) { return false; }

int dist_recv(int from, int tag, void *buf, size_t cap, size_t *len, char *err)
{
    *len = 0;
    return err_set(err, "built without MPI");
}

int dist_bcast(void *buf, size_t len, char *err) { return 0; }

int dist_clock_sync(int64_t *offsets, int64_t *rtts, int64_t *self, char *err)
{
    *self = 0;
    if (offsets)
        offsets[0] = 0;
    if (rtts)
        rtts[0] = 0;
    return 0;
}

#endif
