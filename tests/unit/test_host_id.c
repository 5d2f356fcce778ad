/* The host identity from its parts, as NCCL builds its host hash's string
 * (shim/base/host_id.c; run by tests/t/38-host-identity.t). */
#define _GNU_SOURCE
#include "host_id.h"
#include "tap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[] = "/tmp/ncclshim-hostid-unit.XXXXXX";

/* A file of `text` in the test's directory; its path. */
static const char *file(const char *name, const char *text)
{
    static char path[4][256];
    static int k;
    char *p = path[k++ % 4];
    snprintf(p, 256, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    return p;
}

static void boot_id(void)
{
    struct host_identity h;
    unsetenv("NCCL_HOSTID");
    setenv("NCCL_CONF_FILE", file("empty.conf", ""), 1);
    host_identity_read(&h, "node1.example.com", file("boot", "  28faea0a-77d9-4878-b851-989afa2dc929\n"));
    ok(strcmp(h.id, "node1.example.com28faea0a-77d9-4878-b851-989afa2dc929") == 0 && !h.hostid_set,
       "whole host name (not cut at '.') then the boot id's first word: %s", h.id);
    char b8[9];
    host_identity_boot8(&h, b8);
    ok(strcmp(b8, "28faea0a") == 0, "the boot id's first 8 hex digits name files: %s", b8);

    host_identity_read(&h, "node1", file("boot2", "abc def\n"));
    ok(strcmp(h.id, "node1abc") == 0, "only the first word of the boot id file, as fscanf %%s reads it: %s", h.id);
    host_identity_read(&h, "node1", "/nonexistent/boot_id");
    ok(strcmp(h.id, "node1") == 0 && h.boot_id[0] == '\0', "no boot id: the host name alone, as NCCL's fallback");
    host_identity_boot8(&h, b8);
    ok(strcmp(b8, "nobootid") == 0, "no boot id: files say nobootid");
}

static void long_ids(void)
{
    struct host_identity a, b;
    char name[200];
    memset(name, 'n', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    const char *boot = file("boot", "28faea0a-77d9-4878-b851-989afa2dc929\n");
    host_identity_read(&a, name, boot);
    name[150] = 'm';
    host_identity_read(&b, name, boot);
    ok(strlen(a.id) == 117 && a.id[100] == '#' && strncmp(a.id, name, 100) == 0,
       "an identity over 127 bytes: its first 100, '#', a 64-bit hash (%zu bytes)", strlen(a.id));
    ok(strcmp(a.id, b.id) != 0, "two long ones differing past byte 100 stay apart (the hash)");
    struct host_identity c;
    name[150] = 'n';
    host_identity_read(&c, name, boot);
    ok(strcmp(a.id, c.id) == 0, "and equal ones are equal");
}

static void nccl_hostid(void)
{
    struct host_identity h;
    const char *boot = file("boot", "28faea0a\n");
    setenv("NCCL_HOSTID", "rack7-node3", 1);
    host_identity_read(&h, "pod-a", boot);
    ok(strcmp(h.id, "rack7-node3") == 0 && h.hostid_set && strcmp(h.hostid_from, "environment") == 0,
       "NCCL_HOSTID replaces host name and boot id: %s (from %s)", h.id, h.hostid_from);
    setenv("NCCL_HOSTID", "", 1);
    host_identity_read(&h, "pod-a", boot);
    ok(strcmp(h.id, "NCCL_HOSTID=") == 0 && h.hostid_set && h.hostid[0] == '\0',
       "an empty NCCL_HOSTID: one identity for all (NCCL hashes the empty string), not 'no identity'");
    unsetenv("NCCL_HOSTID");

    const char *conf = file("nccl.conf", "# NCCL_HOSTID=commented\nNCCL_HOSTID\n NCCL_HOSTID=indented\n"
                                         "NCCL_HOSTIDX=other\nNCCL_HOSTID=from-conf\nNCCL_HOSTID=second\n");
    setenv("NCCL_CONF_FILE", conf, 1);
    host_identity_read(&h, "pod-a", boot);
    ok(strcmp(h.id, "from-conf") == 0 && strcmp(h.hostid_from, conf) == 0,
       "NCCL_CONF_FILE: the first NCCL_HOSTID= line; comments, lines without '=', other names skipped: %s", h.id);
    setenv("NCCL_CONF_FILE", file("eof.conf", "NCCL_HOSTID=no-newline"), 1);
    host_identity_read(&h, "pod-a", boot);
    ok(strcmp(h.id, "no-newline") == 0, "a last line without a newline counts");
    setenv("NCCL_HOSTID", "env-wins", 1);
    host_identity_read(&h, "pod-a", boot);
    ok(strcmp(h.id, "env-wins") == 0, "the environment wins over the config file (NCCL sets without overriding)");
    unsetenv("NCCL_HOSTID");

    char big[1100];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    setenv("NCCL_HOSTID", big, 1);
    host_identity_read(&h, "pod-a", boot);
    ok(strlen(h.hostid) == 1023, "NCCL_HOSTID cut at 1023 bytes, as NCCL cuts it");
    unsetenv("NCCL_HOSTID");
}

int main(void)
{
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    boot_id();
    long_ids();
    nccl_hostid();
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "# could not remove %s\n", dir);
    return tap_done();
}
