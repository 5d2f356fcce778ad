/* ncclshim-inspect: shared state and entry points.
 *
 * The tool works in three passes so that input order never matters (NCCL logs
 * may be given before or after the record files they describe):
 *   1. feed: every line of every input goes through inspect_feed_record_line()
 *      or inspect_feed_nccl_line(), which only store facts;
 *   2. inspect_group(): joins comm / comm_end / NCCL-log facts into communicators;
 *   3. inspect_check(): runs the problem rules, then a printer renders the result.
 * The feed functions are the fuzzing surface: they must accept any bytes. */
#ifndef NCCLSHIM_INSPECT_H
#define NCCLSHIM_INSPECT_H

#include <stddef.h>
#include <stdio.h>
#include <uthash.h>

/* Records are at most 16 KiB by contract; 1 MiB leaves room for foreign
 * input while bounding memory on hostile files. */
#define INSPECT_MAX_LINE (1024 * 1024)
#define INSPECT_MAX_NCCL_WARNS 3

typedef struct strlist {
    char **v;
    size_t n, cap;
} strlist;

typedef struct op_stat {
    char *name;
    unsigned long long count, bytes;
    UT_hash_handle hh;
} op_stat;

typedef struct process {
    char *key;              /* "host:pid" */
    char *host;
    long long pid;
    char *title, *log_file, *shim_version;
    char *who;              /* newer shims: "host identity, start ticks" of its first load record */
    char *other_who;        /* another load's, when two processes share host and pid (NULL: none) */
    int has_load, has_exit;
    int mark;               /* scratch for check.c, 0 between uses */
    UT_hash_handle hh;
} process;

/* How an ipc rank's broadcasts moved (comm_end's `ipc`): per hop kind. */
enum { HOP_PUSH, HOP_PULL, HOP_STAGED, NHOPS };
extern const char *const hop_names[NHOPS];

typedef struct ipc_hops {
    int present;
    long long first, in[NHOPS], out[NHOPS];
    /* Newer shims: this rank's hop copies by the SMs (the copy kernel, one
     * GPU) and by copy engines; has_copy 0 for older records. */
    int has_copy;
    long long sm, ce;
    /* Newer shims: pieces of cuMemCreate memory (PyTorch's expandable
     * segments) sent to the neighbours and mapped from them, and why such
     * memory was staged (NULL: it was not, or older records). */
    int has_vmm;
    long long vmm_sent, vmm_mapped;
    char *vmm_note;
} ipc_hops;

typedef struct comm_end_rec {
    char *host;
    long long pid;
    char *comm_norm, *handle, *group, *how;
    char *action;           /* newer shims: what the shim did, as the end saw it */
    char *decision_id;      /* newer shims, marked IDs: the root's decision it carried out */
    long long rank, result;
    int has_rank;
    long long devcomms;     /* NCCL device communicators the application made on it */
    double ts;
    op_stat *ops;
    ipc_hops ipc;           /* newer shims, ipc communicators */
    int used;
    struct comm_end_rec *next;
} comm_end_rec;

/* A `decision` record: the root's verdict for one marked unique ID. */
typedef struct decision_rank {
    long long rank, pid, cuda_device;
    char *host, *role, *api, *local_purpose;
} decision_rank;

typedef struct decision_rec {
    char *host;             /* the root's process */
    long long pid, tid;
    double ts;
    char *stage, *listen, *decision_id, *id_norm, *missing, *purpose, *purpose_reason, *action,
        *action_reason;
    long long nranks, arrived, rule, hosts, training, inference, unknown, rejected, wait_us;
    char *rejected_by;      /* "cause=count,..." as recorded (shims from 2026-11-25 on), or NULL */
    char *unrecognized;     /* a bridge left to NCCL for want of evidence, and the setting to protect it, or NULL */
    decision_rank *ranks;   /* as recorded: the first 32 ranks that arrived */
    size_t nlisted;
    char *file;
    long line;
    char *group;            /* filled by inspect_group(): the communicator it joined, or NULL */
    struct decision_rec *next;
    UT_hash_handle hh;      /* by id_norm; the first record of each id */
} decision_rec;

/* A `unique_id` record that names its rendezvous: joins the root's records
 * (decision, rendezvous_expired, rendezvous-rejected) to a group. */
typedef struct uid_rec {
    char *key;              /* "host:pid:listen" */
    char *id_hash;
    UT_hash_handle hh;
} uid_rec;

/* A `rendezvous_expired` record: a marked ID nobody used in time. */
typedef struct expired_rec {
    char *host, *listen, *id_hash;  /* id_hash joined from unique_id, or NULL */
    long long pid, idle_ms, rejected;
} expired_rec;

typedef struct rank_rec {
    char *host;
    long long pid, tid;
    double ts;
    char *fn, *comm, *comm_norm, *handle, *group, *id_hash;
    long long rank, nranks, cuda_device, result, duration_us;
    char *result_str, *api, *caller_lib, *title, *python0;
    char *role, *role_reason, *purpose, *purpose_reason, *action, *action_reason;
    char *local_purpose, *local_purpose_reason, *net, *net_by, *net_note;
    char *unprotected;      /* a weight-update communicator passed through for a reason other than policy */
    char *unrecognized;     /* a bridge no rendezvous decided (an engine worker on an unmarked ID), or NULL */
    /* NCCL 2.29+'s properties of a redirected communicator (nccl_properties): GIN types, -1 if not told */
    long long gin_type, railed_gin_type;
    /* the record's `decision` object (marked unique IDs only) */
    int has_decision, dec_via_root;
    char *dec_by, *dec_id, *dec_id_norm, *dec_root, *dec_fallback;
    char *dec_fallback_kind; /* decision.fallback_kind: why a passthrough was not the policy's (issue 34) */
    long long dec_rounds, dec_wait_us, dec_hosts;
    char *file;
    long line;
    /* filled by inspect_group() */
    decision_rec *decision; /* the root's record for dec_id, owned by the state list */
    comm_end_rec *end;      /* matched comm_end, owned by the state list */
    const char *network;    /* owned by the NCCL net map */
    int net_channels;       /* NCCL logged channels "via NET/..." for it: data crosses the network */
    int coll_channels;      /* NCCL's "<N> coll channels" for its comm (0: not logged) */
    int ipc_lost_warned;    /* an ipc-peer-lost warning joined it (the shim writes one per communicator) */
    /* NCCL log facts of its comm (see read_nccl_log.c) */
    const char *commid;     /* NCCL's "commId 0x..." (owned by the NCCL net map), NULL for splits */
    const char *net_failed; /* "Failed to initialize NET plugin X" while NCCL initialised it: X */
    int from_log;           /* no shim record: made from NCCL's Init START/COMPLETE lines alone */
    long seq;               /* from_log: the NCCL log line it was first seen on (input order) */
    process *proc;
    struct rank_rec *next;  /* state-wide list, in input order */
} rank_rec;

typedef struct net_entry {
    char *key;              /* "host:pid:tid" or "host:pid:comm" (see read_nccl_log.c) */
    char *network;
    char *comm_norm;        /* per-tid entries: last comm seen on that thread */
    char *failed;           /* per-tid: a NET plugin that failed to initialise, not yet bound to a comm;
                             * per-comm: the one that failed while NCCL initialised this comm */
    int channels;           /* per-comm entries: channels seen "via NET/..." */
    int coll_channels;      /* per-comm entries: NCCL's "<N> coll channels, ..." (0: not logged) */
    /* per-comm entries, from the "ncclCommInit... comm 0x.. rank R nranks N ... - Init START|COMPLETE" line */
    int has_init;
    char *host, *comm, *fn, *commid, *parent;
    long long pid, tid, rank, nranks, cuda_dev;
    long seq;               /* state-wide NCCL line number of its first Init line */
    int joined;             /* a shim record joined it (join.c) */
    UT_hash_handle hh;
} net_entry;

typedef struct nccl_proc {
    char *key;              /* "shorthost:pid" */
    strlist plugins;        /* "NET/Plugin: Loaded net plugin X (vN)": X, in order */
    char *warns[INSPECT_MAX_NCCL_WARNS];
    int nwarns;             /* total, may exceed the stored three */
    char *attns[INSPECT_MAX_NCCL_WARNS]; /* NCCL 2.32's ATTN lines, kept as the WARN ones */
    int nattns;
    UT_hash_handle hh;
} nccl_proc;

/* "a,b,c" in a fixed buffer, capped so that a 4096-rank job with half its
 * ranks gone still yields one readable line; `items` counts them all. */
typedef struct list_buf {
    char s[160];
    size_t n, items;
    int full;
    int has_last;           /* lb_add_ll: a rank added twice in a row counts once */
    long long last;
} list_buf;

typedef struct input_error {
    char *file;
    long line;              /* 0: the file as a whole */
    char *reason;           /* bytes from the input escaped (\xNN), cut */
    int fatal;              /* input could not be read: exit status 2 */
    long bad_lines;         /* on a file's summary (line 0): how many of its lines were bad; else 0 */
    long first_bad;         /* on a summary: the first bad line's number */
    int cut_only;           /* on a summary: the one bad line is a last line cut mid-write */
} input_error;

/* The bad lines of the file being read (state.c): kept and printed as one
 * line for the file, however many there are. */
#define INSPECT_BAD_LINES_SHOWN 5
typedef struct bad_lines {
    char *file;             /* NULL: none so far */
    long count, first;      /* how many, the first's line number */
    int cut;                /* one is a last line cut mid-write */
    char *shown;            /* "line L: reason; ..." of the first INSPECT_BAD_LINES_SHOWN */
    int nshown;
} bad_lines;

typedef struct library_rec {
    char *key;              /* slot|path|version, for de-duplication across processes */
    long long slot, version;
    char *path;
    int nproc;
    UT_hash_handle hh;
} library_rec;

typedef struct warning_rec {
    char *host, *what, *message;
    long long pid;
    double ts;
    /* ipc warnings (ipc, ipc-peer-lost, ipc-comm-call), filled by inspect_group():
     * the rank record it concerns (NULL: joined none), and whether it was
     * written after that rank's own comm_end (a destroy's teardown) */
    rank_rec *rank;
    int after_end;
    char *fn;               /* ipc / ipc-comm-call: the NCCL function named first in the message */
    long long result;       /* ipc: the result it returned ("returns N"), -1 when not said */
    const char *why;        /* ipc: the reason, inside `message` */
} warning_rec;

/* An `ipc_peer_left` record: the root saw a rank of a running ipc
 * communicator close its connection (a process died, or a destroy). */
typedef struct peer_left_rec {
    char *host, *listen, *decision_id, *id_norm;
    long long pid, rank;
    double ts;
    char *group;            /* filled by inspect_group(): the communicator it joined, or NULL */
    int at_destroy;         /* that rank had already ended it by destroy/abort */
} peer_left_rec;

typedef struct communicator {
    char *group;            /* owned */
    char *short_group;      /* owned */
    rank_rec **ranks;       /* sorted by rank, then ts */
    size_t nranks_rec, cap;
    double first_ts;
    long long nranks;       /* most common value reported */
    size_t ranks_seen;      /* distinct ranks */
    const char *purpose, *action, *network;     /* "mixed" / "-" when apt */
    decision_rec *decision; /* the root's decision record, if it was among the inputs */
    const char *root;       /* the rendezvous address the ranks used, or NULL */
    expired_rec *expired;   /* the root's listener expired unused (the ranks came too late) */
    int marked;             /* some rank took part in a rendezvous (has a decision object) */
    int from_log;           /* every rank is from NCCL's log alone (no shim records) */
    long first_seq;         /* from_log: input order, for sorting when there are no timestamps */
    int fell_back;          /* some rank fell back, the root gave up, or the vote undid it */
    char *decision_summary; /* one line for the table; NULL when no rendezvous */
    strlist hosts, apis;
    int ipc;                /* some rank's action is ipc (no NCCL communicator) */
    struct { warning_rec **v; size_t n, cap; } ipc_warns;   /* ipc-* warnings joined to it */
    struct { peer_left_rec **v; size_t n, cap; } peer_left; /* ipc_peer_left records joined to it */
    int ipc_lost;           /* a peer was lost while it ran (see join.c: join_ipc) */
    long long init_us;      /* max duration over ranks */
    op_stat *ops;           /* summed over ranks */
    ipc_hops hops;          /* ipc: out-hops summed over ranks (each hop once) */
    strlist problems;
    UT_hash_handle hh;
} communicator;

typedef struct inspect_state {
    process *procs;
    rank_rec *ranks, **ranks_tail;
    comm_end_rec *ends;
    net_entry *nccl_tid;    /* pending "Using network" and last comm, per thread */
    net_entry *nccl_proc_net; /* last "Using network" per process, fallback */
    net_entry *nccl_comm;   /* network per (host, pid, comm) */
    nccl_proc *nccl_procs;
    library_rec *libs;
    struct { warning_rec *v; size_t n, cap; } warnings;
    decision_rec *decisions, **decisions_tail;  /* input order */
    decision_rec *decision_by_id;
    uid_rec *uids;
    struct { expired_rec *v; size_t n, cap; } expired;
    struct { peer_left_rec *v; size_t n, cap; } peer_left;
    struct { input_error *v; size_t n, cap; } errors;
    bad_lines bad;          /* of the file being read, until inspect_errors_flush */
    communicator *comms;    /* hash by group */
    communicator **sorted;  /* after inspect_group() */
    size_t ncomms;
    size_t nrecords;        /* records accepted */
    strlist problems;       /* inspect_check: problems of the input as a whole (settings, no records) */
    size_t nccl_lines;      /* NCCL log lines recognised */
    /* (dev, ino) of files already read: a file named twice (directly and via
     * its directory) must not produce duplicate ranks. */
    struct seen_file *seen_files;       /* read_input.c, by (dev, ino) */
    struct pending_init *pending_inits; /* read_records.c: non-blocking inits awaiting their comm_init_end */
} inspect_state;

/* util.c */
void *xmalloc(size_t n);
void *xrealloc(void *p, size_t n);
/* Makes room for one more element in a growable array {v, n, cap} (doubling, from `first`). */
#define VEC_RESERVE(vec, first)                                                       \
    do {                                                                              \
        if ((vec).n == (vec).cap) {                                                   \
            (vec).cap = (vec).cap ? (vec).cap * 2 : (first);                          \
            (vec).v = xrealloc((vec).v, (vec).cap * sizeof *(vec).v);                 \
        }                                                                             \
    } while (0)
char *xstrdup(const char *s);
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void strlist_add(strlist *l, char *owned);
void strlist_add_unique(strlist *l, const char *s);
void strlist_free(strlist *l);
char *norm_comm_ptr(const char *s);
char *norm_path(const char *path);
char *short_host(const char *host);
char *short_group(const char *group);
void humanize_bytes(unsigned long long b, char *out, size_t outlen);
void op_add(op_stat **ops, const char *name, unsigned long long count, unsigned long long bytes);
void op_free(op_stat **ops);
void comm_end_free(comm_end_rec *e);
int op_cmp(op_stat *a, op_stat *b);
void lb_add(list_buf *b, const char *item);
void lb_add_ll(list_buf *b, long long v);
char *str_cut(const char *s, size_t max);

/* state.c */
inspect_state *inspect_new(void);
void inspect_free(inspect_state *st);
void inspect_error(inspect_state *st, const char *file, long line, int fatal, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Reports the bad lines of the file read last (one line on stderr) and keeps
 * their summary; read_input.c calls it after each file, inspect_group once more. */
void inspect_errors_flush(inspect_state *st);
process *inspect_process(inspect_state *st, const char *host, long long pid);
void rank_free(rank_rec *r);
void decision_free(decision_rec *d);
/* A decision's rejected connections by cause, for people: "74096 evicted, 63 late"
 * (verbose: each cause explained).  NULL when the record has no causes. */
char *inspect_rejected_text(const decision_rec *d, int verbose);

/* read_records.c: frees what the feed keeps between records (inspect_close calls it). */
void inspect_records_free(inspect_state *st);
/* read_records.c: one line of a ncclshim.*.jsonl file (no trailing newline). */
void inspect_feed_record_line(inspect_state *st, const char *buf, size_t len,
                              const char *file, long lineno);
/* Same, for a final line that had no newline: failures say "truncated". */
void inspect_feed_record_line_ex(inspect_state *st, const char *buf, size_t len,
                                 const char *file, long lineno, int unterminated);
/* read_nccl_log.c: one line of an NCCL_DEBUG=INFO log. Lines that are not NCCL
 * lines are ignored: logs are interleaved with application output. */
/* Returns 1 when the line was an NCCL line. */
int inspect_feed_nccl_line(inspect_state *st, const char *buf, size_t len);

/* read_input.c */
enum input_kind { INPUT_AUTO, INPUT_RECORDS, INPUT_NCCL_LOG };
void inspect_read_path(inspect_state *st, const char *path, enum input_kind kind);
/* The state freed with what the readers keep in it (the files seen, the
 * records' pending inits): the readers sit above state.c, which frees the rest. */
void inspect_close(inspect_state *st);

/* join.c */
void inspect_group(inspect_state *st);
/* The root timed out with ranks missing (from its record, or from what it told the ranks). */
int inspect_root_gave_up(const communicator *c);
/* The vote round undid the root's decision (its record says commit + passthrough). */
int inspect_vote_undone(const communicator *c);
/* A rank's end is destroy or abort (the application ended it), not exit or none. */
int inspect_ended_normally(const rank_rec *r);
/* check.c */
size_t inspect_check(inspect_state *st);
/* print_table.c, print_json.c */
/* "AllReduce:120/480Ki Broadcast:3/3.0Gi", or "-" */
char *inspect_traffic_string(op_stat *ops);
void inspect_print_table(inspect_state *st, FILE *out, int verbose);
void inspect_print_json(inspect_state *st, FILE *out);
/* print_html.c: the self-contained page (report.html with the facts inside) */
void inspect_print_html(inspect_state *st, FILE *out);

#endif
