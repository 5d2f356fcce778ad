/*
 * Binding forwarding slots to real libnccl files (docs/design.md, "One
 * forwarding table per library").
 *
 * No lock of ours is ever held across a call into the dynamic loader
 * (dladdr, dlopen, dlsym): a thread inside dlopen holds the loader's lock
 * while it runs constructors, and a constructor may call NCCL or dlsym; if we
 * held our lock while waiting for the loader's, the two would deadlock.  So a
 * slot is claimed under g_slot_lock (a few stores), and filled outside it.
 */
#define _GNU_SOURCE
#include "slots.h"

#include "loader.h"
#include "record.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

struct shim_slot g_slots[SHIM_NSLOTS] = {
    [0] = { .index = 0 }, [1] = { .index = 1 }, [2] = { .index = 2 }, [3] = { .index = 3 },
};

/* Guards claiming a slot (state FREE -> CLAIMED, base and path). */
static pthread_mutex_t g_slot_lock = PTHREAD_MUTEX_INITIALIZER;

static struct shim_slot *find_slot(const void *base, const char *path)
{
    for (int i = 0; i < SHIM_NSLOTS; i++) {
        struct shim_slot *s = &g_slots[i];
        if (atomic_load_explicit(&s->state, memory_order_acquire) != SLOT_FREE && s->base == base &&
            strcmp(s->path, path) == 0)
            return s;
    }
    return NULL;
}

/* Claims `want` (or, if want is NULL, the first free slot from 1) for the library. */
static struct shim_slot *claim_slot(struct shim_slot *want, const void *base, const char *path, int *claimed)
{
    struct shim_slot *s;
    *claimed = 0;
    pthread_mutex_lock(&g_slot_lock);
    s = find_slot(base, path);
    if (!s) {
        for (int i = want ? want->index : 1; i < (want ? want->index + 1 : SHIM_NSLOTS); i++) {
            if (atomic_load_explicit(&g_slots[i].state, memory_order_relaxed) == SLOT_FREE) {
                s = &g_slots[i];
                s->base = base;
                snprintf(s->path, sizeof(s->path), "%s", path);
                atomic_store_explicit(&s->state, SLOT_CLAIMED, memory_order_release);
                *claimed = 1;
                break;
            }
        }
    }
    pthread_mutex_unlock(&g_slot_lock);
    return s;
}

static void write_library_record(const struct shim_slot *s, const char *how, int nfound)
{
    struct jw w;
    jw_begin(&w, "library");
    jw_int(&w, "slot", s->index);
    jw_str(&w, "path", s->path);
    jw_int(&w, "version", s->version);
    jw_str(&w, "how", how);
    jw_int(&w, "functions", nfound);
    jw_open(&w, "missing", '[');
    for (int i = 0; i < FN_COUNT; i++)
        if (!atomic_load_explicit(&s->fn[i], memory_order_relaxed))
            jw_str(&w, NULL, shim_fn_names[i]);
    jw_close(&w, ']');
    jw_emit(&w);
}

/*
 * An NCCL newer than the table: once per process.  Communicators NCCL makes
 * stay safe whatever it adds (the application holds NCCL's own pointer);
 * a shim-only one (drop, ipc) given to a function the table lacks would
 * reach NCCL, which is what the warning says.
 */
static void warn_if_newer(const struct shim_slot *s)
{
    static atomic_int warned; /* once per process, whichever slot */
    if (s->version <= SHIM_TABLE_NEWEST || atomic_exchange(&warned, 1))
        return;
    shim_warn("nccl-newer", "%s is NCCL %d.%d.%d, newer than the newest NCCL whose functions this shim knows "
              "(2.32): communicators NCCL makes work as without the shim, but a communicator the shim dropped "
              "or runs over CUDA IPC must not be passed to a function NCCL added since; if the application "
              "does, use a newer ncclshim or NCCLSHIM_WEIGHT_UPDATE=passthrough", s->path, s->version / 10000,
              s->version / 100 % 100, s->version % 100);
}

/* Resolves every function of the table in the claimed slot, then publishes it. */
static void fill_slot(struct shim_slot *s, const char *how)
{
    dlsym_fn_t real = shim_real_dlsym();
    /* RTLD_NOLOAD: only a reference to what is already mapped; it also keeps the
     * library mapped for as long as our wrappers may forward to it. */
    void *h = dlopen(s->path, RTLD_NOLOAD | RTLD_LAZY);
    int nfound = 0;
    for (int i = 0; h && i < FN_COUNT; i++) {
        void *f = real(h, shim_fn_names[i]);
        Dl_info info;
        /* A handle's scope is the library and its dependencies; never the shim,
         * but make sure, since forwarding to ourselves would recurse for ever. */
        if (f && dladdr(f, &info) && info.dli_fbase == shim_self_base())
            f = NULL;
        if (f)
            nfound++;
        atomic_store_explicit(&s->fn[i], f, memory_order_release);
    }
    /* The names an older NCCL lacks left an error for dlerror(): the
     * application's own lookup, which brought us here, succeeded. */
    if (h)
        dlerror();
    s->handle = h;
    ncclResult_t (*get_version)(int *) =
        (ncclResult_t(*)(int *))atomic_load_explicit(&s->fn[FN_ncclGetVersion], memory_order_relaxed);
    if (!h || !get_version || get_version(&s->version) != ncclSuccess)
        s->version = 0;
    atomic_store_explicit(&s->state, SLOT_BOUND, memory_order_release);
    if (!h)
        shim_warn("library", "cannot reopen %s (dlopen RTLD_NOLOAD: %s); its calls fail", s->path, dlerror());
    write_library_record(s, how, nfound);
    warn_if_newer(s);
}

struct loaded_nccl { char path[PATH_MAX]; const void *base; };

static int find_loaded_nccl(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    struct loaded_nccl *out = data;
    const char *name = info->dlpi_name;
    const char *slash = name ? strrchr(name, '/') : NULL;
    const char *base = slash ? slash + 1 : name;
    if (base && strncmp(base, "libnccl.so", 10) == 0) {
        snprintf(out->path, sizeof(out->path), "%s", name);
        out->base = (const void *)info->dlpi_addr;
        return 1;
    }
    return 0;
}

/*
 * Which real library should the shim's exported symbols forward to?  The one
 * the caller would have bound to without the shim:
 *   1. the first NCCL in the global scope after the shim (callers linked
 *      against libnccl, which is then global);
 *   2. else the NCCL among the caller's own dependencies (torch's extension is
 *      loaded RTLD_LOCAL by Python, and its libnccl with it);
 *   3. else any libnccl already mapped.
 */
static int locate_global_nccl(const void *caller, const void **base, char *path, size_t pathlen,
                              const char **how)
{
    dlsym_fn_t real = shim_real_dlsym();
    Dl_info info;
    void *f = real(RTLD_NEXT, "ncclGetVersion");
    *how = "symbol";
    if (!f && caller && dladdr(caller, &info) && info.dli_fname && info.dli_fbase != shim_self_base()) {
        void *h = dlopen(info.dli_fname, RTLD_NOLOAD | RTLD_LAZY);
        if (h) {
            f = real(h, "ncclGetVersion");
            dlclose(h);
            *how = "caller-dependency";
        }
    }
    if (f && dladdr(f, &info) && info.dli_fbase && info.dli_fname && info.dli_fbase != shim_self_base()) {
        *base = info.dli_fbase;
        snprintf(path, pathlen, "%s", info.dli_fname);
        return 1;
    }
    struct loaded_nccl found = { "", NULL };
    if (dl_iterate_phdr(find_loaded_nccl, &found) && found.path[0]) {
        *base = found.base;
        snprintf(path, pathlen, "%s", found.path);
        *how = "loaded";
        return 1;
    }
    return 0;
}

/* Binds slot 0 to the NCCL of locate_global_nccl, if there is one yet. */
static void bind_global_slot(const void *caller)
{
    const void *base = NULL;
    char path[PATH_MAX];
    const char *how;
    if (!locate_global_nccl(caller, &base, path, sizeof(path), &how))
        return;
    int claimed;
    struct shim_slot *got = claim_slot(&g_slots[0], base, path, &claimed);
    if (got && claimed)
        fill_slot(got, how);
}

/* Reports a function missing from a real library once per slot and function. */
static void report_missing(struct shim_slot *s, enum fn_index fn)
{
    static atomic_uint_least64_t reported[SHIM_NSLOTS];
    uint64_t bit = 1ull << (fn % 64);
    if (atomic_fetch_or(&reported[s->index], bit) & bit)
        return;
    if (atomic_load(&s->state) == SLOT_FREE)
        shim_warn("no-nccl", "%s called but no libnccl is loaded in this process; it returns an error",
                  shim_fn_names[fn]);
    else
        shim_warn("missing-function", "%s called but %s (NCCL %d) does not have it; it returns an error",
                  shim_fn_names[fn], s->path, s->version);
}

void *shim_resolve(struct shim_slot *s, enum fn_index fn, const void *caller)
{
    int state = atomic_load_explicit(&s->state, memory_order_acquire);
    if (state == SLOT_FREE && s->index == 0) {
        bind_global_slot(caller);
        state = atomic_load_explicit(&s->state, memory_order_acquire);
    }
    if (state == SLOT_CLAIMED) {
        /* Another thread is filling the slot: look the function up ourselves
         * rather than wait (it may be waiting for a loader lock we hold). */
        void *h = dlopen(s->path, RTLD_NOLOAD | RTLD_LAZY);
        void *f = h ? shim_real_dlsym()(h, shim_fn_names[fn]) : NULL;
        if (h)
            dlclose(h);
        return f;
    }
    void *f = state == SLOT_BOUND ? atomic_load_explicit(&s->fn[fn], memory_order_acquire) : NULL;
    if (!f && caller)
        report_missing(s, fn);
    return f;
}

struct shim_slot *shim_slot_for_library(const void *base, const char *path, const char *how)
{
    struct shim_slot *s = find_slot(base, path);
    if (s)
        return s;
    /* The library that global-symbol callers use belongs in slot 0. */
    if (atomic_load_explicit(&g_slots[0].state, memory_order_acquire) == SLOT_FREE) {
        bind_global_slot(NULL);
        s = find_slot(base, path);
        if (s)
            return s;
    }
    int claimed;
    s = claim_slot(NULL, base, path, &claimed);
    if (!s) {
        static atomic_int warned;
        if (!atomic_exchange(&warned, 1))
            shim_warn("slots", "more than %d different libnccl files in one process; calls into %s "
                      "are not seen by the shim", SHIM_NSLOTS, path);
        return NULL;
    }
    if (claimed)
        fill_slot(s, how);
    return s;
}

void shim_slots_lock_for_fork(void)
{
    pthread_mutex_lock(&g_slot_lock);
}

void shim_slots_unlock_after_fork(void)
{
    pthread_mutex_unlock(&g_slot_lock);
}

void shim_slots_after_fork_child(void)
{
    /* Held by the forking thread (before_fork), which is this one; a slot a
     * thread of the parent had claimed but not filled is resolved by each
     * caller itself (shim_resolve), never waited for. */
    pthread_mutex_init(&g_slot_lock, NULL);
}
