/* Settings read from NCCLSHIM_* variables, once per process (docs/policy.md lists them). */
#ifndef NCCLSHIM_CONFIG_H
#define NCCLSHIM_CONFIG_H

#include "../policy/evidence.h"

#include <limits.h>

enum shim_mode { MODE_OBSERVE = 0, MODE_ENFORCE, MODE_OFF };

struct shim_config {
    enum shim_mode mode;
    int python_callsite;                /* NCCLSHIM_PYTHON_CALLSITE, default 1 */
    char log_dir[PATH_MAX];             /* NCCLSHIM_LOG_DIR, default /tmp/ncclshim-<uid> */
    char host[256];                     /* NCCLSHIM_HOSTNAME or gethostname, cut at '.' like NCCL */
    struct policy_patterns patterns;    /* pointers into the environment */
};

/* The settings, read on first use (thread-safe, never changes afterwards: no lock needed to read). */
const struct shim_config *shim_config(void);

/* Names of every variable the shim reads, NULL-terminated (for the load record). */
extern const char *const shim_setting_names[];

const char *shim_mode_name(enum shim_mode m);

/* Writes a `warning` record for each bad setting found (once records can be written). */
void shim_config_report_warnings(void);
/* The same problems on stderr, once, when the shim is loaded. */
void shim_config_print_warnings(void);

#endif
