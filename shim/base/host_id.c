/*
 * Host identity, the way NCCL sees it.  Two ranks are on one host for NCCL
 * when the strings behind its host hash are equal (getHostHash, NCCL's
 * src/misc/utils.cc; read for the facts, the same on Linux in every release
 * 2.18 to 2.30): NCCL_HOSTID when it is set, else the whole host name (not cut
 * at '.') followed by the first word of the kernel's boot_id.  Containers of
 * one machine share the boot id but not, as Kubernetes pods, the host name:
 * NCCL then treats them as two hosts (its network, no shared memory or P2P
 * between them), and so must the shim's decisions, or `auto` chooses ipc for
 * ranks that share neither /dev/shm nor anything else ipc needs.  (What
 * changed across releases does not change the result: NCCL adds a
 * communicator's hash to every rank's host hash alike; before 2.23 it
 * computes the string at each init, since then once per process, as the
 * shim does at its first use: a program that changes NCCL_HOSTID or its host
 * name between communicators is not followed.)
 *
 * NCCL_HOSTID is read as NCCL reads it: the environment, else NCCL's config
 * files, which NCCL puts into the environment at its first use without
 * overriding (NCCL_CONF_FILE if set and not empty, else ~/.nccl.conf, then
 * /etc/nccl.conf): the shim reads its settings before NCCL has run.  An NCCL
 * environment plugin (NCCL_ENV_PLUGIN, 2.28 and later) can answer otherwise;
 * the shim cannot ask it.
 */
#define _GNU_SOURCE
#include "host_id.h"

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The first whitespace-separated word of `path` (as NCCL's fscanf "%ms"), or "". */
static void read_first_word(const char *path, char *out, size_t len)
{
    char buf[256];
    ssize_t n = -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    out[0] = '\0';
    if (fd >= 0) {
        do
            n = read(fd, buf, sizeof(buf) - 1);
        while (n < 0 && errno == EINTR);
        close(fd);
    }
    if (n <= 0)
        return;
    buf[n] = '\0';
    const char *p = buf + strspn(buf, " \t\n\r\v\f");
    size_t w = strcspn(p, " \t\n\r\v\f");
    snprintf(out, len, "%.*s", (int)w, p);
}

/* NCCL_HOSTID from one config file, as NCCL parses it: NAME=VALUE lines, '#' comments,
 * the first definition wins (NCCL sets without overriding).  1 if found. */
static int conf_file_hostid(const char *path, char *out, size_t len)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int found = 0;
    while (!found && (n = getline(&line, &cap, f)) != -1) {
        if (n > 0 && line[n - 1] == '\n')
            line[--n] = '\0';
        if (line[0] == '#' || strncmp(line, "NCCL_HOSTID=", 12) != 0)
            continue;
        snprintf(out, len, "%.*s", HOST_ID_NCCL_MAX - 1, line + 12);
        found = 1;
    }
    free(line);
    fclose(f);
    return found;
}

/* This user's home directory from the password database, as NCCL finds it (not $HOME). */
static int home_dir(char *out, size_t len)
{
    long sz = sysconf(_SC_GETPW_R_SIZE_MAX);
    size_t bufsz = sz > 0 ? (size_t)sz : 16384;
    char *buf = malloc(bufsz);
    struct passwd pw, *res = NULL;
    int ok = buf && getpwuid_r(getuid(), &pw, buf, bufsz, &res) == 0 && res && res->pw_dir;
    if (ok)
        snprintf(out, len, "%s", res->pw_dir);
    free(buf);
    return ok;
}

/* NCCL_HOSTID, where NCCL would find it: 1 and its value and source if set. */
static int find_hostid(struct host_identity *h)
{
    const char *v = getenv("NCCL_HOSTID");
    if (v) {
        snprintf(h->hostid, sizeof(h->hostid), "%.*s", HOST_ID_NCCL_MAX - 1, v);
        snprintf(h->hostid_from, sizeof(h->hostid_from), "environment");
        return 1;
    }
    char path[PATH_MAX];
    const char *user = getenv("NCCL_CONF_FILE");
    int have_user = 1;
    if (user && *user)
        snprintf(path, sizeof(path), "%s", user);
    else if ((have_user = home_dir(path, sizeof(path) - 16)))
        strcat(path, "/.nccl.conf");
    if (have_user && conf_file_hostid(path, h->hostid, sizeof(h->hostid))) {
        snprintf(h->hostid_from, sizeof(h->hostid_from), "%s", path);
        return 1;
    }
    if (conf_file_hostid("/etc/nccl.conf", h->hostid, sizeof(h->hostid))) {
        snprintf(h->hostid_from, sizeof(h->hostid_from), "/etc/nccl.conf");
        return 1;
    }
    return 0;
}

/* `s` as an identity of HOST_ID_LEN: itself if it fits, else its start and a hash of all of it. */
static void set_id(struct host_identity *h, const char *s)
{
    size_t n = strlen(s);
    if (n < sizeof(h->id)) {
        memcpy(h->id, s, n + 1);
        return;
    }
    uint64_t x = 0xcbf29ce484222325ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        x = (x ^ (uint8_t)s[i]) * 0x100000001b3ull;
    snprintf(h->id, sizeof(h->id), "%.100s#%016llx", s, (unsigned long long)x);
}

void host_identity_read(struct host_identity *h, const char *hostname, const char *boot_id_path)
{
    memset(h, 0, sizeof(*h));
    snprintf(h->hostname, sizeof(h->hostname), "%s", hostname);
    read_first_word(boot_id_path, h->boot_id, sizeof(h->boot_id));
    h->hostid_set = find_hostid(h);
    if (h->hostid_set) {
        /* NCCL hashes an empty NCCL_HOSTID as the empty string: every such rank is one host.
         * The shim's decisions count an empty identity as a host of its own, so it gets a name
         * no host name can have ('=' is not allowed in one). */
        set_id(h, h->hostid[0] ? h->hostid : "NCCL_HOSTID=");
        return;
    }
    char whole[HOST_ID_NCCL_MAX];
    snprintf(whole, sizeof(whole), "%s%s", h->hostname, h->boot_id);
    set_id(h, whole);
}

void host_identity_boot8(const struct host_identity *h, char out[9])
{
    int n = 0;
    for (const char *p = h->boot_id; *p && n < 8; p++)
        if ((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f') || (*p >= 'A' && *p <= 'F'))
            out[n++] = *p;
    if (n < 8)
        snprintf(out, 9, "nobootid");
    else
        out[8] = '\0';
}
