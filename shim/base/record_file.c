/*
 * Where this process's records go, opened so that nobody else on the machine
 * can redirect them or hang the process (issue 17).
 *
 * The default directory, /tmp/ncclshim-<uid>, sits in a directory every
 * user can write: another user may have made it first, or put symlinks,
 * FIFOs or files in it named like ours.  So it is used only if it is a real
 * directory (no symlink followed) owned by this user and writable by nobody
 * else; otherwise a fresh private directory is made beside it and one line
 * says where records went.  An explicit NCCLSHIM_LOG_DIR is the operator's
 * choice (a shared cluster file system is one): it may be anyone's, with any
 * mode.  In either, the record file itself is always created new (O_EXCL):
 * its name holds the host name, the boot id, the process's start time and its
 * pid, which no two processes share unless they are in different PID
 * namespaces of one boot under one host name and started in the same clock
 * tick; and then the second gets the next free name, never the first's file.
 * No symlink is followed, no FIFO or device is waited on (O_NONBLOCK).
 * Every refusal is one line on stderr naming the cause and what was done.
 * docs/operations.md ("Record files: who can touch them") has the trust model.
 */
#define _GNU_SOURCE
#include "record_file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* Names tried: the plain one, numbered ones up to RECORD_FILE_NUMBERED - 1, then random ones. */
#define RECORD_FILE_NUMBERED 8
#define RECORD_FILE_ATTEMPTS 16

void record_file_host_part(const char *host, char *out, size_t len)
{
    /* A name component of letters, digits, '-', '_' and '.', never starting
     * with '.' (no "..", no hidden file), never empty: NCCLSHIM_HOSTNAME is
     * free text, and x/../../esc must not leave the directory. */
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)host; *p && n + 1 < len; p++) {
        int okc = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                  *p == '-' || *p == '_' || (*p == '.' && n > 0);
        out[n++] = okc ? (char)*p : '_';
    }
    if (n == 0 && len > 1)
        out[n++] = '_';
    if (len)
        out[n] = '\0';
}

/* Why the directory `st` describes is not private to this user, or NULL. */
static const char *dir_not_private(const struct stat *st, char *why, size_t len)
{
    if (!S_ISDIR(st->st_mode))
        return "not a directory";
    if (st->st_uid != geteuid()) {
        snprintf(why, len, "owned by uid %u, not this user (%u)", (unsigned)st->st_uid, (unsigned)geteuid());
        return why;
    }
    if (st->st_mode & (S_IWGRP | S_IWOTH)) {
        snprintf(why, len, "writable by %s (mode %04o)", st->st_mode & S_IWOTH ? "other users" : "its group",
                 (unsigned)(st->st_mode & 07777));
        return why;
    }
    return NULL;
}

/* What stands at `path` instead of a directory. */
static const char *not_dir_kind(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return "not a directory";
    return S_ISLNK(st.st_mode) ? "a symbolic link" : S_ISFIFO(st.st_mode) ? "a FIFO" :
           S_ISREG(st.st_mode) ? "a file, not a directory" : "not a directory";
}

/*
 * The default directory, opened: a descriptor of it, or -1.  `dir` is
 * replaced by the private one made instead, and `note` says why (empty if the
 * default was used).  Messages for failures are printed here.
 */
static int open_default_dir(char *dir, size_t dirlen, char *note, size_t notelen)
{
    note[0] = '\0';
    /* 0700: records name hosts, pids and call sites of the user's jobs. */
    int made = mkdir(dir, 0700) == 0;
    if (!made && errno != EEXIST) {
        fprintf(stderr, "ncclshim: cannot create record directory %s: %s; records are off "
                        "(set NCCLSHIM_LOG_DIR to a writable directory)\n", dir, strerror(errno));
        return -1;
    }
    /* O_NOFOLLOW: a symlink planted at the name is refused, not followed;
     * O_NONBLOCK: a FIFO there is not waited on (O_DIRECTORY refuses it). */
    char why[96];
    const char *bad = NULL;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (dfd < 0)
        bad = (errno == ELOOP || errno == ENOTDIR) ? not_dir_kind(dir) :
              (snprintf(why, sizeof(why), "not usable by this user (%s)", strerror(errno)), why);
    else if (fstat(dfd, &st) != 0)
        bad = (snprintf(why, sizeof(why), "not usable (fstat: %s)", strerror(errno)), why);
    else
        bad = dir_not_private(&st, why, sizeof(why));
    if (!bad)
        return dfd;
    if (dfd >= 0)
        close(dfd);
    /* Not ours to use: a fresh private directory beside it (mkdtemp: 0700,
     * a random name nobody can have prepared). */
    char fresh[PATH_MAX];
    if (snprintf(fresh, sizeof(fresh), "%s.XXXXXX", dir) >= (int)sizeof(fresh) || !mkdtemp(fresh)) {
        fprintf(stderr, "ncclshim: record directory %s is %s, and no private one could be made beside it (%s); "
                        "records are off (set NCCLSHIM_LOG_DIR to a directory of your own)\n",
                dir, bad, strerror(errno));
        return -1;
    }
    snprintf(note, notelen, "record directory %s is %s (another user could read or redirect the records); "
                            "records go to %s instead", dir, bad, fresh);
    snprintf(dir, dirlen, "%s", fresh);
    dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        fprintf(stderr, "ncclshim: cannot open record directory %s: %s; records are off "
                        "(set NCCLSHIM_LOG_DIR to a directory of your own)\n", dir, strerror(errno));
    return dfd;
}

static int open_explicit_dir(const char *dir)
{
    /* Only the last component is made, as before; an existing one is the
     * operator's choice whoever owns it (a shared file system for all ranks). */
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "ncclshim: cannot create record directory %s: %s; records are off "
                        "(set NCCLSHIM_LOG_DIR to a writable directory)\n", dir, strerror(errno));
        return -1;
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NONBLOCK | O_CLOEXEC);
    if (dfd < 0)
        fprintf(stderr, "ncclshim: cannot open record directory %s: %s; records are off "
                        "(set NCCLSHIM_LOG_DIR to a writable directory)\n", dir, strerror(errno));
    return dfd;
}

/* What stands at `name`: the reason it cannot be this process's record file. */
static void name_taken(int dfd, const char *name, char *why, size_t len)
{
    struct stat st;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        snprintf(why, len, "taken (%s)", strerror(errno));
    else if (S_ISLNK(st.st_mode))
        snprintf(why, len, "a symbolic link");
    else if (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode))
        snprintf(why, len, "a FIFO or socket");
    else if (S_ISDIR(st.st_mode))
        snprintf(why, len, "a directory");
    else if (!S_ISREG(st.st_mode))
        snprintf(why, len, "a device");
    else if (st.st_uid != geteuid())
        snprintf(why, len, "owned by uid %u", (unsigned)st.st_uid);
    else if (st.st_nlink != 1)
        snprintf(why, len, "a file with other hard links");
    else
        snprintf(why, len, "a file already");
}

/* Opens `name` in `dfd`, created new.  Returns the descriptor, or -1 with
 * `why` set; *err is the errno when no other name would help. */
static int open_in(int dfd, const char *name, char *why, size_t len, int *err)
{
    *err = 0;
    /* O_EXCL alone refuses whatever stands at the name (no symlink is
     * followed even to create its target, no FIFO is opened); O_NOFOLLOW and
     * O_NONBLOCK stay so that no change of flags can bring either back. */
    const int flags = O_WRONLY | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;
    int fd = openat(dfd, name, flags | O_CREAT | O_EXCL, 0600);
    if (fd < 0 && errno == EEXIST) {
        name_taken(dfd, name, why, len);
        return -1;
    }
    if (fd < 0) {
        *err = errno; /* the directory refuses a new file: no other name helps */
        snprintf(why, len, "%s", strerror(errno));
        return -1;
    }
    /* Blocking again: a full disk or a slow file system is then a short or
     * failed write, reported once, never a spin. */
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        *err = errno;
        snprintf(why, len, "fcntl: %s", strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

/* This process's start, in clock ticks since boot (/proc/self/stat's 22nd
 * field): with the pid, it tells this process from one that had its pid
 * before, and from a fork child; 0 if /proc cannot say. */
unsigned long long record_file_start_ticks(void)
{
    char buf[1024];
    ssize_t n = -1;
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        do
            n = read(fd, buf, sizeof(buf) - 1);
        while (n < 0 && errno == EINTR);
        close(fd);
    }
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    /* After the command's closing parenthesis (the command may hold spaces and
     * parentheses): the state is field 3, the start time field 22. */
    char *p = strrchr(buf, ')');
    for (int field = 2; p && field < 22; field++)
        p = strchr(p + 1, ' ');
    return p ? strtoull(p + 1, NULL, 10) : 0;
}

/* The name of attempt `k`: the plain one, a number, then random ones (a
 * directory others can write may hold every numbered name already). */
static void attempt_name(char *name, size_t len, const char *stem, int k)
{
    if (k == 0)
        snprintf(name, len, "%s.jsonl", stem);
    else if (k < RECORD_FILE_NUMBERED)
        snprintf(name, len, "%s.%d.jsonl", stem, k);
    else {
        uint64_t r = 0;
        if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r)) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            r = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40) ^ (uint64_t)k;
        }
        snprintf(name, len, "%s.r%016llx.jsonl", stem, (unsigned long long)r);
    }
}

/* Creates the first free name of `stem` in `dfd`: the descriptor and its path,
 * or -1 with the reason printed.  `first` and `why` say what stood at the plain name. */
static int create_named(int dfd, const char *dir, const char *stem, char *path, size_t pathlen, char *first,
                        size_t firstlen, char *why, size_t whylen)
{
    int fd = -1;
    char name[448]; /* stem (< 400) and the longest suffix */
    /* A name taken costs a new name, never the records, and is never shared:
     * nothing the shim did not create this moment is written to. */
    for (int attempt = 0; attempt < RECORD_FILE_ATTEMPTS && fd < 0; attempt++) {
        attempt_name(name, sizeof(name), stem, attempt);
        if (snprintf(path, pathlen, "%s/%s", dir, name) >= (int)pathlen) {
            fprintf(stderr, "ncclshim: record path too long under %s; records are off\n", dir);
            return -1;
        }
        char w[96];
        int err;
        fd = open_in(dfd, name, w, sizeof(w), &err);
        if (fd < 0 && attempt == 0) {
            snprintf(first, firstlen, "%s", path);
            snprintf(why, whylen, "%s", w);
        }
        if (fd < 0 && err)
            break;
    }
    if (fd < 0)
        fprintf(stderr, "ncclshim: cannot open record file %s: %s; records are off "
                        "(set NCCLSHIM_LOG_DIR to a writable directory)\n", why[0] ? first : path, why[0] ? why : "no free name");
    return fd;
}

int record_file_open(const char *log_dir, int is_default, const char *host, const char *boot8, int pid, char *path,
                     size_t pathlen, char *note, size_t notelen)
{
    char dir[PATH_MAX];
    note[0] = '\0';
    snprintf(dir, sizeof(dir), "%s", log_dir);
    int dfd = is_default ? open_default_dir(dir, sizeof(dir), note, notelen) : open_explicit_dir(dir);
    if (dfd < 0)
        return -1;
    char hostpart[256], stem[400], first[PATH_MAX] = "", why[96] = "";
    record_file_host_part(host, hostpart, sizeof(hostpart));
    snprintf(stem, sizeof(stem), "ncclshim.%s.%d.%s.%llu", hostpart, pid, boot8, record_file_start_ticks());
    int fd = create_named(dfd, dir, stem, path, pathlen, first, sizeof(first), why, sizeof(why));
    close(dfd);
    if (fd < 0)
        return -1;
    if (first[0] && strcmp(path, first) != 0) {
        size_t used = strlen(note);
        snprintf(note + used, notelen - used, "%srecord file %s is taken (%s); records go to %s instead",
                 used ? "; " : "", first, why, path);
    }
    /* Keep the descriptor away from 0-2 so an application closing stdio cannot reuse it. */
    if (fd < 3) {
        int fd2 = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        int e = errno;
        close(fd);
        if (fd2 < 0) {
            fprintf(stderr, "ncclshim: cannot move the record file's descriptor above 2: %s; records are off\n",
                    strerror(e));
            return -1;
        }
        fd = fd2;
    }
    if (note[0])
        fprintf(stderr, "ncclshim: warning: %s\n", note);
    return fd;
}
