/*
 * The shim's clocks (clock.h): their own file, so that the transport and the
 * rendezvous, which time things, need nothing of the records.
 */
#include "clock.h"

#include <time.h>

double shim_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

uint64_t shim_mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}
