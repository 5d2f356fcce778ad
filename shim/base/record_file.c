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
 * mode.  In either, the record file itself is created new (O_EXCL) or, if one
 * of that name exists, used only if it is this user's own plain file (an
 * earlier image of this pid, before an exec); no symlink is followed, no FIFO
 * or device is waited on (O_NONBLOCK), and anything else gets a new name.
 * Every refusal is one line on stderr naming the cause and what was done.
 * docs/operations.md ("Record files: who can touch them") has the trust model.
 */
#define _GNU_SOURCE
#include "record_file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* Why the open file `fd` is not one to write records to, or NULL. */
static const char *file_not_ours(int fd, char *why, size_t len)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return strerror(errno);
    if (!S_ISREG(st.st_mode))
        return S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISSOCK(st.st_mode) ? "a socket" :
               S_ISDIR(st.st_mode) ? "a directory" : "a device";
    if (st.st_uid != geteuid()) {
        snprintf(why, len, "owned by uid %u", (unsigned)st.st_uid);
        return why;
    }
    if (st.st_nlink != 1)
        return "a file with other hard links";
    return NULL;
}

/* Opens `name` in `dfd`: created new, or this user's own existing file.
 * Returns the descriptor, or -1 with `why` set (errno text or the reason). */
static int open_in(int dfd, const char *name, char *why, size_t len, int *err)
{
    *err = 0;
    const int flags = O_WRONLY | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;
    int fd = openat(dfd, name, flags | O_CREAT | O_EXCL, 0600);
    if (fd < 0 && errno != EEXIST) {
        *err = errno; /* the directory refuses a new file: no other name helps */
        snprintf(why, len, "%s", strerror(errno));
        return -1;
    }
    if (fd < 0) {
        /* The name is taken: only our own plain file is used (checked below);
         * whatever else it is, another name may do. */
        fd = openat(dfd, name, flags);
        if (fd < 0) {
            snprintf(why, len, "%s", errno == ELOOP ? "a symbolic link" : errno == ENXIO ? "a FIFO or socket" :
                                     errno == EISDIR ? "a directory" : strerror(errno));
            return -1;
        }
    }
    char tmp[64];
    const char *bad = file_not_ours(fd, tmp, sizeof(tmp));
    if (bad) {
        snprintf(why, len, "%s", bad);
        close(fd);
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

int record_file_open(const char *log_dir, int is_default, const char *host, int pid, char *path, size_t pathlen,
                     char *note, size_t notelen)
{
    char dir[PATH_MAX];
    note[0] = '\0';
    snprintf(dir, sizeof(dir), "%s", log_dir);
    int dfd = is_default ? open_default_dir(dir, sizeof(dir), note, notelen) : open_explicit_dir(dir);
    if (dfd < 0)
        return -1;
    char hostpart[256], name[320], first[PATH_MAX] = "", why[96] = "";
    record_file_host_part(host, hostpart, sizeof(hostpart));
    int fd = -1;
    /* The plain name, then a few others: a name taken by something that is
     * not ours costs a new name, not the records. */
    for (int attempt = 0; attempt < 8 && fd < 0; attempt++) {
        if (attempt == 0)
            snprintf(name, sizeof(name), "ncclshim.%s.%d.jsonl", hostpart, pid);
        else
            snprintf(name, sizeof(name), "ncclshim.%s.%d.%d.jsonl", hostpart, pid, attempt);
        if (snprintf(path, pathlen, "%s/%s", dir, name) >= (int)pathlen) {
            fprintf(stderr, "ncclshim: record path too long under %s; records are off\n", dir);
            close(dfd);
            return -1;
        }
        char w[96];
        int err;
        fd = open_in(dfd, name, w, sizeof(w), &err);
        if (fd < 0 && attempt == 0) {
            snprintf(first, sizeof(first), "%s", path);
            snprintf(why, sizeof(why), "%s", w);
        }
        if (fd < 0 && err)
            break;
    }
    close(dfd);
    if (fd < 0) {
        fprintf(stderr, "ncclshim: cannot open record file %s: %s; records are off "
                        "(set NCCLSHIM_LOG_DIR to a writable directory)\n", why[0] ? first : path, why[0] ? why : "no free name");
        return -1;
    }
    if (first[0] && strcmp(path, first) != 0) {
        size_t used = strlen(note);
        snprintf(note + used, notelen - used, "%srecord file %s is %s (not this user's own file); records go to %s instead",
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
