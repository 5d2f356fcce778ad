/* efasim_net.c: EFASim, an NCCL network plugin that stands in for an AWS EFA NIC on one host.
 *
 * Data moves between the processes of one host through a POSIX shared-memory ring per
 * connection (host memory only: ptrSupport NCCL_PTR_HOST, so NCCL stages GPU data through host
 * buffers, as it does for its Socket network).  What makes it a stand-in for EFA is the budget:
 * every connection costs EFASIM_QPS_PER_CONN queue pairs out of a host-wide EFASIM_QP_BUDGET
 * kept in shared memory (efasim_state.c), like the 256 QPs of an EFA NIC.
 *
 * How a communicator that finds the budget spent falls over to Socket, as on EFA, in NCCL 2.28.9
 * (src/plugin/net.cc):
 *  - ncclNetInit(comm) runs for every communicator not split with shared resources (init.cc,
 *    commAlloc: "NCCLCHECK(ncclNetInit(comm))"; a split child that shares resources takes its
 *    parent's network in ncclNetInitFromParent and never reaches us).  It walks the plugins in
 *    order: the external ones from NCCL_NET_PLUGIN, then IB, then Socket.
 *  - ncclNetPluginInit calls ncclNet_v11->init(&comm->netContext, comm->commHash, ...) for EVERY
 *    communicator ("Init must be called for each new comm to set the right context"); devices()
 *    is called only the first time (state InitReady).  So init() is the one per-communicator
 *    decision point we get, and it is where the budget is checked: init refuses when fewer QPs
 *    are left than one connection costs.
 *  - When init fails, ncclNetPluginInit logs "Failed to initialize NET plugin EFASim", calls
 *    finalize(comm->netContext) (so finalize(NULL) must work: we leave *ctx NULL), and marks the
 *    plugin ncclNetPluginStateDisabled; ncclNetInit goes on to IB, then Socket, and init.cc logs
 *    "Using network Socket" for that communicator.  Communicators already assigned EFASim keep
 *    it (comm->ncclNet points at our table and our library stays loaded).
 *  - Limit of 2.28.9, not of this plugin: the Disabled state is process-wide (netPluginLibs[]), so
 *    later communicators of the SAME process skip EFASim without calling init, until the last
 *    EFASim communicator of the process is destroyed (ncclNetPluginFinalize -> refcount 0 ->
 *    ncclNetPluginUnload memsets the entry back to LoadReady, and the next ncclNetInit loads us
 *    again).  Other processes are unaffected.
 *  - QPs are charged in connect() (NCCL connects lazily, NCCL_RUNTIME_CONNECT, at the first
 *    collective), released in closeSend() or when the process is found dead.  A connect that
 *    finds the budget spent fails (as creating a QP on a full NIC fails): that is an error for
 *    the communicator, not a fallback, exactly as on EFA.
 */
#define _GNU_SOURCE
#include "efasim_abi.h"
#include "efasim_state.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

#define NET_NAME "EFASim"
#define DEV_NAME "efasim0"
#define HANDLE_MAGIC 0x4546534dU /* "EFSM" */
#define HANDLE_VERSION 1
#define CONN_MAGIC 0x4546415349434f4eULL
#define DESC_Q 128    /* message descriptors in flight per connection (>= NCCL_NET_MAX_REQUESTS) */
#define NREQ 64       /* requests per comm (NCCL keeps at most NCCL_NET_MAX_REQUESTS = 32) */
#define CTX_MAGIC 0x45435458U
#define SEND_MAGIC 0x45534e44U
#define RECV_MAGIC 0x45524356U
#define LISTEN_MAGIC 0x454c534eU

/* ---------------------------------------------------------------- logging */

static efa_logger_t g_logger;

static void vlog_at(int level, const char *func, int line, const char *fmt, va_list ap) {
  efa_logger_t lf = __atomic_load_n(&g_logger, __ATOMIC_ACQUIRE);
  char buf[1024];
  vsnprintf(buf, sizeof(buf), fmt, ap);
  if (lf)
    lf(level == 2 ? EFA_LOG_WARN : EFA_LOG_INFO, level == 2 ? EFA_SUBSYS_ALL : (EFA_SUBSYS_INIT | EFA_SUBSYS_NET), func,
       line, "%s", buf);
  else if (level == 2)
    fprintf(stderr, "%s\n", buf);
}

__attribute__((format(printf, 2, 3))) static void elog(int level, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vlog_at(level, "efasim", 0, fmt, ap);
  va_end(ap);
}

#define WARN(...) elog(2, __VA_ARGS__)
#define INFO(...) elog(3, __VA_ARGS__)

/* ---------------------------------------------------------------- the budget */

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
/* Mappings of state segments, by name (a process could see EFASIM_STATE change between inits;
 * a connection keeps the segment it was charged to).  Never unmapped before unload. */
#define MAX_STATES 8
static struct { char name[128]; struct efasim_state *st; } g_states[MAX_STATES];
static uint64_t g_seq;

static struct efasim_state *state_for(const struct efasim_config *cfg, char *err, size_t errlen) {
  struct efasim_state *st = NULL;
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < MAX_STATES; i++)
    if (g_states[i].st && strcmp(g_states[i].name, cfg->state_name) == 0) { st = g_states[i].st; break; }
  if (st == NULL && efasim_state_open(cfg, &st, err, errlen) == 0) {
    int i;
    for (i = 0; i < MAX_STATES && g_states[i].st; i++) {}
    if (i < MAX_STATES) {
      snprintf(g_states[i].name, sizeof(g_states[i].name), "%s", cfg->state_name);
      g_states[i].st = st;
    } else {
      efasim_state_close(st);
      st = NULL;
      snprintf(err, errlen, "too many EFASIM_STATE segments in one process");
    }
  }
  pthread_mutex_unlock(&g_mu);
  return st;
}

__attribute__((destructor)) static void efasim_unload(void) {
  for (int i = 0; i < MAX_STATES; i++)
    if (g_states[i].st) { efasim_state_close(g_states[i].st); g_states[i].st = NULL; }
}

static struct efasim_comm *comm_entry(struct efasim_state *st, int slot, uint64_t comm_id) {
  if (slot < 0 || slot >= EFASIM_MAX_COMMS) return NULL;
  struct efasim_comm *c = &st->comms[slot];
  if (c->comm_id != comm_id || c->pid != (int32_t)getpid()) return NULL;
  return c;
}

static int comm_add(struct efasim_state *st, uint64_t comm_id, int status) {
  int best = -1;
  for (int i = 0; i < EFASIM_MAX_COMMS; i++) {
    struct efasim_comm *c = &st->comms[i];
    if (c->status == EFASIM_COMM_FREE) { best = i; break; }
    if (c->status != EFASIM_COMM_ACTIVE && (best < 0 || c->seq < st->comms[best].seq)) best = i;
  }
  if (best < 0) return -1;
  struct efasim_comm *c = &st->comms[best];
  memset(c, 0, sizeof(*c));
  c->comm_id = comm_id;
  c->pid = (int32_t)getpid();
  c->start = efasim_proc_start(getpid());
  c->status = status;
  c->seq = ++st->comm_seq;
  return best;
}

struct efa_ctx {
  uint32_t magic;
  int comm_slot;
  uint64_t comm_id;
  int traffic_class;
  struct efasim_config cfg;
  struct efasim_state *st;
  /* EFASIM_CHARGE=efa: the QPs of this communicator's endpoint in this process, charged at its
   * first listen or connect (aws-ofi-nccl creates it there, keyed by the proxy thread), given
   * back at finalize.  ep_mu orders a listen and a connect of two threads. */
  pthread_mutex_t ep_mu;
  long ep_qps;
};

/* What a connection costs, and what a communicator needs left to be taken. */
static long conn_cost(const struct efasim_config *cfg) {
  return cfg->charge == EFASIM_CHARGE_EFA ? 0 : cfg->qps_per_conn;
}
static long init_need(const struct efasim_config *cfg) {
  return cfg->charge == EFASIM_CHARGE_EFA ? cfg->qps_per_ep : cfg->qps_per_conn;
}

static void log_adapter(int level, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vlog_at(level, "efasim", 0, fmt, ap);
  va_end(ap);
}

static efa_result_t efa_init(void **ctx, uint64_t commId, efa_comm_config_t *config, efa_logger_t logFunction,
                             efa_prof_cb_t profFunction) {
  (void)profFunction;
  if (ctx) *ctx = NULL;
  if (logFunction) __atomic_store_n(&g_logger, logFunction, __ATOMIC_RELEASE);
  if (ctx == NULL) return efa_invalid_argument;
  struct efasim_config cfg;
  char err[512];
  if (efasim_config_read(&cfg, err, sizeof(err)) != 0) {
    WARN("EFASim: %s; EFASim is disabled, NCCL will use its next network", err);
    return efa_invalid_usage;
  }
  struct efasim_state *st = state_for(&cfg, err, sizeof(err));
  if (st == NULL) {
    WARN("EFASim: %s; EFASim is disabled, NCCL will use its next network", err);
    return efa_system_error;
  }
  struct efa_ctx *c = calloc(1, sizeof(*c));
  if (c == NULL) return efa_system_error;
  c->magic = CTX_MAGIC;
  c->comm_id = commId;
  c->traffic_class = config ? config->trafficClass : -1;
  c->cfg = cfg;
  c->st = st;
  pthread_mutex_init(&c->ep_mu, NULL);

  efasim_lock(st, log_adapter);
  if (st->budget != cfg.budget) {
    if (st->in_use == 0) {
      INFO("EFASim: budget of %s set to %ld QPs (EFASIM_QP_BUDGET; it was %lld)", cfg.state_name, cfg.budget,
           (long long)st->budget);
      st->budget = cfg.budget;
    } else {
      WARN("EFASim: EFASIM_QP_BUDGET=%ld but the host's budget in %s is %lld with %lld QPs in use; keeping %lld "
           "(run efasim-stat --reset when nothing uses EFASim)",
           cfg.budget, cfg.state_name, (long long)st->budget, (long long)st->in_use, (long long)st->budget);
    }
  }
  struct efasim_proc *self = efasim_self(st, cfg.qps_per_conn);
  long left = (long)(st->budget - st->in_use);
  int refuse = left < init_need(&cfg);
  if (self == NULL) {
    efasim_unlock(st);
    free(c);
    WARN("EFASim: the process table of %s is full (%d processes); EFASim is disabled for this communicator",
         cfg.state_name, EFASIM_MAX_PROCS);
    return efa_system_error;
  }
  if (refuse) {
    self->inits_refused++;
    st->inits_refused++;
    comm_add(st, commId, EFASIM_COMM_REFUSED);
    long budget = (long)st->budget;
    efasim_unlock(st);
    free(c);
    INFO("EFASim: comm 0x%016llx refused: %ld of %ld QPs left on this host, %s needs %ld; NCCL will use its "
         "next network (Socket) for this communicator",
         (unsigned long long)commId, left, budget, cfg.charge == EFASIM_CHARGE_EFA ? "an endpoint" : "a connection",
         init_need(&cfg));
    return efa_system_error;
  }
  self->inits++;
  st->inits++;
  c->comm_slot = comm_add(st, commId, EFASIM_COMM_ACTIVE);
  long budget = (long)st->budget;
  efasim_unlock(st);
  *ctx = c;
  if (cfg.charge == EFASIM_CHARGE_EFA)
    INFO("EFASim: comm 0x%016llx uses EFASim: %ld of %ld QPs left on this host, %ld for its endpoint in this process "
         "(EFASIM_CHARGE=efa; state %s)", (unsigned long long)commId, left, budget, cfg.qps_per_ep, cfg.state_name);
  else
    INFO("EFASim: comm 0x%016llx uses EFASim: %ld of %ld QPs left on this host, %ld per connection (state %s)",
         (unsigned long long)commId, left, budget, cfg.qps_per_conn, cfg.state_name);
  return efa_success;
}

/* Moves `qps` QPs (negative: gives them back) to this process and communicator, under the lock.
 * Charging fails (-1) when fewer are left. */
static int move_qps(struct efasim_state *st, const struct efa_ctx *c, long qps, long *left, long *budget) {
  efasim_lock(st, log_adapter);
  struct efasim_proc *self = efasim_self(st, c->cfg.qps_per_conn);
  *left = (long)(st->budget - st->in_use);
  *budget = (long)st->budget;
  if (self == NULL || (qps > 0 && *left < qps) || (qps < 0 && self->in_use < -qps)) {
    if (self && qps > 0) self->conns_refused++;
    if (qps > 0) st->conns_refused++;
    efasim_unlock(st);
    return -1;
  }
  self->in_use += qps;
  st->in_use += qps;
  if (qps > 0) {
    self->charged += (uint64_t)qps;
    st->charged += (uint64_t)qps;
  }
  if (st->peak < st->in_use) st->peak = st->in_use;
  struct efasim_comm *e = comm_entry(st, c->comm_slot, c->comm_id);
  if (e && e->in_use + qps >= 0) e->in_use += qps;
  *left = (long)(st->budget - st->in_use);
  efasim_unlock(st);
  return 0;
}

/* EFASIM_CHARGE=efa: this communicator's endpoint in this process, once, at its first listen or
 * connect.  0, or -1 when the budget cannot hold it (as creating the endpoint's QPs fails). */
static int ep_charge(struct efa_ctx *c) {
  if (c->cfg.charge != EFASIM_CHARGE_EFA) return 0;
  pthread_mutex_lock(&c->ep_mu);
  int rc = 0;
  if (c->ep_qps == 0) {
    long left, budget, qps = c->cfg.qps_per_ep;
    rc = move_qps(c->st, c, qps, &left, &budget);
    if (rc == 0) {
      c->ep_qps = qps;
      INFO("EFASim: comm 0x%016llx endpoint of process %d costs %ld QPs, %ld of %ld left (EFASIM_CHARGE=efa)",
           (unsigned long long)c->comm_id, (int)getpid(), qps, left, budget);
    } else {
      WARN("EFASim: comm 0x%016llx: endpoint refused: it needs %ld QPs, %ld of %ld left on this host (all queue pairs "
           "in use: EFASIM_QP_BUDGET)", (unsigned long long)c->comm_id, qps, left, budget);
    }
  }
  pthread_mutex_unlock(&c->ep_mu);
  return rc;
}

static void ep_uncharge(struct efa_ctx *c) {
  pthread_mutex_lock(&c->ep_mu);
  if (c->ep_qps > 0) {
    long left, budget;
    if (move_qps(c->st, c, -c->ep_qps, &left, &budget) == 0)
      INFO("EFASim: comm 0x%016llx endpoint of process %d closed, %ld QPs back, %ld of %ld left",
           (unsigned long long)c->comm_id, (int)getpid(), c->ep_qps, left, budget);
    c->ep_qps = 0;
  }
  pthread_mutex_unlock(&c->ep_mu);
}

static efa_result_t efa_finalize(void *ctx) {
  struct efa_ctx *c = ctx;
  if (c == NULL) return efa_success;
  if (c->magic != CTX_MAGIC) return efa_invalid_argument;
  ep_uncharge(c);
  efasim_lock(c->st, log_adapter);
  struct efasim_comm *e = comm_entry(c->st, c->comm_slot, c->comm_id);
  if (e && e->status == EFASIM_COMM_ACTIVE) e->status = EFASIM_COMM_FINALIZED;
  efasim_unlock(c->st);
  c->magic = 0;
  pthread_mutex_destroy(&c->ep_mu);
  free(c);
  return efa_success;
}

static efa_result_t efa_devices(int *ndev) {
  if (ndev == NULL) return efa_invalid_argument;
  *ndev = 1;
  return efa_success;
}

static efa_result_t efa_get_properties(int dev, efa_props_t *props) {
  if (dev != 0 || props == NULL) return efa_invalid_argument;
  memset(props, 0, sizeof(*props));
  props->name = (char *)DEV_NAME;
  /* NULL: a virtual NIC.  NCCL's topology (graph/xml.cc ncclTopoFillNet) then attaches it to the
   * first CPU, as the ext-net README asks for virtual interfaces. */
  props->pciPath = NULL;
  props->guid = 0xefa5100000000000ULL;
  props->ptrSupport = EFA_PTR_HOST;
  props->regIsGlobal = 0;
  props->forceFlush = 0;
  props->speed = 100000; /* Mbps: one 100 Gbps EFA NIC (g6e.8xlarge) */
  props->port = 0;
  props->latency = 0;    /* not set, as NCCL's Socket does: NCCL uses its own defaults */
  props->maxComms = 65536;
  props->maxRecvs = 1;   /* no grouped receives */
  props->netDeviceType = EFA_NET_DEVICE_HOST;
  props->netDeviceVersion = EFA_NET_DEVICE_INVALID_VERSION;
  props->vProps.ndevs = 1;
  props->vProps.devs[0] = 0;
  props->maxP2pBytes = EFA_MAX_NET_SIZE_BYTES;
  props->maxCollBytes = EFA_MAX_COLLNET_SIZE;
  props->maxMultiRequestSize = 1;
  return efa_success;
}

/* ---------------------------------------------------------------- connections */

struct conn_desc {
  uint64_t size;
  int32_t tag;
  int32_t pad;
};

/* The shared segment of one connection: made by the receiver in listen(), opened by the sender. */
struct conn_hdr {
  uint64_t magic;
  uint64_t nonce;
  uint64_t ring_bytes;
  uint64_t data_off;
  uint32_t state;         /* 0 listening, 1 being claimed, 2 connected */
  int32_t sender_pid;
  int32_t receiver_pid;
  uint32_t sender_closed;
  uint32_t receiver_closed;
  uint64_t desc_head __attribute__((aligned(64))); /* written by the sender */
  uint64_t wb;                                     /* bytes written (sender) */
  uint64_t desc_tail __attribute__((aligned(64))); /* written by the receiver */
  uint64_t rb;                                     /* bytes read (receiver) */
  struct conn_desc desc[DESC_Q] __attribute__((aligned(64)));
};

struct efa_handle {
  uint32_t magic;
  uint16_t version;
  uint16_t dev;
  int32_t pid;
  uint32_t pad;
  uint64_t nonce;
  uint64_t map_len;
  char name[96];
};
_Static_assert(sizeof(struct efa_handle) <= EFA_NET_HANDLE_MAXSIZE, "handle fits NCCL_NET_HANDLE_MAXSIZE");

enum { REQ_FREE = 0, REQ_SEND, REQ_RECV, REQ_FLUSH };

struct efa_req {
  int kind;
  int done;
  void *comm;
  char *buf;
  size_t size;     /* send: message size; recv: buffer size */
  size_t msg;      /* recv: size of the matched message */
  size_t moved;
  int have_desc;
  int tag;
};

struct efa_conn {          /* sendComm or recvComm */
  uint32_t magic;
  pthread_mutex_t mu;
  struct conn_hdr *h;
  char *ring;
  size_t map_len;
  uint64_t ring_bytes;
  uint64_t local_desc;     /* sender: descriptors posted; receiver: descriptors taken */
  struct efa_req reqs[NREQ];
  struct efa_req *fifo[NREQ]; /* requests not yet fully moved, in posting order */
  int fifo_head, fifo_n;
  unsigned idle;
  /* budget (sender) */
  struct efasim_state *st;
  uint64_t comm_id;
  int comm_slot;
  long qps;
  uint64_t conn_no;
};

struct efa_listen {
  uint32_t magic;
  struct conn_hdr *h;
  size_t map_len;
  uint64_t ring_bytes;
  int accepted;
  char name[96];
};

static uint64_t nonce64(void) {
  uint64_t v = 0;
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    if (read(fd, &v, sizeof(v)) != (ssize_t)sizeof(v)) v = 0;
    close(fd);
  }
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (v ^ ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40)) | 1;
}

static efa_result_t efa_listen(void *ctx, int dev, void *handle, void **listenComm) {
  struct efa_ctx *c = ctx;
  if (dev != 0 || handle == NULL || listenComm == NULL) return efa_invalid_argument;
  *listenComm = NULL;
  long ring = EFASIM_DEFAULT_RING;
  if (c && c->magic == CTX_MAGIC && ep_charge(c) != 0) return efa_system_error;
  if (c && c->magic == CTX_MAGIC) ring = c->cfg.ring_bytes;
  else {
    struct efasim_config cfg;
    char err[512];
    if (efasim_config_read(&cfg, err, sizeof(err)) == 0) ring = cfg.ring_bytes;
  }
  struct efa_listen *l = calloc(1, sizeof(*l));
  if (l == NULL) return efa_system_error;
  size_t data_off = (sizeof(struct conn_hdr) + 4095) & ~(size_t)4095;
  l->map_len = data_off + (size_t)ring;
  l->ring_bytes = (uint64_t)ring;
  int fd = -1;
  for (int tries = 0; tries < 16 && fd < 0; tries++) {
    uint64_t seq = __atomic_add_fetch(&g_seq, 1, __ATOMIC_RELAXED);
    snprintf(l->name, sizeof(l->name), "/efasim-%u-c-%d-%llu-%04x", (unsigned)getuid(), (int)getpid(),
             (unsigned long long)seq, (unsigned)(nonce64() & 0xffff));
    fd = shm_open(l->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    WARN("EFASim: cannot create the connection segment %s: %s", l->name, strerror(errno));
    free(l);
    return efa_system_error;
  }
  if (ftruncate(fd, (off_t)l->map_len) != 0) {
    WARN("EFASim: cannot size the connection segment %s to %zu bytes: %s (is /dev/shm big enough? EFASIM_RING_BYTES "
         "sets the ring size)",
         l->name, l->map_len, strerror(errno));
    close(fd);
    shm_unlink(l->name);
    free(l);
    return efa_system_error;
  }
  void *m = mmap(NULL, l->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) {
    WARN("EFASim: cannot map the connection segment %s: %s", l->name, strerror(errno));
    shm_unlink(l->name);
    free(l);
    return efa_system_error;
  }
  l->h = m;
  l->h->ring_bytes = (uint64_t)ring;
  l->h->data_off = data_off;
  l->h->receiver_pid = (int32_t)getpid();
  l->h->nonce = nonce64();
  __atomic_store_n(&l->h->magic, CONN_MAGIC, __ATOMIC_RELEASE);
  l->magic = LISTEN_MAGIC;

  struct efa_handle hd;
  memset(&hd, 0, sizeof(hd));
  hd.magic = HANDLE_MAGIC;
  hd.version = HANDLE_VERSION;
  hd.dev = 0;
  hd.pid = (int32_t)getpid();
  hd.nonce = l->h->nonce;
  hd.map_len = l->map_len;
  snprintf(hd.name, sizeof(hd.name), "%s", l->name);
  memset(handle, 0, EFA_NET_HANDLE_MAXSIZE);
  memcpy(handle, &hd, sizeof(hd));
  *listenComm = l;
  return efa_success;
}

static struct efa_conn *conn_new(uint32_t magic, struct conn_hdr *h, size_t map_len) {
  struct efa_conn *k = calloc(1, sizeof(*k));
  if (k == NULL) return NULL;
  k->magic = magic;
  pthread_mutex_init(&k->mu, NULL);
  k->h = h;
  k->map_len = map_len;
  k->ring_bytes = h->ring_bytes;
  k->ring = (char *)h + h->data_off;
  k->comm_slot = -1;
  return k;
}

/* Charges one connection to this process (and to comm c); 0, or -1 when the budget is spent. */
static int charge(struct efa_ctx *c, struct efa_conn *k) {
  struct efasim_state *st = c->st;
  long qps = conn_cost(&c->cfg);
  if (ep_charge(c) != 0) return -1;
  efasim_lock(st, log_adapter);
  struct efasim_proc *self = efasim_self(st, qps);
  long left = (long)(st->budget - st->in_use);
  long budget = (long)st->budget;
  if (self == NULL || left < qps) {
    if (self) self->conns_refused++;
    st->conns_refused++;
    efasim_unlock(st);
    WARN("EFASim: comm 0x%016llx: connection refused: it needs %ld QPs, %ld of %ld left on this host (all queue pairs "
         "in use: EFASIM_QP_BUDGET)",
         (unsigned long long)c->comm_id, qps, left, budget);
    return -1;
  }
  self->in_use += qps;
  self->conns++;
  self->conns_open++;
  self->charged += (uint64_t)qps;
  st->in_use += qps;
  st->conns_open++;
  st->conns++;
  st->charged += (uint64_t)qps;
  if (st->peak < st->in_use) st->peak = st->in_use;
  uint64_t no = st->conns;
  struct efasim_comm *e = comm_entry(st, c->comm_slot, c->comm_id);
  if (e) {
    e->in_use += qps;
    e->conns++;
  }
  left = (long)(st->budget - st->in_use);
  efasim_unlock(st);
  k->st = st;
  k->qps = qps;
  k->comm_id = c->comm_id;
  k->comm_slot = c->comm_slot;
  k->conn_no = no;
  INFO("EFASim: comm 0x%016llx connection %llu costs %ld QPs, %ld of %ld left", (unsigned long long)c->comm_id,
       (unsigned long long)no, qps, left, budget);
  return 0;
}

static void uncharge(struct efa_conn *k, const char *why) {
  struct efasim_state *st = k->st;
  if (st == NULL) return; /* never charged, or given back already (efa: a connection of 0 QPs) */
  k->st = NULL;
  efasim_lock(st, log_adapter);
  struct efasim_proc *self = efasim_self(st, 0);
  if (self && self->in_use >= k->qps) {
    self->in_use -= k->qps;
    if (self->conns_open) self->conns_open--;
    st->in_use -= k->qps;
    if (st->conns_open) st->conns_open--;
  }
  struct efasim_comm *e = comm_entry(st, k->comm_slot, k->comm_id);
  if (e && e->in_use >= k->qps) e->in_use -= k->qps;
  long left = (long)(st->budget - st->in_use), budget = (long)st->budget;
  efasim_unlock(st);
  INFO("EFASim: comm 0x%016llx connection %llu %s, %ld QPs back, %ld of %ld left", (unsigned long long)k->comm_id,
       (unsigned long long)k->conn_no, why, k->qps, left, budget);
  k->qps = 0;
}

static efa_result_t efa_connect(void *ctx, int dev, void *handle, void **sendComm, efa_dev_handle_t **sendDevComm) {
  (void)sendDevComm; /* netDeviceType HOST: no device offload */
  struct efa_ctx *c = ctx;
  if (sendComm == NULL || handle == NULL || dev != 0) return efa_invalid_argument;
  *sendComm = NULL;
  if (c == NULL || c->magic != CTX_MAGIC) {
    WARN("EFASim: connect without a context from init");
    return efa_invalid_argument;
  }
  struct efa_handle hd;
  memcpy(&hd, handle, sizeof(hd));
  hd.name[sizeof(hd.name) - 1] = '\0';
  if (hd.magic != HANDLE_MAGIC || hd.version != HANDLE_VERSION) {
    WARN("EFASim: connect: not an EFASim handle (magic 0x%x)", hd.magic);
    return efa_invalid_argument;
  }
  int fd = shm_open(hd.name, O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) {
    WARN("EFASim: connect: the peer's connection %s (pid %d) is gone: %s", hd.name, hd.pid, strerror(errno));
    return efa_remote_error;
  }
  struct stat sb;
  if (fstat(fd, &sb) != 0 || (uint64_t)sb.st_size != hd.map_len) {
    close(fd);
    WARN("EFASim: connect: the peer's connection %s has an unexpected size", hd.name);
    return efa_remote_error;
  }
  void *m = mmap(NULL, hd.map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) {
    WARN("EFASim: connect: cannot map %s: %s", hd.name, strerror(errno));
    return efa_system_error;
  }
  struct conn_hdr *h = m;
  if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != CONN_MAGIC || h->nonce != hd.nonce ||
      h->data_off + h->ring_bytes != hd.map_len) {
    munmap(m, hd.map_len);
    WARN("EFASim: connect: %s is not the connection this handle names", hd.name);
    return efa_remote_error;
  }
  struct efa_conn *k = conn_new(SEND_MAGIC, h, hd.map_len);
  if (k == NULL) {
    munmap(m, hd.map_len);
    return efa_system_error;
  }
  if (charge(c, k) != 0) {
    munmap(m, hd.map_len);
    free(k);
    return efa_system_error;
  }
  uint32_t expect = 0;
  if (!__atomic_compare_exchange_n(&h->state, &expect, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    uncharge(k, "not made");
    munmap(m, hd.map_len);
    free(k);
    WARN("EFASim: connect: the handle %s was already connected to", hd.name);
    return efa_invalid_usage;
  }
  h->sender_pid = (int32_t)getpid();
  __atomic_store_n(&h->state, 2, __ATOMIC_RELEASE);
  *sendComm = k;
  return efa_success;
}

static efa_result_t efa_accept(void *listenComm, void **recvComm, efa_dev_handle_t **recvDevComm) {
  (void)recvDevComm;
  struct efa_listen *l = listenComm;
  if (l == NULL || l->magic != LISTEN_MAGIC || recvComm == NULL) return efa_invalid_argument;
  *recvComm = NULL;
  if (l->accepted) return efa_invalid_usage; /* one connection per listen, as NCCL uses it */
  if (__atomic_load_n(&l->h->state, __ATOMIC_ACQUIRE) != 2) return efa_success; /* not yet: NCCL calls again */
  struct efa_conn *k = conn_new(RECV_MAGIC, l->h, l->map_len);
  if (k == NULL) return efa_system_error;
  l->accepted = 1;
  shm_unlink(l->name); /* both ends have it mapped: nothing left behind if either dies */
  *recvComm = k;
  return efa_success;
}

static efa_result_t efa_close_listen(void *listenComm) {
  struct efa_listen *l = listenComm;
  if (l == NULL) return efa_success;
  if (l->magic != LISTEN_MAGIC) return efa_invalid_argument;
  if (!l->accepted) {
    shm_unlink(l->name);
    munmap(l->h, l->map_len);
  }
  l->magic = 0;
  free(l);
  return efa_success;
}

static efa_result_t close_conn(void *comm, uint32_t magic) {
  struct efa_conn *k = comm;
  if (k == NULL) return efa_success;
  if (k->magic != magic) return efa_invalid_argument;
  if (magic == SEND_MAGIC) {
    __atomic_store_n(&k->h->sender_closed, 1, __ATOMIC_RELEASE);
    uncharge(k, "closed");
  } else {
    __atomic_store_n(&k->h->receiver_closed, 1, __ATOMIC_RELEASE);
  }
  munmap(k->h, k->map_len);
  pthread_mutex_destroy(&k->mu);
  k->magic = 0;
  free(k);
  return efa_success;
}

static efa_result_t efa_close_send(void *c) { return close_conn(c, SEND_MAGIC); }
static efa_result_t efa_close_recv(void *c) { return close_conn(c, RECV_MAGIC); }

/* ---------------------------------------------------------------- memory registration */

struct efa_mr {
  void *data;
  size_t size;
};

static efa_result_t efa_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle) {
  (void)comm;
  if (mhandle == NULL) return efa_invalid_argument;
  if (type != EFA_PTR_HOST) {
    WARN("EFASim: regMr of memory type %d: only host memory (NCCL_PTR_HOST) is supported", type);
    return efa_internal_error;
  }
  struct efa_mr *mr = malloc(sizeof(*mr));
  if (mr == NULL) return efa_system_error;
  mr->data = data;
  mr->size = size;
  *mhandle = mr;
  return efa_success;
}

static efa_result_t efa_dereg_mr(void *comm, void *mhandle) {
  (void)comm;
  free(mhandle);
  return efa_success;
}

/* ---------------------------------------------------------------- data */

static struct efa_req *req_get(struct efa_conn *k) {
  if (k->fifo_n >= NREQ) return NULL;
  for (int i = 0; i < NREQ; i++)
    if (k->reqs[i].kind == REQ_FREE) {
      memset(&k->reqs[i], 0, sizeof(k->reqs[i]));
      k->reqs[i].comm = k;
      return &k->reqs[i];
    }
  return NULL;
}

static void fifo_push(struct efa_conn *k, struct efa_req *r) {
  k->fifo[(k->fifo_head + k->fifo_n) % NREQ] = r;
  k->fifo_n++;
}

static void fifo_pop(struct efa_conn *k) {
  k->fifo_head = (k->fifo_head + 1) % NREQ;
  k->fifo_n--;
}

/* Moves as many bytes as the ring allows, oldest message first.  Returns 1 if anything moved. */
static int progress_send(struct efa_conn *k) {
  struct conn_hdr *h = k->h;
  int moved_any = 0;
  while (k->fifo_n > 0) {
    struct efa_req *r = k->fifo[k->fifo_head];
    uint64_t wb = h->wb;
    uint64_t rb = __atomic_load_n(&h->rb, __ATOMIC_ACQUIRE);
    uint64_t room = k->ring_bytes - (wb - rb);
    size_t want = r->size - r->moved;
    size_t n = want < room ? want : (size_t)room;
    if (n > 0) {
      size_t off = (size_t)(wb % k->ring_bytes);
      size_t first = n < k->ring_bytes - off ? n : (size_t)(k->ring_bytes - off);
      memcpy(k->ring + off, r->buf + r->moved, first);
      if (n > first) memcpy(k->ring, r->buf + r->moved + first, n - first);
      r->moved += n;
      __atomic_store_n(&h->wb, wb + n, __ATOMIC_RELEASE);
      moved_any = 1;
    }
    if (r->moved < r->size) break; /* ring full */
    r->done = 1;                   /* all of it is in the ring: the sender's buffer is free again */
    fifo_pop(k);
  }
  return moved_any;
}

static int progress_recv(struct efa_conn *k, efa_result_t *res) {
  struct conn_hdr *h = k->h;
  int moved_any = 0;
  while (k->fifo_n > 0) {
    struct efa_req *r = k->fifo[k->fifo_head];
    if (r->kind == REQ_FLUSH) { r->done = 1; fifo_pop(k); continue; }
    if (!r->have_desc) {
      uint64_t head = __atomic_load_n(&h->desc_head, __ATOMIC_ACQUIRE);
      if (head == k->local_desc) break; /* nothing sent yet */
      struct conn_desc d = h->desc[k->local_desc % DESC_Q];
      k->local_desc++;
      __atomic_store_n(&h->desc_tail, k->local_desc, __ATOMIC_RELEASE);
      if (d.size > r->size) {
        WARN("EFASim: a message of %llu bytes arrived for a receive of %zu bytes (tag %d)",
             (unsigned long long)d.size, r->size, r->tag);
        *res = efa_internal_error;
        return moved_any;
      }
      r->msg = (size_t)d.size;
      r->have_desc = 1;
      moved_any = 1;
    }
    uint64_t rb = h->rb;
    uint64_t wb = __atomic_load_n(&h->wb, __ATOMIC_ACQUIRE);
    size_t want = r->msg - r->moved;
    size_t n = want < wb - rb ? want : (size_t)(wb - rb);
    if (n > 0) {
      size_t off = (size_t)(rb % k->ring_bytes);
      size_t first = n < k->ring_bytes - off ? n : (size_t)(k->ring_bytes - off);
      memcpy(r->buf + r->moved, k->ring + off, first);
      if (n > first) memcpy(r->buf + r->moved + first, k->ring, n - first);
      r->moved += n;
      __atomic_store_n(&h->rb, rb + n, __ATOMIC_RELEASE);
      moved_any = 1;
    }
    if (r->moved < r->msg) break;
    r->done = 1;
    fifo_pop(k);
  }
  return moved_any;
}

static efa_result_t efa_isend(void *sendComm, void *data, size_t size, int tag, void *mhandle, void *phandle,
                              void **request) {
  (void)mhandle;
  (void)phandle;
  struct efa_conn *k = sendComm;
  if (k == NULL || k->magic != SEND_MAGIC || request == NULL || (size > 0 && data == NULL)) return efa_invalid_argument;
  *request = NULL;
  pthread_mutex_lock(&k->mu);
  struct conn_hdr *h = k->h;
  uint64_t tail = __atomic_load_n(&h->desc_tail, __ATOMIC_ACQUIRE);
  struct efa_req *r = NULL;
  if (k->local_desc - tail < DESC_Q) r = req_get(k);
  if (r == NULL) { /* would block: NCCL calls again */
    progress_send(k);
    pthread_mutex_unlock(&k->mu);
    return efa_success;
  }
  r->kind = REQ_SEND;
  r->buf = data;
  r->size = size;
  r->tag = tag;
  struct conn_desc *d = &h->desc[k->local_desc % DESC_Q];
  d->size = size;
  d->tag = tag;
  k->local_desc++;
  __atomic_store_n(&h->desc_head, k->local_desc, __ATOMIC_RELEASE);
  fifo_push(k, r);
  progress_send(k);
  pthread_mutex_unlock(&k->mu);
  *request = r;
  return efa_success;
}

static efa_result_t efa_irecv(void *recvComm, int n, void **data, size_t *sizes, int *tags, void **mhandles,
                              void **phandles, void **request) {
  (void)mhandles;
  (void)phandles;
  struct efa_conn *k = recvComm;
  if (k == NULL || k->magic != RECV_MAGIC || request == NULL) return efa_invalid_argument;
  if (n != 1) {
    WARN("EFASim: irecv of %d grouped receives; EFASim advertises maxRecvs=1", n);
    return efa_internal_error;
  }
  if (data == NULL || sizes == NULL) return efa_invalid_argument;
  *request = NULL; /* NCCL may pass NCCL_NET_OPTIONAL_RECV_COMPLETION in it: we always give a real request */
  pthread_mutex_lock(&k->mu);
  struct efa_req *r = req_get(k);
  if (r == NULL) {
    pthread_mutex_unlock(&k->mu);
    return efa_success;
  }
  r->kind = REQ_RECV;
  r->buf = data[0];
  r->size = sizes[0];
  r->tag = tags ? tags[0] : 0;
  fifo_push(k, r);
  efa_result_t res = efa_success;
  progress_recv(k, &res);
  pthread_mutex_unlock(&k->mu);
  *request = r;
  return res;
}

static efa_result_t efa_iflush(void *recvComm, int n, void **data, int *sizes, void **mhandles, void **request) {
  (void)n;
  (void)data;
  (void)sizes;
  (void)mhandles;
  struct efa_conn *k = recvComm;
  if (k == NULL || k->magic != RECV_MAGIC || request == NULL) return efa_invalid_argument;
  /* Host memory needs no flush; NCCL only asks for GPU memory (which we never accept).  An
   * already-complete request keeps any caller that asks anyway happy. */
  *request = NULL;
  pthread_mutex_lock(&k->mu);
  struct efa_req *r = req_get(k);
  if (r) {
    r->kind = REQ_FLUSH;
    r->done = 1;
  }
  pthread_mutex_unlock(&k->mu);
  *request = r;
  return efa_success;
}

static int peer_gone(struct efa_conn *k) {
  struct conn_hdr *h = k->h;
  int32_t peer = k->magic == SEND_MAGIC ? h->receiver_pid : h->sender_pid;
  uint32_t closed = k->magic == SEND_MAGIC ? __atomic_load_n(&h->receiver_closed, __ATOMIC_ACQUIRE)
                                           : __atomic_load_n(&h->sender_closed, __ATOMIC_ACQUIRE);
  if (closed) return 1;
  return peer > 0 && kill(peer, 0) != 0 && errno == ESRCH;
}

static efa_result_t efa_test(void *request, int *done, int *sizes) {
  struct efa_req *r = request;
  if (r == NULL || done == NULL || r->kind == REQ_FREE) return efa_invalid_argument;
  struct efa_conn *k = r->comm;
  efa_result_t res = efa_success;
  pthread_mutex_lock(&k->mu);
  int moved = 0;
  if (!r->done) {
    if (k->magic == SEND_MAGIC) moved = progress_send(k);
    else moved = progress_recv(k, &res);
  }
  *done = 0;
  if (res == efa_success && r->done) {
    *done = 1;
    if (sizes) sizes[0] = (int)(r->kind == REQ_RECV ? r->msg : r->kind == REQ_SEND ? r->size : 0);
    r->kind = REQ_FREE;
    k->idle = 0;
  } else if (res == efa_success && !moved && ++k->idle % 65536 == 0 && peer_gone(k)) {
    WARN("EFASim: the peer of this %s connection is gone (closed or died)", k->magic == SEND_MAGIC ? "send" : "receive");
    res = efa_remote_error;
  }
  pthread_mutex_unlock(&k->mu);
  return res;
}

/* ---------------------------------------------------------------- the table NCCL loads */

EXPORT const efa_net_v11_t ncclNetPlugin_v11 = {
  .name = NET_NAME,
  .init = efa_init,
  .devices = efa_devices,
  .getProperties = efa_get_properties,
  .listen = efa_listen,
  .connect = efa_connect,
  .accept = efa_accept,
  .regMr = efa_reg_mr,
  .regMrDmaBuf = NULL,    /* no NCCL_PTR_DMABUF */
  .deregMr = efa_dereg_mr,
  .isend = efa_isend,
  .irecv = efa_irecv,
  .iflush = efa_iflush,
  .test = efa_test,
  .closeSend = efa_close_send,
  .closeRecv = efa_close_recv,
  .closeListen = efa_close_listen,
  .getDeviceMr = NULL,    /* host device type: NCCL checks for NULL (transport/net.cc) */
  .irecvConsumed = NULL,  /* checked for NULL (transport/net.cc) */
  .makeVDevice = NULL,    /* NULL: NCCL uses the physical device list (graph/topo.cc ncclTopoProcessNet) */
  .finalize = efa_finalize,
  .setNetAttr = NULL,     /* checked for NULL (transport/net.cc setNetAttrs) */
};
