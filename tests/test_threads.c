/* tests/test_threads.c - concurrent calls from several threads, built and run
   under ThreadSanitizer by `make test` (build/test_threads_tsan; no OpenMP:
   libgomp is not instrumented, so its own synchronization would be reported).

   What the header promises (>>api, fa_set_parallel_for and fa_last_error):
   - the last error is per thread: a thread's failure never shows in another
     thread's fa_last_error();
   - the parallel-for setting is process-wide, and a call copies it once at
     entry: changing it from another thread while calls run is safe, and every
     call still gives the bit-identical result (the same inputs give the same
     bits on any thread count).
   CALLERS threads each run ROUNDS of: a forward that must match the
   single-threaded result bit for bit, a backward likewise (dQ), and a call
   that fails on an argument of its own (q, k, v or o .data NULL), whose
   message must name that argument; meanwhile one more thread keeps switching
   the parallel-for between none, a 2-worker and a 3-worker pthread pool. */
#define FLASHATTN_IMPLEMENTATION
#include "../flashattn.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h" /* rng_uniform */

enum { CALLERS = 4, ROUNDS = 6, SEQ = 96, HEADS = 2, DIM = 32 };
#define ELEMS ((size_t)SEQ * HEADS * DIM)

static float g_q[ELEMS], g_k[ELEMS], g_v[ELEMS], g_do[ELEMS];
static float g_o_ref[ELEMS], g_lse_ref[HEADS * SEQ], g_dq_ref[ELEMS];

/* ---- a pthread pool as a user's job system ------------------------------ */
typedef struct pool_job {
    int n, worker;
    fa_task_fn task;
    void *ctx;
    int *next; /* shared index counter */
    pthread_mutex_t *mu;
} pool_job;

static void *pool_worker(void *arg)
{
    pool_job *j = (pool_job *)arg;
    for (;;) {
        int i;
        pthread_mutex_lock(j->mu);
        i = (*j->next)++;
        pthread_mutex_unlock(j->mu);
        if (i >= j->n)
            return NULL;
        j->task(j->ctx, i, j->worker);
    }
}

/* user points to the worker count; worker w runs on thread w. */
static void pool_parallel_for(void *user, int n, fa_task_fn task, void *ctx)
{
    int workers = *(const int *)user, w, next = 0;
    pthread_t th[8];
    pool_job jobs[8];
    pthread_mutex_t mu;
    pthread_mutex_init(&mu, NULL);
    for (w = 0; w < workers; ++w) {
        jobs[w].n = n;
        jobs[w].worker = w;
        jobs[w].task = task;
        jobs[w].ctx = ctx;
        jobs[w].next = &next;
        jobs[w].mu = &mu;
        pthread_create(&th[w], NULL, pool_worker, &jobs[w]);
    }
    for (w = 0; w < workers; ++w)
        pthread_join(th[w], NULL);
    pthread_mutex_destroy(&mu);
}

static const int g_two = 2, g_three = 3;

/* ---- the calls -------------------------------------------------------- */
static void setup(fa_problem *p, fa_tensor *q, fa_tensor *k, fa_tensor *v)
{
    memset(p, 0, sizeof *p);
    p->batch = 1;
    p->seqlen_q = p->seqlen_k = SEQ;
    p->heads_q = HEADS;
    p->head_dim = DIM;
    p->causal = 1;
    memset(q, 0, sizeof *q);
    *k = *v = *q;
    q->data = g_q;
    k->data = g_k;
    v->data = g_v;
}

static fa_status forward(float *o, float *lse)
{
    fa_problem p;
    fa_tensor q, k, v, to;
    setup(&p, &q, &k, &v);
    to = q;
    to.data = o;
    return fa_forward(&p, q, k, v, to, lse, NULL, 0);
}

static fa_status backward(float *dq, float *dk, float *dv)
{
    fa_problem p;
    fa_tensor q, k, v, o, dout, tdq, tdk, tdv;
    setup(&p, &q, &k, &v);
    o = dout = tdq = tdk = tdv = q;
    o.data = g_o_ref;
    dout.data = g_do;
    tdq.data = dq;
    tdk.data = dk;
    tdv.data = dv;
    return fa_backward(&p, q, k, v, o, dout, g_lse_ref, tdq, tdk, tdv, NULL, 0);
}

typedef struct caller {
    int id;
    int fwd_ok, bwd_ok, err_ok; /* rounds that passed each check */
    char bad_msg[256];          /* the first wrong error message seen */
} caller;

static int g_stop; /* under g_stop_mu: the callers are done */
static pthread_mutex_t g_stop_mu = PTHREAD_MUTEX_INITIALIZER;

static void *caller_main(void *arg)
{
    static const char *names[4] = {"q.data", "k.data", "v.data", "o.data"};
    caller *c = (caller *)arg;
    float *o = (float *)malloc(ELEMS * sizeof(float)), *lse = (float *)malloc(HEADS * SEQ * sizeof(float));
    float *dq = (float *)malloc(3 * ELEMS * sizeof(float));
    int r;
    for (r = 0; r < ROUNDS; ++r) {
        fa_problem p;
        fa_tensor q, k, v, to;
        fa_status s;
        memset(o, 0xff, ELEMS * sizeof(float));
        if (forward(o, lse) == FA_OK && memcmp(o, g_o_ref, sizeof g_o_ref) == 0 &&
            memcmp(lse, g_lse_ref, sizeof g_lse_ref) == 0)
            c->fwd_ok++;
        memset(dq, 0xff, 3 * ELEMS * sizeof(float));
        if (backward(dq, dq + ELEMS, dq + 2 * ELEMS) == FA_OK && memcmp(dq, g_dq_ref, sizeof g_dq_ref) == 0)
            c->bwd_ok++;
        /* a failure of this thread's own: its message, and only it, here */
        setup(&p, &q, &k, &v);
        to = q;
        to.data = o;
        if (c->id % 4 == 0) q.data = NULL;
        if (c->id % 4 == 1) k.data = NULL;
        if (c->id % 4 == 2) v.data = NULL;
        if (c->id % 4 == 3) to.data = NULL;
        s = fa_forward(&p, q, k, v, to, NULL, NULL, 0);
        if (s == FA_ERROR_INVALID_ARGUMENT && strstr(fa_last_error(), names[c->id % 4]))
            c->err_ok++;
        else if (!c->bad_msg[0])
            snprintf(c->bad_msg, sizeof c->bad_msg, "status %d, message \"%s\"", (int)s, fa_last_error());
    }
    free(o);
    free(lse);
    free(dq);
    return NULL;
}

static void *switcher_main(void *arg)
{
    int i = 0, stop;
    (void)arg;
    do {
        switch (i++ % 3) {
        case 0: fa_set_parallel_for(NULL, NULL, 0); break;
        case 1: fa_set_parallel_for(pool_parallel_for, (void *)&g_two, 2); break;
        default: fa_set_parallel_for(pool_parallel_for, (void *)&g_three, 3); break;
        }
        pthread_mutex_lock(&g_stop_mu);
        stop = g_stop;
        pthread_mutex_unlock(&g_stop_mu);
    } while (!stop);
    return NULL;
}

int main(void)
{
    pthread_t th[CALLERS], sw;
    caller cs[CALLERS];
    float dk[ELEMS], dv[ELEMS];
    int i, passed = 0, failed = 0;
    uint64_t z = 12345;
    for (i = 0; i < (int)ELEMS; ++i) { /* values in [-1, 1) */
        g_q[i] = (float)(2.0 * rng_uniform(&z) - 1.0);
        g_k[i] = (float)(2.0 * rng_uniform(&z) - 1.0);
        g_v[i] = (float)(2.0 * rng_uniform(&z) - 1.0);
        g_do[i] = (float)(2.0 * rng_uniform(&z) - 1.0);
    }
    /* references: one thread, nothing else running */
    if (forward(g_o_ref, g_lse_ref) != FA_OK || backward(g_dq_ref, dk, dv) != FA_OK) {
        printf("FAIL: the single-threaded reference calls failed: %s\n0 passed, 1 failed\n", fa_last_error());
        return 1;
    }
    printf("test_threads: %d callers x %d rounds, parallel-for switched meanwhile (CPU path: %s)\n", CALLERS,
           ROUNDS, fa_cpu_simd_path());
    memset(cs, 0, sizeof cs);
    pthread_create(&sw, NULL, switcher_main, NULL);
    for (i = 0; i < CALLERS; ++i) {
        cs[i].id = i;
        pthread_create(&th[i], NULL, caller_main, &cs[i]);
    }
    for (i = 0; i < CALLERS; ++i)
        pthread_join(th[i], NULL);
    pthread_mutex_lock(&g_stop_mu);
    g_stop = 1;
    pthread_mutex_unlock(&g_stop_mu);
    pthread_join(sw, NULL);
    fa_set_parallel_for(NULL, NULL, 0);
    for (i = 0; i < CALLERS; ++i) {
        int ok = cs[i].fwd_ok == ROUNDS && cs[i].bwd_ok == ROUNDS && cs[i].err_ok == ROUNDS;
        if (ok)
            passed++;
        else {
            failed++;
            printf("FAIL: caller %d: forward bit-identical %d/%d, backward %d/%d, own error message %d/%d%s%s\n", i,
                   cs[i].fwd_ok, ROUNDS, cs[i].bwd_ok, ROUNDS, cs[i].err_ok, ROUNDS, cs[i].bad_msg[0] ? ": " : "",
                   cs[i].bad_msg);
        }
    }
    /* this thread made no failing call after the references: its own message
       is still "no error", whatever the callers failed on */
    if (strcmp(fa_last_error(), "no error") == 0)
        passed++;
    else {
        failed++;
        printf("FAIL: the main thread's fa_last_error() is \"%s\", another thread's failure\n", fa_last_error());
    }
    printf("test_threads: %d passed, %d failed\n%d passed, %d failed\n", passed, failed, passed, failed);
    return failed ? 1 : 0;
}
