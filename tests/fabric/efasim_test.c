/* efasim-test: drives build/libnccl-net-efasim.so as NCCL 2.28.9 does (dlopen, dlsym
 * "ncclNetPlugin_v11", init per communicator, devices, getProperties, listen / connect / accept
 * polled until ready, isend / irecv / test, close, finalize) between processes, and checks the
 * host-wide queue-pair budget through build/efasim-stat.  Prints TAP (tests/t/16-fabric.t).
 * Every wait is bounded: alarm() fails the whole test instead of hanging. */
#define _GNU_SOURCE
#include "efasim_abi.h"
#include "efasim_state.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const efa_net_v11_t *N;
static const char *g_build = "build";
static char g_state[64];
static int g_test;
static int g_failed;

/* ---------------------------------------------------------------- TAP */

static void ok(int cond, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("%s %d - ", cond ? "ok" : "not ok", ++g_test);
  vprintf(fmt, ap);
  printf("\n");
  fflush(stdout);
  va_end(ap);
  if (!cond) g_failed++;
}

static void diag(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("# ");
  vprintf(fmt, ap);
  printf("\n");
  fflush(stdout);
  va_end(ap);
}

/* ---------------------------------------------------------------- NCCL's logger */

static pthread_mutex_t g_log_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_log[1 << 16];
static size_t g_log_len;

static void logger(efa_log_level_t level, unsigned long flags, const char *file, int line, const char *fmt, ...) {
  (void)file;
  (void)line;
  char buf[1200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&g_log_mu);
  int n = snprintf(g_log + g_log_len, sizeof(g_log) - g_log_len, "%s flags=0x%lx %s\n",
                   level == EFA_LOG_WARN ? "WARN" : level == EFA_LOG_INFO ? "INFO" : "OTHER", flags, buf);
  if (n > 0 && g_log_len + (size_t)n < sizeof(g_log)) g_log_len += (size_t)n;
  pthread_mutex_unlock(&g_log_mu);
  if (getenv("EFASIM_TEST_VERBOSE")) fprintf(stderr, "[%d] %s\n", (int)getpid(), buf);
}

static void log_clear(void) {
  pthread_mutex_lock(&g_log_mu);
  g_log_len = 0;
  g_log[0] = '\0';
  pthread_mutex_unlock(&g_log_mu);
}

static int log_has(const char *s) {
  pthread_mutex_lock(&g_log_mu);
  int r = strstr(g_log, s) != NULL;
  pthread_mutex_unlock(&g_log_mu);
  return r;
}

static void log_dump(void) {
  pthread_mutex_lock(&g_log_mu);
  char *save = NULL;
  for (char *l = strtok_r(g_log, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) diag("log: %s", l);
  g_log_len = 0;
  g_log[0] = '\0';
  pthread_mutex_unlock(&g_log_mu);
}

/* ---------------------------------------------------------------- efasim-stat */

static char *stat_json(void) {
  char cmd[512];
  snprintf(cmd, sizeof(cmd), "EFASIM_STATE=%s %s/efasim-stat --json 2>/dev/null", g_state, g_build);
  FILE *f = popen(cmd, "r");
  if (!f) return strdup("");
  static char buf[1 << 17];
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  buf[n] = '\0';
  pclose(f);
  return strdup(buf);
}

/* The first "key":number after `from` (top-level figures come before the tables). */
static long long jnum(const char *json, const char *from, const char *key) {
  const char *p = json;
  if (from) {
    p = strstr(json, from);
    if (!p) return -999999;
  }
  char k[64];
  snprintf(k, sizeof(k), "\"%s\":", key);
  p = strstr(p, k);
  if (!p) return -999999;
  return strtoll(p + strlen(k), NULL, 10);
}

static long long stat_of(const char *key) {
  char *j = stat_json();
  long long v = jnum(j, NULL, key);
  free(j);
  return v;
}

static long long stat_pid(pid_t pid, const char *key) {
  char *j = stat_json();
  char from[48];
  snprintf(from, sizeof(from), "{\"pid\":%d,", (int)pid);
  long long v = jnum(j, from, key);
  free(j);
  return v;
}

static int stat_reset(long budget, long cost) {
  char cmd[512];
  snprintf(cmd, sizeof(cmd), "EFASIM_STATE=%s EFASIM_QP_BUDGET=%ld EFASIM_QPS_PER_CONN=%ld %s/efasim-stat --reset >/dev/null",
           g_state, budget, cost, g_build);
  char b[32];
  snprintf(b, sizeof(b), "%ld", budget);
  setenv("EFASIM_QP_BUDGET", b, 1);
  snprintf(b, sizeof(b), "%ld", cost);
  setenv("EFASIM_QPS_PER_CONN", b, 1);
  return system(cmd);
}

/* ---------------------------------------------------------------- driving the plugin */

static efa_result_t init_comm(void **ctx, uint64_t id) {
  efa_comm_config_t cfg = {-1};
  return N->init(ctx, id, &cfg, logger, NULL);
}

/* listen + connect + accept in one process, polled as NCCL's GDR probe does. */
static efa_result_t loopback(void *ctx, void **s, void **r) {
  char handle[EFA_NET_HANDLE_MAXSIZE];
  void *l = NULL;
  *s = *r = NULL;
  efa_result_t rc = N->listen(ctx, 0, handle, &l);
  if (rc != efa_success) return rc;
  for (long i = 0; i < 100000000 && (*s == NULL || *r == NULL); i++) {
    if (*s == NULL && (rc = N->connect(ctx, 0, handle, s, NULL)) != efa_success) break;
    if (*r == NULL && (rc = N->accept(l, r, NULL)) != efa_success) break;
  }
  N->closeListen(l);
  if (rc == efa_success && (*s == NULL || *r == NULL)) rc = efa_internal_error;
  return rc;
}

static inline unsigned char pat(unsigned msg, size_t off) {
  return (unsigned char)((off * 131u + msg * 7u + (off >> 9)) ^ (msg * 29u));
}

static void fill(unsigned char *b, unsigned msg, size_t n) {
  for (size_t i = 0; i < n; i++) b[i] = pat(msg, i);
}

static long check(const unsigned char *b, unsigned msg, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (b[i] != pat(msg, i)) return (long)i;
  return -1;
}

static efa_result_t wait_req(void *req, int *size) {
  int done = 0;
  efa_result_t rc;
  do {
    rc = N->test(req, &done, size);
  } while (rc == efa_success && !done);
  return rc;
}

#define NSIZES 32
static size_t g_sizes[NSIZES];
static void make_sizes(unsigned seed) {
  size_t fixed[] = {1, 0, 7, 4095, 4097, 65537, 1 << 20, (3 << 20) + 13, 8 << 20, 12345, 1};
  size_t nf = sizeof(fixed) / sizeof(fixed[0]);
  for (size_t i = 0; i < NSIZES; i++) {
    if (i < nf) g_sizes[i] = fixed[i];
    else {
      seed = seed * 1103515245u + 12345u;
      g_sizes[i] = (seed >> 8) % (2 << 20) + 1;
    }
  }
}
#define BURST 32
#define BURST_SIZE(i) ((size_t)((i) * 7919 % 200000 + 1))

/* The receiving side: sequential messages into larger buffers, then a burst of BURST in flight. */
static int receiver(void *r) {
  size_t maxs = 0;
  for (int i = 0; i < NSIZES; i++) maxs = g_sizes[i] > maxs ? g_sizes[i] : maxs;
  unsigned char *buf = malloc(maxs + 4096);
  void *mh = NULL;
  if (N->regMr(r, buf, maxs + 4096, EFA_PTR_HOST, &mh) != efa_success) return 10;
  for (int i = 0; i < NSIZES; i++) {
    size_t post = g_sizes[i] + (i % 3 ? 1000 : 0); /* the receiver may post more than is sent */
    void *data[1] = {buf};
    size_t sizes[1] = {post};
    int tags[1] = {i};
    void *mhs[1] = {mh};
    void *req = (void *)1; /* NCCL_NET_OPTIONAL_RECV_COMPLETION may be passed in */
    efa_result_t rc;
    do { rc = N->irecv(r, 1, data, sizes, tags, mhs, NULL, &req); } while (rc == efa_success && req == NULL);
    if (rc != efa_success) return 11;
    int got = -1;
    if (wait_req(req, &got) != efa_success) return 12;
    if ((size_t)got != g_sizes[i]) {
      fprintf(stderr, "receiver: message %d: size %d, sent %zu\n", i, got, g_sizes[i]);
      return 13;
    }
    long bad = check(buf, (unsigned)i, g_sizes[i]);
    if (bad >= 0) {
      fprintf(stderr, "receiver: message %d (%zu bytes): wrong byte at %ld\n", i, g_sizes[i], bad);
      return 14;
    }
  }
  N->deregMr(r, mh);
  free(buf);
  unsigned char *bufs[BURST];
  void *reqs[BURST];
  for (int i = 0; i < BURST; i++) {
    bufs[i] = malloc(BURST_SIZE(i) + 64);
    void *data[1] = {bufs[i]};
    size_t sizes[1] = {BURST_SIZE(i) + 64};
    int tags[1] = {100 + i};
    reqs[i] = NULL;
    efa_result_t rc;
    do { rc = N->irecv(r, 1, data, sizes, tags, NULL, NULL, &reqs[i]); } while (rc == efa_success && reqs[i] == NULL);
    if (rc != efa_success) return 15;
  }
  for (int i = BURST - 1; i >= 0; i--) { /* tested out of order */
    int got = -1;
    if (wait_req(reqs[i], &got) != efa_success) return 16;
    if ((size_t)got != BURST_SIZE(i) || check(bufs[i], 1000u + (unsigned)i, BURST_SIZE(i)) >= 0) {
      fprintf(stderr, "receiver: burst message %d wrong (size %d)\n", i, got);
      return 17;
    }
    free(bufs[i]);
  }
  return 0;
}

static int sender(void *s) {
  size_t maxs = 0;
  for (int i = 0; i < NSIZES; i++) maxs = g_sizes[i] > maxs ? g_sizes[i] : maxs;
  unsigned char *buf = malloc(maxs + 1);
  void *mh = NULL;
  if (N->regMr(s, buf, maxs + 1, EFA_PTR_HOST, &mh) != efa_success) return 20;
  for (int i = 0; i < NSIZES; i++) {
    fill(buf, (unsigned)i, g_sizes[i]);
    void *req = NULL;
    efa_result_t rc;
    do { rc = N->isend(s, buf, g_sizes[i], i, mh, NULL, &req); } while (rc == efa_success && req == NULL);
    if (rc != efa_success) return 21;
    int got = -1;
    if (wait_req(req, &got) != efa_success) return 22;
    if ((size_t)got != g_sizes[i]) return 23;
  }
  N->deregMr(s, mh);
  free(buf);
  unsigned char *bufs[BURST];
  void *reqs[BURST];
  for (int i = 0; i < BURST; i++) {
    bufs[i] = malloc(BURST_SIZE(i));
    fill(bufs[i], 1000u + (unsigned)i, BURST_SIZE(i));
    reqs[i] = NULL;
    efa_result_t rc;
    do { rc = N->isend(s, bufs[i], BURST_SIZE(i), 100 + i, NULL, NULL, &reqs[i]); } while (rc == efa_success && reqs[i] == NULL);
    if (rc != efa_success) return 24;
  }
  for (int i = 0; i < BURST; i++) {
    int got = -1;
    if (wait_req(reqs[i], &got) != efa_success || (size_t)got != BURST_SIZE(i)) return 25;
    free(bufs[i]);
  }
  return 0;
}

static int read_full(int fd, void *b, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, (char *)b + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    got += (size_t)r;
  }
  return 0;
}

static int count_conn_segments(pid_t pid) {
  char prefix[64];
  snprintf(prefix, sizeof(prefix), "efasim-%u-c-%d-", (unsigned)getuid(), (int)pid);
  DIR *d = opendir("/dev/shm");
  if (!d) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) n++;
  closedir(d);
  return n;
}

/* ---------------------------------------------------------------- tests */

static void test_env(void) {
  struct { const char *var, *val; } bad[] = {
    {"EFASIM_QP_BUDGET", "abc"}, {"EFASIM_QP_BUDGET", "-5"}, {"EFASIM_QP_BUDGET", "0"},
    {"EFASIM_QP_BUDGET", "99999999999999999999999"}, {"EFASIM_QP_BUDGET", ""}, {"EFASIM_QP_BUDGET", "12x"},
    {"EFASIM_QPS_PER_CONN", "0"}, {"EFASIM_QPS_PER_CONN", "two"}, {"EFASIM_QPS_PER_CONN", "-2"},
    {"EFASIM_RING_BYTES", "12"}, {"EFASIM_STATE", "a/b"}, {"EFASIM_STATE", "/"},
    {"EFASIM_CHARGE", "EFA"}, {"EFASIM_CHARGE", "qp"}, {"EFASIM_CHARGE", ""}, {"EFASIM_QPS_PER_EP", "0"},
    {"EFASIM_QPS_PER_EP", "x4"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    char *old = getenv(bad[i].var) ? strdup(getenv(bad[i].var)) : NULL;
    setenv(bad[i].var, bad[i].val, 1);
    log_clear();
    void *ctx = (void *)0x1;
    efa_result_t rc = init_comm(&ctx, 0x1234);
    char want[128];
    snprintf(want, sizeof(want), "%s='%s'", bad[i].var, bad[i].val);
    int named = log_has(want) || (bad[i].val[0] == '\0' && log_has(bad[i].var));
    ok(rc != efa_success && ctx == NULL && named && log_has("set it to") && log_has("WARN"),
       "init refuses %s='%s' with a message naming it and the fix", bad[i].var, bad[i].val);
    if (!(rc != efa_success && named)) log_dump();
    ok(N->finalize(NULL) == efa_success, "finalize(NULL) after a failed init (NCCL's fail path) is fine");
    if (old) { setenv(bad[i].var, old, 1); free(old); } else unsetenv(bad[i].var);
  }
}

static void test_props(void) {
  void *ctx = NULL;
  log_clear();
  ok(init_comm(&ctx, 0xabc) == efa_success && ctx != NULL, "init of a communicator gives a context");
  ok(log_has("comm 0x0000000000000abc uses EFASim: 64 of 64 QPs left") && log_has("INFO flags=0x11"),
     "init logs the budget left (INFO, NET subsystem)");
  int nd = 0;
  ok(N->devices(&nd) == efa_success && nd == 1, "devices: 1");
  efa_props_t p;
  memset(&p, 0xff, sizeof(p));
  ok(N->getProperties(0, &p) == efa_success, "getProperties(0)");
  ok(p.name && strcmp(p.name, "efasim0") == 0 && p.pciPath == NULL && p.ptrSupport == EFA_PTR_HOST && p.maxRecvs == 1 &&
         p.speed > 0 && p.maxComms > 0 && p.netDeviceType == 0 && p.netDeviceVersion == 0 && p.vProps.ndevs == 1 &&
         p.vProps.devs[0] == 0 && p.maxP2pBytes > 0 && p.maxCollBytes > 0 && p.maxMultiRequestSize == 1 &&
         p.regIsGlobal == 0 && p.forceFlush == 0,
     "properties: efasim0, virtual (NULL pciPath), host pointers, maxRecvs 1, host device type");
  ok(N->getProperties(1, &p) != efa_success, "getProperties(1) is refused");
  ok(strcmp(N->name, "EFASim") == 0, "the network is named EFASim");
  ok(N->regMrDmaBuf == NULL && N->getDeviceMr == NULL && N->irecvConsumed == NULL && N->makeVDevice == NULL &&
         N->setNetAttr == NULL && N->iflush && N->finalize,
     "optional entries NULL where NCCL allows it");
  void *mh = NULL;
  char b[8];
  ok(N->regMr(NULL, b, 8, EFA_PTR_CUDA, &mh) != efa_success, "regMr of CUDA memory is refused");
  ok(N->finalize(ctx) == efa_success, "finalize");
}

static void test_two_processes(void) {
  stat_reset(64, 2);
  make_sizes(12345);
  int hp[2], rp[2];
  if (pipe(hp) || pipe(rp)) { ok(0, "pipe"); return; }
  pid_t child = fork();
  if (child == 0) {
    alarm(120); /* alarms are not inherited */
    close(hp[0]);
    close(rp[0]);
    void *ctx = NULL, *l = NULL, *r = NULL;
    char handle[EFA_NET_HANDLE_MAXSIZE];
    if (init_comm(&ctx, 0x2222) != efa_success || N->listen(ctx, 0, handle, &l) != efa_success) _exit(2);
    if (write(hp[1], handle, sizeof(handle)) != (ssize_t)sizeof(handle)) _exit(3);
    efa_result_t rc = efa_success;
    while (r == NULL && (rc = N->accept(l, &r, NULL)) == efa_success) sched_yield();
    if (rc != efa_success) _exit(4);
    N->closeListen(l);
    int st = receiver(r);
    char c = 'D';
    if (write(rp[1], &c, 1) != 1) _exit(5);
    N->closeRecv(r);
    N->finalize(ctx);
    _exit(st);
  }
  close(hp[1]);
  close(rp[1]);
  char handle[EFA_NET_HANDLE_MAXSIZE];
  void *ctx = NULL, *s = NULL;
  ok(read_full(hp[0], handle, sizeof(handle)) == 0, "the listener's handle came over the pipe");
  ok(init_comm(&ctx, 0x1111) == efa_success, "sender's communicator inits");
  efa_result_t rc = efa_success;
  while (s == NULL && (rc = N->connect(ctx, 0, handle, &s, NULL)) == efa_success) sched_yield();
  ok(rc == efa_success && s != NULL, "connect returns a send comm");
  ok(stat_of("in_use") == 2 && stat_of("connections") == 1 && stat_of("qps_charged") == 2 &&
         stat_pid(getpid(), "in_use") == 2 && stat_pid(getpid(), "connections") == 1,
     "efasim-stat: the connection costs 2 QPs, charged to the sender");
  ok(log_has("comm 0x0000000000001111 connection 1 costs 2 QPs, 62 of 64 left"), "the charge is logged");
  void *s2 = NULL;
  ok(N->connect(ctx, 0, handle, &s2, NULL) != efa_success && s2 == NULL, "a second connect to the same handle is refused");
  ok(stat_of("in_use") == 2, "... and charges nothing");
  int st = s ? sender(s) : -1;
  ok(st == 0, "sender: %d messages (1 B .. 8 MiB, odd sizes, empty) then %d in flight (status %d)", NSIZES, BURST, st);
  char c;
  ok(read_full(rp[0], &c, 1) == 0 && c == 'D', "receiver finished");
  int status = 0;
  waitpid(child, &status, 0);
  ok(WIFEXITED(status) && WEXITSTATUS(status) == 0,
     "receiver: sizes reported, data intact, larger posted buffers, burst tested out of order (exit %d)",
     WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  ok(N->closeSend(s) == efa_success, "closeSend");
  ok(stat_of("in_use") == 0 && stat_of("connections_open") == 0 && stat_of("peak") == 2 &&
         stat_pid(getpid(), "in_use") == 0,
     "QPs come back on close (in use 0, peak 2)");
  ok(log_has("connection 1 closed, 2 QPs back, 64 of 64 left"), "the release is logged");
  N->finalize(ctx);
  close(hp[0]);
  close(rp[0]);
}

static void test_budget(void) {
  stat_reset(6, 2);
  log_clear();
  void *a = NULL, *b = NULL;
  ok(init_comm(&a, 0xa) == efa_success, "comm A inits with 6 QPs left");
  void *s[4] = {0}, *r[4] = {0};
  int made = 0;
  for (int i = 0; i < 3; i++) made += loopback(a, &s[i], &r[i]) == efa_success;
  ok(made == 3, "comm A makes 3 connections");
  ok(stat_of("in_use") == 6 && stat_of("left") == 0 && stat_of("connections") == 3 && stat_of("qps_charged") == 6,
     "efasim-stat: 6 of 6 QPs in use, 3 connections");
  ok(log_has("costs 2 QPs, 0 of 6 left"), "the last charge logs 0 left");
  log_clear();
  ok(loopback(a, &s[3], &r[3]) != efa_success, "a 4th connection is refused (budget spent)");
  ok(log_has("connection refused: it needs 2 QPs, 0 of 6 left") && stat_of("connections_refused") == 1,
     "the refusal is logged and counted");
  log_clear();
  ok(init_comm(&b, 0xb) != efa_success && b == NULL, "a new communicator's init refuses: budget spent");
  ok(log_has("comm 0x000000000000000b refused: 0 of 6 QPs left on this host, a connection needs 2"),
     "the refusal says why");
  ok(stat_of("inits_refused") == 1 && stat_pid(getpid(), "inits_refused") == 1, "efasim-stat counts the refused init");
  char *j = stat_json();
  ok(strstr(j, "\"comm\":\"0x000000000000000b\"") && strstr(j, "\"status\":\"refused\""), "the refused comm is listed");
  free(j);
  N->finalize(b);
  N->closeSend(s[0]);
  N->closeRecv(r[0]);
  ok(stat_of("in_use") == 4, "closing one connection gives 2 QPs back");
  b = NULL;
  ok(init_comm(&b, 0xb2) == efa_success, "a new communicator inits again once QPs are free");
  ok(stat_of("peak") == 6, "peak stays 6");
  for (int i = 1; i < 3; i++) { N->closeSend(s[i]); N->closeRecv(r[i]); }
  N->finalize(a);
  N->finalize(b);
  ok(stat_of("in_use") == 0, "all back");
  /* A different EFASIM_QP_BUDGET is adopted while nothing is in use. */
  setenv("EFASIM_QP_BUDGET", "10", 1);
  a = NULL;
  ok(init_comm(&a, 0xc) == efa_success && stat_of("budget") == 10, "an idle host takes a new EFASIM_QP_BUDGET");
  N->finalize(a);
}

/* EFASIM_CHARGE=efa: a communicator costs one endpoint per process (EFASIM_QPS_PER_EP), at its
 * first listen or connect, whatever its connections; it comes back at finalize. */
static void test_efa_charge(void) {
  stat_reset(10, 2);
  setenv("EFASIM_CHARGE", "efa", 1);
  setenv("EFASIM_QPS_PER_EP", "4", 1);
  log_clear();
  void *a = NULL, *b = NULL, *c = NULL;
  ok(init_comm(&a, 0xe1) == efa_success && log_has("4 for its endpoint in this process (EFASIM_CHARGE=efa"),
     "efa: comm A inits, the log says what it will cost");
  ok(stat_of("in_use") == 0, "efa: init alone charges nothing (the endpoint comes with the first connection)");
  void *s[6] = {0}, *r[6] = {0};
  int made = 0;
  for (int i = 0; i < 6; i++) made += loopback(a, &s[i], &r[i]) == efa_success;
  ok(made == 6 && stat_of("in_use") == 4 && stat_of("connections") == 6,
     "efa: 6 connections of one communicator cost its one endpoint, 4 QPs (ib would charge 12)");
  ok(log_has("endpoint of process") && log_has("costs 4 QPs, 6 of 10 left"), "efa: the endpoint's charge is logged");
  ok(init_comm(&b, 0xe2) == efa_success, "efa: comm B inits with 6 left (an endpoint needs 4)");
  void *sb = NULL, *rb = NULL;
  ok(loopback(b, &sb, &rb) == efa_success && stat_of("in_use") == 8, "efa: comm B's endpoint takes 4 more: 8 in use");
  log_clear();
  ok(init_comm(&c, 0xe3) != efa_success && c == NULL &&
     log_has("refused: 2 of 10 QPs left on this host, an endpoint needs 4"),
     "efa: comm C is refused at init, 2 left, an endpoint needs 4: NCCL takes its next network");
  N->closeSend(sb);
  N->closeRecv(rb);
  ok(stat_of("in_use") == 8, "efa: closing a connection gives nothing back (the endpoint stays the comm's)");
  N->finalize(b);
  ok(stat_of("in_use") == 4, "efa: finalize gives the endpoint's 4 QPs back");
  for (int i = 0; i < 6; i++) { N->closeSend(s[i]); N->closeRecv(r[i]); }
  N->finalize(a);
  ok(stat_of("in_use") == 0 && stat_of("connections_open") == 0, "efa: all back, no connection left open");
  /* An endpoint that does not fit: the connect fails, as creating its QPs would. */
  stat_reset(3, 2);
  setenv("EFASIM_QP_BUDGET", "3", 1);
  setenv("EFASIM_QPS_PER_EP", "2", 1);
  a = NULL;
  ok(init_comm(&a, 0xe4) == efa_success, "efa: with 3 QPs and endpoints of 2, comm D inits");
  setenv("EFASIM_QPS_PER_EP", "4", 1);
  b = NULL;
  ok(init_comm(&b, 0xe5) != efa_success, "efa: a process whose endpoints cost 4 is refused at init with 3 left");
  N->finalize(a);
  unsetenv("EFASIM_CHARGE");
  unsetenv("EFASIM_QPS_PER_EP");
  stat_reset(64, 2);
}

static void test_killed(void) {
  stat_reset(64, 2);
  int p[2];
  if (pipe(p)) { ok(0, "pipe"); return; }
  pid_t child = fork();
  if (child == 0) {
    alarm(120); /* alarms are not inherited */
    close(p[0]);
    void *ctx = NULL, *s1, *r1, *s2, *r2;
    if (init_comm(&ctx, 0xdead) != efa_success || loopback(ctx, &s1, &r1) || loopback(ctx, &s2, &r2)) _exit(2);
    char c = 'R';
    if (write(p[1], &c, 1) != 1) _exit(3);
    for (;;) pause();
  }
  close(p[1]);
  char c = 0;
  ok(read_full(p[0], &c, 1) == 0 && c == 'R', "child holds 2 connections");
  ok(stat_pid(child, "in_use") == 4 && stat_of("in_use") == 4, "efasim-stat: the child holds 4 QPs");
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  char *j = stat_json();
  char from[48];
  snprintf(from, sizeof(from), "{\"pid\":%d,", (int)child);
  ok(jnum(j, NULL, "in_use") == 0 && jnum(j, NULL, "reclaimed_qps") == 4 && jnum(j, NULL, "dead_processes") == 1 &&
         strstr(j, from) == NULL,
     "after kill -9 its 4 QPs are reclaimed and it leaves the table");
  if (jnum(j, NULL, "in_use") != 0) diag("%s", j);
  free(j);
  close(p[0]);
}

static void test_dead_lock_holder(void) {
  stat_reset(64, 2);
  int p[2];
  if (pipe(p)) { ok(0, "pipe"); return; }
  pid_t child = fork();
  if (child == 0) {
    alarm(120); /* alarms are not inherited */
    close(p[0]);
    struct efasim_state *st = NULL;
    char err[256];
    if (efasim_state_attach(g_state, &st, err, sizeof(err)) != 0) _exit(2);
    pthread_mutex_lock(&st->lock);
    st->procs[0].pid = getpid(); /* half-way through an update */
    st->procs[0].start = efasim_proc_start(getpid());
    st->procs[0].in_use = 8;
    st->in_use = 8;
    char c = 'L';
    if (write(p[1], &c, 1) != 1) _exit(3);
    for (;;) pause();
  }
  close(p[1]);
  char c = 0;
  ok(read_full(p[0], &c, 1) == 0 && c == 'L', "child holds the budget lock");
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  log_clear();
  void *ctx = NULL;
  ok(init_comm(&ctx, 0xe) == efa_success, "init does not hang on a lock whose owner died");
  ok(log_has("died holding the budget lock") && log_has("died holding 8 QPs"), "it says so and reclaims the dead's QPs");
  ok(stat_of("in_use") == 0, "figures repaired");
  N->finalize(ctx);
  close(p[0]);
}

static void test_pid_reuse(void) {
  stat_reset(64, 2);
  struct efasim_state *st = NULL;
  char err[256];
  if (efasim_state_attach(g_state, &st, err, sizeof(err)) != 0) { ok(0, "attach: %s", err); return; }
  efasim_lock(st, NULL);
  /* A live pid (our parent) with the wrong start time: the process that held these QPs is gone
   * and the pid now belongs to someone else. */
  st->procs[5].pid = getppid();
  st->procs[5].start = 1;
  st->procs[5].in_use = 10;
  st->procs[5].conns_open = 5;
  efasim_unlock(st);
  efasim_state_close(st);
  ok(stat_of("in_use") == 0 && stat_of("reclaimed_qps") == 10, "a reused pid (other start time) does not keep QPs");
}

struct thr { int id; int rc; };

static void *thread_main(void *arg) {
  struct thr *t = arg;
  void *ctx = NULL, *s = NULL, *r = NULL;
  t->rc = 1;
  if (init_comm(&ctx, 0x7000 + (uint64_t)t->id) != efa_success) return NULL;
  t->rc = 2;
  if (loopback(ctx, &s, &r) != efa_success) return NULL;
  t->rc = 3;
  for (unsigned m = 0; m < 200; m++) {
    size_t n = (m * 2654435761u + (unsigned)t->id * 977u) % 300000;
    unsigned char *a = malloc(n + 1), *b = malloc(n + 17);
    fill(a, m + (unsigned)t->id * 1000, n);
    void *sr = NULL, *rr = NULL;
    void *data[1] = {b};
    size_t sizes[1] = {n + 17};
    int tags[1] = {(int)m};
    efa_result_t rc = efa_success;
    while (rc == efa_success && rr == NULL) rc = N->irecv(r, 1, data, sizes, tags, NULL, NULL, &rr);
    while (rc == efa_success && sr == NULL) rc = N->isend(s, a, n, (int)m, NULL, NULL, &sr);
    int sd = 0, rd = 0, got = -1, sent = -1;
    while (rc == efa_success && (!sd || !rd)) {
      if (!sd) rc = N->test(sr, &sd, &sent);
      if (rc == efa_success && !rd) rc = N->test(rr, &rd, &got);
    }
    int good = rc == efa_success && (size_t)got == n && (size_t)sent == n && check(b, m + (unsigned)t->id * 1000, n) < 0;
    free(a);
    free(b);
    if (!good) return NULL;
  }
  N->closeSend(s);
  N->closeRecv(r);
  N->finalize(ctx);
  t->rc = 0;
  return NULL;
}

static void test_threads(void) {
  stat_reset(256, 2);
  setenv("EFASIM_RING_BYTES", "65536", 1); /* small rings: many wrap-arounds */
  pthread_t th[6];
  struct thr t[6];
  for (int i = 0; i < 6; i++) {
    t[i].id = i;
    pthread_create(&th[i], NULL, thread_main, &t[i]);
  }
  int bad = 0;
  for (int i = 0; i < 6; i++) {
    pthread_join(th[i], NULL);
    if (t[i].rc) { bad++; diag("thread %d failed at step %d", i, t[i].rc); }
  }
  unsetenv("EFASIM_RING_BYTES");
  ok(bad == 0, "6 threads init, connect, move 200 messages each through 64 KiB rings, close, concurrently");
  ok(stat_of("in_use") == 0 && stat_of("connections") == 6 && stat_of("qps_charged") == 12, "and give all QPs back");
}

static void test_stat_cli(void) {
  char cmd[512];
  snprintf(cmd, sizeof(cmd), "EFASIM_STATE=%s %s/efasim-stat | grep -q 'in use'", g_state, g_build);
  ok(system(cmd) == 0, "efasim-stat prints text");
  snprintf(cmd, sizeof(cmd), "EFASIM_STATE=/efasim-none-%d %s/efasim-stat --json | grep -q '\"exists\":false'",
           (int)getpid(), g_build);
  ok(system(cmd) == 0, "efasim-stat --json on a host without state says so");
  snprintf(cmd, sizeof(cmd), "EFASIM_QP_BUDGET=-1 %s/efasim-stat 2>&1 | grep -q \"EFASIM_QP_BUDGET='-1' is negative\"", g_build);
  ok(system(cmd) == 0, "efasim-stat rejects bad settings with the same message");
  ok(count_conn_segments(getpid()) == 0, "no connection segment of this process left in /dev/shm");
}

static void on_alarm(int sig) {
  (void)sig;
  static const char m[] = "not ok 999 - timed out (a wait did not end)\n";
  if (write(1, m, sizeof(m) - 1)) {}
  _exit(1);
}

int main(int argc, char **argv) {
  if (argc > 1) g_build = argv[1];
  setvbuf(stdout, NULL, _IOLBF, 0);
  signal(SIGALRM, on_alarm);
  alarm(150);
  snprintf(g_state, sizeof(g_state), "/efasim-test-%d", (int)getpid());
  setenv("EFASIM_STATE", g_state, 1);
  unsetenv("EFASIM_RING_BYTES");
  unsetenv("EFASIM_CHARGE");
  unsetenv("EFASIM_QPS_PER_EP");
  stat_reset(64, 2);
  char path[512];
  snprintf(path, sizeof(path), "%s/libnccl-net-efasim.so", g_build);
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  ok(lib != NULL, "dlopen %s%s%s", path, lib ? "" : ": ", lib ? "" : dlerror());
  if (!lib) { printf("1..%d\n", g_test); return 1; }
  N = dlsym(lib, EFA_NET_PLUGIN_SYMBOL);
  ok(N != NULL, "dlsym %s (what NCCL 2.28.9 looks for first)", EFA_NET_PLUGIN_SYMBOL);
  if (!N) { printf("1..%d\n", g_test); return 1; }
  test_env();
  test_props();
  test_two_processes();
  test_budget();
  test_efa_charge();
  test_killed();
  test_dead_lock_holder();
  test_pid_reuse();
  test_threads();
  test_stat_cli();
  shm_unlink(g_state);
  printf("1..%d\n", g_test);
  return g_failed ? 1 : 0;
}
