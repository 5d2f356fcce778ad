/*
 * Random bytes (random.h): in base/, because both the rendezvous and the
 * CUDA IPC transport need them and neither should call the other for it.
 */
#define _GNU_SOURCE
#include "random.h"

#include <errno.h>
#include <sys/random.h>
#include <sys/types.h>

int shim_random(void *buf, size_t len)
{
    size_t off = 0;
    while (off < len) {
        ssize_t n = getrandom((char *)buf + off, len - off, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        off += (size_t)n;
    }
    return 0;
}
