/* Settings read from NCCLSHIM_* variables, once per process (docs/policy.md lists them). */
#ifndef NCCLSHIM_CONFIG_H
#define NCCLSHIM_CONFIG_H

#include "policy/decide.h"
#include "policy/evidence.h"
#include "host_id.h"

#include <limits.h>

enum shim_mode { MODE_ENFORCE = 0, MODE_OBSERVE, MODE_OFF };
/* NCCLSHIM_TAG: which unique IDs get the rendezvous mark. */
enum shim_tag { TAG_BINDINGS = 0, TAG_ALL, TAG_NONE };

struct shim_config {
    enum shim_mode mode;
    int python_callsite;                /* NCCLSHIM_PYTHON_CALLSITE, default 1 */
    char log_dir[PATH_MAX];             /* NCCLSHIM_LOG_DIR, default /tmp/ncclshim-<uid> */
    int log_dir_default;                /* log_dir is the default (must be private: record_file.c) */
    char host[256];                     /* NCCLSHIM_HOSTNAME or gethostname, cut at '.' like NCCL */
    char hostname[256];                 /* the whole host name (or NCCLSHIM_HOSTNAME): what the host identity
                                         * is made of with the boot id (shim_host_identity) */
    enum shim_tag tag;                  /* NCCLSHIM_TAG, default bindings (IDs not made by torch) */
    int rendezvous_timeout_ms;          /* NCCLSHIM_RENDEZVOUS_TIMEOUT_MS: first rank's arrival to decision */
    int rendezvous_idle_ms;             /* NCCLSHIM_RENDEZVOUS_IDLE_MS: an ID's listener waits this long for a rank */
    int rendezvous_one_round;           /* NCCLSHIM_RENDEZVOUS_ONE_ROUND (default 1): say in the HELLO whether socket can
                                         * be carried out, so that the root commits it without the vote round */
    int rendezvous_fanin;               /* NCCLSHIM_RENDEZVOUS_FANIN: communicators of more ranks meet at a leader per host */
    struct policy policy;               /* NCCLSHIM_WEIGHT_UPDATE, NCCLSHIM_RULES, NCCLSHIM_STRICT */
    size_t ipc_chunk_bytes;             /* NCCLSHIM_IPC_CHUNK_BYTES: one staging slot */
    int ipc_slots;                      /* NCCLSHIM_IPC_SLOTS: slots per rank */
    size_t ipc_step_bytes;              /* NCCLSHIM_IPC_STEP_BYTES: a chain's step; 0: by the broadcast's size */
    int ipc_push_wait_us;               /* NCCLSHIM_IPC_PUSH_WAIT_US: a sender's wait for a receiver a few broadcasts behind */
    int ipc_resume_wait_ms;             /* NCCLSHIM_IPC_RESUME_WAIT_MS: an operation's wait for a suspended peer's resume */
    int ipc_vmm;                        /* NCCLSHIM_IPC_VMM: share cuMemCreate memory as file descriptors (default 1) */
    int fabric_budget;                  /* NCCLSHIM_FABRIC_BUDGET: 0 unset, -1 malformed (the fabric goes unjudged) */
    int ipc_copy_sm;                    /* NCCLSHIM_IPC_COPY=sm: the copy kernel for hops within one GPU */
    struct policy_patterns patterns;    /* pointers into the environment */
};

/* The settings, read on first use (thread-safe, never changes afterwards: no lock needed to read). */
const struct shim_config *shim_config(void);

/*
 * This host's identity as NCCL's (host_id.c), read at its first use, not at load: a
 * process that never calls NCCL (a shell, a launcher under the same LD_PRELOAD) reads
 * no password database or NCCL config file, and an NCCL_HOSTID the program sets before
 * its first NCCL call is seen, as NCCL sees it.  The same for the process's life.
 */
const struct host_identity *shim_host_identity(void);

/* Names of every variable the shim reads, NULL-terminated (for the load record). */
extern const char *const shim_setting_names[];

const char *shim_mode_name(enum shim_mode m);

/* The problems found while reading the settings, in the order found: the
 * caller prints them when the shim is loaded and records them once records
 * can be written (settings sit below records and report to nobody). */
int shim_config_warning_count(void);
const char *shim_config_warning(int i);

#endif
