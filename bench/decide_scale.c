/*
 * decide() at the sizes of frontier RL jobs (issue 34): N ranks on H hosts,
 * every rank's facts filled as a job's are (8 Python frames, a title, the
 * fabric), half training and half inference, NCCLSHIM_WEIGHT_UPDATE=auto:
 * the root's decision after the last arrival, alone.  Prints ms per call
 * (median of R calls) and the facts' memory.
 *
 *   cc -O2 -I. -Ipolicy -o /tmp/decide_scale bench/decide_scale.c policy/*.c
 *   /tmp/decide_scale 32768 4096 5; /tmp/decide_scale 65536 8192 5
 */
#include "policy/decide.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 32768, hosts = argc > 2 ? atoi(argv[2]) : 4096;
    int reps = argc > 3 ? atoi(argv[3]) : 5;
    if (n < 1 || n > FACTS_MAX_RANKS || hosts < 1 || reps < 1 || reps > 100)
        return 2;
    struct rank_facts *F = calloc((size_t)n, sizeof(*F));
    double *t = calloc((size_t)reps, sizeof(*t));
    /* Two distinct texts, a trainer's and an engine's, as the root keeps them (interned). */
    static struct rank_text texts[2];
    if (!F || !t)
        return 1;
    for (int j = 0; j < 2; j++) {
        snprintf(texts[j].title, sizeof(texts[j].title), "%s", j == 0 ? "python3 grpo.py (trainer)" : "vllm worker");
        for (int k = 0; k < EVIDENCE_MAX_FRAMES; k++)
            snprintf(texts[j].frames[k], sizeof(texts[j].frames[k]),
                     "/usr/lib/python3/site-packages/pkg/mod_%d.py:%d fn_%d", k, 100 + k, k);
    }
    for (int i = 0; i < n; i++) {
        struct rank_facts *f = &F[i];
        f->rank = i;
        f->nranks = n;
        f->role = i < n / 2 ? ROLE_TRAINING : ROLE_INFERENCE;
        f->api = API_CTYPES;
        snprintf(f->host, sizeof(f->host), "node-%d", i % hosts);
        snprintf(f->host_id, sizeof(f->host_id), "%08x-boot-id-%d", (unsigned)(i % hosts) * 2654435761u, i % hosts);
        f->text = &texts[i < n / 2 ? 0 : 1];
        f->nframes = EVIDENCE_MAX_FRAMES;
        f->socket_ready = 1;
        f->fabric = (struct fabric_facts){ .state = FABRIC_READ, .kind = FABRIC_IB, .devices = 8, .gpus = 8 };
    }
    struct policy p;
    memset(&p, 0, sizeof(p));
    policy_parse(&p, "auto", NULL, NULL);
    struct decision d;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        decide(&p, NULL, F, n, &d);
        t[r] = (now() - t0) * 1e3;
    }
    qsort(t, (size_t)reps, sizeof(*t), cmp);
    printf("%d ranks on %d hosts: decide %.1f ms (median of %d; min %.1f), %d hosts seen, action %s; facts %zu MiB "
           "(%zu bytes a rank)\n", n, hosts, t[reps / 2], reps, t[0], d.nhosts, action_name(d.action),
           (size_t)n * sizeof(*F) >> 20, sizeof(*F));
    free(F);
    free(t);
    return 0;
}
