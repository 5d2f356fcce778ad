/*
 * dlsym semantics with and without the shim.  Prints one line per lookup,
 * "<label> <object holding the result or (null)> <dlerror or ->", so a test
 * can run it twice (with and without LD_PRELOAD) and compare.
 *
 *   dl_lookup <libA> <libB> <libOld>
 * libA is dlopened RTLD_GLOBAL only when DL_LOOKUP_GLOBAL=1 (to give the
 * process a global NCCL, like torch linked against it).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*version_fn)(int *);

static const char *obj(const void *p)
{
    Dl_info info;
    if (!p)
        return "(null)";
    if (!dladdr(p, &info) || !info.dli_fname)
        return "(unknown)";
    return info.dli_fname;
}

static void show(const char *label, void *p)
{
    const char *err = dlerror();
    /* Report the object by its last two path components (stable across runs). */
    const char *o = obj(p);
    const char *cut = o + strlen(o);
    int slashes = 0;
    while (cut > o && slashes < 2)
        if (*--cut == '/')
            slashes++;
    printf("%s %s %s\n", label, slashes == 2 ? cut + 1 : o, err ? (strstr(err, "undefined symbol") ? "undefined-symbol" : err) : "-");
}

static int call_version(void *p)
{
    int v = -1;
    if (p)
        ((version_fn)p)(&v);
    return v;
}

int main(int argc, char **argv)
{
    if (argc < 4)
        return 2;
    dlerror();
    void *ha = dlopen(argv[1], RTLD_NOW | (getenv("DL_LOOKUP_GLOBAL") ? RTLD_GLOBAL : RTLD_LOCAL));
    void *hb = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
    void *hold = dlopen(argv[3], RTLD_NOW | RTLD_LOCAL);
    void *hm = dlopen("libm.so.6", RTLD_NOW | RTLD_LOCAL);
    if (!ha || !hb || !hold || !hm) {
        printf("dlopen failed: %s\n", dlerror());
        return 1;
    }
    dlerror();
    show("default-ncclGetVersion", dlsym(RTLD_DEFAULT, "ncclGetVersion"));
    show("default-nonexistent", dlsym(RTLD_DEFAULT, "ncclNoSuchFunction"));
    show("a-ncclGetVersion", dlsym(ha, "ncclGetVersion"));
    show("b-ncclGetVersion", dlsym(hb, "ncclGetVersion"));
    show("old-ncclCommShrink", dlsym(hold, "ncclCommShrink"));
    show("old-ncclCommInitRank", dlsym(hold, "ncclCommInitRank"));
    show("a-pncclAllReduce", dlsym(ha, "pncclAllReduce"));
    show("a-ncclTeamWorld-unwrapped", dlsym(ha, "ncclNotInTable"));
    show("m-cos", dlsym(hm, "cos"));
    show("next-dlsym", dlsym(RTLD_NEXT, "dlsym"));
    show("default-malloc", dlsym(RTLD_DEFAULT, "malloc"));
    /* Calls reach the library the lookup named. */
    printf("version-a %d\n", call_version(dlsym(ha, "ncclGetVersion")));
    printf("version-old %d\n", call_version(dlsym(hold, "ncclGetVersion")));
    /* next-dlsym must be the dlsym this program itself binds to. */
    printf("next-dlsym-is-own %d\n", dlsym(RTLD_NEXT, "dlsym") == (void *)dlsym);
    return 0;
}
