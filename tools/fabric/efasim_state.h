/* efasim_state.h: EFASim's host-wide queue-pair budget, a POSIX shared-memory segment shared by
 * every process of the host (the plugin in each NCCL process, and efasim-stat).
 *
 * One segment, named by EFASIM_STATE (default "/efasim-<uid>"), holds the budget, the figures,
 * a table of processes (pid + start time, so a reused pid is not mistaken for the dead process)
 * and a table of communicators.  A process-shared robust mutex guards it: a process that dies
 * holding it hands it to the next locker (EOWNERDEAD), which repairs the figures from the tables.
 * QPs in use are always the sum over live processes, so a dead process's QPs come back as soon as
 * anyone looks (every lock reclaims the dead). */
#ifndef EFASIM_STATE_H
#define EFASIM_STATE_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#define EFASIM_STATE_MAGIC 0x45464153494d5354ULL /* "EFASIMST" */
#define EFASIM_STATE_VERSION 1
#define EFASIM_MAX_PROCS 256
#define EFASIM_MAX_COMMS 512
#define EFASIM_DEFAULT_BUDGET 256
#define EFASIM_DEFAULT_QPS_PER_CONN 2
#define EFASIM_MAX_BUDGET (1L << 24)
#define EFASIM_DEFAULT_RING (1L << 20)

enum { EFASIM_COMM_FREE = 0, EFASIM_COMM_ACTIVE = 1, EFASIM_COMM_REFUSED = 2, EFASIM_COMM_FINALIZED = 3 };

struct efasim_proc {
  int32_t pid;            /* 0: free slot */
  uint32_t pad;
  uint64_t start;         /* /proc/<pid>/stat field 22 (start time in clock ticks) */
  int64_t in_use;         /* QPs this process holds now */
  int64_t qps_per_conn;   /* its EFASIM_QPS_PER_CONN */
  uint64_t conns;         /* connections it made */
  uint64_t conns_open;    /* connections it holds now */
  uint64_t charged;       /* QPs charged to it in all */
  uint64_t conns_refused;
  uint64_t inits;
  uint64_t inits_refused;
};

struct efasim_comm {
  uint64_t comm_id;       /* NCCL's commHash, as passed to init */
  int32_t pid;
  int32_t status;         /* EFASIM_COMM_* */
  uint64_t start;
  uint64_t seq;           /* order of creation (recycling picks the oldest closed one) */
  int64_t in_use;
  uint64_t conns;
};

struct efasim_state {
  uint64_t magic;
  uint32_t version;
  uint32_t size;          /* sizeof(struct efasim_state) */
  pthread_mutex_t lock;   /* process-shared, robust */
  int64_t budget;
  int64_t qps_per_conn;   /* as set by whoever created or reset the state (processes may differ) */
  int64_t in_use;         /* sum of procs[].in_use (repaired on every lock) */
  int64_t peak;
  uint64_t conns;         /* connections made */
  uint64_t conns_open;
  uint64_t charged;       /* QPs charged in all */
  uint64_t conns_refused;
  uint64_t inits;
  uint64_t inits_refused;
  uint64_t reclaimed;     /* QPs taken back from dead processes */
  uint64_t dead_procs;    /* processes found dead holding QPs */
  uint64_t comm_seq;
  struct efasim_proc procs[EFASIM_MAX_PROCS];
  struct efasim_comm comms[EFASIM_MAX_COMMS];
};

/* EFASIM_CHARGE: what a communicator costs, as the fabric it stands for charges it
 * (tools/fabric/README.md, "What a communicator costs"). */
enum { EFASIM_CHARGE_IB = 0, EFASIM_CHARGE_EFA = 1 };
#define EFASIM_DEFAULT_QPS_PER_EP 4

struct efasim_config {
  long budget;
  long qps_per_conn;      /* ib: QPs one connection costs */
  int charge;             /* EFASIM_CHARGE_* */
  long qps_per_ep;        /* efa: QPs of the endpoint a communicator takes in a process */
  long ring_bytes;
  char state_name[128];
};

/* Messages go through this (the plugin passes NCCL's logger, efasim-stat stderr). level: 2 warn, 3 info. */
typedef void (*efasim_log_fn)(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Reads EFASIM_QP_BUDGET, EFASIM_QPS_PER_CONN, EFASIM_CHARGE, EFASIM_QPS_PER_EP, EFASIM_STATE, EFASIM_RING_BYTES.  0 on success;
 * -1 with a message naming the variable and the fix in err. */
int efasim_config_read(struct efasim_config *cfg, char *err, size_t errlen);

/* Maps (creating if absent) the segment.  0 or -1 with err. */
int efasim_state_open(const struct efasim_config *cfg, struct efasim_state **out, char *err, size_t errlen);
/* Maps an existing segment; 1 if absent, -1 if not usable (err), 0 when mapped. */
int efasim_state_attach(const char *name, struct efasim_state **out, char *err, size_t errlen);
void efasim_state_close(struct efasim_state *st);
/* Clears every figure and table, sets the budget and cost (in place when the segment is ours,
 * re-created when it is of another layout).  0 or -1 with err. */
int efasim_state_reset(const struct efasim_config *cfg, char *err, size_t errlen);

/* Takes the lock (repairing after a dead owner), then reclaims the QPs of dead processes,
 * logging each.  Returns the QPs reclaimed now (>= 0). */
long efasim_lock(struct efasim_state *st, efasim_log_fn log);
void efasim_unlock(struct efasim_state *st);

/* Under the lock: the slot of this process (registering it), or NULL when the table is full. */
struct efasim_proc *efasim_self(struct efasim_state *st, long qps_per_conn);
/* Under the lock: whether the recorded process still runs (same pid, same start time). */
int efasim_proc_alive(int32_t pid, uint64_t start);
uint64_t efasim_proc_start(pid_t pid);

#endif
