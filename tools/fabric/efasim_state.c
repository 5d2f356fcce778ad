/* efasim_state.c: the host-wide queue-pair budget (see efasim_state.h). */
#define _GNU_SOURCE
#include "efasim_state.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <stddef.h>
#include <sys/stat.h>
#include <unistd.h>

/* A positive decimal integer in [min, max]; unset means dflt.  Anything else is refused with a
 * message that names the variable and says what to set it to. */
static int env_long(const char *var, long dflt, long min, long max, const char *what, long *out, char *err,
                    size_t errlen) {
  const char *s = getenv(var);
  if (s == NULL) { *out = dflt; return 0; }
  const char *p = s;
  while (*p == ' ' || *p == '\t') p++;
  if (*p == '\0') {
    snprintf(err, errlen, "%s is set but empty; set it to %s between %ld and %ld, or unset it (default %ld)", var,
             what, min, max, dflt);
    return -1;
  }
  if (*p == '-') {
    snprintf(err, errlen, "%s='%s' is negative; set it to %s between %ld and %ld, or unset it (default %ld)", var, s,
             what, min, max, dflt);
    return -1;
  }
  if (*p < '0' || *p > '9') {
    snprintf(err, errlen, "%s='%s' is not a number; set it to %s between %ld and %ld, or unset it (default %ld)", var,
             s, what, min, max, dflt);
    return -1;
  }
  errno = 0;
  char *end = NULL;
  long long v = strtoll(p, &end, 10);
  while (end && (*end == ' ' || *end == '\t')) end++;
  if (end == NULL || *end != '\0') {
    snprintf(err, errlen, "%s='%s' is not a number; set it to %s between %ld and %ld, or unset it (default %ld)", var,
             s, what, min, max, dflt);
    return -1;
  }
  if (errno == ERANGE || v > max) {
    snprintf(err, errlen, "%s='%s' is too large; set it to %s between %ld and %ld, or unset it (default %ld)", var, s,
             what, min, max, dflt);
    return -1;
  }
  if (v < min) {
    snprintf(err, errlen, "%s='%s' is too small; set it to %s between %ld and %ld, or unset it (default %ld)", var, s,
             what, min, max, dflt);
    return -1;
  }
  *out = (long)v;
  return 0;
}

int efasim_config_read(struct efasim_config *cfg, char *err, size_t errlen) {
  memset(cfg, 0, sizeof(*cfg));
  if (env_long("EFASIM_QP_BUDGET", EFASIM_DEFAULT_BUDGET, 1, EFASIM_MAX_BUDGET, "the number of queue pairs of the host's NIC",
               &cfg->budget, err, errlen))
    return -1;
  if (env_long("EFASIM_QPS_PER_CONN", EFASIM_DEFAULT_QPS_PER_CONN, 1, EFASIM_MAX_BUDGET, "the queue pairs one connection costs",
               &cfg->qps_per_conn, err, errlen))
    return -1;
  const char *charge = getenv("EFASIM_CHARGE");
  if (charge == NULL || strcmp(charge, "ib") == 0) {
    cfg->charge = EFASIM_CHARGE_IB;
  } else if (strcmp(charge, "efa") == 0) {
    cfg->charge = EFASIM_CHARGE_EFA;
  } else {
    snprintf(err, errlen,
             "EFASIM_CHARGE='%.40s' is not ib or efa; set it to ib (QPs per connection, as NCCL's IB transport) or efa "
             "(an endpoint per communicator per process, as aws-ofi-nccl 1.18+), or unset it (default ib)",
             charge);
    return -1;
  }
  if (env_long("EFASIM_QPS_PER_EP", EFASIM_DEFAULT_QPS_PER_EP, 1, EFASIM_MAX_BUDGET,
               "the queue pairs of the endpoint a communicator takes in a process (EFASIM_CHARGE=efa)",
               &cfg->qps_per_ep, err, errlen))
    return -1;
  if (env_long("EFASIM_RING_BYTES", EFASIM_DEFAULT_RING, 4096, 1L << 30, "the bytes of each connection's shared-memory ring",
               &cfg->ring_bytes, err, errlen))
    return -1;
  const char *name = getenv("EFASIM_STATE");
  if (name == NULL) {
    snprintf(cfg->state_name, sizeof(cfg->state_name), "/efasim-%u", (unsigned)getuid());
    return 0;
  }
  const char *base = name[0] == '/' ? name + 1 : name;
  if (*base == '\0' || strchr(base, '/') != NULL || strlen(base) > 100) {
    snprintf(err, errlen,
             "EFASIM_STATE='%s' is not a shared-memory name; set it to a name like /efasim-test (one leading '/', no "
             "other '/', at most 100 characters), or unset it (default /efasim-<uid>)",
             name);
    return -1;
  }
  snprintf(cfg->state_name, sizeof(cfg->state_name), "/%s", base);
  return 0;
}

uint64_t efasim_proc_start(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  char *p = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
  if (p == NULL) return 0;
  p++;
  /* Fields after ')': 3 (state) ... 22 (starttime). */
  for (int field = 3; field < 22; field++) {
    while (*p == ' ') p++;
    while (*p && *p != ' ') p++;
    if (*p == '\0') return 0;
  }
  return strtoull(p, NULL, 10);
}

int efasim_proc_alive(int32_t pid, uint64_t start) {
  if (pid <= 0) return 0;
  if (kill(pid, 0) != 0 && errno == ESRCH) return 0;
  uint64_t now = efasim_proc_start(pid);
  if (now == 0) {
    /* No /proc entry: dead, unless /proc cannot be read at all (then trust kill()). */
    char path[32];
    snprintf(path, sizeof(path), "/proc/%d", (int)getpid());
    return access(path, F_OK) != 0;
  }
  return now == start; /* a different start time: the pid was reused */
}

static void init_mutex(pthread_mutex_t *m) {
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(m, &a);
  pthread_mutexattr_destroy(&a);
}

static void clear_figures(struct efasim_state *st, long budget, long qps_per_conn) {
  size_t off = offsetof(struct efasim_state, budget);
  memset((char *)st + off, 0, sizeof(*st) - off);
  st->budget = budget;
  st->qps_per_conn = qps_per_conn;
}

static int valid(const struct efasim_state *st) {
  return __atomic_load_n(&st->magic, __ATOMIC_ACQUIRE) == EFASIM_STATE_MAGIC && st->version == EFASIM_STATE_VERSION &&
         st->size == sizeof(*st);
}

/* Creates or maps `name` under an flock on the segment, so that exactly one process initialises it
 * (and a creator that dies half-way leaves a zero magic that the next opener re-initialises). */
static int open_locked(const char *name, long budget, long qpc, int create, struct efasim_state **out, char *err,
                       size_t errlen) {
  int fd = shm_open(name, O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0600);
  if (fd < 0) {
    if (!create && errno == ENOENT) return 1;
    snprintf(err, errlen, "cannot open the EFASim state %s: %s (EFASIM_STATE names it; run efasim-stat --reset, or pick another name)",
             name, strerror(errno));
    return -1;
  }
  if (flock(fd, LOCK_EX) != 0) {
    snprintf(err, errlen, "cannot lock the EFASim state %s: %s", name, strerror(errno));
    close(fd);
    return -1;
  }
  struct stat sb;
  int rc = -1;
  if (fstat(fd, &sb) != 0) {
    snprintf(err, errlen, "cannot stat the EFASim state %s: %s", name, strerror(errno));
    goto out;
  }
  if (sb.st_size == 0) {
    if (!create) { rc = 1; goto out; }
    if (ftruncate(fd, sizeof(struct efasim_state)) != 0) {
      snprintf(err, errlen, "cannot size the EFASim state %s: %s", name, strerror(errno));
      goto out;
    }
  } else if ((size_t)sb.st_size != sizeof(struct efasim_state)) {
    snprintf(err, errlen,
             "the EFASim state %s has another layout (%lld bytes, this build expects %zu): another build of EFASim made "
             "it; run efasim-stat --reset when nothing uses it",
             name, (long long)sb.st_size, sizeof(struct efasim_state));
    goto out;
  }
  struct efasim_state *st = mmap(NULL, sizeof(*st), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (st == MAP_FAILED) {
    snprintf(err, errlen, "cannot map the EFASim state %s: %s", name, strerror(errno));
    goto out;
  }
  if (st->magic == 0) {
    init_mutex(&st->lock);
    st->version = EFASIM_STATE_VERSION;
    st->size = sizeof(*st);
    clear_figures(st, budget, qpc);
    __atomic_store_n(&st->magic, EFASIM_STATE_MAGIC, __ATOMIC_RELEASE);
  } else if (!valid(st)) {
    snprintf(err, errlen, "the EFASim state %s has another version; run efasim-stat --reset when nothing uses it", name);
    munmap(st, sizeof(*st));
    goto out;
  }
  *out = st;
  rc = 0;
out:
  flock(fd, LOCK_UN);
  close(fd);
  return rc;
}

int efasim_state_open(const struct efasim_config *cfg, struct efasim_state **out, char *err, size_t errlen) {
  return open_locked(cfg->state_name, cfg->budget, cfg->qps_per_conn, 1, out, err, errlen);
}

int efasim_state_attach(const char *name, struct efasim_state **out, char *err, size_t errlen) {
  return open_locked(name, 0, 0, 0, out, err, errlen);
}

void efasim_state_close(struct efasim_state *st) {
  if (st) munmap(st, sizeof(*st));
}

int efasim_state_reset(const struct efasim_config *cfg, char *err, size_t errlen) {
  struct efasim_state *st = NULL;
  char e2[512];
  int rc = efasim_state_attach(cfg->state_name, &st, e2, sizeof(e2));
  if (rc == 0) {
    efasim_lock(st, NULL);
    clear_figures(st, cfg->budget, cfg->qps_per_conn);
    efasim_unlock(st);
    efasim_state_close(st);
    return 0;
  }
  if (rc < 0) shm_unlink(cfg->state_name); /* another layout: start afresh */
  if (efasim_state_open(cfg, &st, err, errlen) != 0) return -1;
  efasim_lock(st, NULL);
  clear_figures(st, cfg->budget, cfg->qps_per_conn);
  efasim_unlock(st);
  efasim_state_close(st);
  return 0;
}

long efasim_lock(struct efasim_state *st, efasim_log_fn log) {
  int r = pthread_mutex_lock(&st->lock);
  if (r == EOWNERDEAD) {
    /* The owner died inside; the figures are repaired below from the tables. */
    pthread_mutex_consistent(&st->lock);
    if (log) log(2, "EFASim: a process died holding the budget lock of the host; the figures are rebuilt from the process table");
  } else if (r != 0) {
    /* ENOTRECOVERABLE cannot happen (every EOWNERDEAD is made consistent); never hang on it. */
    if (log) log(2, "EFASim: the budget lock is unusable (%s); run efasim-stat --reset", strerror(r));
  }
  long reclaimed = 0;
  int64_t in_use = 0;
  uint64_t open = 0;
  for (int i = 0; i < EFASIM_MAX_PROCS; i++) {
    struct efasim_proc *p = &st->procs[i];
    if (p->pid == 0) continue;
    if (!efasim_proc_alive(p->pid, p->start)) {
      if (p->in_use > 0) {
        reclaimed += p->in_use;
        st->dead_procs++;
        if (log)
          log(3, "EFASim: process %d died holding %lld QPs in %llu connections; reclaimed", (int)p->pid,
              (long long)p->in_use, (unsigned long long)p->conns_open);
      }
      for (int c = 0; c < EFASIM_MAX_COMMS; c++) {
        struct efasim_comm *cm = &st->comms[c];
        if (cm->pid == p->pid && cm->start == p->start && cm->status == EFASIM_COMM_ACTIVE) {
          cm->status = EFASIM_COMM_FINALIZED;
          cm->in_use = 0;
        }
      }
      memset(p, 0, sizeof(*p));
      continue;
    }
    if (p->in_use < 0) p->in_use = 0;
    in_use += p->in_use;
    open += p->conns_open;
  }
  st->reclaimed += (uint64_t)reclaimed;
  st->in_use = in_use;
  st->conns_open = open;
  if (st->peak < in_use) st->peak = in_use;
  return reclaimed;
}

void efasim_unlock(struct efasim_state *st) {
  pthread_mutex_unlock(&st->lock);
}

struct efasim_proc *efasim_self(struct efasim_state *st, long qps_per_conn) {
  int32_t pid = (int32_t)getpid();
  uint64_t start = efasim_proc_start(pid);
  struct efasim_proc *free_slot = NULL;
  for (int i = 0; i < EFASIM_MAX_PROCS; i++) {
    struct efasim_proc *p = &st->procs[i];
    if (p->pid == pid && p->start == start) {
      if (qps_per_conn > 0) p->qps_per_conn = qps_per_conn;
      return p;
    }
    if (p->pid == 0 && free_slot == NULL) free_slot = p;
  }
  if (free_slot) {
    memset(free_slot, 0, sizeof(*free_slot));
    free_slot->pid = pid;
    free_slot->start = start;
    free_slot->qps_per_conn = qps_per_conn;
  }
  return free_slot;
}
