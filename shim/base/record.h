/*
 * JSON-lines records (docs/records.md): a small writer that builds one line in
 * a caller-provided buffer and appends it with a single write(2).
 */
#ifndef NCCLSHIM_RECORD_H
#define NCCLSHIM_RECORD_H

#include <stddef.h>
#include <stdint.h>

#define RECORD_MAX 16384

struct jw {
    size_t len;
    int need_comma;
    int truncated;
    char buf[RECORD_MAX];
};

/* Starts a record with the keys every record has: type, ts, host, pid, tid. */
void jw_begin(struct jw *w, const char *type);
void jw_str(struct jw *w, const char *key, const char *val);   /* NULL -> null */
void jw_int(struct jw *w, const char *key, long long val);
void jw_u64(struct jw *w, const char *key, unsigned long long val);
void jw_double(struct jw *w, const char *key, double val, int decimals);
void jw_ptr(struct jw *w, const char *key, const void *p);      /* "0x.." like %p; NULL -> null */
void jw_hex64(struct jw *w, const char *key, uint64_t v);       /* "0x%016llx" */
void jw_null(struct jw *w, const char *key);
void jw_open(struct jw *w, const char *key, char bracket);      /* key NULL inside arrays */
void jw_close(struct jw *w, char bracket);
/* Closes the record and appends it to this process's record file. */
void jw_emit(struct jw *w);

/* One `warning` record (and one line on stderr, so nobody misses it). */
void shim_warn(const char *what, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The record alone (for problems already printed). */
void shim_record_warning(const char *what, const char *msg);

/* The record file of this process ("" if not open: not used yet, off, or failed). */
const char *shim_record_path(void);
int shim_record_opened(void);
/* What to write first into a new record file (the load record: shim_main.c
 * sets it in the constructor, before any thread can open the file). */
void shim_record_set_first(void (*write_first)(void));
/* After fork(): the child writes to a file of its own (called from the atfork handler). */
void shim_record_after_fork_child(void);
void shim_record_lock_for_fork(void);
void shim_record_unlock_after_fork(void);

/*
 * The process is leaving (exit, _exit, a fatal signal): returns 1 for the
 * first caller, whose records go to the file already open (if any) and
 * nothing else: no file is opened after this, nothing is printed, no lock is
 * taken.  0 for any later caller (another thread crashing at once, _exit
 * after a destructor), and in a process that is not the file's owner (a
 * vfork child shares the parent's memory and its open file).
 */
int shim_record_leaving(void);

/* This thread's id, as the records' `tid` shows it. */
int shim_gettid(void);

#endif
